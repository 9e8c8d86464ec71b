package status

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/atoll-edge/atoll/internal/api"
	"github.com/atoll-edge/atoll/internal/blob"
	"github.com/atoll-edge/atoll/internal/cluster"
	"github.com/atoll-edge/atoll/internal/etcdembed"
	"github.com/atoll-edge/atoll/internal/lifecycle"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/plan"
	"github.com/atoll-edge/atoll/internal/rsync"
	"github.com/atoll-edge/atoll/internal/store"
)

// The plan the tests deploy: app db on c1, app web on c1 and c2.
var (
	cmWeb  = plan.Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: "retail", Name: "web-config"}
	depWeb = plan.Ref{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "retail", Name: "web"}
	stsDB  = plan.Ref{APIVersion: "apps/v1", Kind: "StatefulSet", Namespace: "retail", Name: "db"}
	svcDB  = plan.Ref{APIVersion: "v1", Kind: "Service", Namespace: "retail", Name: "db-svc"}
)

const (
	c1 = "clusters/cp/c1"
	c2 = "clusters/cp/c2"
)

func clusterPlan(path string, refs ...plan.Ref) plan.ClusterPlan {
	parts := strings.Split(path, "/")
	cp := plan.ClusterPlan{Cluster: path, Provider: parts[1], Name: parts[2]}
	for i, r := range refs {
		cp.Resources = append(cp.Resources, plan.Resource{Ref: r, Hash: fmt.Sprintf("sha256:%064d", i), Phase: "main"})
	}
	return cp
}

// planner stores a hand-built plan for each revision.
type planner struct {
	plans *plan.Store
}

func (p planner) Plan(ctx context.Context, dig store.Key, revision int64) (string, error) {
	return p.plans.Put(ctx, &plan.Plan{DIG: dig.Path(), Project: dig.Names[0], CompositeApp: dig.Names[1], Version: dig.Names[2], Name: dig.Names[3],
		Profile: "standard", Namespace: "retail", Instance: plan.InstanceOf(dig.Path()), Revision: revision,
		Apps: []plan.AppPlan{
			{App: "db", Clusters: []plan.ClusterPlan{clusterPlan(c1, stsDB, svcDB)}},
			{App: "web", Clusters: []plan.ClusterPlan{clusterPlan(c1, cmWeb, depWeb), clusterPlan(c2, cmWeb, depWeb)}},
		}})
}

// connectivity knows c1 (reachable) and not c2 (never probed).
type connectivity struct{}

func (connectivity) Status(k store.Key) (cluster.Status, bool) {
	if k.Path() == c1 {
		return cluster.Status{State: cluster.Reachable, Reachable: true}, true
	}
	return cluster.Status{}, false
}

type fixture struct {
	st    *store.Store
	lc    *lifecycle.Machine
	plans *plan.Store
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return newFixtureWith(t, nil)
}

