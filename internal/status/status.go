// Package status keeps, in memory, the status of every deployment intent group:
// per app, cluster and resource, what the resource sync did (deployed: Pending,
// Applied, Failed, Deleted) and what the hub-side watches see on the cluster
// (ready: Ready, NotReady, NotPresent, judged with kstatus). The aggregate is
// updated as events arrive, so a status query never walks etcd.
package status

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

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
	at             time.Time
}

type readyState struct {
	state, message, instance string
}

type waitState struct {
	waiting   int
	lastError string
}

// New returns an empty aggregate.
func New(lc *lifecycle.Machine, plans *plan.Store, conn Connectivity, log *slog.Logger) *Aggregate {
	if log == nil {
		log = slog.Default()
	}
	return &Aggregate{lc: lc, plans: plans, conn: conn, log: log.With("component", "status"),
		digs: map[string]*digState{}, deployed: map[string]map[string]deployedState{},
		ready: map[string]map[string]readyState{}, waiting: map[string]waitState{}}
}

// Run follows the DIG states (and loads their plans) until ctx ends.
func (a *Aggregate) Run(ctx context.Context) error {
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
	old := a.digs[e.DIG]
	if old != nil && old.rec.Plan != e.Record.Plan && e.Record.State == lifecycle.Instantiated {
		// A new plan: its resources are Pending until the sync says otherwise.
		delete(a.deployed, e.DIG)
	}
	a.digs[e.DIG] = &digState{rec: e.Record, plan: p}
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
	m[clusterPath+"|"+ref.ID()] = deployedState{state: state, message: message, at: time.Now().UTC()}
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

var _ rsync.Sink = (*Aggregate)(nil)

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
				if dstate == "" {
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
		if q.Output != "summary" {
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
