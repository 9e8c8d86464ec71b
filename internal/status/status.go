// Package status keeps, in memory, the status of every deployment intent group:
// per app, cluster and resource, what the resource sync did (deployed: Pending,
// Applied, Failed, Deleted) and what the hub-side watches see on the cluster
// (ready: Ready, NotReady, NotPresent, judged with kstatus). The aggregate is
// updated as events arrive, so a status query never walks etcd.
package status

import (
	"context"
	"encoding/json"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/atoll-edge/atoll/internal/api"
	"github.com/atoll-edge/atoll/internal/cluster"
	"github.com/atoll-edge/atoll/internal/lifecycle"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/plan"
	"github.com/atoll-edge/atoll/internal/rsync"
	"github.com/atoll-edge/atoll/internal/store"
)

// Ready states.
const (
	Ready      = "Ready"
	NotReady   = "NotReady"
	NotPresent = "NotPresent"
)

// Connectivity reports whether clusters answer.
type Connectivity interface {
	Status(key store.Key) (cluster.Status, bool)
}

// Aggregate is the status of every DIG. Create it with New, feed it with
// Deployed, ClusterWaiting and Observed, and keep its DIG states current with Run.
type Aggregate struct {
	cli   *clientv3.Client
	root  string
	lc    *lifecycle.Machine
	plans *plan.Store
	conn  Connectivity
	log   *slog.Logger

	mu       sync.RWMutex
	digs     map[string]*digState                // by DIG path
	deployed map[string]map[string]deployedState // by DIG path, then cluster + "|" + ref ID
	ready    map[string]map[string]readyState    // by cluster path, then ref ID
	waiting  map[string]waitState                // by cluster path
}

type digState struct {
	rec  lifecycle.Record
	plan *plan.Plan
}

type deployedState struct {
	state, message string
	// hash is the content hash the resource was applied with, from the applied
	// records; a plan that wants another hash sees the resource as Pending.
	hash string
	at   time.Time
}

type readyState struct {
	state, message, instance string
}

type waitState struct {
	waiting   int
	lastError string
}

// New returns an empty aggregate. With cli set, Run also follows the resource
// sync's applied records under root (the hub's etcd prefix), so that every hub
// replica, and a hub just restarted, shows what any replica applied.
func New(cli *clientv3.Client, root string, lc *lifecycle.Machine, plans *plan.Store, conn Connectivity, log *slog.Logger) *Aggregate {
	if log == nil {
		log = slog.Default()
	}
	return &Aggregate{cli: cli, root: strings.TrimSuffix(root, "/"), lc: lc, plans: plans, conn: conn, log: log.With("component", "status"),
		digs: map[string]*digState{}, deployed: map[string]map[string]deployedState{},
		ready: map[string]map[string]readyState{}, waiting: map[string]waitState{}}
}