// newFixtureWith uses the planner that mk makes (nil: the fixed plan of c1 and c2).
func newFixtureWith(t *testing.T, mk func(*plan.Store) lifecycle.Planner) *fixture {
	t.Helper()
	srv, err := etcdembed.Start(context.Background(), etcdembed.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	f := &fixture{st: store.New(srv.Client(), model.Schema, "/atoll")}
	f.plans = plan.NewStore(blob.New(srv.Client(), blob.Options{Root: "/atoll"}))
	var pl lifecycle.Planner = planner{f.plans}
	if mk != nil {
		pl = mk(f.plans)
	}
	f.lc = lifecycle.New(srv.Client(), f.st, "/atoll", pl)
	f.create(t, store.K(model.Projects, "p"), &model.Project{Metadata: model.Metadata{Name: "p"}})
	f.create(t, store.K(model.CompositeApps, "p", "ca", "v1"), &model.CompositeApp{Metadata: model.Metadata{Name: "ca"}, Spec: model.CompositeAppSpec{Version: "v1"}})
	return f
}

func (f *fixture) create(t *testing.T, k store.Key, v any) {
	t.Helper()
	if _, err := f.st.Create(context.Background(), k, v); err != nil {
		t.Fatalf("create %s: %v", k, err)
	}
}

func (f *fixture) dig(t *testing.T, name string) store.Key {
	t.Helper()
	k := store.K(model.DIGs, "p", "ca", "v1", name)
	f.create(t, k, &model.DeploymentIntentGroup{Metadata: model.Metadata{Name: name}, Spec: model.DIGSpec{Profile: "standard"}})
	return k
}

func (f *fixture) instantiated(t *testing.T, name string) store.Key {
	t.Helper()
	k := f.dig(t, name)
	ctx := context.Background()
	if _, err := f.lc.Approve(ctx, k); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lc.Instantiate(ctx, k); err != nil {
		t.Fatal(err)
	}
	return k
}

func query(t *testing.T, a *Aggregate, dig store.Key, q api.StatusQuery) *Answer {
	t.Helper()
	out, err := a.Status(context.Background(), dig, q)
	if err != nil {
		t.Fatalf("Status(%+v): %v", q, err)
	}
	return out.(*Answer)
}

// row is one resource of an answer, flattened for comparison.
type row struct {
	app, cluster, kind, name string
	deployed, ready, message string
}

func (r row) String() string {
	return fmt.Sprintf("%s@%s %s/%s deployed=%q ready=%q message=%q", r.app, r.cluster, r.kind, r.name, r.deployed, r.ready, r.message)
}

func rows(ans *Answer) []row {
	var out []row
	for _, a := range ans.Apps {
		for _, c := range a.Clusters {
			for _, r := range c.Resources {
				out = append(out, row{a.Name, c.Cluster, r.GVK.Kind, r.Name, r.DeployedStatus, r.ReadyStatus, r.Message})
			}
		}
	}
	return out
}

func TestStatusBeforeAnyEvent(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := New(nil, "/atoll", f.lc, f.plans, connectivity{}, nil)

	created := f.dig(t, "created")
	approved := f.dig(t, "approved")
	if _, err := f.lc.Approve(ctx, approved); err != nil {
		t.Fatal(err)
	}
	dig := f.instantiated(t, "fresh")

	tests := []struct {
		name       string
		dig        store.Key
		q          api.StatusQuery
		wantState  lifecycle.State
		wantCounts map[string]int
		wantRollup string
		wantRows   int
	}{
		{"never approved", created, api.StatusQuery{Type: "deployed", Output: "all"}, lifecycle.Created, nil, "", 0},
		{"approved, no plan yet", approved, api.StatusQuery{Type: "deployed", Output: "all"}, lifecycle.Approved, nil, "", 0},
		{"planned: all pending", dig, api.StatusQuery{Type: "deployed", Output: "all"}, lifecycle.Instantiated, map[string]int{rsync.Pending: 6}, rsync.Pending, 6},
		{"planned: nothing present", dig, api.StatusQuery{Type: "ready", Output: "all"}, lifecycle.Instantiated, map[string]int{NotPresent: 6}, NotPresent, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ans := query(t, a, tc.dig, tc.q)
			counts, rollup := ans.DeployedCounts, ans.DeployedStatus
			if tc.q.Type == "ready" {
				counts, rollup = ans.ReadyCounts, ans.ReadyStatus
			}
			if ans.State != tc.wantState || !reflect.DeepEqual(counts, tc.wantCounts) || rollup != tc.wantRollup || len(rows(ans)) != tc.wantRows {
				t.Errorf("got state %s counts %v rollup %q with %d resources, want %s %v %q with %d",
					ans.State, counts, rollup, len(rows(ans)), tc.wantState, tc.wantCounts, tc.wantRollup, tc.wantRows)
			}
			if ans.Project != "p" || ans.CompositeApp != "ca" || ans.CompositeVersion != "v1" || ans.Name != tc.dig.Name() {
				t.Errorf("header: got %s/%s/%s/%s, want p/ca/v1/%s", ans.Project, ans.CompositeApp, ans.CompositeVersion, ans.Name, tc.dig.Name())
			}
		})
	}
}

