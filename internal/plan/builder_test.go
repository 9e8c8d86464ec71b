package plan

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/atoll-edge/atoll/internal/blob"
	"github.com/atoll-edge/atoll/internal/cluster"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/etcdembed"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/render"
	"github.com/atoll-edge/atoll/internal/store"
)

// chartDir holds the charts written for the render tests.
const chartDir = "../render/testdata"

// fakeClusters is the cluster manager as planning sees it: fixed connectivity
// and capabilities.
type fakeClusters struct {
	reachable map[string]bool // by cluster key path; absent: never probed
	caps      map[string]capabilities
}

type capabilities struct {
	kubeVersion string
	apiVersions []string
}

func (f *fakeClusters) Status(k store.Key) (cluster.Status, bool) {
	r, ok := f.reachable[k.Path()]
	if !ok {
		return cluster.Status{}, false
	}
	st := cluster.Status{State: cluster.Unreachable, Reachable: r}
	if r {
		st.State = cluster.Reachable
	}
	return st, true
}

func (f *fakeClusters) Capabilities(k store.Key) (string, []string, bool) {
	c, ok := f.caps[k.Path()]
	return c.kubeVersion, c.apiVersions, ok
}

// world is a hub's store on a real etcd, filled the way the API fills it.
type world struct {
	st      *store.Store
	blobs   *blob.Store
	plans   *Store
	builder *Builder
}

