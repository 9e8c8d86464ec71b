package apply_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/atoll-edge/atoll/internal/apply"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/test/edge"
)

var (
	configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	namespaces = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

// TestApplier runs the Applier against one real API server; every subtest uses
// its own namespace.
func TestApplier(t *testing.T) {
	t.Parallel()
	cluster := edge.Start(t, 1, edge.Options{})[0]
	cfg := cluster.RESTConfig()
	a := newApplier(t, cfg, apply.Options{})
	check := dynamicFor(t, cfg)

	t.Run("ConfigMap into a new namespace: created, unchanged, configured", func(t *testing.T) {
		ns := uniqueName(t, "cm")
		steps := []struct {
			name          string
			data          string
			wantOp        apply.Operation
			wantCreatedNS string
		}{
			{"first apply creates the namespace and the object", "one", apply.Created, ns},
			{"same object again changes nothing", "one", apply.Unchanged, ""},
			{"changed data", "two", apply.Configured, ""},
			{"changed data again is stable", "two", apply.Unchanged, ""},
		}
		for _, step := range steps {
			obj := object(t, `
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: %s}
data: {greeting: %s}`, ns, step.data)
			res, err := a.Apply(t.Context(), obj)
			if err != nil {
				t.Fatalf("%s: Apply: %v", step.name, err)
			}
			want := apply.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "settings"}
			if res.Ref != want || res.Operation != step.wantOp || res.CreatedNamespace != step.wantCreatedNS {
				t.Fatalf("%s: got ref %v, operation %q, created namespace %q; want %v, %q, %q",
					step.name, res.Ref, res.Operation, res.CreatedNamespace, want, step.wantOp, step.wantCreatedNS)
			}
			if res.Changed() != (step.wantOp != apply.Unchanged) || res.UID == "" || res.ResourceVersion == "" {
				t.Fatalf("%s: result %+v: Changed or identity wrong", step.name, res)
			}
			got, err := check.Resource(configMaps).Namespace(ns).Get(t.Context(), "settings", metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: the ConfigMap is not there: %v", step.name, err)
			}
			if v, _, _ := unstructured.NestedString(got.Object, "data", "greeting"); v != step.data {
				t.Fatalf("%s: data.greeting = %q, want %q", step.name, v, step.data)
			}
			if got.GetResourceVersion() != res.ResourceVersion {
				t.Fatalf("%s: resourceVersion %s on the server, %s in the result", step.name, got.GetResourceVersion(), res.ResourceVersion)
			}
			if !managedBy(got, apply.DefaultFieldManager, metav1.ManagedFieldsOperationApply) {
				t.Fatalf("%s: managedFields %+v lack an Apply entry of manager %q", step.name, got.GetManagedFields(), apply.DefaultFieldManager)
			}
		}
		if _, err := check.Resource(namespaces).Get(t.Context(), ns, metav1.GetOptions{}); err != nil {
			t.Fatalf("namespace %s was not created: %v", ns, err)
		}
	})

	t.Run("namespace is defaulted for namespaced kinds and dropped for cluster-scoped ones", func(t *testing.T) {
		name := uniqueName(t, "scope")
		tests := []struct {
			name    string
			obj     *unstructured.Unstructured
			wantRef apply.ObjectRef
			gvr     schema.GroupVersionResource
		}{
			{
				name: "ConfigMap without a namespace goes to default",
				obj: object(t, `
apiVersion: v1
kind: ConfigMap
metadata: {name: %s}`, name),
				wantRef: apply.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: name},
				gvr:     configMaps,
			},
			{
				name: "ClusterRole with a namespace is applied cluster-wide",
				obj: object(t, `
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %s, namespace: nowhere}
rules: [{apiGroups: [""], resources: [configmaps], verbs: [get]}]`, name),
				wantRef: apply.ObjectRef{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: name},
				gvr:     schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
			},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				input := tc.obj.DeepCopy()
				res, err := a.Apply(t.Context(), tc.obj)
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				if !reflect.DeepEqual(input, tc.obj) {
					t.Fatalf("Apply modified its argument: %v, was %v", tc.obj, input)
				}
				if res.Ref != tc.wantRef || res.Operation != apply.Created || res.CreatedNamespace != "" {
					t.Fatalf("got %v %q (created namespace %q), want %v created", res.Ref, res.Operation, res.CreatedNamespace, tc.wantRef)
				}
				ri := dynamic.ResourceInterface(check.Resource(tc.gvr))
				if tc.wantRef.Namespace != "" {
					ri = check.Resource(tc.gvr).Namespace(tc.wantRef.Namespace)
				}
				if _, err := ri.Get(t.Context(), name, metav1.GetOptions{}); err != nil {
					t.Fatalf("the object is not where the result says: %v", err)
				}
				if _, err := check.Resource(namespaces).Get(t.Context(), "nowhere", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
					t.Fatalf("namespace nowhere: err = %v, want NotFound (nothing should create it)", err)
				}
			})
		}
	})

	t.Run("a custom resource applies right after its CRD", func(t *testing.T) {
		ns := uniqueName(t, "crd")
		group := ns + ".test.atoll.dev"
		crd := object(t, `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.%s}
spec:
  group: %s
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}`, group, group)
		cr := object(t, `
apiVersion: %s/v1
kind: Widget
metadata: {name: w1, namespace: %s}
spec: {size: 3}`, group, ns)

		start := time.Now()
		res, err := a.Apply(t.Context(), crd)
		if err != nil {
			t.Fatalf("Apply CRD: %v", err)
		}
		if res.Operation != apply.Created || res.Ref.Namespace != "" {
			t.Fatalf("CRD result %+v, want created, cluster-scoped", res)
		}
		t.Logf("CRD Established and served after %s", time.Since(start).Round(time.Millisecond))
		// No retry: the CRD's Apply returning is the promise that this works.
		res, err = a.Apply(t.Context(), cr)
		if err != nil {
			t.Fatalf("Apply custom resource right after its CRD: %v", err)
		}
		if res.Operation != apply.Created || res.CreatedNamespace != ns {
			t.Fatalf("custom resource result %+v, want created with namespace %s created", res, ns)
		}
		got, err := check.Resource(schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}).
			Namespace(ns).Get(t.Context(), "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the custom resource is not there: %v", err)
		}
		if size, _, _ := unstructured.NestedInt64(got.Object, "spec", "size"); size != 3 {
			t.Fatalf("spec.size = %d, want 3", size)
		}
		// Applying the CRD again finds it Established at once.
		if res, err := a.Apply(t.Context(), crd); err != nil || res.Operation != apply.Unchanged {
			t.Fatalf("Apply CRD again: %+v, %v; want unchanged", res, err)
		}
	})

	t.Run("rejected objects give classified errors naming the object", func(t *testing.T) {
		ns := uniqueName(t, "bad")
		secretValue := "s3cr3t-" + ns
		tests := []struct {
			name       string
			obj        *unstructured.Unstructured
			wantKind   errs.Kind
			wantInMsg  []string
			notInMsg   []string
			wantReject bool
		}{
			{
				name: "Deployment without a selector",
				obj: object(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %s}
spec:
  replicas: 1
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: c, image: fake}]}`, ns),
				wantKind:   errs.Invalid,
				wantReject: true,
				wantInMsg:  []string{"apply apps/v1 Deployment " + ns + "/web", "422", "selector"},
			},
			{
				name: "ConfigMap with an invalid name",
				obj: object(t, `
apiVersion: v1
kind: ConfigMap
metadata: {name: Not_A_Name, namespace: %s}`, ns),
				wantKind:   errs.Invalid,
				wantReject: true,
				wantInMsg:  []string{"v1 ConfigMap " + ns + "/Not_A_Name", "rejected"},
			},
			{
				name: "kind the cluster does not serve",
				obj: object(t, `
apiVersion: nothing.atoll.dev/v1
kind: Gadget
metadata: {name: g, namespace: %s}`, ns),
				wantKind:   errs.Invalid,
				wantReject: true,
				wantInMsg:  []string{"nothing.atoll.dev/v1 Gadget " + ns + "/g", "does not serve"},
			},
			{
				name: "Secret with an invalid key: name only, never the value",
				obj: object(t, `
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: %s}
data: {"bad key!": %s}`, ns, base64.StdEncoding.EncodeToString([]byte(secretValue))),
				wantKind:   errs.Invalid,
				wantReject: true,
				wantInMsg:  []string{"v1 Secret " + ns + "/creds", "422", "data[bad key!]"},
				notInMsg:   []string{secretValue, base64.StdEncoding.EncodeToString([]byte(secretValue))},
			},
			{
				name: "object without a name",
				obj: object(t, `