func TestStatusAfterEvents(t *testing.T) {
	f := newFixture(t)
	a := New(nil, "/atoll", f.lc, f.plans, connectivity{}, nil)
	dig := f.instantiated(t, "launch")
	other := f.instantiated(t, "other")
	inst := plan.InstanceOf(dig.Path())
	d := dig.Path()

	// What the resource sync reports.
	a.Deployed(d, "web", c1, cmWeb, rsync.Applied, "")
	a.Deployed(d, "web", c1, depWeb, rsync.Applied, "")
	a.Deployed(d, "web", c2, cmWeb, rsync.Failed, "apply ConfigMap retail/web-config: denied by a webhook")
	a.Deployed(d, "db", c1, stsDB, rsync.Failed, "first try failed")
	a.Deployed(d, "db", c1, stsDB, rsync.Applied, "") // the later report wins
	a.Deployed(d, "db", c1, svcDB, rsync.Deleted, "")
	a.Deployed(other.Path(), "web", c2, depWeb, rsync.Applied, "") // another DIG: ignored
	a.ClusterWaiting(c2, 2, "some resources failed on clusters/cp/c2")
	a.ClusterWaiting(c1, 0, "")
	// What the readiness watches see.
	a.Observed(c1, cmWeb, inst, "Current", true, "")
	a.Observed(c1, depWeb, inst, "InProgress", true, "Deployment is not available: 0 of 3 replicas")
	a.Observed(c2, cmWeb, plan.InstanceOf(other.Path()), "Current", true, "") // another instance: ignored
	a.Observed(c1, stsDB, inst, "Current", true, "")
	a.Observed(c1, stsDB, inst, "", false, "") // gone again
	a.Observed(c1, svcDB, inst, "Current", true, "")

	deployedAll := []row{
		{"db", "c1", "StatefulSet", "db", rsync.Applied, "", ""},
		{"db", "c1", "Service", "db-svc", rsync.Deleted, "", ""},
		{"web", "c1", "ConfigMap", "web-config", rsync.Applied, "", ""},
		{"web", "c1", "Deployment", "web", rsync.Applied, "", ""},
		{"web", "c2", "ConfigMap", "web-config", rsync.Failed, "", "apply ConfigMap retail/web-config: denied by a webhook"},
		{"web", "c2", "Deployment", "web", rsync.Pending, "", ""},
	}
	readyAll := []row{
		{"db", "c1", "StatefulSet", "db", "", NotPresent, ""},
		{"db", "c1", "Service", "db-svc", "", Ready, ""},
		{"web", "c1", "ConfigMap", "web-config", "", Ready, ""},
		{"web", "c1", "Deployment", "web", "", NotReady, "Deployment is not available: 0 of 3 replicas"},
		{"web", "c2", "ConfigMap", "web-config", "", NotPresent, ""},
		{"web", "c2", "Deployment", "web", "", NotPresent, ""},
	}
	tests := []struct {
		name         string
		q            api.StatusQuery
		wantCounts   map[string]int
		wantRollup   string
		wantRows     []row
		wantClusters []string // provider/name connectivity waiting lastError
	}{
		{"deployed, all", api.StatusQuery{Type: "deployed", Output: "all"},
			map[string]int{rsync.Applied: 3, rsync.Failed: 1, rsync.Deleted: 1, rsync.Pending: 1}, rsync.Failed, deployedAll,
			[]string{"cp/c1 Reachable 0 ", "cp/c2 Pending 2 some resources failed on clusters/cp/c2"}},
		{"ready, all", api.StatusQuery{Type: "ready", Output: "all"},
			map[string]int{Ready: 2, NotReady: 1, NotPresent: 3}, NotReady, readyAll, nil},
		{"deployed, app filter", api.StatusQuery{Type: "deployed", Output: "all", Apps: []string{"db"}},
			map[string]int{rsync.Applied: 1, rsync.Deleted: 1}, rsync.Applied, deployedAll[:2], []string{"cp/c1 Reachable 0 "}},
		{"deployed, cluster filter by name", api.StatusQuery{Type: "deployed", Output: "all", Clusters: []string{"c2"}},
			map[string]int{rsync.Failed: 1, rsync.Pending: 1}, rsync.Failed, deployedAll[4:], []string{"cp/c2 Pending 2 some resources failed on clusters/cp/c2"}},
		{"deployed, cluster filter by provider+name", api.StatusQuery{Type: "deployed", Output: "all", Clusters: []string{"cp+c1"}},
			map[string]int{rsync.Applied: 3, rsync.Deleted: 1}, rsync.Applied, deployedAll[:4], nil},
		{"ready, resource filter", api.StatusQuery{Type: "ready", Output: "all", Resources: []string{"web"}},
			map[string]int{NotReady: 1, NotPresent: 1}, NotReady, []row{readyAll[3], readyAll[5]}, nil},
		{"ready, two filters", api.StatusQuery{Type: "ready", Output: "all", Apps: []string{"web"}, Clusters: []string{"c1"}, Resources: []string{"web-config", "db"}},
			map[string]int{Ready: 1}, Ready, []row{readyAll[2]}, nil},
		{"filter matching nothing", api.StatusQuery{Type: "deployed", Output: "all", Apps: []string{"nope"}},
			map[string]int{}, "", nil, nil},
		{"deployed, summary has no apps", api.StatusQuery{Type: "deployed", Output: "summary"},
			map[string]int{rsync.Applied: 3, rsync.Failed: 1, rsync.Deleted: 1, rsync.Pending: 1}, rsync.Failed, nil, nil},
		{"ready, detail has both statuses and messages", api.StatusQuery{Type: "ready", Output: "detail"},
			map[string]int{Ready: 2, NotReady: 1, NotPresent: 3}, NotReady, []row{
				{"db", "c1", "StatefulSet", "db", rsync.Applied, NotPresent, ""},
				{"db", "c1", "Service", "db-svc", rsync.Deleted, Ready, ""},
				{"web", "c1", "ConfigMap", "web-config", rsync.Applied, Ready, ""},
				{"web", "c1", "Deployment", "web", rsync.Applied, NotReady, "Deployment is not available: 0 of 3 replicas"},
				{"web", "c2", "ConfigMap", "web-config", rsync.Failed, NotPresent, "apply ConfigMap retail/web-config: denied by a webhook"},
				{"web", "c2", "Deployment", "web", rsync.Pending, NotPresent, ""},
			}, nil},
		{"deployed, detail", api.StatusQuery{Type: "deployed", Output: "detail", Apps: []string{"web"}, Clusters: []string{"c1"}},
			map[string]int{rsync.Applied: 2}, rsync.Applied, []row{
				{"web", "c1", "ConfigMap", "web-config", rsync.Applied, Ready, ""},
				{"web", "c1", "Deployment", "web", rsync.Applied, NotReady, ""},
			}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ans := query(t, a, dig, tc.q)
			counts, rollup, otherCounts := ans.DeployedCounts, ans.DeployedStatus, ans.ReadyCounts
			if tc.q.Type == "ready" {
				counts, rollup, otherCounts = ans.ReadyCounts, ans.ReadyStatus, ans.DeployedCounts
			}
			if !reflect.DeepEqual(counts, tc.wantCounts) || rollup != tc.wantRollup {
				t.Errorf("got counts %v rollup %q, want %v %q", counts, rollup, tc.wantCounts, tc.wantRollup)
			}
			if otherCounts != nil {
				t.Errorf("counts of the other status type: got %v, want none", otherCounts)
			}
			if got := rows(ans); !reflect.DeepEqual(got, tc.wantRows) {
				t.Errorf("resources:\n got %v\nwant %v", got, tc.wantRows)
			}
			if tc.q.Output == "summary" && ans.Apps != nil {
				t.Errorf("summary: got apps %+v, want none", ans.Apps)
			}
			if tc.wantClusters != nil {
				var got []string
				for _, c := range ans.Clusters {
					w := -1
					if c.Waiting != nil {
						w = *c.Waiting
					}
					got = append(got, fmt.Sprintf("%s/%s %s %d %s", c.ClusterProvider, c.Cluster, c.Connectivity, w, c.LastError))
				}
				if !reflect.DeepEqual(got, tc.wantClusters) {
					t.Errorf("clusters:\n got %q\nwant %q", got, tc.wantClusters)
				}
			}
			if ans.State != lifecycle.Instantiated || ans.Revision != 1 || ans.CompositeProfile != "standard" {
				t.Errorf("got state %s revision %d profile %q, want Instantiated 1 standard", ans.State, ans.Revision, ans.CompositeProfile)
			}
		})
	}

	t.Run("GVK", func(t *testing.T) {
		ans := query(t, a, dig, api.StatusQuery{Type: "ready", Output: "all", Apps: []string{"db"}})
		got := []GVK{ans.Apps[0].Clusters[0].Resources[0].GVK, ans.Apps[0].Clusters[0].Resources[1].GVK}
		want := []GVK{{Group: "apps", Version: "v1", Kind: "StatefulSet"}, {Group: "", Version: "v1", Kind: "Service"}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v, want %+v", got, want)
		}
	})
}

