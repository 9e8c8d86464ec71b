package rsync

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/atoll-edge/atoll/internal/blob"
	"github.com/atoll-edge/atoll/internal/etcdembed"
	"github.com/atoll-edge/atoll/internal/lifecycle"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/plan"
	"github.com/atoll-edge/atoll/internal/store"
	"github.com/atoll-edge/atoll/test/edge"
)

const root = "/atoll"

// replicas numbers the engines, each a hub replica of its own.
var replicas atomic.Int32

// configs is the cluster manager as the engine sees it: a config per cluster
// key path, which a test can add later.
type configs struct {
	mu   sync.Mutex
	cfgs map[string]*rest.Config
}

func (c *configs) Config(k store.Key) (*rest.Config, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cfg, ok := c.cfgs[k.Path()]
	return cfg, ok
}

func (c *configs) set(path string, cfg *rest.Config) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cfgs[path] = cfg
}

// sink records what the engine reports.
type sink struct {
	mu       sync.Mutex
	deployed []deployedEvent
	waiting  []waitingEvent
}

type deployedEvent struct {
	dig, app, cluster string
	ref               plan.Ref
	state, message    string
}

type waitingEvent struct {
	cluster   string
	waiting   int
	lastError string
}

func (s *sink) Deployed(dig, app, cluster string, ref plan.Ref, state, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deployed = append(s.deployed, deployedEvent{dig, app, cluster, ref, state, message})
}

func (s *sink) ClusterWaiting(cluster string, waiting int, lastError string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting = append(s.waiting, waitingEvent{cluster, waiting, lastError})
}

// names lists the names of the resources reported in state, in report order.
func (s *sink) names(state string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.deployed {
		if e.state == state {
			out = append(out, e.ref.Name)
		}
	}
	return out
}

func (s *sink) waits(cluster string) []waitingEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []waitingEvent
	for _, w := range s.waiting {
		if w.cluster == cluster {
			out = append(out, w)
		}
	}
	return out
}

// planner answers the plan a test set for the next revision.
type planner struct {
	plans *plan.Store
	mu    sync.Mutex
	next  *plan.Plan
}

func (p *planner) Plan(ctx context.Context, dig store.Key, revision int64) (string, error) {
	p.mu.Lock()
	next := *p.next
	p.mu.Unlock()
	next.Revision = revision
	return p.plans.Put(ctx, &next)
}

func (p *planner) set(next *plan.Plan) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next = next
}

// fixture is one hub's data path on its own etcd, syncing to the shared edge
// cluster: a real lifecycle machine and plan store, a fake cluster manager, and
// a recording sink.
type fixture struct {
	cli     *clientv3.Client
	st      *store.Store
	lc      *lifecycle.Machine
	plans   *plan.Store
	planner *planner
	configs *configs
	sink    *sink
	kube    kubernetes.Interface
	ns      string
	dig     store.Key
}