apiVersion: v1
kind: ConfigMap
metadata: {generateName: x-, namespace: %s}`, ns),
				wantKind:   errs.Invalid,
				wantReject: true,
				wantInMsg:  []string{"no name"},
			},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := a.Apply(t.Context(), tc.obj)
				if err == nil {
					t.Fatal("Apply succeeded, want an error")
				}
				if got := errs.KindOf(err); got != tc.wantKind {
					t.Errorf("kind = %q, want %q (err: %v)", got, tc.wantKind, err)
				}
				if apply.IsRejected(err) != tc.wantReject || apply.IsUnreachable(err) {
					t.Errorf("IsRejected = %t (want %t), IsUnreachable = %t (want false): %v",
						apply.IsRejected(err), tc.wantReject, apply.IsUnreachable(err), err)
				}
				for _, s := range tc.wantInMsg {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				for _, s := range tc.notInMsg {
					if strings.Contains(err.Error(), s) {
						t.Errorf("error %q contains %q", err, s)
					}
				}
			})
		}
	})

	t.Run("delete, then wait until gone", func(t *testing.T) {
		ns := uniqueName(t, "del")
		ref := apply.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "doomed"}
		if _, err := a.Apply(t.Context(), object(t, `
apiVersion: v1
kind: ConfigMap
metadata: {name: doomed, namespace: %s}`, ns)); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		steps := []struct {
			name string
			do   func(context.Context) error
		}{
			{"delete", func(ctx context.Context) error { return a.Delete(ctx, ref) }},
			{"wait gone", func(ctx context.Context) error { return a.WaitGone(ctx, ref) }},
			{"delete what is gone is a success", func(ctx context.Context) error { return a.Delete(ctx, ref) }},
			{"wait for what is gone returns at once", func(ctx context.Context) error { return a.WaitGone(ctx, ref) }},
			{"delete of a kind not served is a success", func(ctx context.Context) error {
				return a.Delete(ctx, apply.ObjectRef{APIVersion: "nothing.atoll.dev/v1", Kind: "Gadget", Namespace: ns, Name: "g"})
			}},
		}
		for _, step := range steps {
			if err := step.do(t.Context()); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
		}
		if _, err := check.Resource(configMaps).Namespace(ns).Get(t.Context(), "doomed", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("after WaitGone: err = %v, want NotFound", err)
		}
	})

	t.Run("wait gone gives up on an object held by a finalizer", func(t *testing.T) {
		ns := uniqueName(t, "fin")
		short := newApplier(t, cfg, apply.Options{DeleteTimeout: time.Second})
		ref := apply.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "held"}
		if _, err := short.Apply(t.Context(), object(t, `
