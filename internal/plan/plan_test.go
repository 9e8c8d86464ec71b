package plan

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/atoll-edge/atoll/internal/blob"
	"github.com/atoll-edge/atoll/internal/etcdembed"
)

func TestExpandDotted(t *testing.T) {
	tests := []struct {
		name string
		in   map[string]any
		want map[string]any
	}{
		{"empty", map[string]any{}, map[string]any{}},
		{"plain keys stay", map[string]any{"replicas": 3, "image": "x"}, map[string]any{"replicas": 3, "image": "x"}},
		{"one dotted key", map[string]any{"image.tag": "1.2"}, map[string]any{"image": map[string]any{"tag": "1.2"}}},
		{"deep dotted key", map[string]any{"a.b.c.d": true}, map[string]any{"a": map[string]any{"b": map[string]any{"c": map[string]any{"d": true}}}}},
		{"dotted keys share a prefix", map[string]any{"image.tag": "1.2", "image.repo": "r", "service.port": 80},
			map[string]any{"image": map[string]any{"tag": "1.2", "repo": "r"}, "service": map[string]any{"port": 80}}},
		{"nested map is taken as it is", map[string]any{"image": map[string]any{"tag": "1.2"}}, map[string]any{"image": map[string]any{"tag": "1.2"}}},
		{"dotted keys inside a nested map expand", map[string]any{"image": map[string]any{"pull.policy": "Always"}},
			map[string]any{"image": map[string]any{"pull": map[string]any{"policy": "Always"}}}},
		{"nested map and dotted key merge", map[string]any{"image": map[string]any{"repo": "r"}, "image.tag": "1.2"},
			map[string]any{"image": map[string]any{"repo": "r", "tag": "1.2"}}},
		{"dotted key with a map value merges with a nested map", map[string]any{"a": map[string]any{"b": map[string]any{"x": 1}}, "a.b": map[string]any{"y": 2}},
			map[string]any{"a": map[string]any{"b": map[string]any{"x": 1, "y": 2}}}},
		{"conflict: the dotted key wins over a scalar", map[string]any{"image": "x", "image.tag": "1.2"}, map[string]any{"image": map[string]any{"tag": "1.2"}}},
		{"conflict: the deeper key wins over a scalar in a nested map", map[string]any{"a": map[string]any{"b": 1}, "a.b.c": 2},
			map[string]any{"a": map[string]any{"b": map[string]any{"c": 2}}}},
		{"conflict: the deeper key wins over a dotted scalar", map[string]any{"a.b": 1, "a.b.c": 2}, map[string]any{"a": map[string]any{"b": map[string]any{"c": 2}}}},
		{"lists and nulls are values", map[string]any{"args": []any{"a", "b"}, "x.y": nil}, map[string]any{"args": []any{"a", "b"}, "x": map[string]any{"y": nil}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprint(tc.in)
			// Map order changes between runs: the result must not.
			for range 50 {
				got := expandDotted(tc.in)
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("expandDotted(%v):\n got %v\nwant %v", tc.in, got, tc.want)
				}
			}
			if after := fmt.Sprint(tc.in); after != before {
				t.Errorf("expandDotted changed its input: %s → %s", before, after)
			}
		})
	}
}

func TestMergeMaps(t *testing.T) {
	tests := []struct {
		name string
		a, b map[string]any
		want map[string]any
	}{
		{"both nil", nil, nil, map[string]any{}},
		{"nil base", nil, map[string]any{"x": 1}, map[string]any{"x": 1}},
		{"nil override", map[string]any{"x": 1}, nil, map[string]any{"x": 1}},
		{"override replaces a scalar", map[string]any{"x": 1, "y": 2}, map[string]any{"x": 3}, map[string]any{"x": 3, "y": 2}},
		{"nested maps merge key by key", map[string]any{"image": map[string]any{"repo": "r", "tag": "1"}}, map[string]any{"image": map[string]any{"tag": "2"}},
			map[string]any{"image": map[string]any{"repo": "r", "tag": "2"}}},
		{"deep merge", map[string]any{"a": map[string]any{"b": map[string]any{"c": 1, "d": 2}}}, map[string]any{"a": map[string]any{"b": map[string]any{"d": 3}}},
			map[string]any{"a": map[string]any{"b": map[string]any{"c": 1, "d": 3}}}},
		{"a scalar replaces a map", map[string]any{"image": map[string]any{"tag": "1"}}, map[string]any{"image": "x"}, map[string]any{"image": "x"}},
		{"a map replaces a scalar", map[string]any{"image": "x"}, map[string]any{"image": map[string]any{"tag": "1"}}, map[string]any{"image": map[string]any{"tag": "1"}}},
		{"a list replaces a list", map[string]any{"args": []any{"a"}}, map[string]any{"args": []any{"b", "c"}}, map[string]any{"args": []any{"b", "c"}}},
		{"null overrides", map[string]any{"x": 1}, map[string]any{"x": nil}, map[string]any{"x": nil}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			beforeA, beforeB := fmt.Sprint(tc.a), fmt.Sprint(tc.b)
			got := mergeMaps(tc.a, tc.b)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("mergeMaps(%v, %v):\n got %v\nwant %v", tc.a, tc.b, got, tc.want)
			}
			if fmt.Sprint(tc.a) != beforeA || fmt.Sprint(tc.b) != beforeB {
				t.Errorf("mergeMaps changed its input: a %s → %v, b %s → %v", beforeA, tc.a, beforeB, tc.b)
			}
		})
	}
}

