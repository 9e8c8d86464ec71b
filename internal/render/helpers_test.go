package render

import (
	"context"
	"path/filepath"
	"sort"
	"testing"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// testChart loads the chart directory testdata/<name> with Helm's loader.
func testChart(t testing.TB, name string) *chartv2.Chart {
	t.Helper()
	c, err := loader.LoadDir(filepath.Join("testdata", name))
	if err != nil {
		t.Fatalf("load testdata/%s: %v", name, err)
	}
	return c
}

// memChart loads a chart from files named relative to the chart directory
// ("Chart.yaml", "templates/x.yaml"). Chart.yaml defaults to a v2 chart "mem".
func memChart(t testing.TB, files map[string]string) *chartv2.Chart {
	t.Helper()
	if _, ok := files["Chart.yaml"]; !ok {
		files["Chart.yaml"] = "apiVersion: v2\nname: mem\nversion: 0.1.0\n"
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var bf []*archive.BufferedFile
	for _, n := range names {
		bf = append(bf, &archive.BufferedFile{Name: n, Data: []byte(files[n])})
	}
	c, err := loader.LoadFiles(bf)
	if err != nil {
		t.Fatalf("load in-memory chart: %v", err)
	}
	return c
}

// mustRender renders in with r and fails the test on error.
func mustRender(t testing.TB, r *Renderer, in Input) *Output {
	t.Helper()
	out, err := r.Render(context.Background(), in)
	if err != nil {
		t.Fatalf("Render: %v", err)
	}
	return out
}

// find returns the resource of kind and name, or fails the test.
func find(t testing.TB, rs []Resource, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, r := range rs {
		if r.Object.GetKind() == kind && r.Object.GetName() == name {
			return r.Object
		}
	}
	t.Fatalf("no %s %q among %v", kind, name, names(rs))
	return nil
}

// names lists "Kind/name" of rs, in order.
func names(rs []Resource) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Object.GetKind()+"/"+r.Object.GetName())
	}
	return out
}

func hookNames(hs []Hook) []string {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.Object.GetKind()+"/"+h.Object.GetName())
	}
	return out
}

// str returns the string at fields of obj ("" if absent).
func str(obj *unstructured.Unstructured, fields ...string) string {
	s, _, _ := unstructured.NestedString(obj.Object, fields...)
	return s
}

// num returns the integer at fields of obj (-1 if absent).
func num(obj *unstructured.Unstructured, fields ...string) int64 {
	v, ok, _ := unstructured.NestedInt64(obj.Object, fields...)
	if !ok {
		return -1
	}
	return v
}

// unstructuredSlice returns the list at fields of obj.
func unstructuredSlice(obj map[string]any, fields ...string) ([]any, bool, error) {
	return unstructured.NestedSlice(obj, fields...)
}
