package readiness

import (
	"maps"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/yaml"

	"github.com/atoll-edge/atoll/internal/apply"
)

func TestEventFor(t *testing.T) {
	tests := []struct {
		name        string
		manifest    string
		wantStatus  Status
		wantMessage string // a part of it
	}{
		{
			name: "ConfigMap is current at once",
			manifest: `
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: ns, labels: {atoll.dev/dig: d1}}`,
			wantStatus: Current,
		},
		{
			name: "new Deployment without status",
			manifest: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ns, generation: 1}
spec: {replicas: 2}`,
			wantStatus: InProgress, wantMessage: "Replicas: 0/2",
		},
		{
			name: "available Deployment",
			manifest: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ns, generation: 1}
spec: {replicas: 2, progressDeadlineSeconds: 600}
status:
  observedGeneration: 1
  replicas: 2
  updatedReplicas: 2
  readyReplicas: 2
  availableReplicas: 2
  conditions:
  - {type: Available, status: "True"}
  - {type: Progressing, status: "True", reason: NewReplicaSetAvailable}`,
			wantStatus: Current, wantMessage: "Deployment is available",
		},
		{
			name: "Deployment past its progress deadline",
			manifest: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ns, generation: 1}
spec: {replicas: 2}
status:
  observedGeneration: 1
  conditions:
  - {type: Progressing, status: "False", reason: ProgressDeadlineExceeded}`,
			wantStatus: Failed, wantMessage: "deadline",
		},
		{
			name: "Deployment whose new generation is not observed yet",
			manifest: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ns, generation: 2}
status: {observedGeneration: 1}`,
			wantStatus: InProgress, wantMessage: "generation",
		},
		{
			name: "object being deleted",
			manifest: `
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: ns, deletionTimestamp: "2026-01-01T00:00:00Z"}`,
			wantStatus: Terminating,
		},
		{
			name: "custom resource with Ready=False",
			manifest: `
apiVersion: example.dev/v1
kind: Widget
metadata: {name: w, namespace: ns}
status: {conditions: [{type: Ready, status: "False", reason: Waiting, message: waiting for the widget}]}`,
			wantStatus: InProgress, wantMessage: "waiting for the widget",
		},
		{
			name: "custom resource that has stalled",
			manifest: `
apiVersion: example.dev/v1
kind: Widget
metadata: {name: w, namespace: ns}
status: {conditions: [{type: Stalled, status: "True", reason: Broken, message: the widget broke}]}`,
			wantStatus: Failed, wantMessage: "the widget broke",
		},
		{
			name: "custom resource without conditions",
			manifest: `
apiVersion: example.dev/v1
kind: Widget
metadata: {name: w}`,
			wantStatus: Current,
		},
		{
			name: "unreadable status",
			manifest: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ns, generation: 1}
status: {observedGeneration: "one"}`,
			wantStatus: Unknown, wantMessage: "computing status",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			obj := parse(t, tc.manifest)
			ev := eventFor(obj)
			if ev.Status != tc.wantStatus || !strings.Contains(ev.Message, tc.wantMessage) {
				t.Errorf("status %q, message %q; want %q, containing %q", ev.Status, ev.Message, tc.wantStatus, tc.wantMessage)
			}
			if !ev.Present || ev.Ref != apply.RefOf(obj) || !maps.Equal(ev.Labels, obj.GetLabels()) {
				t.Errorf("event %+v: want present, ref %v, labels %v", ev, apply.RefOf(obj), obj.GetLabels())
			}
			if ev.Ready() != (tc.wantStatus == Current) {
				t.Errorf("Ready() = %t with status %q", ev.Ready(), ev.Status)
			}
		})
	}
}

func TestGoneEvent(t *testing.T) {
	obj := parse(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: ns, labels: {atoll.dev/dig: d1}}`)
	tests := []struct {
		name   string
		in     any
		wantOK bool
	}{
		{"deleted object", obj, true},
		{"tombstone of a missed delete", cache.DeletedFinalStateUnknown{Key: "ns/web", Obj: obj}, true},
		{"something else", "ns/web", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, ok := goneEvent(tc.in)
			if ok != tc.wantOK {
				t.Fatalf("ok = %t, want %t", ok, tc.wantOK)
			}
			if !ok {
				return
			}
			want := apply.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web"}
			if ev.Present || ev.Status != NotFound || ev.Ref != want || ev.Labels[apply.LabelDIG] != "d1" || ev.Ready() {
				t.Fatalf("event %+v, want not present, NotFound, %v, with its labels", ev, want)
			}
		})
	}
}

func TestSlim(t *testing.T) {
	tests := []struct {
		name     string
		manifest string
		gone     []string // top-level fields removed
		kept     []string // top-level fields kept
	}{
		{
			name: "Secret loses its data",
			manifest: `
apiVersion: v1
kind: Secret
metadata: {name: s, managedFields: [{manager: atoll}]}
data: {token: c2VjcmV0}
stringData: {other: secret}`,
			gone: []string{"data", "stringData"}, kept: []string{"metadata"},
		},
		{
			name: "ConfigMap loses its data",
			manifest: `
apiVersion: v1
kind: ConfigMap
metadata: {name: c, annotations: {kubectl.kubernetes.io/last-applied-configuration: "{}", keep: me}}
data: {a: b}
binaryData: {c: ZA==}`,
			gone: []string{"data", "binaryData"}, kept: []string{"metadata"},
		},
		{
			name: "Deployment keeps spec and status",
			manifest: `
apiVersion: apps/v1
kind: Deployment
metadata: {name: d, managedFields: [{manager: atoll}]}
spec: {replicas: 2}
status: {replicas: 2}`,
			kept: []string{"spec", "status"},
		},
		{
			name: "a custom Secret kind keeps its data",
			manifest: `
apiVersion: example.dev/v1
kind: Secret
metadata: {name: s}
data: {a: b}`,
			kept: []string{"data"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := slim(parse(t, tc.manifest))
			if err != nil {
				t.Fatal(err)
			}
			u := out.(*unstructured.Unstructured)
			for _, f := range tc.gone {
				if _, ok := u.Object[f]; ok {
					t.Errorf("%s is still there", f)
				}
			}
			for _, f := range tc.kept {
				if _, ok := u.Object[f]; !ok {
					t.Errorf("%s was removed", f)
				}
			}
			if len(u.GetManagedFields()) != 0 {
				t.Errorf("managedFields kept: %v", u.GetManagedFields())
			}
			if _, ok := u.GetAnnotations()[lastApplied]; ok {
				t.Errorf("last-applied annotation kept")
			}
			if ann := parse(t, tc.manifest).GetAnnotations(); ann["keep"] != "" && u.GetAnnotations()["keep"] != ann["keep"] {
				t.Errorf("other annotations dropped: %v", u.GetAnnotations())
			}
		})
	}
	if got, err := slim("not an object"); got != "not an object" || err != nil {
		t.Errorf("slim(non-object) = %v, %v; want it unchanged", got, err)
	}
}

func parse(t *testing.T, manifest string) *unstructured.Unstructured {
	t.Helper()
	// Through JSON, so that numbers are int64 as the API machinery has them.
	data, err := yaml.YAMLToJSON([]byte(manifest))
	obj := &unstructured.Unstructured{}
	if err == nil {
		err = obj.UnmarshalJSON(data)
	}
	if err != nil {
		t.Fatalf("parsing manifest: %v\n%s", err, manifest)
	}
	return obj
}
