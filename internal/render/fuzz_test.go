package render

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// FuzzDecodeObjects feeds arbitrary rendered documents to the decoder of
// manifests: it must never panic, and what it accepts must be objects that
// namespace defaulting, hashing and deep copies handle.
func FuzzDecodeObjects(f *testing.F) {
	f.Add("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: b\n")
	f.Add("apiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: ConfigMap\n    metadata: {name: y}\n")
	f.Add("# only a comment\n")
	f.Add("- a\n- b\n")
	f.Add("apiVersion: v1\nkind: ConfigMap\nmetadata: [x]\n")
	f.Add("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: 3}\nspec: {n: 1.5, big: 123456789012345678901234567890}\n")
	f.Add("{\"apiVersion\":\"v1\",\"kind\":\"Secret\",\"metadata\":{\"generateName\":\"s-\"}}")
	f.Fuzz(func(t *testing.T, doc string) {
		objs, err := decodeObjects("fuzz/templates/x.yaml", doc)
		if err != nil {
			return
		}
		sc := newScopes(nil)
		for _, o := range objs {
			sc.learnCRD(o)
			u := &unstructured.Unstructured{Object: o}
			if u.GetKind() == "" || u.GetAPIVersion() == "" || (u.GetName() == "" && u.GetGenerateName() == "") {
				t.Fatalf("accepted an object without kind, apiVersion or name: %v", o)
			}
			if u.GetNamespace() == "" && sc.namespaced(u.GroupVersionKind().GroupKind()) {
				u.SetNamespace("ns")
			}
			if _, err := hashObject(o); err != nil {
				t.Fatalf("accepted an object that does not hash: %v", err)
			}
			_ = u.DeepCopy()
		}
	})
}