apiVersion: v1
kind: ConfigMap
metadata: {name: held, namespace: %s, finalizers: [test.atoll.dev/hold]}`, ns)); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		t.Cleanup(func() {
			patch := []byte(`{"metadata":{"finalizers":null}}`)
			_, _ = check.Resource(configMaps).Namespace(ns).Patch(context.Background(), "held", types.MergePatchType, patch, metav1.PatchOptions{})
		})
		if err := short.Delete(t.Context(), ref); err != nil {
			t.Fatalf("Delete: %v", err)
		}
		start := time.Now()
		err := short.WaitGone(t.Context(), ref)
		if errs.KindOf(err) != errs.Conflict || apply.IsUnreachable(err) || apply.IsRejected(err) {
			t.Fatalf("WaitGone: err = %v, want a conflict (neither unreachable nor rejected)", err)
		}
		for _, s := range []string{ref.String(), "test.atoll.dev/hold", "being deleted"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not contain %q", err, s)
			}
		}
		if d := time.Since(start); d < time.Second || d > 10*time.Second {
			t.Errorf("WaitGone took %s, want about DeleteTimeout (1s)", d)
		}
	})

	t.Run("apply into a terminating namespace is a conflict, not a rejection", func(t *testing.T) {
		ns := uniqueName(t, "term")
		cm := func(name string) *unstructured.Unstructured {
			return object(t, `
