package apply

import (
	"fmt"
	"maps"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/atoll-edge/atoll/internal/errs"
)

// The labels Atoll puts on every object it applies, so that the hub's watches
// (package readiness) and a terminate find them.
const (
	LabelDIG      = "atoll.dev/dig"      // the deployment intent group
	LabelApp      = "atoll.dev/app"      // the app of the composite app
	LabelInstance = "atoll.dev/instance" // the instantiation
)

// ObjectRef names one object of one cluster. It is comparable, so it can key a map.
type ObjectRef struct {
	APIVersion string `json:"apiVersion"`          // "v1", "apps/v1"
	Kind       string `json:"kind"`                // "ConfigMap"
	Namespace  string `json:"namespace,omitempty"` // empty for cluster-scoped objects
	Name       string `json:"name"`
}

// RefOf returns the reference of obj, as it stands (no namespace defaulting).
func RefOf(obj *unstructured.Unstructured) ObjectRef {
	return ObjectRef{
		APIVersion: obj.GetAPIVersion(),
		Kind:       obj.GetKind(),
		Namespace:  obj.GetNamespace(),
		Name:       obj.GetName(),
	}
}

// GroupVersionKind returns the group, version and kind of the reference. An
// unparsable APIVersion gives an empty GroupVersion; Validate reports it.
func (r ObjectRef) GroupVersionKind() schema.GroupVersionKind {
	gv, _ := schema.ParseGroupVersion(r.APIVersion)
	return gv.WithKind(r.Kind)
}

// String returns "apps/v1 Deployment ns/name", or "v1 Namespace name" for a
// cluster-scoped object.
func (r ObjectRef) String() string {
	if r.Namespace == "" {
		return fmt.Sprintf("%s %s %s", r.APIVersion, r.Kind, r.Name)
	}
	return fmt.Sprintf("%s %s %s/%s", r.APIVersion, r.Kind, r.Namespace, r.Name)
}

// Validate reports an errs.Invalid error when the reference lacks an apiVersion,
// a kind or a name, or when its apiVersion does not parse.
func (r ObjectRef) Validate() error {
	switch {
	case r.APIVersion == "":
		return errs.New(errs.Invalid, "object %s has no apiVersion", r)
	case r.Kind == "":
		return errs.New(errs.Invalid, "object %s has no kind", r)
	case r.Name == "":
		return errs.New(errs.Invalid, "object %s has no name (generateName cannot be applied)", r)
	}
	if _, err := schema.ParseGroupVersion(r.APIVersion); err != nil {
		return errs.Wrap(errs.Invalid, err, "object %s has an invalid apiVersion", r)
	}
	return nil
}

// isSecret reports whether the reference is a core Secret, whose errors are redacted.
func (r ObjectRef) isSecret() bool {
	return r.Kind == "Secret" && r.GroupVersionKind().Group == ""
}

// Label sets labels on obj's metadata, keeping the labels it already has (a label
// given here wins over one of the same key). It changes only metadata.labels, not
// the pod templates of workloads.
func Label(obj *unstructured.Unstructured, labels map[string]string) {
	if len(labels) == 0 {
		return
	}
	l := obj.GetLabels()
	if l == nil {
		l = make(map[string]string, len(labels))
	}
	maps.Copy(l, labels)
	obj.SetLabels(l)
}