func newFixture(t *testing.T, cl *edge.Cluster, ns string) *fixture {
	t.Helper()
	srv, err := etcdembed.Start(context.Background(), etcdembed.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	f := &fixture{cli: srv.Client(), st: store.New(srv.Client(), model.Schema, root), sink: &sink{},
		configs: &configs{cfgs: map[string]*rest.Config{"clusters/cp/edge": cl.RESTConfig()}},
		kube:    kubernetes.NewForConfigOrDie(cl.RESTConfig()), ns: ns}
	f.plans = plan.NewStore(blob.New(srv.Client(), blob.Options{Root: root}))
	f.planner = &planner{plans: f.plans}
	f.lc = lifecycle.New(srv.Client(), f.st, root, f.planner)
	ctx := context.Background()
	f.dig = store.K(model.DIGs, "p", "ca", "v1", "launch")
	for _, c := range []struct {
		k store.Key
		v any
	}{
		{store.K(model.Projects, "p"), &model.Project{Metadata: model.Metadata{Name: "p"}}},
		{store.K(model.CompositeApps, "p", "ca", "v1"), &model.CompositeApp{Metadata: model.Metadata{Name: "ca"}, Spec: model.CompositeAppSpec{Version: "v1"}}},
		{f.dig, &model.DeploymentIntentGroup{Metadata: model.Metadata{Name: "launch"}, Spec: model.DIGSpec{Profile: "none", Namespace: ns}}},
	} {
		if _, err := f.st.Create(ctx, c.k, c.v); err != nil {
			t.Fatalf("create %s: %v", c.k, err)
		}
	}
	return f
}

// engine starts an engine with a fast resync and backoff; it stops in cleanup
// (or when stop is called).
func (f *fixture) engine(t *testing.T, reg prometheus.Registerer) (stop func()) {
	t.Helper()
	e, err := New(Options{Client: f.cli, Root: root, Lifecycle: f.lc, Plans: f.plans, Clusters: f.configs, Sink: f.sink,
		Logger:  slog.New(slog.DiscardHandler),
		Workers: 2, BackoffBase: 50 * time.Millisecond, BackoffCap: 200 * time.Millisecond, Resync: 200 * time.Millisecond,
		Metrics: reg, Replica: fmt.Sprintf("%s-%d", t.Name(), replicas.Add(1)), LeaseTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("Run did not return within 20s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// configMap is a ConfigMap of app web as the plan builder makes it: labelled.
func (f *fixture) configMap(name string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": f.ns, "labels": map[string]any{
			plan.LabelDIG: f.dig.Name(), plan.LabelApp: "web", plan.LabelInstance: plan.InstanceOf(f.dig.Path())}},
		"data": data,
	}}
}

// plan is a plan putting objs, in order, on the clusters named by path.
func (f *fixture) plan(t *testing.T, objs []*unstructured.Unstructured, clusters ...string) *plan.Plan {
	t.Helper()
	if len(clusters) == 0 {
		clusters = []string{"clusters/cp/edge"}
	}
	p := &plan.Plan{DIG: f.dig.Path(), Project: "p", CompositeApp: "ca", Version: "v1", Name: f.dig.Name(), Profile: "none",
		Namespace: f.ns, Instance: plan.InstanceOf(f.dig.Path())}
	ap := plan.AppPlan{App: "web"}
	for _, c := range clusters {
		parts := strings.Split(c, "/")
		cp := plan.ClusterPlan{Cluster: c, Provider: parts[1], Name: parts[2]}
		for _, o := range objs {
			hash, data, err := plan.HashObject(o)
			if err != nil {
				t.Fatal(err)
			}
			digest, err := f.plans.PutObject(context.Background(), data)
			if err != nil {
				t.Fatal(err)
			}
			cp.Resources = append(cp.Resources, plan.Resource{
				Ref:  plan.Ref{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName()},
				Hash: hash, Blob: digest, Phase: "main"})
		}
		ap.Clusters = append(ap.Clusters, cp)
	}
	p.Apps = []plan.AppPlan{ap}
	return p
}

func (f *fixture) instantiate(t *testing.T, p *plan.Plan) {
	t.Helper()
	ctx := context.Background()
	f.planner.set(p)
	if _, err := f.lc.Approve(ctx, f.dig); err != nil {
		t.Fatalf("approve: %v", err)
	}
	if _, err := f.lc.Instantiate(ctx, f.dig); err != nil {
		t.Fatalf("instantiate: %v", err)
	}
}

// records returns the applied records of the DIG on cluster, by ConfigMap name.
func (f *fixture) records(t *testing.T, cluster string) map[string]record {
	t.Helper()
	resp, err := f.cli.Get(context.Background(), root+"/applied/"+f.dig.Path()+"/"+cluster+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]record{}
	for _, kv := range resp.Kvs {
		var r record
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			t.Fatalf("record %s: %v", kv.Key, err)
		}
		out[r.Ref.Name] = r
	}
	return out
}

