package render

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/atoll-edge/atoll/internal/chart"
	"github.com/atoll-edge/atoll/internal/errs"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// webInput is a render of testdata/web for a v1.37.2 cluster.
func webInput(t testing.TB) Input {
	return Input{
		Chart:       testChart(t, "web"),
		ReleaseName: "shop",
		Namespace:   "apps",
		KubeVersion: "v1.37.2",
		APIVersions: []string{"apps/v1/Deployment", "bpa.akraino.org/v1alpha1"},
	}
}

// goldenText writes out as text: every object with its source and hash.
func goldenText(t *testing.T, out *Output) []byte {
	t.Helper()
	var b bytes.Buffer
	section := func(title string, rs []Resource, extra func(i int) string) {
		for i, r := range rs {
			y, err := yaml.Marshal(r.Object.Object)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "# %s %s from %s %s%s\n---\n%s", title, r.Object.GetKind(), r.Source, r.Hash, extra(i), y)
		}
	}
	none := func(int) string { return "" }
	section("crd", out.CRDs, none)
	section("resource", out.Resources, none)
	hooks := make([]Resource, len(out.Hooks))
	for i, h := range out.Hooks {
		hooks[i] = h.Resource
	}
	section("hook", hooks, func(i int) string {
		h := out.Hooks[i]
		return fmt.Sprintf(" events=%v weight=%d delete=%v", h.Events, h.Weight, h.DeletePolicies)
	})
	fmt.Fprintf(&b, "# notes\n%s", out.Notes)
	return b.Bytes()
}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		golden string
		in     func(t *testing.T) Input
	}{
		{"web.txt", func(t *testing.T) Input { return webInput(t) }},
		{"crdapp.txt", func(t *testing.T) Input {
			return Input{Chart: testChart(t, "crdapp"), ReleaseName: "gadgets", Namespace: "apps", KubeVersion: "v1.37.2"}
		}},
		{"hooks.txt", func(t *testing.T) Input {
			return Input{Chart: testChart(t, "hooks"), ReleaseName: "h", Namespace: "jobs", KubeVersion: "v1.37.2"}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.golden, func(t *testing.T) {
			got := goldenText(t, mustRender(t, New(0), tt.in(t)))
			file := filepath.Join("testdata", "golden", tt.golden)
			if *update {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("render differs from %s (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", file, got, want)
			}
		})
	}
}

func TestValuesLayering(t *testing.T) {
	tests := []struct {
		name         string
		layers       []map[string]any
		wantGreeting string
		wantReplicas int64
		wantImage    string
		wantPort     int64
		wantType     string
	}{
		{
			name:         "chart defaults",
			wantGreeting: "hello", wantReplicas: 2, wantImage: "registry.example/web:1.0", wantPort: 80, wantType: "ClusterIP",
		},
		{
			name:         "profile over defaults",
			layers:       []map[string]any{{"greeting": "from profile", "replicas": 3}},
			wantGreeting: "from profile", wantReplicas: 3, wantImage: "registry.example/web:1.0", wantPort: 80, wantType: "ClusterIP",
		},
		{
			name: "override over profile over defaults",
			layers: []map[string]any{
				{"greeting": "from profile", "replicas": 3},
				{"greeting": "from override"},
			},
			wantGreeting: "from override", wantReplicas: 3, wantImage: "registry.example/web:1.0", wantPort: 80, wantType: "ClusterIP",
		},
		{
			name: "maps merge key by key through every layer",
			layers: []map[string]any{
				{"service": map[string]any{"port": 8080}},
				{"service": map[string]any{"type": "NodePort"}},
			},
			wantGreeting: "hello", wantReplicas: 2, wantImage: "registry.example/web:1.0", wantPort: 8080, wantType: "NodePort",
		},
		{
			name: "a later layer replaces a scalar of an earlier one",
			layers: []map[string]any{
				{"image": "registry.example/web:2.0", "replicas": 5},
				{"replicas": 1},
			},
			wantGreeting: "hello", wantReplicas: 1, wantImage: "registry.example/web:2.0", wantPort: 80, wantType: "ClusterIP",
		},
		{
			name:         "nil layers are skipped",
			layers:       []map[string]any{nil, {"greeting": "hi"}, nil},
			wantGreeting: "hi", wantReplicas: 2, wantImage: "registry.example/web:1.0", wantPort: 80, wantType: "ClusterIP",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := webInput(t)
			in.Values = tt.layers
			out := mustRender(t, New(0), in)
			cm := find(t, out.Resources, "ConfigMap", "shop-web")
			dep := find(t, out.Resources, "Deployment", "shop-web")
			svc := find(t, out.Resources, "Service", "shop-web")
			if got := str(cm, "data", "greeting"); got != tt.wantGreeting {
				t.Errorf("greeting = %q, want %q", got, tt.wantGreeting)
			}
			if got := num(dep, "spec", "replicas"); got != tt.wantReplicas {
				t.Errorf("replicas = %d, want %d", got, tt.wantReplicas)
			}
			containers, _, _ := unstructuredSlice(dep.Object, "spec", "template", "spec", "containers")
			if len(containers) != 1 || containers[0].(map[string]any)["image"] != tt.wantImage {
				t.Errorf("containers = %v, want one with image %q", containers, tt.wantImage)
			}
			ports, _, _ := unstructuredSlice(svc.Object, "spec", "ports")
			if len(ports) != 1 || ports[0].(map[string]any)["port"] != tt.wantPort {
				t.Errorf("ports = %v, want port %d", ports, tt.wantPort)
			}
			if got := str(svc, "spec", "type"); got != tt.wantType {
				t.Errorf("service type = %q, want %q", got, tt.wantType)
			}
		})
	}
}

