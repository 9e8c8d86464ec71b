package ztp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
	"github.com/atoll-edge/atoll/config/crd"
	"github.com/atoll-edge/atoll/internal/api"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/store"
)

const (
	provisioningsPath = "/v2/cluster-providers/{clusterProvider}/clusters/{cluster}/provisionings"
	provisioningPath  = provisioningsPath + "/{provisioning}"
	tag               = "zero-touch provisioning"
	// DefaultNamespace is where a Provisioning goes on its site when the request names none.
	DefaultNamespace = "default"
)

// Register says where the new cluster goes in the hub's registry.
type Register struct {
	ClusterProvider string `json:"clusterProvider"`
	// Cluster is the registered name; empty means the cluster's name.
	Cluster string   `json:"cluster,omitempty"`
	Labels  []string `json:"labels,omitempty"`
}

// Spec is a provisioning request's spec: the Provisioning's spec, the namespace
// of the site it goes in, and where its cluster is registered.
type Spec struct {
	bpav1.ProvisioningSpec `json:",inline"`
	Namespace              string   `json:"namespace,omitempty"`
	Register               Register `json:"register"`
}

// Request is the body of POST .../provisionings.
type Request struct {
	Metadata model.Metadata `json:"metadata"`
	Spec     Spec           `json:"spec"`
}

// Status is what the hub shows of a Provisioning: the site's status, where it is,
// and whether its cluster is registered.
type Status struct {
	bpav1.ProvisioningStatus `json:",inline"`
	Site                     string `json:"site"`
	Namespace                string `json:"namespace"`
	// Registered is true when the registry holds the cluster this Provisioning registered.
	Registered bool `json:"registered"`
	// RegisteredAs is provider/cluster.
	RegisteredAs      string `json:"registeredAs"`
	RegistrationError string `json:"registrationError,omitempty"`
}

// View is a Provisioning as the API answers it.
type View struct {
	Metadata model.Metadata `json:"metadata"`
	Spec     Spec           `json:"spec"`
	Status   Status         `json:"status"`
}

// Routes are the REST routes of zero-touch provisioning, for api.Options.Extra.
func (z *Controller) Routes() []api.Route {
	schemas := openAPISchemas()
	return []api.Route{
		{Method: "POST", Pattern: provisioningsPath, Summary: "Create a Provisioning on the site (a registered cluster running the BPA operator); its cluster is registered into register.clusterProvider once installed.",
			Request: "ProvisioningRequest", Response: "Provisioning", Status: http.StatusCreated, Tag: tag, Schemas: schemas, Handler: z.create},
		{Method: "GET", Pattern: provisioningsPath, Summary: "List the site's Provisionings that the hub manages, with their conditions.",
			Response: "[]Provisioning", Status: http.StatusOK, Tag: tag, Handler: z.list},
		{Method: "GET", Pattern: provisioningPath, Summary: "Get one Provisioning of the site: conditions, hosts, kubeconfig Secret, registration.",
			Response: "Provisioning", Status: http.StatusOK, Tag: tag, Handler: z.get},
		{Method: "DELETE", Pattern: provisioningPath, Summary: "Delete a Provisioning on the site: the operator releases its hosts. The registered cluster stays in the registry.",
			Status: http.StatusNoContent, Tag: tag, Handler: z.delete},
	}
}

// pathSite reads the site from the path and checks that the registry holds it.
func (z *Controller) pathSite(r *http.Request) (site, error) {
	provider, err := api.PathName(r, "clusterProvider", "cluster provider")
	if err != nil {
		return site{}, err
	}
	cluster, err := api.PathName(r, "cluster", "cluster")
	if err != nil {
		return site{}, err
	}
	s := site{Provider: provider, Cluster: cluster}
	if _, err := z.opts.Store.Get(r.Context(), s.key(), nil); err != nil {
		return site{}, err
	}
	return s, nil
}

func (z *Controller) create(w http.ResponseWriter, r *http.Request) error {
	s, err := z.pathSite(r)
	if err != nil {
		return err
	}
	var req Request
	if err := api.DecodeJSON(r, &req); err != nil {
		return err
	}
	if err := z.validate(r.Context(), &req); err != nil {
		return err
	}
	c, _, err := z.siteClient(s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), siteRequestTimeout)
	defer cancel()
	if old, err := z.find(ctx, c, s, req.Metadata.Name); err == nil {
		return errs.New(errs.Exists, "site %s already has Provisioning %s (in namespace %s)", s, req.Metadata.Name, old.Namespace)
	} else if !errors.Is(err, errNotFound) {
		return err
	}
	// The record first: a Provisioning is never on a site the hub does not follow.
	if err := z.ensureSite(ctx, s); err != nil {
		return err
	}
	labels, _ := json.Marshal(req.Spec.Register.Labels)
	p := &bpav1.Provisioning{
		ObjectMeta: metav1.ObjectMeta{Name: req.Metadata.Name, Namespace: req.Spec.Namespace,
			Labels: map[string]string{LabelManaged: "true"},
			Annotations: map[string]string{
				AnnotationProvider: req.Spec.Register.ClusterProvider, AnnotationCluster: req.Spec.Register.Cluster,
				AnnotationLabels: string(labels),
			}},
		Spec: req.Spec.ProvisioningSpec,
	}
	for k, v := range map[string]string{AnnotationDescription: req.Metadata.Description, AnnotationUserData1: req.Metadata.UserData1, AnnotationUserData2: req.Metadata.UserData2} {
		if v != "" {
			p.Annotations[k] = v
		}
	}
	if err := c.Create(ctx, p); err != nil {
		return siteError(s, "create Provisioning "+p.Name, err)
	}
	api.WriteJSON(w, http.StatusCreated, z.view(ctx, s, p))
	return nil
}

