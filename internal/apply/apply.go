package apply

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/atoll-edge/atoll/internal/errs"
)

// Defaults of Options.
const (
	DefaultFieldManager   = "atoll"
	DefaultNamespace      = "default"
	DefaultCRDTimeout     = 60 * time.Second
	DefaultDeleteTimeout  = 2 * time.Minute
	DefaultRequestTimeout = 30 * time.Second

	// defaultQPS and defaultBurst replace client-go's 5 and 10 requests per second
	// when the rest.Config leaves them unset: a chart is tens of objects, each one a
	// GET and a PATCH.
	defaultQPS   = 50
	defaultBurst = 100

	// maxFieldManager is the API server's limit on a field manager's length.
	maxFieldManager = 128
)

// The polling of waits (CRD Established, WaitGone): from firstPoll, doubled up to maxPoll.
const (
	firstPoll = 25 * time.Millisecond
	maxPoll   = time.Second
)

var (
	namespaceGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	crdGVR       = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	crdGroupKind = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
)

// Options configure an Applier. The zero value is usable: every field has a default.
type Options struct {
	// FieldManager is the server-side apply field manager (default "atoll").
	FieldManager string
	// DefaultNamespace receives namespaced objects that name no namespace
	// (default "default").
	DefaultNamespace string
	// CRDTimeout bounds the wait for an applied CustomResourceDefinition to be
	// Established and served (default 60s).
	CRDTimeout time.Duration
	// DeleteTimeout bounds WaitGone (default 2m).
	DeleteTimeout time.Duration
	// RequestTimeout bounds each request to the API server (default 30s), so
	// that a cluster that stops answering mid-connection does not hold a worker.
	RequestTimeout time.Duration
	// Propagation is the deletion propagation of Delete (default Background:
	// dependents, such as a Deployment's ReplicaSets, are removed by the garbage
	// collector after the object is gone; Foreground keeps the object until they are).
	Propagation metav1.DeletionPropagation
}

func (o Options) withDefaults() (Options, error) {
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if o.DefaultNamespace == "" {
		o.DefaultNamespace = DefaultNamespace
	}
	if o.CRDTimeout == 0 {
		o.CRDTimeout = DefaultCRDTimeout
	}
	if o.DeleteTimeout == 0 {
		o.DeleteTimeout = DefaultDeleteTimeout
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.Propagation == "" {
		o.Propagation = metav1.DeletePropagationBackground
	}
	switch {
	case len(o.FieldManager) > maxFieldManager:
		return o, errs.New(errs.Invalid, "apply: field manager %q is longer than %d characters", o.FieldManager, maxFieldManager)
	case o.CRDTimeout < 0 || o.DeleteTimeout < 0 || o.RequestTimeout < 0:
		return o, errs.New(errs.Invalid, "apply: timeouts must not be negative (CRDTimeout %s, DeleteTimeout %s, RequestTimeout %s)",
			o.CRDTimeout, o.DeleteTimeout, o.RequestTimeout)
	}
	switch o.Propagation {
	case metav1.DeletePropagationBackground, metav1.DeletePropagationForeground, metav1.DeletePropagationOrphan:
	default:
		return o, errs.New(errs.Invalid, "apply: unknown deletion propagation %q (want Background, Foreground or Orphan)", o.Propagation)
	}
	return o, nil
}

// Operation says what an Apply did to the object.
type Operation string

// The operations of an Apply.
const (
	Created    Operation = "created"    // the object did not exist
	Configured Operation = "configured" // the object existed and the apply changed it
	Unchanged  Operation = "unchanged"  // the object existed and the apply changed nothing
)

// Result is the outcome of one Apply.
type Result struct {
	// Ref is the object as applied: namespace defaulted for a namespaced kind,
	// dropped for a cluster-scoped one. It matches the Ref of readiness events.
	Ref             ObjectRef
	Operation       Operation
	UID             types.UID
	ResourceVersion string
	Generation      int64
	// CreatedNamespace names the namespace Apply created for the object, if it
	// had to; a terminate may want to delete it.
	CreatedNamespace string
}

// Changed reports whether the apply created or changed the object.
func (r Result) Changed() bool { return r.Operation == Created || r.Operation == Configured }

// Applier applies objects to one cluster and deletes them. Create it with New.
// Its methods are safe for concurrent use.
type Applier struct {
	opts   Options
	client dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper

	mu         sync.Mutex
	namespaces map[string]bool // namespaces known to exist (and not terminating)
}

// New returns an Applier for the cluster cfg points at. It does not contact the
// cluster: discovery is read on the first Apply or Delete. cfg is copied; when its
// QPS and Burst are unset they are raised from client-go's 5/10 to 50/100.
func New(cfg *rest.Config, opts Options) (*Applier, error) {
	if cfg == nil {
		return nil, errs.New(errs.Invalid, "apply: no rest config")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 && cfg.Burst == 0 {
		cfg.QPS, cfg.Burst = defaultQPS, defaultBurst
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "atoll-apply"
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("apply: building the HTTP client of %s: %w", cfg.Host, err)
	}
	client, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("apply: building the dynamic client of %s: %w", cfg.Host, err)
	}
	disco, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("apply: building the discovery client of %s: %w", cfg.Host, err)
	}
	return &Applier{
		opts:       opts,
		client:     client,
		mapper:     restmapper.NewDeferredDiscoveryRESTMapperWithContext(memory.NewMemCacheClientWithContext(disco)),
		namespaces: make(map[string]bool),
	}, nil
}