func newWorld(t *testing.T) *world {
	t.Helper()
	srv, err := etcdembed.Start(context.Background(), etcdembed.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	w := &world{st: store.New(srv.Client(), model.Schema, "/atoll"), blobs: blob.New(srv.Client(), blob.Options{Root: "/atoll"})}
	w.plans = NewStore(w.blobs)
	info := &fakeClusters{
		reachable: map[string]bool{"clusters/telco/edge-a": true, "clusters/telco/edge-b": true, "clusters/telco/core": true, "clusters/telco/down": false},
		caps: map[string]capabilities{
			"clusters/telco/edge-a": {"v1.36.1", []string{"example.atoll.dev/v1", "example.atoll.dev/v1/Widget", "policy/v1/PodDisruptionBudget"}},
			"clusters/telco/core":   {"v1.30.2", nil},
		},
	}
	w.builder = &Builder{Store: w.st, Blobs: w.blobs, Plans: w.plans, Renderer: render.New(0), Clusters: info}

	w.create(t, store.K(model.Projects, "p"), &model.Project{Metadata: model.Metadata{Name: "p"}})
	w.create(t, store.K(model.ClusterProviders, "telco"), &model.ClusterProvider{Metadata: model.Metadata{Name: "telco"}})
	w.create(t, store.K(model.ClusterProviders, "empty"), &model.ClusterProvider{Metadata: model.Metadata{Name: "empty"}})
	for name, labels := range map[string][]string{"edge-a": {"edge", "gpu"}, "edge-b": {"edge"}, "core": {"core"}, "down": nil} {
		w.create(t, store.K(model.Clusters, "telco", name), &model.ClusterRecord{Cluster: model.Cluster{Metadata: model.Metadata{Name: name}}})
		for _, l := range labels {
			w.create(t, store.K(model.ClusterLabels, "telco", name, l), &model.ClusterLabel{ClusterLabel: l})
		}
	}
	return w
}

func (w *world) create(t *testing.T, k store.Key, v any) {
	t.Helper()
	if _, err := w.st.Create(context.Background(), k, v); err != nil {
		t.Fatalf("create %s: %v", k, err)
	}
}

// compositeApp creates a composite app whose apps are charts of chartDir (app
// name → chart folder) and an empty composite profile "none".
func (w *world) compositeApp(t *testing.T, name string, apps map[string]string) store.Key {
	t.Helper()
	ca := store.K(model.CompositeApps, "p", name, "v1")
	w.create(t, ca, &model.CompositeApp{Metadata: model.Metadata{Name: name}, Spec: model.CompositeAppSpec{Version: "v1"}})
	for app, dir := range apps {
		info, err := w.blobs.Put(context.Background(), bytes.NewReader(tgzDir(t, filepath.Join(chartDir, dir), dir)))
		if err != nil {
			t.Fatal(err)
		}
		w.create(t, store.K(model.Apps, "p", name, "v1", app), &model.AppRecord{App: model.App{Metadata: model.Metadata{Name: app}},
			Chart: model.ChartRef{Digest: info.Digest, Size: info.Size, Name: dir, Version: "0.1.0"}})
	}
	w.create(t, store.K(model.CompositeProfiles, "p", name, "v1", "none"), &model.CompositeProfile{Metadata: model.Metadata{Name: "none"}})
	return ca
}

// profile adds a composite profile with one profile archive per app.
func (w *world) profile(t *testing.T, ca store.Key, name string, archives map[string][]byte) {
	t.Helper()
	n := ca.Names
	w.create(t, store.K(model.CompositeProfiles, n[0], n[1], n[2], name), &model.CompositeProfile{Metadata: model.Metadata{Name: name}})
	for app, data := range archives {
		info, err := w.blobs.Put(context.Background(), bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		w.create(t, store.K(model.Profiles, n[0], n[1], n[2], name, app+"-profile"), &model.ProfileRecord{
			Profile: model.Profile{Metadata: model.Metadata{Name: app + "-profile"}, Spec: model.ProfileSpec{App: app}},
			Archive: model.ChartRef{Digest: info.Digest, Size: info.Size}})
	}
}

// digSpec says what to create for one DIG.
type digSpec struct {
	spec model.DIGSpec
	// gpi is the generic placement intent created (none if empty), with one app
	// intent per app of intents.
	gpi     string
	intents map[string]model.PlacementIntent
	// useGPI is the generic placement intent the DIG's intent names (none if empty).
	useGPI string
}

func (w *world) dig(t *testing.T, ca store.Key, name string, d digSpec) store.Key {
	t.Helper()
	n := append(append([]string(nil), ca.Names...), name)
	k := store.K(model.DIGs, n...)
	if d.spec.Profile == "" {
		d.spec.Profile = "none"
	}
	w.create(t, k, &model.DeploymentIntentGroup{Metadata: model.Metadata{Name: name}, Spec: d.spec})
	if d.gpi != "" {
		w.create(t, store.K(model.GenericPlacementIntents, append(n, d.gpi)...), &model.GenericPlacementIntent{Metadata: model.Metadata{Name: d.gpi}})
		for app, it := range d.intents {
			w.create(t, store.K(model.AppIntents, append(n, d.gpi, app+"-intent")...), &model.AppIntent{
				Metadata: model.Metadata{Name: app + "-intent"}, Spec: model.AppIntentSpec{App: app, Intent: it}})
		}
	}
	if d.useGPI != "" {
		w.create(t, store.K(model.DIGIntents, append(n, "intents")...), &model.DIGIntent{
			Metadata: model.Metadata{Name: "intents"}, Spec: model.DIGIntentSpec{Intent: map[string]string{"genericPlacementIntent": d.useGPI}}})
	}
	return k
}

// tgzDir packs dir as a chart archive whose top folder is top.
func tgzDir(t *testing.T, dir, top string) []byte {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		files[top+"/"+filepath.ToSlash(rel)] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return tgzFiles(t, files)
}

// tgzFiles packs name → content pairs, in name order.
func tgzFiles(t *testing.T, files map[string]string) []byte {
	t.Helper()
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func byLabel(l string) model.PlacementTerm {
	return model.PlacementTerm{ClusterProvider: "telco", ClusterLabel: l}
}

func byName(n string) model.PlacementTerm {
	return model.PlacementTerm{ClusterProvider: "telco", Cluster: n}
}

// planned is one resource of a plan as the tests compare it.
type planned struct {
	phase, kind, name string
}

func TestBuild(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	ca := w.compositeApp(t, "shop", map[string]string{"web": "web", "widgets": "crdapp", "caps": "caps", "hooks": "hooks"})
	w.profile(t, ca, "standard", map[string][]byte{"web": tgzFiles(t, map[string]string{
		"manifest.yaml":        "version: v1\ntype:\n  values: override_values.yaml\n",
		"override_values.yaml": "greeting: from-profile\nreplicas: 1\nimage: registry.example/web:2.0\n",
	})})
	dig := w.dig(t, ca, "launch", digSpec{
		spec: model.DIGSpec{Profile: "standard", Version: "r1", Namespace: "retail", OverrideValues: []model.OverrideValue{
			{App: "web", Values: map[string]any{"replicas": 5, "service.port": 8080}},
			{App: "web", Values: map[string]any{"replicas": 3}}, // a later entry wins
		}},
		gpi: "placement",
		intents: map[string]model.PlacementIntent{
			"web":     {AllOf: []model.PlacementTerm{byLabel("edge")}},
			"widgets": {AnyOf: []model.PlacementTerm{byName("down"), byName("core")}}, // down is unreachable
			"caps":    {AllOf: []model.PlacementTerm{byName("edge-a"), byLabel("core")}},
			"hooks":   {AllOf: []model.PlacementTerm{byLabel("gpu")}},
		},
		useGPI: "placement",
	})

	digest, err := w.builder.Plan(ctx, dig, 4)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	p, err := NewStore(w.blobs).Get(ctx, digest) // read back, not from the builder's cache
	if err != nil {
		t.Fatalf("read the plan back: %v", err)
	}

	header := Plan{DIG: dig.Path(), Project: "p", CompositeApp: "shop", Version: "v1", Name: "launch", Profile: "standard",
		Namespace: "retail", Instance: InstanceOf(dig.Path()), Revision: 4}
	got := *p
	got.Apps = nil
	if !reflect.DeepEqual(got, header) {
		t.Errorf("plan header:\n got %+v\nwant %+v", got, header)
	}

	// Apps in name order, each with its clusters in ID order.
	wantClusters := map[string][]string{
		"caps":    {"clusters/telco/core", "clusters/telco/edge-a"},
		"hooks":   {"clusters/telco/edge-a"},
		"web":     {"clusters/telco/edge-a", "clusters/telco/edge-b"},
		"widgets": {"clusters/telco/core"},
	}
	var apps []string
	for _, a := range p.Apps {
		apps = append(apps, a.App)
		var cl []string
		for _, c := range a.Clusters {
			cl = append(cl, c.Cluster)
			if c.Cluster != "clusters/"+c.Provider+"/"+c.Name {
				t.Errorf("app %s: cluster %q does not match provider %q name %q", a.App, c.Cluster, c.Provider, c.Name)
			}
		}
		if !reflect.DeepEqual(cl, wantClusters[a.App]) {
			t.Errorf("app %s clusters: got %v, want %v", a.App, cl, wantClusters[a.App])
		}
	}
	if want := []string{"caps", "hooks", "web", "widgets"}; !reflect.DeepEqual(apps, want) {
		t.Fatalf("apps: got %v, want %v", apps, want)
	}

	// Resource order per app and cluster.
	wantOrder := []struct {
		app, cluster string
		want         []planned
		sorted       bool // compare as a set (Helm's order among kinds it does not rank)
	}{
		{"web", "clusters/telco/edge-a", []planned{{"main", "ConfigMap", "web-web"}, {"main", "Service", "web-web"}, {"main", "Deployment", "web-web"}}, false},
		{"web", "clusters/telco/edge-b", []planned{{"main", "ConfigMap", "web-web"}, {"main", "Service", "web-web"}, {"main", "Deployment", "web-web"}}, false},
		{"widgets", "clusters/telco/core", []planned{{"crd", "CustomResourceDefinition", "widgets.example.atoll.dev"}, {"main", "Widget", "widgets-widget"}}, false},
		{"hooks", "clusters/telco/edge-a", []planned{
			{"hook:pre-install", "ConfigMap", "hooks-pre-config"}, {"hook:pre-install", "Job", "hooks-migrate"},
			{"main", "ConfigMap", "hooks-app"},
			{"hook:post-install", "ConfigMap", "hooks-a-post-config"}, {"hook:post-install", "Job", "hooks-notify"},
		}, false},
		// Capabilities reach the render: the Widget and the PDB only where their
		// APIs are served.
		{"caps", "clusters/telco/edge-a", []planned{{"main", "ConfigMap", "caps-caps"}, {"main", "PodDisruptionBudget", "caps-pdb"}, {"main", "Widget", "caps-widget"}}, true},
		{"caps", "clusters/telco/core", []planned{{"main", "ConfigMap", "caps-caps"}}, true},
	}
	for _, wo := range wantOrder {
		cp := findCluster(t, p, wo.app, wo.cluster)
		var gotRes []planned
		for _, r := range cp.Resources {
			gotRes = append(gotRes, planned{r.Phase, r.Ref.Kind, r.Ref.Name})
		}
		if wo.sorted {
			sort.Slice(gotRes, func(i, j int) bool { return gotRes[i].kind < gotRes[j].kind })
		}
		if !reflect.DeepEqual(gotRes, wo.want) {
			t.Errorf("%s on %s:\n got %v\nwant %v", wo.app, wo.cluster, gotRes, wo.want)
		}
	}
	hooks := findCluster(t, p, "hooks", "clusters/telco/edge-a").Resources
	if hooks[0].Weight != -5 || hooks[1].Weight != 5 || !reflect.DeepEqual(hooks[1].DeletePolicies, []string{"before-hook-creation", "hook-succeeded"}) {
		t.Errorf("pre-install hooks: got weights %d, %d and policies %v; want -5, 5 and [before-hook-creation hook-succeeded]",
			hooks[0].Weight, hooks[1].Weight, hooks[1].DeletePolicies)
	}

	// Every stored object: the three labels, its hash, the namespace.
	objs := map[string]map[string]any{} // app|cluster|kind/name → object
	for _, a := range p.Apps {
		for _, c := range a.Clusters {
			for _, r := range c.Resources {
				o, err := w.plans.Object(ctx, r)
				if err != nil {
					t.Fatalf("object %s: %v", r.Ref, err)
				}
				l := o.GetLabels()
				if l[LabelDIG] != "launch" || l[LabelApp] != a.App || l[LabelInstance] != p.Instance {
					t.Errorf("%s of %s on %s: labels %v, want %s=launch %s=%s %s=%s", r.Ref, a.App, c.Cluster, l,
						LabelDIG, LabelApp, a.App, LabelInstance, p.Instance)
				}
				if h, _, _ := HashObject(o); h != r.Hash {
					t.Errorf("%s: plan hash %s, object hash %s", r.Ref, r.Hash, h)
				}
				wantNS := "retail"
				if r.Ref.Kind == "CustomResourceDefinition" {
					wantNS = ""
				}
				if o.GetNamespace() != wantNS || r.Ref.Namespace != wantNS {
					t.Errorf("%s: namespace %q (ref %q), want %q", r.Ref, o.GetNamespace(), r.Ref.Namespace, wantNS)
				}
				if o.GetKind() != r.Ref.Kind || o.GetName() != r.Ref.Name || o.GetAPIVersion() != r.Ref.APIVersion {
					t.Errorf("ref %+v does not name object %s %s %s", r.Ref, o.GetAPIVersion(), o.GetKind(), o.GetName())
				}
				objs[a.App+"|"+c.Name+"|"+r.Ref.Kind+"/"+r.Ref.Name] = o.Object
			}
		}
	}

	// Values: chart < profile < DIG overrides (later entries last).
	values := []struct {
		name string
		obj  string
		path []string
		want any
	}{
		{"profile over chart", "web|edge-a|ConfigMap/web-web", []string{"data", "greeting"}, "from-profile"},
		{"DIG over profile, last entry wins", "web|edge-b|Deployment/web-web", []string{"spec", "replicas"}, int64(3)},
		{"profile value kept", "web|edge-a|Deployment/web-web", []string{"spec", "template", "spec", "containers"}, nil}, // checked below
		{"dotted override", "web|edge-a|Service/web-web", []string{"spec", "ports"}, nil},                                // checked below
		{"kube version of edge-a", "caps|edge-a|ConfigMap/caps-caps", []string{"data", "kubeVersion"}, "v1.36.1"},
		{"kube version of core", "caps|core|ConfigMap/caps-caps", []string{"data", "kubeVersion"}, "v1.30.2"},
		{"api versions of core", "caps|core|ConfigMap/caps-caps", []string{"data", "widgets"}, "absent"},
		{"chart default kept", "widgets|core|Widget/widgets-widget", []string{"spec", "color"}, "blue"},
	}
	for _, v := range values {
		o, ok := objs[v.obj]
		if !ok {
			t.Errorf("%s: no object %s", v.name, v.obj)
			continue
		}
		got := dig2(o, v.path...)
		switch v.name {
		case "profile value kept":
			cs, _ := got.([]any)
			if len(cs) != 1 || dig2(cs[0].(map[string]any), "image") != "registry.example/web:2.0" {
				t.Errorf("%s: containers %v, want the profile's image", v.name, got)
			}
		case "dotted override":
			ps, _ := got.([]any)
			if len(ps) != 1 || dig2(ps[0].(map[string]any), "port") != int64(8080) {
				t.Errorf("%s: ports %v, want port 8080 from service.port", v.name, got)
			}
		default:
			if !reflect.DeepEqual(got, v.want) {
				t.Errorf("%s: %s %s = %#v, want %#v", v.name, v.obj, strings.Join(v.path, "."), got, v.want)
			}
		}
	}

	// The same inputs plan the same resources.
	again, err := w.builder.Build(ctx, dig, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, p) {
		t.Errorf("a second Build of the same DIG differs:\n got %+v\nwant %+v", again, p)
	}
}

func dig2(m map[string]any, path ...string) any {
	var cur any = m
	for _, p := range path {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[p]
	}
	return cur
}

func findCluster(t *testing.T, p *Plan, app, cluster string) ClusterPlan {
	t.Helper()
	for _, a := range p.Apps {
		if a.App != app {
			continue
		}
		for _, c := range a.Clusters {
			if c.Cluster == cluster {
				return c
			}
		}
	}
	t.Fatalf("plan has no app %s on %s", app, cluster)
	return ClusterPlan{}
}

func TestBuildRefusals(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	shop := w.compositeApp(t, "shop", map[string]string{"web": "web", "widgets": "crdapp"})
	bad := w.compositeApp(t, "bad", map[string]string{"web": "web", "broken": "broken"})
	empty := w.compositeApp(t, "empty", nil)
	edge := model.PlacementIntent{AllOf: []model.PlacementTerm{byLabel("edge")}}
	both := map[string]model.PlacementIntent{"web": edge, "widgets": edge}

	tests := []struct {
		name    string
		ca      store.Key
		dig     digSpec
		wantErr []string // parts of the errs.Invalid message
	}{
		{"app without intent", shop, digSpec{gpi: "g", useGPI: "g", intents: map[string]model.PlacementIntent{"web": edge}},
			[]string{`app "widgets" has no placement intent`, "add an app intent"}},
		{"DIG without intents", shop, digSpec{gpi: "g", intents: both}, []string{"has no intents", "genericPlacementIntent"}},
		{"intent naming a missing generic placement intent", shop, digSpec{gpi: "g", intents: both, useGPI: "nope"},
			[]string{`generic placement intent "nope", which does not exist`}},
		{"unknown cluster provider", shop, digSpec{gpi: "g", useGPI: "g", intents: map[string]model.PlacementIntent{
			"web": edge, "widgets": {AllOf: []model.PlacementTerm{{ClusterProvider: "mars", ClusterLabel: "edge"}}}}},
			[]string{`cluster provider "mars", which does not exist`}},
		{"provider without clusters", shop, digSpec{gpi: "g", useGPI: "g", intents: map[string]model.PlacementIntent{
			"web": edge, "widgets": {AllOf: []model.PlacementTerm{{ClusterProvider: "empty", ClusterLabel: "edge"}}}}},
			[]string{`placement of app "widgets"`, "label edge of cluster provider empty matches no cluster"}},
		{"label matching nothing", shop, digSpec{gpi: "g", useGPI: "g", intents: map[string]model.PlacementIntent{
			"web": {AllOf: []model.PlacementTerm{byLabel("moon")}}, "widgets": edge}},
			[]string{`placement of app "web"`, "label moon", "matches no cluster"}},
		{"cluster name matching nothing in anyOf", shop, digSpec{gpi: "g", useGPI: "g", intents: map[string]model.PlacementIntent{
			"web": edge, "widgets": {AnyOf: []model.PlacementTerm{byName("ghost")}}}},
			[]string{"anyOf [cluster telco/ghost] matches no cluster"}},
		{"override naming an unknown app", shop, digSpec{gpi: "g", useGPI: "g", intents: both,
			spec: model.DIGSpec{OverrideValues: []model.OverrideValue{{App: "db", Values: map[string]any{"x": 1}}}}},
			[]string{`spec.overrideValues names app "db"`}},
		{"missing composite profile", shop, digSpec{gpi: "g", useGPI: "g", intents: both, spec: model.DIGSpec{Profile: "gold"}},
			[]string{`composite profile "gold" does not exist`}},
		{"chart that fails to render", bad, digSpec{gpi: "g", useGPI: "g", intents: map[string]model.PlacementIntent{"web": edge, "broken": edge}},
			[]string{`app "broken" for cluster telco/edge-a`, `render chart "broken"`, "need x"}},
		{"composite app without apps", empty, digSpec{gpi: "g", useGPI: "g"}, []string{"has no apps to deploy"}},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dig := w.dig(t, tc.ca, "d"+string(rune('a'+i)), tc.dig)
			p, err := w.builder.Build(ctx, dig, 1)
			if errs.KindOf(err) != errs.Invalid {
				t.Fatalf("Build: got plan %v, error %v (kind %q), want an invalid error", p != nil, err, errs.KindOf(err))
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Build: got %q, want it to contain %q", err, s)
				}
			}
			if _, err := w.builder.Plan(ctx, dig, 1); errs.KindOf(err) != errs.Invalid {
				t.Errorf("Plan: got %v, want the same invalid error", err)
			}
		})
	}

	t.Run("deleted DIG", func(t *testing.T) {
		k := store.K(model.DIGs, "p", "shop", "v1", "never")
		if _, err := w.builder.Build(ctx, k, 1); errs.KindOf(err) != errs.NotFound {
			t.Fatalf("Build: got %v, want not found", err)
		}
	})
}