// validate checks what the site's API server cannot: the hub's names, and that
// the cluster provider exists. The spec is checked by the site (the CRD's schema).
func (z *Controller) validate(ctx context.Context, req *Request) error {
	if err := model.ValidateMetadata("provisioning", &req.Metadata); err != nil {
		return err
	}
	sp := &req.Spec
	if sp.Namespace == "" {
		sp.Namespace = DefaultNamespace
	}
	if msgs := validation.IsDNS1123Label(sp.Namespace); len(msgs) > 0 {
		return errs.New(errs.Invalid, "spec.namespace %q is not a namespace name: %s", sp.Namespace, strings.Join(msgs, "; "))
	}
	if sp.ClusterName == "" {
		sp.ClusterName = req.Metadata.Name
	}
	reg := &sp.Register
	if reg.ClusterProvider == "" {
		return errs.New(errs.Invalid, "spec.register.clusterProvider is empty: name the cluster provider the new cluster is registered into")
	}
	if err := model.ValidateName("cluster provider", reg.ClusterProvider); err != nil {
		return err
	}
	if reg.Cluster == "" {
		reg.Cluster = sp.ClusterName
	}
	if err := model.ValidateName("cluster", reg.Cluster); err != nil {
		return err
	}
	for _, l := range reg.Labels {
		if err := model.ValidateLabel(l); err != nil {
			return err
		}
	}
	if _, err := z.opts.Store.Get(ctx, store.K(model.ClusterProviders, reg.ClusterProvider), nil); err != nil {
		return err
	}
	return nil
}

func (z *Controller) list(w http.ResponseWriter, r *http.Request) error {
	s, err := z.pathSite(r)
	if err != nil {
		return err
	}
	c, _, err := z.siteClient(s)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), siteRequestTimeout)
	defer cancel()
	var list bpav1.ProvisioningList
	if err := c.List(ctx, &list, client.MatchingLabels{LabelManaged: "true"}); err != nil {
		return siteError(s, "list Provisionings", err)
	}
	slices.SortFunc(list.Items, func(a, b bpav1.Provisioning) int { return strings.Compare(a.Name, b.Name) })
	out := make([]View, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, z.view(ctx, s, &list.Items[i]))
	}
	api.WriteJSON(w, http.StatusOK, out)
	return nil
}

func (z *Controller) get(w http.ResponseWriter, r *http.Request) error {
	s, _, p, err := z.pathProvisioning(r)
	if err != nil {
		return err
	}
	api.WriteJSON(w, http.StatusOK, z.view(r.Context(), s, p))
	return nil
}

func (z *Controller) delete(w http.ResponseWriter, r *http.Request) error {
	s, c, p, err := z.pathProvisioning(r)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), siteRequestTimeout)
	defer cancel()
	if err := c.Delete(ctx, p, client.Preconditions{UID: &p.UID}); err != nil && !apierrors.IsNotFound(err) {
		return siteError(s, "delete Provisioning "+p.Name, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (z *Controller) pathProvisioning(r *http.Request) (site, client.Client, *bpav1.Provisioning, error) {
	s, err := z.pathSite(r)
	if err != nil {
		return site{}, nil, nil, err
	}
	name, err := api.PathName(r, "provisioning", "provisioning")
	if err != nil {
		return site{}, nil, nil, err
	}
	c, _, err := z.siteClient(s)
	if err != nil {
		return site{}, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(r.Context(), siteRequestTimeout)
	defer cancel()
	p, err := z.find(ctx, c, s, name)
	return s, c, p, err
}

// find returns the managed Provisioning named name on the site, in any namespace.
func (z *Controller) find(ctx context.Context, c client.Client, s site, name string) (*bpav1.Provisioning, error) {
	var list bpav1.ProvisioningList
	if err := c.List(ctx, &list, client.MatchingLabels{LabelManaged: "true"}); err != nil {
		return nil, siteError(s, "list Provisionings", err)
	}
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i], nil
		}
	}
	return nil, errs.New(errs.NotFound, "site %s has no Provisioning %s that the hub manages", s, name)
}