func TestValuesLayersAreNotModified(t *testing.T) {
	profile := map[string]any{"service": map[string]any{"port": 8080}}
	override := map[string]any{"service": map[string]any{"type": "NodePort"}}
	in := webInput(t)
	in.Values = []map[string]any{profile, override}
	mustRender(t, New(0), in)
	if want := map[string]any{"port": 8080}; fmt.Sprint(profile["service"]) != fmt.Sprint(want) {
		t.Errorf("profile layer modified: %v", profile)
	}
	if want := map[string]any{"type": "NodePort"}; fmt.Sprint(override["service"]) != fmt.Sprint(want) {
		t.Errorf("override layer modified: %v", override)
	}
}

func TestCapabilities(t *testing.T) {
	tests := []struct {
		name           string
		kubeVersion    string
		apiVersions    []string
		wantVersion    string
		wantMinor      string
		wantGeneration string
		wantWidgets    string
		wantKinds      []string
	}{
		{
			name:           "new cluster serving the widget API",
			kubeVersion:    "v1.37.2",
			apiVersions:    []string{"example.atoll.dev/v1", "example.atoll.dev/v1/Widget", "policy/v1/PodDisruptionBudget"},
			wantVersion:    "v1.37.2",
			wantMinor:      "37",
			wantGeneration: "new",
			wantWidgets:    "served",
			wantKinds:      []string{"PodDisruptionBudget", "ConfigMap", "Widget"},
		},
		{
			name:           "old cluster without it",
			kubeVersion:    "1.30.1",
			wantVersion:    "v1.30.1",
			wantMinor:      "30",
			wantGeneration: "old",
			wantWidgets:    "absent",
			wantKinds:      []string{"ConfigMap"},
		},
		{
			name:           "vendor suffix kept in Version",
			kubeVersion:    "v1.33.4-gke.1245000",
			wantVersion:    "v1.33.4-gke.1245000",
			wantMinor:      "33",
			wantGeneration: "new",
			wantWidgets:    "absent",
			wantKinds:      []string{"ConfigMap"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := mustRender(t, New(0), Input{
				Chart: testChart(t, "caps"), ReleaseName: "c", KubeVersion: tt.kubeVersion, APIVersions: tt.apiVersions,
			})
			cm := find(t, out.Resources, "ConfigMap", "c-caps")
			for field, want := range map[string]string{
				"kubeVersion": tt.wantVersion, "kubeMinor": tt.wantMinor, "generation": tt.wantGeneration, "widgets": tt.wantWidgets,
			} {
				if got := str(cm, "data", field); got != want {
					t.Errorf("data.%s = %q, want %q", field, got, want)
				}
			}
			var kinds []string
			for _, r := range out.Resources {
				kinds = append(kinds, r.Object.GetKind())
			}
			if !slices.Equal(kinds, tt.wantKinds) {
				t.Errorf("kinds = %v, want %v", kinds, tt.wantKinds)
			}
		})
	}
}