func TestObservedReadiness(t *testing.T) {
	f := newFixture(t)
	a := New(nil, "/atoll", f.lc, f.plans, connectivity{}, nil)
	dig := f.instantiated(t, "launch")
	inst := plan.InstanceOf(dig.Path())

	type obs struct {
		instance, kstatus string
		present           bool
		message           string
	}
	tests := []struct {
		name        string
		seen        []obs // in order, of ConfigMap web-config on c1
		wantReady   string
		wantMessage string
	}{
		{"not seen", nil, NotPresent, ""},
		{"Current is ready", []obs{{inst, "Current", true, ""}}, Ready, ""},
		{"InProgress is not ready", []obs{{inst, "InProgress", true, "waiting for rollout"}}, NotReady, "waiting for rollout"},
		{"Failed is not ready", []obs{{inst, "Failed", true, "crash loop"}}, NotReady, "crash loop"},
		{"Terminating is not ready", []obs{{inst, "Terminating", true, ""}}, NotReady, ""},
		{"Unknown is not ready", []obs{{inst, "Unknown", true, ""}}, NotReady, ""},
		{"gone after ready", []obs{{inst, "Current", true, ""}, {inst, "", false, ""}}, NotPresent, ""},
		{"back after gone", []obs{{inst, "", false, ""}, {inst, "Current", true, ""}}, Ready, ""},
		{"another instance's object is not ours", []obs{{"iother", "Current", true, ""}}, NotPresent, ""},
		{"ours replaced by another instance's", []obs{{inst, "Current", true, ""}, {"iother", "Current", true, ""}}, NotPresent, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a.Observed(c1, cmWeb, inst, "", false, "") // start from nothing
			for _, o := range tc.seen {
				a.Observed(c1, cmWeb, o.instance, o.kstatus, o.present, o.message)
			}
			ans := query(t, a, dig, api.StatusQuery{Type: "ready", Output: "all", Apps: []string{"web"}, Clusters: []string{"c1"}, Resources: []string{"web-config"}})
			got := rows(ans)
			if len(got) != 1 || got[0].ready != tc.wantReady || got[0].message != tc.wantMessage {
				t.Fatalf("got %v, want one resource %s with message %q", got, tc.wantReady, tc.wantMessage)
			}
			if want := map[string]int{tc.wantReady: 1}; !reflect.DeepEqual(ans.ReadyCounts, want) || ans.ReadyStatus != tc.wantReady {
				t.Errorf("got counts %v rollup %q, want %v %q", ans.ReadyCounts, ans.ReadyStatus, want, tc.wantReady)
			}
		})
	}
}