// live returns the DIG's ConfigMaps on the edge: name → resourceVersion.
func (f *fixture) live(t *testing.T) map[string]string {
	t.Helper()
	list, err := f.kube.CoreV1().ConfigMaps(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: plan.LabelInstance})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, cm := range list.Items {
		out[cm.Name] = cm.ResourceVersion
	}
	return out
}

func (f *fixture) state(t *testing.T) lifecycle.Record {
	t.Helper()
	rec, _, err := f.lc.Get(context.Background(), f.dig)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// waitFor polls ok; when it times out it says what it saw.
func (f *fixture) waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			f.sink.mu.Lock()
			reports, waits := f.sink.deployed, f.sink.waiting
			f.sink.mu.Unlock()
			reports, waits = reports[max(0, len(reports)-6):], waits[max(0, len(waits)-3):]
			t.Fatalf("waited 15s for %s; got live ConfigMaps %v, state %s, last reports %+v, last waiting reports %+v",
				what, f.live(t), f.state(t).State, reports, waits)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// applies returns the engine's apply counter by result.
func applies(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "atoll_rsync_applies_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					out[l.GetValue()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	return out
}

// TestEngine drives the engine against one real API server; every subtest has its
// own etcd, DIG and namespace.
func TestEngine(t *testing.T) {
	cl := edge.Start(t, 1, edge.Options{})[0]

	t.Run("instantiate applies in order, labelled, recorded", func(t *testing.T) {
		f := newFixture(t, cl, "rsync-apply")
		reg := prometheus.NewRegistry()
		f.engine(t, reg)
		p := f.plan(t, []*unstructured.Unstructured{
			f.configMap("alpha", map[string]any{"k": "1"}),
			f.configMap("beta", map[string]any{"k": "2"}),
		})
		f.instantiate(t, p)

		f.waitFor(t, "both ConfigMaps applied", func() bool { return len(f.sink.names(Applied)) >= 2 })
		if got := f.sink.names(Applied)[:2]; !reflect.DeepEqual(got, []string{"alpha", "beta"}) {
			t.Errorf("apply order: got %v, want [alpha beta] (plan order)", got)
		}
		for _, name := range []string{"alpha", "beta"} {
			cm, err := f.kube.CoreV1().ConfigMaps(f.ns).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("ConfigMap %s on the edge: %v", name, err)
			}
			want := map[string]string{plan.LabelDIG: "launch", plan.LabelApp: "web", plan.LabelInstance: plan.InstanceOf(f.dig.Path())}
			for k, v := range want {
				if cm.Labels[k] != v {
					t.Errorf("ConfigMap %s label %s: got %q, want %q", name, k, cm.Labels[k], v)
				}
			}
		}
		recs := f.records(t, "clusters/cp/edge")
		for i, res := range p.Apps[0].Clusters[0].Resources {
			r, ok := recs[res.Ref.Name]
			if !ok || r.Hash != res.Hash || r.App != "web" || r.Order != i || r.Ref != res.Ref {
				t.Errorf("record of %s: got %+v (present %v), want app web, order %d, hash %s", res.Ref.Name, r, ok, i, res.Hash)
			}
		}
		if len(recs) != 2 {
			t.Errorf("got %d records, want 2", len(recs))
		}
		f.sink.mu.Lock()
		reports := append([]deployedEvent(nil), f.sink.deployed...)
		f.sink.mu.Unlock()
		for _, e := range reports {
			if e.dig != f.dig.Path() || e.app != "web" || e.cluster != "clusters/cp/edge" || e.message != "" {
				t.Errorf("sink event %+v: want DIG %s, app web, cluster clusters/cp/edge, no message", e, f.dig.Path())
			}
		}
		f.waitFor(t, "the cluster reported with nothing waiting", func() bool {
			w := f.sink.waits("clusters/cp/edge")
			return len(w) > 0 && w[len(w)-1].waiting == 0 && w[len(w)-1].lastError == ""
		})
		if got := applies(t, reg); got["created"] != 2 || got["failed"] != 0 {
			t.Errorf("applies: got %v, want 2 created", got)
		}
	})

	t.Run("a resync or a restart applies nothing", func(t *testing.T) {
		f := newFixture(t, cl, "rsync-idle")
		reg := prometheus.NewRegistry()
		stop := f.engine(t, reg)
		f.instantiate(t, f.plan(t, []*unstructured.Unstructured{
			f.configMap("alpha", map[string]any{"k": "1"}),
			f.configMap("beta", map[string]any{"k": "2"}),
		}))
		f.waitFor(t, "both ConfigMaps applied", func() bool { return len(f.sink.names(Applied)) >= 2 })
		before := f.live(t)
		if len(before) != 2 {
			t.Fatalf("live ConfigMaps: got %v, want alpha and beta", before)
		}

		// Resync is 200ms: wait for several syncs of the cluster.
		reports := len(f.sink.names(Applied))
		f.waitFor(t, "three more syncs", func() bool { return len(f.sink.names(Applied)) >= reports+6 })
		if after := f.live(t); !reflect.DeepEqual(after, before) {
			t.Errorf("resourceVersions after resyncs: got %v, want unchanged %v", after, before)
		}
		if got := applies(t, reg); got["created"] != 2 || len(got) != 1 {
			t.Errorf("applies after resyncs: got %v, want only the 2 creates", got)
		}

		// A new engine (a hub restart) finds the records and applies nothing.
		stop()
		reg2 := prometheus.NewRegistry()
		reports = len(f.sink.names(Applied))
		f.engine(t, reg2)
		f.waitFor(t, "the new engine's syncs", func() bool { return len(f.sink.names(Applied)) >= reports+4 })
		if after := f.live(t); !reflect.DeepEqual(after, before) {
			t.Errorf("resourceVersions after a restart: got %v, want unchanged %v", after, before)
		}
		if got := applies(t, reg2); len(got) != 0 {
			t.Errorf("applies of the restarted engine: got %v, want none", got)
		}
	})

	t.Run("a new revision deletes the dropped, updates the changed, leaves the rest", func(t *testing.T) {
		f := newFixture(t, cl, "rsync-update")
		reg := prometheus.NewRegistry()
		f.engine(t, reg)
		f.instantiate(t, f.plan(t, []*unstructured.Unstructured{
			f.configMap("alpha", map[string]any{"k": "1"}),
			f.configMap("beta", map[string]any{"k": "2"}),
			f.configMap("gamma", map[string]any{"k": "3"}),
		}))
		f.waitFor(t, "three ConfigMaps applied", func() bool { return len(f.live(t)) == 3 })
		before := f.live(t)

		f.planner.set(f.plan(t, []*unstructured.Unstructured{
			f.configMap("beta", map[string]any{"k": "two"}),
			f.configMap("gamma", map[string]any{"k": "3"}),
		}))
		if _, err := f.lc.Update(context.Background(), f.dig); err != nil {
			t.Fatalf("update: %v", err)
		}
		f.waitFor(t, "alpha deleted and beta updated", func() bool {
			cm, err := f.kube.CoreV1().ConfigMaps(f.ns).Get(context.Background(), "beta", metav1.GetOptions{})
			return len(f.live(t)) == 2 && err == nil && cm.Data["k"] == "two"
		})
		after := f.live(t)
		tests := []struct {
			name, cm  string
			wantRV    string // "" when it must be gone
			wantSame  bool
			wantState string
		}{
			{"dropped is deleted", "alpha", "", false, Deleted},
			{"changed is updated", "beta", "new", false, Applied},
			{"unchanged is untouched", "gamma", before["gamma"], true, Applied},
		}
		for _, tc := range tests {
			rv, present := after[tc.cm]
			switch {
			case tc.wantRV == "" && present:
				t.Errorf("%s: %s still on the edge (rv %s)", tc.name, tc.cm, rv)
			case tc.wantRV != "" && !present:
				t.Errorf("%s: %s is gone", tc.name, tc.cm)
			case tc.wantSame && rv != before[tc.cm]:
				t.Errorf("%s: %s resourceVersion got %s, want unchanged %s", tc.name, tc.cm, rv, before[tc.cm])
			case tc.wantRV == "new" && rv == before[tc.cm]:
				t.Errorf("%s: %s resourceVersion unchanged %s, want a new one", tc.name, tc.cm, rv)
			}
		}
		if got := f.sink.names(Deleted); !reflect.DeepEqual(got, []string{"alpha"}) {
			t.Errorf("deleted: got %v, want [alpha]", got)
		}
		recs := f.records(t, "clusters/cp/edge")
		if _, ok := recs["alpha"]; ok || len(recs) != 2 {
			t.Errorf("records: got %v, want beta and gamma", recs)
		}
		if got := applies(t, reg); got["created"] != 3 || got["configured"] != 1 || len(got) != 2 {
			t.Errorf("applies: got %v, want 3 created and 1 configured (beta)", got)
		}
		if st := f.state(t); st.State != lifecycle.Instantiated || st.Revision != 2 {
			t.Errorf("state: got %s revision %d, want Instantiated revision 2", st.State, st.Revision)
		}
	})

	t.Run("terminate deletes in reverse order and records Terminated", func(t *testing.T) {
		f := newFixture(t, cl, "rsync-terminate")
		f.engine(t, nil)
		f.instantiate(t, f.plan(t, []*unstructured.Unstructured{
			f.configMap("alpha", map[string]any{"k": "1"}),
			f.configMap("beta", map[string]any{"k": "2"}),
			f.configMap("gamma", map[string]any{"k": "3"}),
		}))
		f.waitFor(t, "three ConfigMaps applied", func() bool { return len(f.live(t)) == 3 })
		if _, err := f.lc.Terminate(context.Background(), f.dig); err != nil {
			t.Fatalf("terminate: %v", err)
		}
		f.waitFor(t, "the DIG terminated", func() bool { return f.state(t).State == lifecycle.Terminated })
		if got := f.sink.names(Deleted); !reflect.DeepEqual(got, []string{"gamma", "beta", "alpha"}) {
			t.Errorf("delete order: got %v, want [gamma beta alpha] (reverse apply order)", got)
		}
		if live := f.live(t); len(live) != 0 {
			t.Errorf("ConfigMaps left on the edge: %v", live)
		}
		for _, name := range []string{"alpha", "beta", "gamma"} {
			if _, err := f.kube.CoreV1().ConfigMaps(f.ns).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("ConfigMap %s: got %v, want not found", name, err)
			}
		}
		if recs := f.records(t, "clusters/cp/edge"); len(recs) != 0 {
			t.Errorf("records left: %v", recs)
		}
		var states []string
		for _, a := range f.state(t).Actions {
			states = append(states, string(a.State))
		}
		if got := strings.Join(states, ","); got != "Created,Approved,Instantiated,Terminating,Terminated" {
			t.Errorf("stateInfo: got %s", got)
		}
	})

	t.Run("a cluster without a config waits and is retried", func(t *testing.T) {
		f := newFixture(t, cl, "rsync-late")
		const late = "clusters/cp/late"
		f.engine(t, nil)
		f.instantiate(t, f.plan(t, []*unstructured.Unstructured{
			f.configMap("alpha", map[string]any{"k": "1"}),
			f.configMap("beta", map[string]any{"k": "2"}),
		}, late))
		f.waitFor(t, "the late cluster reported waiting, three times", func() bool { return len(f.sink.waits(late)) >= 3 })
		for _, w := range f.sink.waits(late)[:3] {
			if w.waiting != 2 || !strings.Contains(w.lastError, "has no client") || !strings.Contains(w.lastError, `cluster "late"`) {
				t.Errorf("waiting report: got %+v, want 2 waiting and an error saying cluster late has no client", w)
			}
		}
		if got := f.sink.names(Applied); len(got) != 0 {
			t.Errorf("applied without a client: %v", got)
		}

		f.configs.set(late, cl.RESTConfig()) // the cluster manager connects
		f.waitFor(t, "both applied once the config is there", func() bool { return len(f.live(t)) == 2 })
		f.waitFor(t, "nothing waiting", func() bool {
			w := f.sink.waits(late)
			return w[len(w)-1].waiting == 0 && w[len(w)-1].lastError == ""
		})
		if st := f.state(t); st.State != lifecycle.Instantiated {
			t.Errorf("state: got %s, want Instantiated", st.State)
		}
	})
}