func TestCapabilitiesIncludeHelmBuiltins(t *testing.T) {
	c := memChart(t, map[string]string{"templates/cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: caps
data:
  apps: {{ .Capabilities.APIVersions.Has "apps/v1" | quote }}
  crd: {{ .Capabilities.APIVersions.Has "apiextensions.k8s.io/v1" | quote }}
  install: {{ .Release.IsInstall | quote }}
  revision: {{ .Release.Revision | quote }}
  service: {{ .Release.Service | quote }}
`})
	out := mustRender(t, New(0), Input{Chart: c, ReleaseName: "r", KubeVersion: "v1.37.2"})
	cm := find(t, out.Resources, "ConfigMap", "caps")
	for field, want := range map[string]string{"apps": "true", "crd": "true", "install": "true", "revision": "1", "service": "Helm"} {
		if got := str(cm, "data", field); got != want {
			t.Errorf("data.%s = %q, want %q (as helm template renders it)", field, got, want)
		}
	}
}

func TestCRDsSplit(t *testing.T) {
	out := mustRender(t, New(0), Input{Chart: testChart(t, "crdapp"), ReleaseName: "g", Namespace: "apps", KubeVersion: "v1.37.2"})
	if len(out.CRDs) != 1 {
		t.Fatalf("CRDs = %v, want one", names(out.CRDs))
	}
	crd := out.CRDs[0]
	if crd.Object.GetName() != "widgets.example.atoll.dev" || crd.Source != "crdapp/crds/widgets.yaml" {
		t.Errorf("CRD = %s from %s, want widgets.example.atoll.dev from crdapp/crds/widgets.yaml", crd.Object.GetName(), crd.Source)
	}
	if ns := crd.Object.GetNamespace(); ns != "" {
		t.Errorf("CRD namespace = %q, want none (cluster-scoped)", ns)
	}
	if got := names(out.Resources); !slices.Equal(got, []string{"Widget/g-widget"}) {
		t.Fatalf("Resources = %v, want only the Widget (the CRD is not repeated)", got)
	}
	w := out.Resources[0].Object
	if w.GetNamespace() != "apps" {
		t.Errorf("Widget namespace = %q, want apps (the CRD says Namespaced)", w.GetNamespace())
	}
	if got := num(w, "spec", "size"); got != 3 {
		t.Errorf("Widget spec.size = %d, want 3", got)
	}
}

func TestCRDsOfDisabledSubchartsAreLeftOut(t *testing.T) {
	c := memChart(t, map[string]string{
		"Chart.yaml":                        "apiVersion: v2\nname: top\nversion: 0.1.0\ndependencies:\n  - name: sub\n    version: 0.1.0\n    condition: sub.enabled\n",
		"values.yaml":                       "sub:\n  enabled: false\n",
		"charts/sub/Chart.yaml":             "apiVersion: v2\nname: sub\nversion: 0.1.0\n",
		"charts/sub/crds/things.yaml":       thingsCRD("Namespaced"),
		"charts/sub/templates/thing.yaml":   "apiVersion: example.atoll.dev/v1\nkind: Thing\nmetadata:\n  name: t\n",
		"templates/cm.yaml":                 "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: top\n",
		"charts/sub/templates/NOTES.txt":    "sub notes",
		"templates/NOTES.txt":               "top notes for {{ .Release.Name }}",
		"charts/sub/templates/_helpers.tpl": "{{- define \"x\" }}x{{ end }}",
	})
	for _, tt := range []struct {
		enabled   bool
		wantCRDs  int
		wantNames []string
	}{
		{false, 0, []string{"ConfigMap/top"}},
		{true, 1, []string{"ConfigMap/top", "Thing/t"}},
	} {
		t.Run(fmt.Sprintf("enabled=%v", tt.enabled), func(t *testing.T) {
			out := mustRender(t, New(0), Input{Chart: c, ReleaseName: "r", Values: []map[string]any{{"sub": map[string]any{"enabled": tt.enabled}}}})
			if len(out.CRDs) != tt.wantCRDs {
				t.Errorf("CRDs = %v, want %d", names(out.CRDs), tt.wantCRDs)
			}
			if got := names(out.Resources); !slices.Equal(got, tt.wantNames) {
				t.Errorf("Resources = %v, want %v", got, tt.wantNames)
			}
			if out.Notes != "top notes for r" {
				t.Errorf("Notes = %q, want only the top chart's", out.Notes)
			}
		})
	}
}

func thingsCRD(scope string) string {
	return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.example.atoll.dev
spec:
  group: example.atoll.dev
  scope: ` + scope + `
  names: {kind: Thing, plural: things}
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
`
}

func TestHooks(t *testing.T) {
	out := mustRender(t, New(0), Input{Chart: testChart(t, "hooks"), ReleaseName: "h", Namespace: "jobs", KubeVersion: "v1.37.2"})
	if got := names(out.Resources); !slices.Equal(got, []string{"ConfigMap/h-app"}) {
		t.Errorf("Resources = %v, want only the non-hook ConfigMap", got)
	}
	want := []struct {
		name    string
		events  []string
		weight  int
		delete  []string
		kind    string
		sources string
	}{
		{"h-pre-config", []string{"pre-install", "pre-upgrade"}, -5, nil, "ConfigMap", "hooks/templates/pre-install.yaml"},
		{"h-a-post-config", []string{"post-install"}, 1, []string{"hook-failed"}, "ConfigMap", "hooks/templates/post-install.yaml"},
		{"h-notify", []string{"post-install"}, 1, []string{"hook-succeeded"}, "Job", "hooks/templates/post-install.yaml"},
		{"h-migrate", []string{"pre-install"}, 5, []string{"before-hook-creation", "hook-succeeded"}, "Job", "hooks/templates/pre-install.yaml"},
	}
	if len(out.Hooks) != len(want) {
		t.Fatalf("Hooks = %v, want %d", hookNames(out.Hooks), len(want))
	}
	for i, w := range want {
		h := out.Hooks[i]
		if h.Object.GetName() != w.name || h.Object.GetKind() != w.kind || h.Weight != w.weight || h.Source != w.sources ||
			!slices.Equal(h.Events, w.events) || !slices.Equal(h.DeletePolicies, w.delete) {
			t.Errorf("hook %d = %s %s weight %d events %v delete %v from %s; want %s %s weight %d events %v delete %v from %s",
				i, h.Object.GetKind(), h.Object.GetName(), h.Weight, h.Events, h.DeletePolicies, h.Source,
				w.kind, w.name, w.weight, w.events, w.delete, w.sources)
		}
		if h.Object.GetNamespace() != "jobs" {
			t.Errorf("hook %s namespace = %q, want jobs", h.Object.GetName(), h.Object.GetNamespace())
		}
		if !strings.HasPrefix(h.Hash, "sha256:") {
			t.Errorf("hook %s hash = %q", h.Object.GetName(), h.Hash)
		}
	}
	if got := hookNames(out.HooksFor("pre-install")); !slices.Equal(got, []string{"ConfigMap/h-pre-config", "Job/h-migrate"}) {
		t.Errorf("HooksFor(pre-install) = %v", got)
	}
	if got := hookNames(out.HooksFor("post-install")); !slices.Equal(got, []string{"ConfigMap/h-a-post-config", "Job/h-notify"}) {
		t.Errorf("HooksFor(post-install) = %v", got)
	}
	if got := out.HooksFor("pre-delete"); len(got) != 0 {
		t.Errorf("HooksFor(pre-delete) = %v, want none", hookNames(got))
	}
}

func TestInstallOrder(t *testing.T) {
	doc := func(apiVersion, kind, name string) string {
		return fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata:\n  name: %s\n", apiVersion, kind, name)
	}
	c := memChart(t, map[string]string{
		"templates/a-deploy.yaml": doc("apps/v1", "Deployment", "d"),
		"templates/b-widget.yaml": doc("example.atoll.dev/v1", "Widget", "w"),
		"templates/c-svc.yaml":    doc("v1", "Service", "s"),
		"templates/d-multi.yaml": doc("v1", "ConfigMap", "cm-2") + "---\n" + doc("batch/v1", "Job", "j") + "---\n" +
			doc("v1", "ConfigMap", "cm-1") + "---\n# only a comment\n---\n",
		"templates/e-ns.yaml":    doc("v1", "Namespace", "ns"),
		"templates/f-sa.yaml":    doc("v1", "ServiceAccount", "sa"),
		"templates/g-role.yaml":  doc("rbac.authorization.k8s.io/v1", "ClusterRole", "cr"),
		"templates/h-secret.yml": doc("v1", "Secret", "sec"),
		"templates/i-crd.yaml":   thingsCRD("Cluster"),
		"templates/j-empty.yaml": "{{/* renders nothing */}}\n",
		"templates/_partial.tpl": doc("v1", "ConfigMap", "never"),
		"templates/k-list.yaml":  "apiVersion: v1\nkind: List\nitems:\n  - " + strings.ReplaceAll(doc("v1", "ConfigMap", "from-list"), "\n", "\n    ") + "\n",
	})
	out := mustRender(t, New(0), Input{Chart: c, ReleaseName: "r"})
	got := names(out.Resources)
	// Helm's InstallOrder by kind, stable within a kind (file name order, then
	// document order); the List is expanded where it stands; unknown kinds last.
	wantExpanded := []string{
		"Namespace/ns", "ServiceAccount/sa", "Secret/sec", "ConfigMap/cm-2", "ConfigMap/cm-1",
		"CustomResourceDefinition/things.example.atoll.dev", "ClusterRole/cr", "Service/s", "Deployment/d", "Job/j",
		"ConfigMap/from-list", "Widget/w",
	}
	if !slices.Equal(got, wantExpanded) {
		t.Errorf("install order =\n  %v\nwant\n  %v", got, wantExpanded)
	}
	if src := out.Resources[3].Source; src != "mem/templates/d-multi.yaml" {
		t.Errorf("source of cm-2 = %q, want mem/templates/d-multi.yaml", src)
	}
}

func TestNamespaceDefaulting(t *testing.T) {
	doc := func(apiVersion, kind, name, ns string) string {
		s := fmt.Sprintf("apiVersion: %s\nkind: %s\nmetadata:\n  name: %s\n", apiVersion, kind, name)
		if ns != "" {
			s += "  namespace: " + ns + "\n"
		}
		return s
	}
	files := map[string]string{
		"crds/things.yaml": thingsCRD("Cluster"),
		"templates/all.yaml": strings.Join([]string{
			doc("v1", "ConfigMap", "plain", ""),
			doc("v1", "ConfigMap", "explicit", "other"),
			doc("v1", "Namespace", "ns", ""),
			doc("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "crb", ""),
			doc("rbac.authorization.k8s.io/v1", "RoleBinding", "rb", ""),
			doc("storage.k8s.io/v1", "StorageClass", "sc", ""),
			doc("scheduling.k8s.io/v1", "PriorityClass", "pc", ""),
			doc("example.atoll.dev/v1", "Thing", "thing", ""),
			doc("example.atoll.dev/v1", "Gadget", "gadget", ""),
			doc("named.example/v1", "Global", "global", ""),
			doc("other.example/v1", "Namespace", "not-core", ""),
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: null-ns\n  namespace: null\n",
		}, "---\n"),
	}
	out := mustRender(t, New(0), Input{
		Chart: memChart(t, files), ReleaseName: "r", Namespace: "tenant",
		ClusterScoped: []schema.GroupKind{{Group: "named.example", Kind: "Global"}},
	})
	want := map[string]string{
		"ConfigMap/plain":        "tenant",
		"ConfigMap/explicit":     "other",
		"Namespace/ns":           "",
		"ClusterRoleBinding/crb": "",
		"RoleBinding/rb":         "tenant",
		"StorageClass/sc":        "",
		"PriorityClass/pc":       "",
		"Thing/thing":            "", // the chart's CRD says Cluster
		"Gadget/gadget":          "tenant",
		"Global/global":          "", // Input.ClusterScoped
		"Namespace/not-core":     "tenant",
		"ConfigMap/null-ns":      "tenant",
	}
	if len(out.Resources) != len(want) {
		t.Fatalf("Resources = %v, want %d", names(out.Resources), len(want))
	}
	for _, r := range out.Resources {
		id := r.Object.GetKind() + "/" + r.Object.GetName()
		if got := r.Object.GetNamespace(); got != want[id] {
			t.Errorf("%s namespace = %q, want %q", id, got, want[id])
		}
	}
}

func TestDefaultNamespace(t *testing.T) {
	in := webInput(t)
	in.Namespace = ""
	out := mustRender(t, New(0), in)
	for _, r := range out.Resources {
		if r.Object.GetNamespace() != DefaultNamespace {
			t.Errorf("%s/%s namespace = %q, want %q", r.Object.GetKind(), r.Object.GetName(), r.Object.GetNamespace(), DefaultNamespace)
		}
	}
	if !strings.Contains(out.Notes, "in namespace default") {
		t.Errorf("Notes = %q, want .Release.Namespace default", out.Notes)
	}
}

func TestProfileFiles(t *testing.T) {
	in := webInput(t)
	in.ProfileFiles = []chart.ProfileFile{
		{Path: "cm.yaml", ChartPath: "web/templates/configmap.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-web\ndata:\n  greeting: {{ .Values.greeting | upper | quote }}\n  replaced: \"yes\"\n")},
		{Path: "extra.yaml", ChartPath: "web/templates/extra.yaml", Data: []byte("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ .Release.Name }}-extra\nstringData:\n  token: abc\n")},
		{Path: "values.yaml", ChartPath: "web/values.yaml", Data: []byte("image: registry.example/web:1.0\nreplicas: 2\ngreeting: profile-default\nservice: {type: ClusterIP, port: 80}\n")},
	}
	chartBefore := len(in.Chart.Templates)
	out := mustRender(t, New(0), in)
	cm := find(t, out.Resources, "ConfigMap", "shop-web")
	if got := str(cm, "data", "replaced"); got != "yes" {
		t.Errorf("configmap not replaced by the profile's: data = %v", cm.Object["data"])
	}
	if got := str(cm, "data", "greeting"); got != "PROFILE-DEFAULT" {
		t.Errorf("greeting = %q, want PROFILE-DEFAULT (profile values.yaml replaced the chart's)", got)
	}
	sec := find(t, out.Resources, "Secret", "shop-extra")
	if sec.GetNamespace() != "apps" {
		t.Errorf("added template's namespace = %q", sec.GetNamespace())
	}
	if got := names(out.Resources); !slices.Equal(got, []string{"Secret/shop-extra", "ConfigMap/shop-web", "Service/shop-web", "Deployment/shop-web"}) {
		t.Errorf("Resources = %v", got)
	}
	if len(in.Chart.Templates) != chartBefore {
		t.Errorf("the input chart was modified: %d templates, had %d", len(in.Chart.Templates), chartBefore)
	}
	// The same chart without profile files renders as before.
	plain := mustRender(t, New(0), webInput(t))
	if got := str(find(t, plain.Resources, "ConfigMap", "shop-web"), "data", "greeting"); got != "hello" {
		t.Errorf("render without profile files: greeting = %q, want hello", got)
	}
}

func TestRenderErrors(t *testing.T) {
	bad := func(tpl string) Input {
		return Input{Chart: memChart(t, map[string]string{"Chart.yaml": "apiVersion: v2\nname: bad\nversion: 0.1.0\n", "templates/x.yaml": tpl}), ReleaseName: "r"}
	}
	tests := []struct {
		name    string
		in      Input
		wantMsg []string // substrings
	}{
		{
			name:    "required value missing",
			in:      Input{Chart: testChart(t, "broken"), ReleaseName: "r"},
			wantMsg: []string{`render chart "broken": execution error at (broken/templates/cm.yaml:6:8): need x`},
		},
		{
			name:    "template does not parse",
			in:      bad("{{ .Values.x "),
			wantMsg: []string{`render chart "bad": parse error at (bad/templates/x.yaml:1)`},
		},
		{
			name:    "fail function",
			in:      bad(`{{ fail "no way" }}`),
			wantMsg: []string{`render chart "bad": execution error at (bad/templates/x.yaml:1:3): no way`},
		},
		{
			name:    "rendered YAML does not parse",
			in:      bad("apiVersion: v1\nkind: ConfigMap\nmetadata: [name\n"),
			wantMsg: []string{`render chart "bad": YAML parse error on bad/templates/x.yaml`},
		},
		{
			name:    "manifest without kind",
			in:      bad("apiVersion: v1\nmetadata:\n  name: x\n"),
			wantMsg: []string{`render chart "bad": bad/templates/x.yaml: manifest has no kind`},
		},
		{
			name:    "manifest without apiVersion",
			in:      bad("kind: ConfigMap\nmetadata:\n  name: x\n"),
			wantMsg: []string{`bad/templates/x.yaml: ConfigMap manifest has no apiVersion`},
		},
		{
			name:    "manifest without name",
			in:      bad("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels: {a: b}\n"),
			wantMsg: []string{`bad/templates/x.yaml: ConfigMap manifest has no metadata.name`},
		},
		{
			name:    "manifest that is a list of strings",
			in:      bad("- a\n- b\n"),
			wantMsg: []string{`render chart "bad": YAML parse error on bad/templates/x.yaml`},
		},
		{
			name:    "item of a List that is not an object",
			in:      bad("apiVersion: v1\nkind: List\nitems:\n  - 3\n"),
			wantMsg: []string{`bad/templates/x.yaml: item 0 of a List is a number, not a Kubernetes object`},
		},
		{
			name:    "invalid release name",
			in:      Input{Chart: testChart(t, "web"), ReleaseName: "Not_A_Name"},
			wantMsg: []string{`render chart "web": release name "Not_A_Name"`},
		},
		{
			name:    "empty release name",
			in:      Input{Chart: testChart(t, "web")},
			wantMsg: []string{`render chart "web": release name ""`},
		},
		{
			name:    "kube version the chart excludes",
			in:      Input{Chart: testChart(t, "caps"), ReleaseName: "r", KubeVersion: "v1.23.0"},
			wantMsg: []string{`render chart "caps": chart requires kubeVersion: >= 1.24.0-0 which is incompatible with Kubernetes v1.23.0`},
		},
		{
			name:    "unparsable kube version",
			in:      Input{Chart: testChart(t, "caps"), ReleaseName: "r", KubeVersion: "latest"},
			wantMsg: []string{`render chart "caps": invalid kube version "latest"`},
		},
		{
			name: "values against the schema",
			in: Input{Chart: memChart(t, map[string]string{
				"values.schema.json": `{"type":"object","properties":{"replicas":{"type":"integer"}}}`,
				"templates/x.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n",
			}), ReleaseName: "r", Values: []map[string]any{{"replicas": "many"}}},
			wantMsg: []string{`render chart "mem": values don't meet the specifications of the schema`},
		},
		{
			name:    "profile file escaping the chart",
			in:      Input{Chart: testChart(t, "web"), ReleaseName: "r", ProfileFiles: []chart.ProfileFile{{Path: "x", ChartPath: "web/../../x", Data: []byte("x")}}},
			wantMsg: []string{`render chart "web": profile file "x": chartpath "web/../../x" escapes the chart directory`},
		},
		{
			name:    "profile file breaking Chart.yaml",
			in:      Input{Chart: testChart(t, "web"), ReleaseName: "r", ProfileFiles: []chart.ProfileFile{{Path: "c", ChartPath: "web/Chart.yaml", Data: []byte("name: [x")}}},
			wantMsg: []string{`render chart "web": the chart with the profile's files cannot be loaded: cannot load Chart.yaml`},
		},
		{
			name:    "values that are not JSON",
			in:      Input{Chart: testChart(t, "web"), ReleaseName: "r", Values: []map[string]any{{"f": func() {}}}},
			wantMsg: []string{`render chart "web": values must be JSON-compatible`},
		},
		{
			name:    "chart without raw files",
			in:      func() Input { c := testChart(t, "web"); c.Raw = nil; return Input{Chart: c, ReleaseName: "r"} }(),
			wantMsg: []string{`render chart "web": the chart has no raw files`},
		},
		{
			name:    "no chart",
			in:      Input{ReleaseName: "r"},
			wantMsg: []string{"render: no chart"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New(8)
			out, err := r.Render(context.Background(), tt.in)
			if err == nil {
				t.Fatalf("Render succeeded with %v; want an error", names(out.Resources))
			}
			if out != nil {
				t.Errorf("Render returned output with its error")
			}
			if k := errs.KindOf(err); k != errs.Invalid {
				t.Errorf("kind = %q, want %q (error: %v)", k, errs.Invalid, err)
			}
			for _, m := range tt.wantMsg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error = %q\nwant it to contain %q", err, m)
				}
			}
		})
	}
}