// Apply server-side applies obj (force, with the field manager), after creating
// its namespace when it is missing; when obj is a CustomResourceDefinition it
// returns once the CRD is Established and its kinds are served, bounded by
// Options.CRDTimeout. obj is not modified.
//
// Errors name the object and are classified: see IsUnreachable and IsRejected.
func (a *Applier) Apply(ctx context.Context, obj *unstructured.Unstructured) (Result, error) {
	if obj == nil {
		return Result{}, errs.New(errs.Invalid, "apply: no object")
	}
	ref := RefOf(obj)
	if err := ref.Validate(); err != nil {
		return Result{Ref: ref}, fmt.Errorf("apply: %w", err)
	}
	gvk := ref.GroupVersionKind()
	mapping, err := a.mapping(ctx, gvk)
	if err != nil {
		return Result{Ref: ref}, classify("apply", ref, err)
	}

	obj = obj.DeepCopy()
	namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
	switch {
	case namespaced && obj.GetNamespace() == "":
		obj.SetNamespace(a.opts.DefaultNamespace)
	case !namespaced:
		obj.SetNamespace("")
	}
	ref = RefOf(obj)
	res := Result{Ref: ref}

	if namespaced {
		created, err := a.ensureNamespace(ctx, ref.Namespace)
		if err != nil {
			return res, classify("apply", ref, fmt.Errorf("creating namespace %s: %w", ref.Namespace, err))
		}
		if created {
			res.CreatedNamespace = ref.Namespace
		}
	}

	body, err := obj.MarshalJSON()
	if err != nil {
		return res, errs.Wrap(errs.Invalid, err, "apply %s: encoding the object", ref)
	}
	ri := a.resource(mapping, ref.Namespace)

	before, err := a.get(ctx, ri, ref.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return res, classify("apply", ref, err)
	}
	after, err := a.patch(ctx, ri, ref.Name, body)
	if namespaced && isNamespaceNotFound(err, ref.Namespace) {
		// The namespace was deleted since it was remembered: create it again, once.
		a.forgetNamespace(ref.Namespace)
		created, nsErr := a.ensureNamespace(ctx, ref.Namespace)
		if nsErr != nil {
			return res, classify("apply", ref, fmt.Errorf("creating namespace %s: %w", ref.Namespace, nsErr))
		}
		if created {
			res.CreatedNamespace = ref.Namespace
		}
		after, err = a.patch(ctx, ri, ref.Name, body)
	}
	if err != nil {
		return res, classify("apply", ref, err)
	}

	res.UID, res.ResourceVersion, res.Generation = after.GetUID(), after.GetResourceVersion(), after.GetGeneration()
	switch {
	case before == nil || before.GetUID() != after.GetUID():
		res.Operation = Created
	case before.GetResourceVersion() != after.GetResourceVersion():
		res.Operation = Configured
	default:
		res.Operation = Unchanged
	}

	switch gvk.GroupKind() {
	case crdGroupKind:
		if err := a.waitEstablished(ctx, ref, after); err != nil {
			return res, err
		}
	case schema.GroupKind{Kind: "Namespace"}:
		if after.GetDeletionTimestamp() == nil {
			a.rememberNamespace(ref.Name)
		}
	}
	return res, nil
}

// mapping returns the REST mapping of gvk, reading discovery again when the
// kind is unknown (a CRD applied since the last read).
func (a *Applier) mapping(ctx context.Context, gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := a.mapper.RESTMappingWithContext(ctx, gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.ResetWithContext(ctx)
		m, err = a.mapper.RESTMappingWithContext(ctx, gvk.GroupKind(), gvk.Version)
	}
	return m, err
}

func (a *Applier) resource(m *meta.RESTMapping, namespace string) dynamic.ResourceInterface {
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.client.Resource(m.Resource).Namespace(namespace)
	}
	return a.client.Resource(m.Resource)
}

// get returns the object, or nil and a NotFound error.
func (a *Applier) get(ctx context.Context, ri dynamic.ResourceInterface, name string) (*unstructured.Unstructured, error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.RequestTimeout)
	defer cancel()
	obj, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return obj, nil
}