apiVersion: v1
kind: ConfigMap
metadata: {name: %s, namespace: %s}`, name, ns)
		}
		if _, err := a.Apply(t.Context(), cm("first")); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		// Without a namespace controller (no Workloads) the namespace stays Terminating.
		if err := check.Resource(namespaces).Delete(t.Context(), ns, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting namespace %s: %v", ns, err)
		}
		var err error
		deadline := time.Now().Add(10 * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			// Admission sees the namespace's deletion a moment later: poll.
			if _, err = a.Apply(t.Context(), cm(fmt.Sprintf("late-%d", i))); errs.KindOf(err) == errs.Conflict {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if errs.KindOf(err) != errs.Conflict || apply.IsRejected(err) || apply.IsUnreachable(err) {
			t.Fatalf("Apply into terminating namespace: err = %v, want a conflict", err)
		}
		if !strings.Contains(err.Error(), "being deleted") {
			t.Fatalf("error %q does not say the namespace is being deleted", err)
		}
	})
}

// TestApplyUnreachable stops a cluster and checks that every operation says the
// cluster is unreachable, with a warm and a cold Applier, and that applying works
// again once it is back.
func TestApplyUnreachable(t *testing.T) {
	t.Parallel()
	cluster := edge.Start(t, 1, edge.Options{})[0]
	warm := newApplier(t, cluster.RESTConfig(), apply.Options{})
	ns := uniqueName(t, "down")
	cm := object(t, `
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: %s}
data: {a: b}`, ns)
	ref := apply.RefOf(cm)
	if _, err := warm.Apply(t.Context(), cm); err != nil {
		t.Fatalf("Apply before the stop: %v", err)
	}

	if err := cluster.Stop(t.Context()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	cold := newApplier(t, cluster.RESTConfig(), apply.Options{})
	tests := []struct {
		name string
		do   func(context.Context) error
	}{
		{"apply, warm discovery", func(ctx context.Context) error { _, err := warm.Apply(ctx, cm); return err }},
		{"apply, cold discovery", func(ctx context.Context) error { _, err := cold.Apply(ctx, cm); return err }},
		{"delete", func(ctx context.Context) error { return warm.Delete(ctx, ref) }},
		{"wait gone", func(ctx context.Context) error { return warm.WaitGone(ctx, ref) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			err := tc.do(t.Context())
			if !apply.IsUnreachable(err) || apply.IsRejected(err) || errs.KindOf(err) != errs.Unavailable {
				t.Fatalf("err = %v, want unreachable (errs.Unavailable)", err)
			}
			if !strings.Contains(err.Error(), ref.String()) {
				t.Errorf("error %q does not name %s", err, ref)
			}
			t.Logf("failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
		})
	}

	if err := cluster.Restart(t.Context()); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	for name, a := range map[string]*apply.Applier{"warm": warm, "cold": cold} {
		res, err := a.Apply(t.Context(), cm)
		if err != nil || res.Operation != apply.Unchanged {
			t.Fatalf("%s applier after restart: %+v, %v; want unchanged", name, res, err)
		}
	}
}

func newApplier(t *testing.T, cfg *rest.Config, opts apply.Options) *apply.Applier {
	t.Helper()
	a, err := apply.New(cfg, opts)
	if err != nil {
		t.Fatalf("apply.New: %v", err)
	}
	return a
}

func dynamicFor(t *testing.T, cfg *rest.Config) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("dynamic.NewForConfig: %v", err)
	}
	return c
}

// object parses a YAML manifest, formatted with args.
func object(t *testing.T, manifest string, args ...any) *unstructured.Unstructured {
	t.Helper()
	// Through JSON, so that numbers are int64 as the API machinery has them.
	data, err := yaml.YAMLToJSON(fmt.Appendf(nil, manifest, args...))
	obj := &unstructured.Unstructured{}
	if err == nil {
		err = obj.UnmarshalJSON(data)
	}
	if err != nil {
		t.Fatalf("parsing manifest: %v\n%s", err, fmt.Sprintf(manifest, args...))
	}
	return obj
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// uniqueName returns a DNS label starting with prefix and unique to this run.
func uniqueName(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return notDNS.ReplaceAllString(prefix, "-") + "-" + hex.EncodeToString(b)
}

func managedBy(obj *unstructured.Unstructured, manager string, op metav1.ManagedFieldsOperationType) bool {
	for _, f := range obj.GetManagedFields() {
		if f.Manager == manager && f.Operation == op {
			return true
		}
	}
	return false
}