func TestRollup(t *testing.T) {
	deployedOrder := []string{rsync.Failed, rsync.Pending, rsync.Applied, rsync.Deleted}
	readyOrder := []string{NotReady, NotPresent, Ready}
	tests := []struct {
		name   string
		counts map[string]int
		order  []string
		want   string
	}{
		{"nothing", map[string]int{}, deployedOrder, ""},
		{"one failure is worst", map[string]int{rsync.Applied: 10, rsync.Failed: 1, rsync.Pending: 3}, deployedOrder, rsync.Failed},
		{"pending over applied", map[string]int{rsync.Applied: 10, rsync.Pending: 1}, deployedOrder, rsync.Pending},
		{"applied over deleted", map[string]int{rsync.Applied: 1, rsync.Deleted: 5}, deployedOrder, rsync.Applied},
		{"all deleted", map[string]int{rsync.Deleted: 5}, deployedOrder, rsync.Deleted},
		{"zero counts do not count", map[string]int{rsync.Failed: 0, rsync.Applied: 2}, deployedOrder, rsync.Applied},
		{"not ready is worst", map[string]int{Ready: 4, NotPresent: 1, NotReady: 1}, readyOrder, NotReady},
		{"not present over ready", map[string]int{Ready: 4, NotPresent: 1}, readyOrder, NotPresent},
		{"all ready", map[string]int{Ready: 4}, readyOrder, Ready},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := rollup(tc.counts, tc.order); got != tc.want {
				t.Errorf("rollup(%v): got %q, want %q", tc.counts, got, tc.want)
			}
		})
	}
}