func TestResourcesOn(t *testing.T) {
	res := func(name, phase string) plan.Resource {
		return plan.Resource{Ref: plan.Ref{APIVersion: "v1", Kind: "ConfigMap", Name: name}, Phase: phase}
	}
	p := &plan.Plan{Apps: []plan.AppPlan{
		{App: "web", DependsOn: []plan.Dependency{{App: "db", OpStatus: "Deployed"}}, Clusters: []plan.ClusterPlan{
			{Cluster: "clusters/cp/a", Resources: []plan.Resource{res("web-cm", "main"), res("web-crd", "crd"), res("web-svc", "main")}},
			{Cluster: "clusters/cp/b", Resources: []plan.Resource{res("web-b", "main")}},
		}},
		{App: "db", Clusters: []plan.ClusterPlan{
			{Cluster: "clusters/cp/a", Resources: []plan.Resource{res("db-sts", "main"), res("db-crd", "crd")}},
		}},
		{App: "cache", Clusters: []plan.ClusterPlan{
			{Cluster: "clusters/cp/a", Resources: []plan.Resource{res("cache", "main")}},
		}},
	}}
	tests := []struct {
		cluster string
		want    []string
	}{
		{"clusters/cp/a", []string{"cache/cache", "db/db-crd", "db/db-sts", "web/web-crd", "web/web-cm", "web/web-svc"}},
		{"clusters/cp/b", []string{"web/web-b"}},
		{"clusters/cp/none", nil},
	}
	for _, tc := range tests {
		t.Run(tc.cluster, func(t *testing.T) {
			var got []string
			for _, r := range resourcesOn(p, tc.cluster) {
				got = append(got, r.app+"/"+r.res.Ref.Name)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v (apps after their dependencies, each app's CRDs first)", got, tc.want)
			}
		})
	}
}

func TestRecordKey(t *testing.T) {
	a := plan.Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "a"}
	b := plan.Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns2", Name: "a"}
	p := "/atoll/applied/deployment-intent-groups/p/ca/v1/d/clusters/cp/c1/"
	ka, kb := recordKey(p, a), recordKey(p, b)
	if ka != recordKey(p, a) || ka == kb {
		t.Errorf("record keys: %s and %s, want stable and distinct per ref", ka, kb)
	}
	if rest := strings.TrimPrefix(ka, p); strings.Contains(rest, "/") || len(rest) != 24 {
		t.Errorf("record key %s: want one 24-character segment under the cluster prefix", ka)
	}
	// The engine finds the clusters of a DIG from its record keys.
	parts := strings.Split(strings.TrimPrefix(ka, "/atoll/applied/deployment-intent-groups/p/ca/v1/d/"), "/")
	if len(parts) != 4 || strings.Join(parts[:3], "/") != "clusters/cp/c1" {
		t.Errorf("record key %s does not split into the cluster path and one segment: %v", ka, parts)
	}
}