func TestBrokenRendersWhenValueGiven(t *testing.T) {
	out := mustRender(t, New(0), Input{Chart: testChart(t, "broken"), ReleaseName: "r", Values: []map[string]any{{"x": "given"}}})
	if got := str(find(t, out.Resources, "ConfigMap", "r-broken"), "data", "x"); got != "given" {
		t.Errorf("data.x = %q, want given", got)
	}
}

func TestRenderCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := New(1).Render(ctx, webInput(t))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Render with a canceled context: %v, want context.Canceled", err)
	}
}

func TestCache(t *testing.T) {
	r := New(16)
	base := webInput(t)
	wantStats := func(t *testing.T, hits, misses int) {
		t.Helper()
		if h, m := r.Stats(); h != hits || m != misses {
			t.Fatalf("Stats() = %d hits, %d misses; want %d, %d", h, m, hits, misses)
		}
	}

	first := mustRender(t, r, base)
	wantStats(t, 0, 1)

	second := mustRender(t, r, base)
	wantStats(t, 1, 1)
	if first == second || first.Resources[0].Object == second.Resources[0].Object {
		t.Fatalf("a cache hit returned the same objects; each caller must get its own copy")
	}
	if !slices.Equal(hashes(first), hashes(second)) {
		t.Fatalf("cached output differs: %v vs %v", hashes(first), hashes(second))
	}

	// A caller that modifies its output does not change what the cache holds.
	second.Resources[0].Object.SetLabels(map[string]string{"mutated": "yes"})
	third := mustRender(t, r, base)
	wantStats(t, 2, 1)
	if _, ok := third.Resources[0].Object.GetLabels()["mutated"]; ok {
		t.Fatalf("the cached output was modified through a returned copy")
	}

	// The same chart and values, written differently, hit.
	same := base
	same.Chart = testChart(t, "web") // a different *Chart with the same files
	same.APIVersions = []string{"bpa.akraino.org/v1alpha1", "apps/v1/Deployment", "apps/v1/Deployment"}
	mustRender(t, r, same)
	wantStats(t, 3, 1)

	misses := []struct {
		name   string
		change func(in *Input)
	}{
		{"values", func(in *Input) { in.Values = []map[string]any{{"greeting": "hi"}} }},
		{"values layer order", func(in *Input) { in.Values = []map[string]any{{}, {"greeting": "hi"}} }},
		{"kube version", func(in *Input) { in.KubeVersion = "v1.36.0" }},
		{"api versions", func(in *Input) { in.APIVersions = append(slices.Clone(in.APIVersions), "example.atoll.dev/v1") }},
		{"release name", func(in *Input) { in.ReleaseName = "other" }},
		{"namespace", func(in *Input) { in.Namespace = "other" }},
		{"chart digest", func(in *Input) { in.ChartDigest = "sha256:0000" }},
		{"profile files", func(in *Input) {
			in.ProfileFiles = []chart.ProfileFile{{Path: "e", ChartPath: "web/templates/e.yaml", Data: []byte("# nothing\n")}}
		}},
		{"cluster-scoped kinds", func(in *Input) { in.ClusterScoped = []schema.GroupKind{{Group: "x", Kind: "Y"}} }},
	}
	for i, m := range misses {
		t.Run(m.name, func(t *testing.T) {
			in := base
			m.change(&in)
			mustRender(t, r, in)
			wantStats(t, 3, 2+i)
			mustRender(t, r, in)
			wantStats(t, 4, 2+i)
			r = resetHits(r, 3)
		})
	}
}