// TestNewRevisionResets follows the DIG states with Run: a new plan makes every
// resource Pending again; terminating the old one does not.
func TestNewRevisionResets(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	a := New(nil, "/atoll", f.lc, f.plans, connectivity{}, nil)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	dig := f.instantiated(t, "launch")
	d := dig.Path()
	waitSeen(t, a, d, lifecycle.Instantiated, 1)

	deployedCounts := func() map[string]int {
		t.Helper()
		return query(t, a, dig, api.StatusQuery{Type: "deployed", Output: "summary"}).DeployedCounts
	}
	all := []struct {
		app, cluster string
		ref          plan.Ref
	}{{"db", c1, stsDB}, {"db", c1, svcDB}, {"web", c1, cmWeb}, {"web", c1, depWeb}, {"web", c2, cmWeb}, {"web", c2, depWeb}}
	for _, r := range all {
		a.Deployed(d, r.app, r.cluster, r.ref, rsync.Applied, "")
	}
	if got, want := deployedCounts(), map[string]int{rsync.Applied: 6}; !reflect.DeepEqual(got, want) {
		t.Fatalf("revision 1 applied: got %v, want %v", got, want)
	}

	steps := []struct {
		name     string
		do       func() error
		state    lifecycle.State
		revision int64
		report   string // reported for every resource after the step
		want     map[string]int
	}{
		{"terminate keeps what was deployed", func() error { _, err := f.lc.Terminate(ctx, dig); return err },
			lifecycle.Terminating, 1, "", map[string]int{rsync.Applied: 6}},
		{"the sync deletes", nil, lifecycle.Terminating, 1, rsync.Deleted, map[string]int{rsync.Deleted: 6}},
		{"terminated keeps the deletes", func() error { return f.lc.Terminated(ctx, dig) },
			lifecycle.Terminated, 1, "", map[string]int{rsync.Deleted: 6}},
		{"a new plan revision is pending", func() error { _, err := f.lc.Instantiate(ctx, dig); return err },
			lifecycle.Instantiated, 2, "", map[string]int{rsync.Pending: 6}},
		{"and applied again", nil, lifecycle.Instantiated, 2, rsync.Applied, map[string]int{rsync.Applied: 6}},
	}
	for _, s := range steps {
		if s.do != nil {
			if err := s.do(); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			waitSeen(t, a, d, s.state, s.revision)
		}
		if s.report != "" {
			for _, r := range all {
				a.Deployed(d, r.app, r.cluster, r.ref, s.report, "")
			}
		}
		ans := query(t, a, dig, api.StatusQuery{Type: "deployed", Output: "summary"})
		if !reflect.DeepEqual(ans.DeployedCounts, s.want) || ans.State != s.state || ans.Revision != s.revision {
			t.Errorf("%s: got %s revision %d counts %v, want %s revision %d counts %v", s.name, ans.State, ans.Revision, ans.DeployedCounts, s.state, s.revision, s.want)
		}
	}

	// A forgotten DIG (deleted) drops out of the aggregate.
	if _, err := f.lc.Terminate(ctx, dig); err != nil {
		t.Fatal(err)
	}
	if err := f.lc.Terminated(ctx, dig); err != nil {
		t.Fatal(err)
	}
	if err := f.lc.Forget(ctx, dig); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the forgotten DIG to drop out", func() bool {
		a.mu.RLock()
		defer a.mu.RUnlock()
		_, seen := a.digs[d]
		_, deployed := a.deployed[d]
		return !seen && !deployed
	})
}

func waitSeen(t *testing.T, a *Aggregate, dig string, state lifecycle.State, revision int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.mu.RLock()
		ds := a.digs[dig]
		var got lifecycle.Record
		hasPlan := false
		if ds != nil {
			got, hasPlan = ds.rec, ds.plan != nil
		}
		a.mu.RUnlock()
		if got.State == state && got.Revision == revision && hasPlan {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for the aggregate: got %q revision %d (plan loaded %v), want %s revision %d with its plan",
				got.State, got.Revision, hasPlan, state, revision)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