// Run follows the DIG states (and loads their plans), and the applied records,
// until ctx ends.
func (a *Aggregate) Run(ctx context.Context) error {
	if a.cli != nil {
		done := make(chan struct{})
		defer func() { <-done }()
		go func() {
			defer close(done)
			a.followApplied(ctx)
		}()
	}
	for ctx.Err() == nil {
		entries, rev, err := a.lc.List(ctx)
		if err == nil {
			for _, e := range entries {
				a.setState(ctx, e)
			}
			err = a.lc.Watch(ctx, rev, func(e lifecycle.Entry) { a.setState(ctx, e) })
		}
		if ctx.Err() != nil {
			break
		}
		a.log.Warn("DIG state watch ended; listing again", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

func (a *Aggregate) setState(ctx context.Context, e lifecycle.Entry) {
	if e.Deleted {
		a.mu.Lock()
		delete(a.digs, e.DIG)
		delete(a.deployed, e.DIG)
		a.mu.Unlock()
		return
	}
	var p *plan.Plan
	if e.Record.Plan != "" {
		var err error
		if p, err = a.plans.Get(ctx, e.Record.Plan); err != nil {
			a.log.Warn("cannot read a DIG's plan", "dig", e.DIG, "error", err.Error())
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	// A new plan needs no reset: a resource whose applied hash differs from the
	// plan's shows as Pending until the sync applies it.
	a.digs[e.DIG] = &digState{rec: e.Record, plan: p}
}

// followApplied lists and watches the resource sync's records: a record with a
// hash is an Applied resource, one without is being applied, a deleted one was
// deleted from its cluster.
func (a *Aggregate) followApplied(ctx context.Context) {
	prefix := a.root + "/applied/"
	for ctx.Err() == nil {
		resp, err := a.cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err == nil {
			for _, kv := range resp.Kvs {
				a.appliedEvent(prefix, kv.Key, kv.Value, false)
			}
			wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
			for w := range a.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1), clientv3.WithPrevKV()) {
				if w.Err() != nil {
					break
				}
				for _, ev := range w.Events {
					if ev.Type == clientv3.EventTypeDelete {
						var prev []byte
						if ev.PrevKv != nil {
							prev = ev.PrevKv.Value
						}
						a.appliedEvent(prefix, ev.Kv.Key, prev, true)
					} else {
						a.appliedEvent(prefix, ev.Kv.Key, ev.Kv.Value, false)
					}
				}
			}
			cancel()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (a *Aggregate) appliedEvent(prefix string, key, value []byte, deleted bool) {
	parts := strings.Split(strings.TrimPrefix(string(key), prefix), "/")
	if len(parts) != 9 || value == nil {
		return
	}
	dig, clusterPath := strings.Join(parts[:5], "/"), strings.Join(parts[5:8], "/")
	var rec struct {
		App  string   `json:"app"`
		Ref  plan.Ref `json:"ref"`
		Hash string   `json:"hash"`
	}
	if json.Unmarshal(value, &rec) != nil {
		return
	}
	state := rsync.Applied
	switch {
	case deleted:
		state = rsync.Deleted
	case rec.Hash == "":
		state = rsync.Pending
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.deployed[dig]
	if m == nil {
		m = map[string]deployedState{}
		a.deployed[dig] = m
	}
	k := clusterPath + "|" + rec.Ref.ID()
	if state == rsync.Pending && m[k].state == rsync.Failed {
		return // the failure the local sync reported says more
	}
	if state == rsync.Applied && m[k].state == rsync.Applied && m[k].hash == rec.Hash {
		return
	}
	m[k] = deployedState{state: state, hash: rec.Hash, at: time.Now().UTC()}
}

// Deployed records what the resource sync did (rsync.Sink).
func (a *Aggregate) Deployed(dig, app, clusterPath string, ref plan.Ref, state, message string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.deployed[dig]
	if m == nil {
		m = map[string]deployedState{}
		a.deployed[dig] = m
	}
	k := clusterPath + "|" + ref.ID()
	m[k] = deployedState{state: state, message: message, hash: m[k].hash, at: time.Now().UTC()}
}

// ClusterWaiting records how much work waits for a cluster (rsync.Sink).
func (a *Aggregate) ClusterWaiting(clusterPath string, waiting int, lastError string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waiting[clusterPath] = waitState{waiting: waiting, lastError: lastError}
}

// Observed records what a hub-side watch saw of a labelled object: its kstatus
// status ("Current" means ready), or present=false when it is gone.
func (a *Aggregate) Observed(clusterPath string, ref plan.Ref, instance, kstatus string, present bool, message string) {
	state := NotReady
	switch {
	case !present:
		state = NotPresent
	case kstatus == "Current":
		state = Ready
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	m := a.ready[clusterPath]
	if m == nil {
		m = map[string]readyState{}
		a.ready[clusterPath] = m
	}
	if !present {
		delete(m, ref.ID())
		return
	}
	m[ref.ID()] = readyState{state: state, message: message, instance: instance}
}

var (
	_ rsync.Sink      = (*Aggregate)(nil)
	_ rsync.Readiness = (*Aggregate)(nil)
)

// AppReady says whether every resource app's plan puts on the cluster is Ready
// there (rsync.Readiness, for dependencies).
func (a *Aggregate) AppReady(dig, clusterPath, app string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	ds := a.digs[dig]
	if ds == nil || ds.plan == nil {
		return false
	}
	for _, ap := range ds.plan.Apps {
		if ap.App != app {
			continue
		}
		for _, c := range ap.Clusters {
			if c.Cluster != clusterPath {
				continue
			}
			for _, r := range c.Resources {
				if strings.HasPrefix(r.Phase, "hook:") {
					continue // hooks run to completion and may be deleted after
				}
				rs, ok := a.ready[clusterPath][r.Ref.ID()]
				if !ok || rs.state != Ready || rs.instance != ds.plan.Instance {
					return false
				}
			}
		}
	}
	return true
}

// GVK is a resource's group, version and kind, as EMCO's status shows it.
type GVK struct {
	Group   string `json:"Group"`
	Version string `json:"Version"`
	Kind    string `json:"Kind"`
}

// ResourceStatus is one resource on one cluster.
type ResourceStatus struct {
	GVK            GVK    `json:"GVK"`
	Name           string `json:"name"`
	Namespace      string `json:"namespace,omitempty"`
	DeployedStatus string `json:"deployedStatus,omitempty"`
	ReadyStatus    string `json:"readyStatus,omitempty"`
	Message        string `json:"message,omitempty"`
}

// ClusterStatus is one app on one cluster, or one cluster's connectivity.
type ClusterStatus struct {
	ClusterProvider string           `json:"clusterProvider"`
	Cluster         string           `json:"cluster"`
	Connectivity    string           `json:"connectivity"`
	Waiting         *int             `json:"waiting,omitempty"`
	LastError       string           `json:"lastError,omitempty"`
	Resources       []ResourceStatus `json:"resources,omitempty"`
}

// AppStatus is one app's clusters.
type AppStatus struct {
	Name     string          `json:"name"`
	Clusters []ClusterStatus `json:"clusters"`
}

// Answer is the body of GET .../status (EMCO's shape).
type Answer struct {
	Project          string          `json:"project"`
	CompositeApp     string          `json:"compositeApp"`
	CompositeVersion string          `json:"compositeAppVersion"`
	CompositeProfile string          `json:"compositeProfile,omitempty"`
	Name             string          `json:"name"`
	State            lifecycle.State `json:"status"`
	Revision         int64           `json:"revision"`
	Revisions        []int64         `json:"revisions,omitempty"`
	StateInfo        map[string]any  `json:"states"`
	DeployedStatus   string          `json:"deployedStatus,omitempty"`
	ReadyStatus      string          `json:"readyStatus,omitempty"`
	DeployedCounts   map[string]int  `json:"deployedCounts,omitempty"`
	ReadyCounts      map[string]int  `json:"readyCounts,omitempty"`
	Clusters         []ClusterStatus `json:"clusters"`
	Apps             []AppStatus     `json:"apps,omitempty"`
}

// Status answers the status query of the DIG at dig (api.DIGStatus).
func (a *Aggregate) Status(ctx context.Context, dig store.Key, q api.StatusQuery) (any, error) {
	a.mu.RLock()
	ds := a.digs[dig.Path()]
	a.mu.RUnlock()
	rec := lifecycle.Record{State: lifecycle.Created}
	var p *plan.Plan
	if ds != nil {
		rec, p = ds.rec, ds.plan
	} else {
		// Not seen by the watch yet (or never approved): read it once.
		r, _, err := a.lc.Get(ctx, dig)
		if err != nil {
			return nil, err
		}
		rec = r
		if r.Plan != "" {
			if p, err = a.plans.Get(ctx, r.Plan); err != nil {
				return nil, err
			}
		}
	}
	names := dig.Names
	ans := &Answer{Project: names[0], CompositeApp: names[1], CompositeVersion: names[2], Name: names[3],
		State: rec.State, Revision: rec.Revision, StateInfo: map[string]any{"actions": rec.Actions}, Clusters: []ClusterStatus{}}
	for _, h := range rec.History {
		ans.Revisions = append(ans.Revisions, h.Revision)
	}
	if p == nil {
		return ans, nil
	}
	ans.CompositeProfile = p.Profile
	want := func(list []string, v string) bool {
		if len(list) == 0 {
			return true
		}
		for _, x := range list {
			if x == v {
				return true
			}
		}
		return false
	}

	var planAt time.Time // when the current plan was recorded
	if n := len(rec.History); n > 0 {
		planAt = rec.History[n-1].Time
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	deployed := a.deployed[dig.Path()]
	counts := map[string]int{}
	seenCluster := map[string]bool{}
	for _, app := range p.Apps {
		if !want(q.Apps, app.App) {
			continue
		}
		as := AppStatus{Name: app.App}
		for _, c := range app.Clusters {
			if !want(q.Clusters, c.Provider+"+"+c.Name) && !want(q.Clusters, c.Name) {
				continue
			}
			cs := ClusterStatus{ClusterProvider: c.Provider, Cluster: c.Name, Connectivity: a.connectivity(c)}
			if !seenCluster[c.Cluster] {
				seenCluster[c.Cluster] = true
				w := a.waiting[c.Cluster]
				n := w.waiting
				ans.Clusters = append(ans.Clusters, ClusterStatus{ClusterProvider: c.Provider, Cluster: c.Name,
					Connectivity: cs.Connectivity, Waiting: &n, LastError: w.lastError})
			}
			for _, r := range c.Resources {
				if !want(q.Resources, r.Ref.Name) {
					continue
				}
				d := deployed[c.Cluster+"|"+r.Ref.ID()]
				dstate := d.state
				switch {
				case dstate == "",
					dstate == rsync.Applied && d.hash != "" && d.hash != r.Hash,                           // applied as an older revision had it
					dstate == rsync.Deleted && rec.State == lifecycle.Instantiated && d.at.Before(planAt): // by an earlier terminate
					dstate = rsync.Pending
				}
				rstate := NotPresent
				rmsg := ""
				if rs, ok := a.ready[c.Cluster][r.Ref.ID()]; ok && rs.instance == p.Instance {
					rstate, rmsg = rs.state, rs.message
				}
				res := ResourceStatus{GVK: gvkOf(r.Ref), Name: r.Ref.Name, Namespace: r.Ref.Namespace}
				if q.Type == "deployed" {
					counts[dstate]++
					res.DeployedStatus = dstate
					res.Message = d.message
				} else {
					counts[rstate]++
					res.ReadyStatus = rstate
					res.Message = rmsg
				}
				if q.Output == "detail" {
					res.DeployedStatus, res.ReadyStatus = dstate, rstate
					if d.message != "" {
						res.Message = d.message
					}
				}
				cs.Resources = append(cs.Resources, res)
			}
			as.Clusters = append(as.Clusters, cs)
		}
		if q.Output != "summary" && (len(as.Clusters) > 0 || len(q.Clusters) == 0) {
			if as.Clusters == nil {
				as.Clusters = []ClusterStatus{}
			}
			ans.Apps = append(ans.Apps, as)
		}
	}
	if q.Type == "deployed" {
		ans.DeployedCounts = counts
		ans.DeployedStatus = rollup(counts, []string{rsync.Failed, rsync.Pending, rsync.Applied, rsync.Deleted})
	} else {
		ans.ReadyCounts = counts
		ans.ReadyStatus = rollup(counts, []string{NotReady, NotPresent, Ready})
	}
	sort.Slice(ans.Clusters, func(i, j int) bool {
		return ans.Clusters[i].ClusterProvider+"/"+ans.Clusters[i].Cluster < ans.Clusters[j].ClusterProvider+"/"+ans.Clusters[j].Cluster
	})
	return ans, nil
}

// rollup is the first state of order that has a count: the worst one.
func rollup(counts map[string]int, order []string) string {
	for _, s := range order {
		if counts[s] > 0 {
			return s
		}
	}
	return ""
}

func (a *Aggregate) connectivity(c plan.ClusterPlan) string {
	if a.conn == nil {
		return ""
	}
	st, ok := a.conn.Status(store.K(model.Clusters, c.Provider, c.Name))
	if !ok {
		return string(cluster.Pending)
	}
	return string(st.State)
}

func gvkOf(r plan.Ref) GVK {
	g, v := "", r.APIVersion
	if i := strings.LastIndex(r.APIVersion, "/"); i >= 0 {
		g, v = r.APIVersion[:i], r.APIVersion[i+1:]
	}
	return GVK{Group: g, Version: v, Kind: r.Kind}
}