// TestOverrideOrder checks how the builder layers the DIG's override values:
// each entry for an app is expanded, then merged over the earlier ones.
func TestOverrideOrder(t *testing.T) {
	tests := []struct {
		name   string
		values []map[string]any
		want   map[string]any
	}{
		{"later entry wins", []map[string]any{{"replicas": 1}, {"replicas": 3}}, map[string]any{"replicas": 3}},
		{"dotted and nested entries merge", []map[string]any{{"image.tag": "1"}, {"image": map[string]any{"repo": "r"}}},
			map[string]any{"image": map[string]any{"tag": "1", "repo": "r"}}},
		{"later dotted key overrides an earlier nested one", []map[string]any{{"image": map[string]any{"tag": "1", "repo": "r"}}, {"image.tag": "2"}},
			map[string]any{"image": map[string]any{"tag": "2", "repo": "r"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got map[string]any
			for _, v := range tc.values {
				got = mergeMaps(got, expandDotted(v))
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestInstanceOf(t *testing.T) {
	long := "deployment-intent-groups/" + strings.Repeat("project", 9) + "/" + strings.Repeat("app", 21) + "/v1/" + strings.Repeat("d", 63)
	paths := []string{
		"deployment-intent-groups/p/ca/v1/dig",
		"deployment-intent-groups/p/ca/v2/dig",
		"deployment-intent-groups/q/ca/v1/dig",
		long,
		"",
	}
	seen := map[string]string{}
	for _, p := range paths {
		got := InstanceOf(p)
		if again := InstanceOf(p); again != got {
			t.Errorf("InstanceOf(%q) not stable: %q then %q", p, got, again)
		}
		if len(got) > 63 {
			t.Errorf("InstanceOf(%q) = %q: %d characters, want at most 63", p, got, len(got))
		}
		if msgs := validation.IsValidLabelValue(got); len(msgs) > 0 {
			t.Errorf("InstanceOf(%q) = %q is not a label value: %v", p, got, msgs)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("InstanceOf(%q) = InstanceOf(%q) = %q", p, other, got)
		}
		seen[got] = p
	}
}

func cm(name string, labels map[string]any, data map[string]any) *unstructured.Unstructured {
	md := map[string]any{"name": name, "namespace": "ns"}
	if labels != nil {
		md["labels"] = labels
	}
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": md, "data": data}}
}

func TestHashObject(t *testing.T) {
	base := func() *unstructured.Unstructured {
		return cm("a", map[string]any{"x": "1", "y": "2"}, map[string]any{"k": "v", "l": "w"})
	}
	h0, data, err := HashObject(base())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h0, "sha256:") || len(h0) != len("sha256:")+64 {
		t.Fatalf("hash %q is not sha256:<64 hex>", h0)
	}
	var back map[string]any
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back, base().Object) {
		t.Fatalf("HashObject data does not decode to the object: %v, %s", err, data)
	}
	// The same object built with its keys in another order hashes the same.
	reordered := &unstructured.Unstructured{Object: map[string]any{}}
	reordered.Object["data"] = map[string]any{"l": "w", "k": "v"}
	reordered.Object["metadata"] = map[string]any{"labels": map[string]any{"y": "2", "x": "1"}, "namespace": "ns", "name": "a"}
	reordered.Object["kind"] = "ConfigMap"
	reordered.Object["apiVersion"] = "v1"

	tests := []struct {
		name     string
		obj      *unstructured.Unstructured
		wantSame bool
	}{
		{"same object again", base(), true},
		{"keys in another order", reordered, true},
		{"a label changed", cm("a", map[string]any{"x": "1", "y": "3"}, map[string]any{"k": "v", "l": "w"}), false},
		{"a label added", cm("a", map[string]any{"x": "1", "y": "2", "z": "3"}, map[string]any{"k": "v", "l": "w"}), false},
		{"data changed", cm("a", map[string]any{"x": "1", "y": "2"}, map[string]any{"k": "v", "l": "W"}), false},
		{"name changed", cm("b", map[string]any{"x": "1", "y": "2"}, map[string]any{"k": "v", "l": "w"}), false},
		{"a string became a number", cm("a", map[string]any{"x": "1", "y": "2"}, map[string]any{"k": "v", "l": int64(1)}), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _, err := HashObject(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			if (h == h0) != tc.wantSame {
				t.Errorf("hash %s vs base %s: same=%v, want same=%v", h, h0, h == h0, tc.wantSame)
			}
		})
	}
	bad := cm("a", nil, map[string]any{"k": make(chan int)})
	if _, _, err := HashObject(bad); err == nil || !strings.Contains(err.Error(), "ConfigMap a") {
		t.Errorf("HashObject of an object that is not JSON: got %v, want an error naming it", err)
	}
}

func newBlobs(t *testing.T) *blob.Store {
	t.Helper()
	srv, err := etcdembed.Start(context.Background(), etcdembed.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return blob.New(srv.Client(), blob.Options{Root: "/test", ChunkSize: 1 << 10})
}

func TestStoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	blobs := newBlobs(t)
	s := NewStore(blobs)

	obj := cm("big", map[string]any{LabelInstance: "i1"}, map[string]any{"k": strings.Repeat("x", 5000)}) // several chunks
	hash, data, err := HashObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	objDigest, err := s.PutObject(ctx, data)
	if err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	again, err := s.PutObject(ctx, data)
	if err != nil || again != objDigest {
		t.Errorf("PutObject of the same object: got %q, %v, want %q", again, err, objDigest)
	}
	res := Resource{Ref: Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "big"}, Hash: hash, Blob: objDigest, Phase: "main"}
	p := &Plan{DIG: "deployment-intent-groups/p/ca/v1/d", Project: "p", CompositeApp: "ca", Version: "v1", Name: "d", Profile: "prof",
		Namespace: "ns", Instance: InstanceOf("deployment-intent-groups/p/ca/v1/d"), Revision: 7,
		Apps: []AppPlan{{App: "web", Clusters: []ClusterPlan{
			{Cluster: "clusters/cp/c2", Provider: "cp", Name: "c2", Resources: []Resource{res}},
			{Cluster: "clusters/cp/c1", Provider: "cp", Name: "c1", Resources: []Resource{res}},
		}}, {App: "db", Clusters: []ClusterPlan{{Cluster: "clusters/cp/c1", Provider: "cp", Name: "c1"}}}}}
	digest, err := s.Put(ctx, p)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}

	tests := []struct {
		name  string
		store *Store
	}{
		{"the store that wrote it (cached)", s},
		{"a new store on the same blobs (read back)", NewStore(blobs)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.store.Get(ctx, digest)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if !reflect.DeepEqual(got, p) {
				t.Errorf("Get:\n got %+v\nwant %+v", got, p)
			}
			if cl := strings.Join(got.Clusters(), ","); cl != "clusters/cp/c2,clusters/cp/c1" {
				t.Errorf("Clusters: got %s, want each cluster once in plan order", cl)
			}
			o, err := tc.store.Object(ctx, got.Apps[0].Clusters[0].Resources[0])
			if err != nil {
				t.Fatalf("Object: %v", err)
			}
			if !reflect.DeepEqual(o.Object, obj.Object) {
				t.Errorf("Object:\n got %v\nwant %v", o.Object, obj.Object)
			}
			if h, _, _ := HashObject(o); h != hash {
				t.Errorf("hash of the object read back: got %s, want %s", h, hash)
			}
		})
	}

	missing := "sha256:" + strings.Repeat("0", 64)
	if _, err := NewStore(blobs).Get(ctx, missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Get of a missing plan: got %v, want an error naming it", err)
	}
	if _, err := NewStore(blobs).Object(ctx, Resource{Ref: res.Ref, Blob: missing}); err == nil || !strings.Contains(err.Error(), "ConfigMap ns/big") {
		t.Errorf("Object of a missing blob: got %v, want an error naming the resource", err)
	}
	notPlan, err := s.PutObject(ctx, []byte(`["not a plan"]`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewStore(blobs).Get(ctx, notPlan); err == nil || !strings.Contains(err.Error(), "decode plan") {
		t.Errorf("Get of a blob that is not a plan: got %v, want a decode error", err)
	}
}