// resetHits is a test helper that keeps TestCache's expected counts simple:
// it brings the hit counter back to hits after a subtest's second render.
func resetHits(r *Renderer, hits int) *Renderer {
	r.cache.mu.Lock()
	r.cache.hits = hits
	r.cache.mu.Unlock()
	return r
}

func TestCacheErrorsAreNotCached(t *testing.T) {
	r := New(4)
	in := Input{Chart: testChart(t, "broken"), ReleaseName: "r"}
	for range 2 {
		if _, err := r.Render(context.Background(), in); err == nil {
			t.Fatal("broken chart rendered")
		}
	}
	if h, m := r.Stats(); h != 0 || m != 2 {
		t.Fatalf("Stats() = %d, %d; want 0 hits, 2 misses", h, m)
	}
}

func TestCacheEviction(t *testing.T) {
	r := New(2)
	in := func(greeting string) Input {
		i := webInput(t)
		i.Values = []map[string]any{{"greeting": greeting}}
		return i
	}
	mustRender(t, r, in("a")) // miss: [a]
	mustRender(t, r, in("b")) // miss: [b a]
	mustRender(t, r, in("a")) // hit:  [a b]
	mustRender(t, r, in("c")) // miss: [c a], b evicted
	mustRender(t, r, in("a")) // hit
	mustRender(t, r, in("b")) // miss
	if h, m := r.Stats(); h != 2 || m != 4 {
		t.Fatalf("Stats() = %d hits, %d misses; want 2, 4", h, m)
	}

	off := New(0)
	mustRender(t, off, in("a"))
	mustRender(t, off, in("a"))
	if h, m := off.Stats(); h != 0 || m != 2 {
		t.Fatalf("cache disabled: Stats() = %d, %d; want 0, 2", h, m)
	}
}

