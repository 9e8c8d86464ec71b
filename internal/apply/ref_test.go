package apply

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/atoll-edge/atoll/internal/errs"
)

func TestObjectRef(t *testing.T) {
	tests := []struct {
		name       string
		ref        ObjectRef
		wantString string
		wantErr    string // in Validate's message; empty when valid
	}{
		{"namespaced", ObjectRef{"apps/v1", "Deployment", "ns", "web"}, "apps/v1 Deployment ns/web", ""},
		{"cluster-scoped", ObjectRef{"v1", "Namespace", "", "ns"}, "v1 Namespace ns", ""},
		{"no apiVersion", ObjectRef{"", "ConfigMap", "ns", "cm"}, " ConfigMap ns/cm", "no apiVersion"},
		{"no kind", ObjectRef{"v1", "", "ns", "cm"}, "v1  ns/cm", "no kind"},
		{"no name", ObjectRef{"v1", "ConfigMap", "ns", ""}, "v1 ConfigMap ns/", "no name"},
		{"bad apiVersion", ObjectRef{"a/b/c", "X", "", "x"}, "a/b/c X x", "invalid apiVersion"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.ref.String(); got != tc.wantString {
				t.Errorf("String() = %q, want %q", got, tc.wantString)
			}
			err := tc.ref.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.wantErr != "" && (errs.KindOf(err) != errs.Invalid || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate = %v, want invalid containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestLabel(t *testing.T) {
	tests := []struct {
		name     string
		existing map[string]string
		add      map[string]string
		want     map[string]string
	}{
		{"onto none", nil, map[string]string{LabelDIG: "d1"}, map[string]string{LabelDIG: "d1"}},
		{"keeps others, ours win",
			map[string]string{"app": "web", LabelDIG: "old"},
			map[string]string{LabelDIG: "d1", LabelApp: "a1", LabelInstance: "i1"},
			map[string]string{"app": "web", LabelDIG: "d1", LabelApp: "a1", LabelInstance: "i1"}},
		{"nothing to add", map[string]string{"app": "web"}, nil, map[string]string{"app": "web"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "apps/v1", "kind": "Deployment",
				"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}}}},
			}}
			obj.SetLabels(tc.existing)
			Label(obj, tc.add)
			if got := obj.GetLabels(); !maps.Equal(got, tc.want) {
				t.Errorf("labels = %v, want %v", got, tc.want)
			}
			tmpl, _, _ := unstructured.NestedStringMap(obj.Object, "spec", "template", "metadata", "labels")
			if !maps.Equal(tmpl, map[string]string{"app": "web"}) {
				t.Errorf("pod template labels changed to %v", tmpl)
			}
		})
	}
}