func (a *Applier) patch(ctx context.Context, ri dynamic.ResourceInterface, name string, body []byte) (*unstructured.Unstructured, error) {
	ctx, cancel := context.WithTimeout(ctx, a.opts.RequestTimeout)
	defer cancel()
	return ri.Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{
		FieldManager: a.opts.FieldManager,
		Force:        new(true),
	})
}

// ensureNamespace creates namespace ns when it does not exist and reports
// whether it did. A namespace seen once is not looked up again (until an apply
// into it finds it gone, or Delete removes it).
func (a *Applier) ensureNamespace(ctx context.Context, ns string) (bool, error) {
	a.mu.Lock()
	known := a.namespaces[ns]
	a.mu.Unlock()
	if known {
		return false, nil
	}
	ri := a.client.Resource(namespaceGVR)
	got, err := a.get(ctx, ri, ns)
	switch {
	case err == nil:
		// A terminating namespace is not remembered: the apply into it will fail
		// (errs.Conflict) and the next one looks again.
		if got.GetDeletionTimestamp() == nil {
			a.rememberNamespace(ns)
		}
		return false, nil
	case !apierrors.IsNotFound(err):
		return false, err
	}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("v1")
	obj.SetKind("Namespace")
	obj.SetName(ns)
	cctx, cancel := context.WithTimeout(ctx, a.opts.RequestTimeout)
	defer cancel()
	_, err = ri.Create(cctx, obj, metav1.CreateOptions{FieldManager: a.opts.FieldManager})
	created := err == nil
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	a.rememberNamespace(ns)
	return created, nil
}

func (a *Applier) rememberNamespace(ns string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.namespaces[ns] = true
}

func (a *Applier) forgetNamespace(ns string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.namespaces, ns)
}

// isNamespaceNotFound reports whether err is the API server's answer to a write
// into namespace ns, which does not exist.
func isNamespaceNotFound(err error, ns string) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusNotFound {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Kind == "namespaces" && d.Name == ns
}

// waitEstablished waits until the CRD applied as obj is Established and
// discovery serves every served version of its kind, polling with backoff.
func (a *Applier) waitEstablished(ctx context.Context, ref ObjectRef, obj *unstructured.Unstructured) error {
	wctx, cancel := context.WithTimeout(ctx, a.opts.CRDTimeout)
	defer cancel()
	ri := a.client.Resource(crdGVR)
	state := "not Established"
	for delay := firstPoll; ; delay = min(2*delay, maxPoll) {
		established, rejected, msg := crdConditions(obj)
		switch {
		case rejected:
			return errs.New(errs.Invalid, "apply %s: the API server did not accept its names: %s", ref, msg)
		case established:
			served, err := a.served(wctx, obj)
			if err == nil && served {
				return nil
			}
			if err != nil && wctx.Err() == nil {
				return classify("apply", ref, fmt.Errorf("reading discovery: %w", err))
			}
			state = "Established but not yet served by discovery"
		case msg != "":
			state = "not Established: " + msg
		}

		timer := time.NewTimer(delay)
		select {
		case <-wctx.Done():
			timer.Stop()
			if err := ctx.Err(); err != nil {
				return classify("apply", ref, err)
			}
			return errs.New(errs.Conflict, "apply %s: still %s after %s; retry later", ref, state, a.opts.CRDTimeout)
		case <-timer.C:
		}
		got, err := a.get(wctx, ri, ref.Name)
		switch {
		case err == nil:
			obj = got
		case wctx.Err() != nil:
			// The deadline passed during the GET: report it on the next turn.
		default:
			return classify("apply", ref, err)
		}
	}
}

// crdConditions reads the Established and NamesAccepted conditions of a CRD.
func crdConditions(crd *unstructured.Unstructured) (established, rejected bool, msg string) {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok {
			continue
		}
		typ, _ := m["type"].(string)
		status, _ := m["status"].(string)
		message, _ := m["message"].(string)
		switch {
		case typ == "Established" && status == "True":
			established = true
		case typ == "NamesAccepted" && status == "False":
			rejected, msg = true, message
		case typ == "Established" && message != "" && !rejected:
			msg = message
		}
	}
	return established, rejected, msg
}

// served reports whether the mapper resolves every served version of the CRD's
// kind, reading discovery again if it does not.
func (a *Applier) served(ctx context.Context, crd *unstructured.Unstructured) (bool, error) {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	gk := schema.GroupKind{Group: group, Kind: kind}
	for attempt := range 2 {
		missing := false
		for _, v := range versions {
			m, _ := v.(map[string]any)
			name, _ := m["name"].(string)
			if served, _ := m["served"].(bool); !served || name == "" {
				continue
			}
			_, err := a.mapper.RESTMappingWithContext(ctx, gk, name)
			if meta.IsNoMatchError(err) {
				missing = true
				break
			}
			if err != nil {
				return false, err
			}
		}
		if !missing {
			return true, nil
		}
		if attempt == 0 {
			a.mapper.ResetWithContext(ctx)
		}
	}
	return false, nil
}