func hashes(out *Output) []string {
	var hs []string
	for _, r := range out.CRDs {
		hs = append(hs, r.Hash)
	}
	for _, r := range out.Resources {
		hs = append(hs, r.Hash)
	}
	for _, h := range out.Hooks {
		hs = append(hs, h.Hash)
	}
	return hs
}

func TestHashStable(t *testing.T) {
	a := mustRender(t, New(0), webInput(t))
	b := mustRender(t, New(0), webInput(t))
	if !slices.Equal(hashes(a), hashes(b)) {
		t.Fatalf("two renders hash differently: %v vs %v", hashes(a), hashes(b))
	}
	for _, r := range a.Resources {
		if len(r.Hash) != len("sha256:")+64 || !strings.HasPrefix(r.Hash, "sha256:") {
			t.Errorf("hash %q is not sha256:<64 hex>", r.Hash)
		}
		h, err := hashObject(r.Object.Object)
		if err != nil || h != r.Hash {
			t.Errorf("hash of %s = %q, recomputed %q (%v)", r.Object.GetName(), r.Hash, h, err)
		}
	}

	in := webInput(t)
	in.Values = []map[string]any{{"greeting": "changed"}}
	c := mustRender(t, New(0), in)
	for i, r := range c.Resources {
		changed := r.Hash != a.Resources[i].Hash
		if wantChanged := r.Object.GetKind() == "ConfigMap"; changed != wantChanged {
			t.Errorf("%s hash changed = %v, want %v", r.Object.GetKind(), changed, wantChanged)
		}
	}
}

func TestConcurrentRenders(t *testing.T) {
	r := New(4)
	shared := testChart(t, "web")
	var wg sync.WaitGroup
	errc := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			greeting := fmt.Sprintf("g%d", i%4)
			out, err := r.Render(context.Background(), Input{
				Chart: shared, ReleaseName: "w", KubeVersion: "v1.37.2",
				Values:       []map[string]any{{"greeting": greeting}},
				ProfileFiles: []chart.ProfileFile{{Path: "x", ChartPath: "web/templates/x.yaml", Data: []byte("# x\n")}},
			})
			if err != nil {
				errc <- err
				return
			}
			for _, res := range out.Resources {
				if res.Object.GetKind() == "ConfigMap" && str(res.Object, "data", "greeting") != greeting {
					errc <- fmt.Errorf("render %d: greeting %q, want %q", i, str(res.Object, "data", "greeting"), greeting)
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if h, m := r.Stats(); h+m != 16 || m < 4 {
		t.Errorf("Stats() = %d hits, %d misses; want 16 renders, at least 4 misses", h, m)
	}
}