// view is the API's answer for p.
func (z *Controller) view(ctx context.Context, s site, p *bpav1.Provisioning) View {
	a := p.Annotations
	labels, _ := parseLabels(a[AnnotationLabels])
	v := View{
		Metadata: model.Metadata{Name: p.Name, Description: a[AnnotationDescription], UserData1: a[AnnotationUserData1], UserData2: a[AnnotationUserData2]},
		Spec: Spec{ProvisioningSpec: p.Spec, Namespace: p.Namespace,
			Register: Register{ClusterProvider: a[AnnotationProvider], Cluster: a[AnnotationCluster], Labels: labels}},
		Status: Status{ProvisioningStatus: p.Status, Site: s.String(), Namespace: p.Namespace},
	}
	t := clusterRef{Provider: a[AnnotationProvider], Name: a[AnnotationCluster]}
	v.Status.RegisteredAs = t.String()
	if res, ok := z.result(resultKey(s, p.Namespace, p.Name)); ok {
		v.Status.RegistrationError = res.Err
	}
	if t.Provider != "" && t.Name != "" && p.Status.KubeconfigSecretRef != nil {
		var rec model.ClusterRecord
		if _, err := z.opts.Store.Get(ctx, store.K(model.Clusters, t.Provider, t.Name), &rec); err == nil {
			v.Status.Registered = rec.Metadata.Description == fmt.Sprintf(registeredByDescription, s.Provider, s.Cluster, p.Namespace, p.Name)
		}
	}
	if v.Status.Conditions == nil {
		v.Status.Conditions = []metav1.Condition{}
	}
	return v
}

// siteError maps an error of the site's API server to an error kind of the hub.
// The site's message is kept: it says which field of the spec is wrong.
func siteError(s site, what string, err error) error {
	var k errs.Kind
	switch {
	case apierrors.IsAlreadyExists(err):
		k = errs.Exists
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		k = errs.Invalid
	case meta.IsNoMatchError(err):
		return errs.Wrap(errs.Invalid, err, "site %s does not serve bpa.akraino.org/v1alpha1 Provisionings (is the BPA operator installed there?)", s)
	case apierrors.IsNotFound(err):
		k = errs.NotFound
	case apierrors.IsConflict(err):
		k = errs.Conflict
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		k = errs.Invalid
	default:
		k = errs.Unavailable
	}
	return errs.Wrap(k, err, "site %s: %s", s, what)
}

// openAPISchemas are the components these routes introduce; the spec's schema is
// the Provisioning CRD's own.
func openAPISchemas() map[string]any {
	spec := map[string]any{"type": "object", "description": "the Provisioning's spec (see the CRD provisionings.bpa.akraino.org)"}
	status := map[string]any{"type": "object"}
	if crds, err := crd.CRDs(); err == nil {
		for _, c := range crds {
			if c.Spec.Names.Kind != "Provisioning" || len(c.Spec.Versions) == 0 || c.Spec.Versions[0].Schema == nil {
				continue
			}
			props := c.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties
			if data, err := json.Marshal(props["spec"]); err == nil {
				_ = json.Unmarshal(data, &spec)
			}
			if data, err := json.Marshal(props["status"]); err == nil {
				_ = json.Unmarshal(data, &status)
			}
		}
	}
	specProps, _ := spec["properties"].(map[string]any)
	if specProps == nil {
		specProps = map[string]any{}
		spec["properties"] = specProps
	}
	specProps["namespace"] = map[string]any{"type": "string", "description": "namespace of the site the Provisioning goes in (default \"default\")"}
	specProps["register"] = map[string]any{"type": "object", "required": []string{"clusterProvider"}, "properties": map[string]any{
		"clusterProvider": map[string]any{"type": "string", "description": "the cluster provider the new cluster is registered into"},
		"cluster":         map[string]any{"type": "string", "description": "the registered name (default: the cluster's name)"},
		"labels":          map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": "cluster labels to add"},
	}}
	if req, ok := spec["required"].([]any); ok {
		spec["required"] = append(req, "register")
	}
	statusProps, _ := status["properties"].(map[string]any)
	if statusProps == nil {
		statusProps = map[string]any{}
		status["properties"] = statusProps
	}
	statusProps["site"] = map[string]any{"type": "string", "description": "provider/cluster of the site"}
	statusProps["namespace"] = map[string]any{"type": "string"}
	statusProps["registered"] = map[string]any{"type": "boolean", "description": "the registry holds the cluster this Provisioning registered"}
	statusProps["registeredAs"] = map[string]any{"type": "string", "description": "provider/cluster"}
	statusProps["registrationError"] = map[string]any{"type": "string", "description": "why the last registration attempt failed"}
	meta := map[string]any{"$ref": "#/components/schemas/Metadata"}
	return map[string]any{
		"ProvisioningRequest": map[string]any{"type": "object", "required": []string{"metadata", "spec"},
			"properties": map[string]any{"metadata": meta, "spec": spec}},
		"Provisioning": map[string]any{"type": "object",
			"properties": map[string]any{"metadata": meta, "spec": spec, "status": status}},
	}
}
