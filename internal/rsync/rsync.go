// Package rsync is the resource sync: per-cluster workers that make each edge
// cluster hold what the plans of its deployment intent groups say, and nothing the
// plans no longer say.
//
// Work is keyed by cluster in a client-go workqueue with per-cluster exponential
// backoff, so one dead cluster never slows the others. What has been applied is
// recorded in etcd per DIG, cluster and resource, with the content hash it was
// applied with; a worker that starts again (after a hub restart, or when a cluster
// comes back) compares the plan with these records and applies only what is
// missing or changed. A record is written before its apply, so that a terminate
// never declares a DIG gone while an apply is in flight.
package rsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/atoll-edge/atoll/internal/apply"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/lifecycle"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/plan"
	"github.com/atoll-edge/atoll/internal/store"
)

// Deployed states of a resource on a cluster, as the status API shows them.
const (
	Pending = "Pending"
	Applied = "Applied"
	Failed  = "Failed"
	Deleted = "Deleted"
)

// ClusterConfigs gives the client config of a registered cluster.
type ClusterConfigs interface {
	Config(key store.Key) (*rest.Config, bool)
}

// Readiness says whether an app's resources on a cluster are all ready, for
// dependencies with opStatus Ready.
type Readiness interface {
	AppReady(dig, cluster, app string) bool
}

// Sink receives what the workers do, for the status aggregate.
type Sink interface {
	Deployed(dig, app, cluster string, ref plan.Ref, state, message string)
	// ClusterWaiting reports how many resources wait for a cluster.
	ClusterWaiting(cluster string, waiting int, lastError string)
}

// Options configure the engine. Client, Lifecycle, Plans and Clusters must be set.
type Options struct {
	Client    *clientv3.Client
	Root      string // the hub's etcd prefix
	Lifecycle *lifecycle.Machine
	Plans     *plan.Store
	Clusters  ClusterConfigs
	Sink      Sink
	Ready     Readiness
	Logger    *slog.Logger
	// Workers is the number of clusters synced at once (default 8).
	Workers int
	// BackoffBase and BackoffCap bound the per-cluster retry backoff (1s, 60s).
	BackoffBase, BackoffCap time.Duration
	// Resync is how often every cluster with work is looked at again (default 30s).
	Resync time.Duration
	// Metrics registers the engine's counters; nil keeps them unregistered.
	Metrics prometheus.Registerer
	// Replica names this hub process among the replicas sharing one etcd; each
	// cluster is synced by the one replica that holds its owner key, kept alive
	// by that replica's lease (LeaseTTL, default 10s). When a replica dies, its
	// lease expires and the others take its clusters.
	Replica  string
	LeaseTTL time.Duration
}

// Engine runs the workers.
type Engine struct {
	opts  Options
	log   *slog.Logger
	queue workqueue.TypedRateLimitingInterface[string]

	mu       sync.Mutex
	digs     map[string]lifecycle.Record // by DIG path
	appliers map[string]*clusterClient   // by cluster path

	metAt map[string]time.Time // when a dependency was first seen met, by dig|cluster|app|dep

	sessMu  sync.Mutex
	session *concurrency.Session

	applies *prometheus.CounterVec // by result: created, configured, unchanged, failed
	deletes *prometheus.CounterVec // by result: deleted, failed
}

type clusterClient struct {
	host    string
	applier *apply.Applier
}

// record is what etcd keeps of one applied resource.
type record struct {
	App   string   `json:"app"`
	Ref   plan.Ref `json:"ref"`
	Hash  string   `json:"hash"`           // empty while the apply is in flight
	Want  string   `json:"want,omitempty"` // the hash being applied, while in flight
	Order int      `json:"order"`
	Phase string   `json:"phase,omitempty"`
	// Done marks a Helm hook that completed (it may have been deleted since, by
	// its delete policy).
	Done bool `json:"done,omitempty"`
}

// New checks opts.
func New(opts Options) (*Engine, error) {
	if opts.Client == nil || opts.Lifecycle == nil || opts.Plans == nil || opts.Clusters == nil {
		return nil, errors.New("rsync: Client, Lifecycle, Plans and Clusters must be set")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Workers <= 0 {
		opts.Workers = 8
	}
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = time.Second
	}
	if opts.BackoffCap <= 0 {
		opts.BackoffCap = time.Minute
	}
	if opts.Resync <= 0 {
		opts.Resync = 30 * time.Second
	}
	if opts.LeaseTTL <= 0 {
		opts.LeaseTTL = 10 * time.Second
	}
	if opts.Replica == "" {
		host, _ := os.Hostname()
		opts.Replica = fmt.Sprintf("%s-%d-%d", host, os.Getpid(), time.Now().UnixNano())
	}
	opts.Root = strings.TrimSuffix(opts.Root, "/")
	limiter := jitter{workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.BackoffBase, opts.BackoffCap), 0.2}
	e := &Engine{
		opts:     opts,
		log:      opts.Logger.With("component", "rsync"),
		queue:    workqueue.NewTypedRateLimitingQueueWithConfig[string](limiter, workqueue.TypedRateLimitingQueueConfig[string]{Name: "rsync"}),
		digs:     map[string]lifecycle.Record{},
		appliers: map[string]*clusterClient{},
		metAt:    map[string]time.Time{},
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atoll_rsync_applies_total",
			Help: "Server-side applies to edge clusters, by result; unchanged ones were redundant, resumed ones were found applied after a crash and not sent again.",
		}, []string{"result"}),
		deletes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "atoll_rsync_deletes_total", Help: "Deletes sent to edge clusters, by result.",
		}, []string{"result"}),
	}
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{e.applies, e.deletes} {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("rsync: register metrics: %w", err)
			}
		}
	}
	return e, nil
}

// jitter spreads the retries of many clusters that failed at once: each wait of
// the inner limiter is moved by up to ±factor of itself.
type jitter struct {
	workqueue.TypedRateLimiter[string]
	factor float64
}

// When returns the inner wait with jitter.
func (j jitter) When(item string) time.Duration {
	d := j.TypedRateLimiter.When(item)
	return time.Duration(float64(d) * (1 + j.factor*(2*rand.Float64()-1)))
}

// Run follows the DIG states and syncs clusters until ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for i := 0; i < e.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for e.next(ctx) {
			}
		}()
	}
	go e.followOwners(ctx)
	go func() {
		t := time.NewTicker(e.opts.Resync)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				e.enqueueAll(ctx)
			}
		}
	}()
	for ctx.Err() == nil {
		entries, rev, err := e.opts.Lifecycle.List(ctx)
		if err == nil {
			e.mu.Lock()
			e.digs = map[string]lifecycle.Record{}
			for _, en := range entries {
				e.digs[en.DIG] = en.Record
			}
			e.mu.Unlock()
			e.enqueueAll(ctx)
			err = e.opts.Lifecycle.Watch(ctx, rev, func(en lifecycle.Entry) {
				e.mu.Lock()
				if en.Deleted {
					delete(e.digs, en.DIG)
				} else {
					e.digs[en.DIG] = en.Record
				}
				e.mu.Unlock()
				e.enqueueDIG(ctx, en.DIG, en.Record)
			})
		}
		if ctx.Err() != nil {
			break
		}
		e.log.Warn("DIG state watch ended; listing again", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	e.queue.ShutDown()
	wg.Wait()
	e.sessMu.Lock()
	if e.session != nil {
		// Give the clusters up at once, rather than when the lease expires.
		_ = e.session.Close()
	}
	e.sessMu.Unlock()
	return nil
}

func (e *Engine) enqueueDIG(ctx context.Context, dig string, rec lifecycle.Record) {
	clusters, err := e.clustersOf(ctx, dig, rec)
	if err != nil {
		e.log.Warn("cannot read the plan of a DIG", "dig", dig, "error", err.Error())
		return
	}
	for _, c := range clusters {
		e.queue.Add(c)
	}
}

// clustersOf lists the clusters a DIG's plan names and those it has records on.
func (e *Engine) clustersOf(ctx context.Context, dig string, rec lifecycle.Record) ([]string, error) {
	set := map[string]bool{}
	if rec.Plan != "" {
		p, err := e.opts.Plans.Get(ctx, rec.Plan)
		if err != nil {
			return nil, err
		}
		for _, c := range p.Clusters() {
			set[c] = true
		}
	}
	resp, err := e.opts.Client.Get(ctx, e.appliedPrefix(dig), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), e.appliedPrefix(dig))
		parts := strings.Split(rest, "/")
		if len(parts) == 4 {
			set[strings.Join(parts[:3], "/")] = true
		}
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out, nil
}

func (e *Engine) enqueueAll(ctx context.Context) {
	e.mu.Lock()
	digs := make(map[string]lifecycle.Record, len(e.digs))
	for k, v := range e.digs {
		digs[k] = v
	}
	e.mu.Unlock()
	for dig, rec := range digs {
		e.enqueueDIG(ctx, dig, rec)
	}
}

func (e *Engine) next(ctx context.Context) bool {
	cluster, shutdown := e.queue.Get()
	if shutdown {
		return false
	}
	defer e.queue.Done(cluster)
	owned, err := e.own(ctx, cluster)
	if err != nil || !owned {
		if err != nil && ctx.Err() == nil {
			e.log.Warn("cannot claim a cluster", "cluster", cluster, "error", err.Error())
		}
		// Another replica syncs it; look again in case that replica dies.
		e.queue.Forget(cluster)
		e.queue.AddAfter(cluster, e.opts.LeaseTTL)
		return true
	}
	if err := e.syncCluster(ctx, cluster); err != nil {
		if ctx.Err() == nil {
			e.log.Info("cluster sync will be retried", "cluster", cluster, "error", err.Error(), "retries", e.queue.NumRequeues(cluster))
		}
		e.queue.AddRateLimited(cluster)
		return true
	}
	e.queue.Forget(cluster)
	return true
}

// followOwners watches the owner keys until ctx ends: when one is deleted (the
// lease of its replica expired, or the replica gave its clusters up), the
// cluster is looked at at once, so that another replica takes it over within
// the lease TTL rather than up to a TTL later, at its next look (see next).
func (e *Engine) followOwners(ctx context.Context) {
	prefix := e.opts.Root + "/owners/"
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range e.opts.Client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithFilterPut()) {
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					e.queue.Add(strings.TrimPrefix(string(ev.Kv.Key), prefix))
				}
			}
		}
		cancel()
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// ClusterBack tells the engine that a cluster answers again: its backoff is
// reset and its work resumes now.
func (e *Engine) ClusterBack(key store.Key) {
	e.queue.Forget(key.Path())
	e.queue.Add(key.Path())
}

// own says whether this replica syncs cluster, claiming it when nobody does. The
// claim is an etcd key bound to this replica's lease.
func (e *Engine) own(ctx context.Context, cluster string) (bool, error) {
	sess, err := e.currentSession(ctx)
	if err != nil {
		return false, err
	}
	key := e.opts.Root + "/owners/" + cluster
	resp, err := e.opts.Client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, e.opts.Replica, clientv3.WithLease(sess.Lease()))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return false, err
	}
	if resp.Succeeded {
		e.log.Info("cluster claimed", "cluster", cluster, "replica", e.opts.Replica)
		return true, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	return len(kvs) == 1 && string(kvs[0].Value) == e.opts.Replica && kvs[0].Lease == int64(sess.Lease()), nil
}

// currentSession returns this replica's lease session, making a new one when the
// old one expired (its claims went with it).
func (e *Engine) currentSession(ctx context.Context) (*concurrency.Session, error) {
	e.sessMu.Lock()
	defer e.sessMu.Unlock()
	if e.session != nil {
		select {
		case <-e.session.Done():
			e.session = nil
		default:
			return e.session, nil
		}
	}
	sess, err := concurrency.NewSession(e.opts.Client, concurrency.WithTTL(int(e.opts.LeaseTTL.Seconds())), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		return nil, fmt.Errorf("open a lease session: %w", err)
	}
	e.session = sess
	return sess, nil
}

func (e *Engine) appliedPrefix(dig string) string { return e.opts.Root + "/applied/" + dig + "/" }

func (e *Engine) clusterPrefix(dig, cluster string) string {
	return e.appliedPrefix(dig) + cluster + "/"
}

func recordKey(prefix string, ref plan.Ref) string {
	sum := sha256.Sum256([]byte(ref.ID()))
	return prefix + hex.EncodeToString(sum[:])[:24]
}

func (e *Engine) applierFor(cluster string) (*apply.Applier, error) {
	parts := strings.Split(cluster, "/")
	if len(parts) != 3 || parts[0] != model.Clusters.Name {
		return nil, fmt.Errorf("rsync: %q is not a cluster key", cluster)
	}
	key := store.K(model.Clusters, parts[1], parts[2])
	cfg, ok := e.opts.Clusters.Config(key)
	if !ok {
		return nil, fmt.Errorf("%s has no client: it is not registered, or its kubeconfig cannot be used", key)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.appliers[cluster]; c != nil && c.host == cfg.Host {
		return c.applier, nil
	}
	a, err := apply.New(cfg, apply.Options{})
	if err != nil {
		return nil, err
	}
	e.appliers[cluster] = &clusterClient{host: cfg.Host, applier: a}
	return a, nil
}

// syncCluster brings one cluster in line with every DIG.
func (e *Engine) syncCluster(ctx context.Context, cluster string) error {
	e.mu.Lock()
	digs := make([]string, 0, len(e.digs))
	recs := make(map[string]lifecycle.Record, len(e.digs))
	for d, r := range e.digs {
		digs = append(digs, d)
		recs[d] = r
	}
	e.mu.Unlock()
	sort.Strings(digs)
	var firstErr error
	waiting := 0
	for _, dig := range digs {
		n, err := e.syncDIG(ctx, dig, recs[dig], cluster)
		waiting += n
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if err != nil && apply.IsUnreachable(err) {
			break
		}
	}
	if e.opts.Sink != nil {
		msg := ""
		if firstErr != nil {
			msg = firstErr.Error()
		}
		e.opts.Sink.ClusterWaiting(cluster, waiting, msg)
	}
	return firstErr
}

// syncDIG applies or deletes one DIG's resources on one cluster. It returns how
// many resources are still waiting there.
func (e *Engine) syncDIG(ctx context.Context, dig string, rec lifecycle.Record, cluster string) (int, error) {
	if rec.State == lifecycle.Stopped {
		return 0, nil
	}
	applied, err := e.records(ctx, dig, cluster)
	if err != nil {
		return 0, err
	}
	var planned []plannedResource
	if (rec.State == lifecycle.Instantiated || rec.State == lifecycle.Terminating) && rec.Plan != "" {
		p, err := e.opts.Plans.Get(ctx, rec.Plan)
		if err != nil {
			return 0, err
		}
		planned = resourcesOn(p, cluster)
	}
	// What an install applies, and the delete hooks kept for a terminate.
	var desired, deleteHooks []plannedResource
	for _, d := range planned {
		switch {
		case isDeleteHook(d.res.Phase):
			deleteHooks = append(deleteHooks, d)
		case rec.State == lifecycle.Instantiated:
			desired = append(desired, d)
		}
	}
	if len(desired) == 0 && len(applied) == 0 {
		if rec.State == lifecycle.Terminating {
			return 0, e.maybeTerminated(ctx, dig)
		}
		return 0, nil
	}
	a, err := e.applierFor(cluster)
	if err != nil {
		return len(desired) + len(applied), err
	}
	prefix := e.clusterPrefix(dig, cluster)
	byID := map[string]record{}
	for _, r := range applied {
		byID[r.Ref.ID()] = r
	}

	// Delete what is applied but no longer planned, newest first; on a
	// terminate the pre-delete hooks run before and the post-delete hooks after.
	keep := map[string]bool{}
	for _, d := range desired {
		keep[d.res.Ref.ID()] = true
	}
	var stale, hookRecords []record
	for _, r := range applied {
		switch {
		case isDeleteHook(r.Phase):
			hookRecords = append(hookRecords, r)
		case !keep[r.Ref.ID()]:
			stale = append(stale, r)
		}
	}
	sort.Slice(stale, func(i, j int) bool { return stale[i].Order > stale[j].Order })
	waiting := len(stale)
	terminating := rec.State == lifecycle.Terminating
	if terminating && len(stale) > 0 {
		done, err := e.runHooks(ctx, a, prefix, dig, cluster, byID, deleteHooks, "hook:pre-delete")
		if err != nil || !done {
			return waiting, err
		}
	}
	var failed error
	for _, r := range stale {
		if err := e.deleteOne(ctx, a, prefix, r); err != nil {
			if apply.IsUnreachable(err) {
				return waiting, err
			}
			e.report(dig, r.App, cluster, r.Ref, Failed, err.Error())
			failed = err
			continue
		}
		waiting--
		e.report(dig, r.App, cluster, r.Ref, Deleted, "")
	}
	if terminating && failed == nil && waiting == 0 {
		done, err := e.runHooks(ctx, a, prefix, dig, cluster, byID, deleteHooks, "hook:post-delete")
		if err != nil || !done {
			return len(deleteHooks), err
		}
		// The delete hooks are done: remove them too, so nothing is left behind.
		records, err := e.records(ctx, dig, cluster)
		if err != nil {
			return 0, err
		}
		for _, r := range append(hookRecords, records...) {
			if err := e.deleteOne(ctx, a, prefix, r); err != nil {
				return 1, err
			}
		}
		if err := e.maybeTerminated(ctx, dig); err != nil {
			return 0, err
		}
	}

	// Apply what is planned and not applied with the same hash, app by app in
	// dependency order, each app's resources in plan order; an install hook
	// holds back what follows it until it is complete.
	waiting += len(desired)
	deployed := map[string]bool{} // apps whose resources are all applied here
	order := 0
	for _, app := range appsOn(desired) {
		if ok, retry := e.depsMet(dig, cluster, app, deployed); !ok {
			deployed[app.name] = false
			e.queue.AddAfter(cluster, retry)
			order += len(app.res)
			continue
		}
		complete := true
		for _, d := range app.res {
			i := order
			order++
			if isHook(d.res.Phase) {
				done, err := e.runHook(ctx, a, prefix, dig, cluster, byID, d, i)
				if err != nil {
					if apply.IsUnreachable(err) {
						return waiting, err
					}
					e.report(dig, d.app, cluster, d.res.Ref, Failed, err.Error())
					failed = err
				}
				if err != nil || !done {
					complete = false
					e.queue.AddAfter(cluster, time.Second)
					break
				}
				waiting--
				continue
			}
			if r, ok := byID[d.res.Ref.ID()]; ok && (r.Hash == d.res.Hash || e.landed(ctx, a, prefix, r, d)) {
				waiting--
				e.report(dig, d.app, cluster, d.res.Ref, Applied, "")
				continue
			}
			if err := e.applyOne(ctx, a, prefix, d, i); err != nil {
				if apply.IsUnreachable(err) {
					return waiting, err
				}
				e.report(dig, d.app, cluster, d.res.Ref, Failed, err.Error())
				failed = err
				complete = false
				continue
			}
			waiting--
			e.report(dig, d.app, cluster, d.res.Ref, Applied, "")
		}
		deployed[app.name] = complete
	}
	if failed != nil {
		return waiting, fmt.Errorf("some resources of %s failed on %s: %w", dig, cluster, failed)
	}
	return waiting, nil
}

func isHook(phase string) bool { return strings.HasPrefix(phase, "hook:") }

func isDeleteHook(phase string) bool {
	return phase == "hook:pre-delete" || phase == "hook:post-delete"
}

// applyOne applies one planned resource, with its record written before (no
// hash: in flight) and after (its hash).
func (e *Engine) applyOne(ctx context.Context, a *apply.Applier, prefix string, d plannedResource, order int) error {
	obj, err := e.opts.Plans.Object(ctx, d.res)
	if err != nil {
		return err
	}
	r := record{App: d.app, Ref: d.res.Ref, Order: order, Phase: d.res.Phase, Want: d.res.Hash}
	if err := e.putRecord(ctx, prefix, r); err != nil {
		return err
	}
	annotations := obj.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationHash] = d.res.Hash
	obj.SetAnnotations(annotations)
	res, err := a.Apply(ctx, obj)
	if err != nil {
		e.applies.WithLabelValues("failed").Inc()
		return err
	}
	e.applies.WithLabelValues(string(res.Operation)).Inc()
	r.Hash = d.res.Hash
	return e.putRecord(ctx, prefix, r)
}

// AnnotationHash is put on every applied object: the plan hash it was applied
// with. After a crash between an apply and its record, the object itself says
// whether the apply happened, so it is not sent again.
const AnnotationHash = "atoll.dev/hash"

// landed says whether an apply whose record was left in flight (a crash between
// the apply and the record) reached the cluster: the object carries the hash.
// It then completes the record.
func (e *Engine) landed(ctx context.Context, a *apply.Applier, prefix string, r record, d plannedResource) bool {
	if r.Hash != "" || r.Want != d.res.Hash {
		return false
	}
	obj, err := a.Get(ctx, toApplyRef(d.res.Ref))
	if err != nil || obj.GetAnnotations()[AnnotationHash] != d.res.Hash {
		return false
	}
	r.Hash = d.res.Hash
	if err := e.putRecord(ctx, prefix, r); err != nil {
		return false
	}
	e.applies.WithLabelValues("resumed").Inc()
	return true
}

// deleteOne deletes an applied object, waits until it is gone and drops its record.
func (e *Engine) deleteOne(ctx context.Context, a *apply.Applier, prefix string, r record) error {
	ref := toApplyRef(r.Ref)
	if err := a.Delete(ctx, ref); err != nil {
		e.deletes.WithLabelValues("failed").Inc()
		return err
	}
	e.deletes.WithLabelValues("deleted").Inc()
	if err := a.WaitGone(ctx, ref); err != nil {
		return err
	}
	_, err := e.opts.Client.Delete(ctx, recordKey(prefix, r.Ref))
	return err
}

// runHooks runs the hooks of one phase in plan order (by weight); done is false
// while one is not complete yet.
func (e *Engine) runHooks(ctx context.Context, a *apply.Applier, prefix, dig, cluster string, byID map[string]record, hooks []plannedResource, phase string) (bool, error) {
	for i, d := range hooks {
		if d.res.Phase != phase {
			continue
		}
		done, err := e.runHook(ctx, a, prefix, dig, cluster, byID, d, 1<<20+i)
		if err != nil {
			if !apply.IsUnreachable(err) {
				e.report(dig, d.app, cluster, d.res.Ref, Failed, err.Error())
			}
			return false, err
		}
		if !done {
			e.queue.AddAfter(cluster, time.Second)
			return false, nil
		}
	}
	return true, nil
}

// runHook applies a Helm hook once and says whether it is complete (kstatus
// Current: a Job that succeeded). Its delete policies are honoured:
// before-hook-creation (the default) deletes an earlier copy before applying a
// changed one, hook-succeeded deletes it once complete.
func (e *Engine) runHook(ctx context.Context, a *apply.Applier, prefix, dig, cluster string, byID map[string]record, d plannedResource, order int) (bool, error) {
	r, seen := byID[d.res.Ref.ID()]
	if seen && r.Hash == d.res.Hash && r.Done {
		e.report(dig, d.app, cluster, d.res.Ref, Applied, "")
		return true, nil
	}
	policies := d.res.DeletePolicies
	if !seen || r.Hash != d.res.Hash {
		if seen && (len(policies) == 0 || hasPolicy(policies, "before-hook-creation")) {
			if err := e.deleteOne(ctx, a, prefix, r); err != nil {
				return false, err
			}
		}
		if err := e.applyOne(ctx, a, prefix, d, order); err != nil {
			return false, err
		}
		e.report(dig, d.app, cluster, d.res.Ref, Pending, "hook applied; waiting until it is complete")
	}
	obj, err := a.Get(ctx, toApplyRef(d.res.Ref))
	if err != nil {
		return false, err
	}
	complete, err := hookComplete(obj)
	if err != nil || !complete {
		return false, err
	}
	done := record{App: d.app, Ref: d.res.Ref, Order: order, Phase: d.res.Phase, Hash: d.res.Hash, Done: true}
	if err := e.putRecord(ctx, prefix, done); err != nil {
		return false, err
	}
	byID[d.res.Ref.ID()] = done
	if hasPolicy(policies, "hook-succeeded") {
		if err := a.Delete(ctx, toApplyRef(d.res.Ref)); err != nil {
			return false, err
		}
	}
	e.report(dig, d.app, cluster, d.res.Ref, Applied, "")
	return true, nil
}

// hookComplete judges a hook as Helm does: a Job when it is Complete, a Pod when
// it Succeeded (either failing is an error), anything else once kstatus says it
// is Current.
func hookComplete(obj *unstructured.Unstructured) (bool, error) {
	switch obj.GroupVersionKind().GroupKind() {
	case schema.GroupKind{Group: "batch", Kind: "Job"}:
		conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["status"] != "True" {
				continue
			}
			switch m["type"] {
			case "Complete":
				return true, nil
			case "Failed":
				return false, errs.New(errs.Invalid, "hook Job %s failed: %v", obj.GetName(), m["message"])
			}
		}
		return false, nil
	case schema.GroupKind{Kind: "Pod"}:
		phase, _, _ := unstructured.NestedString(obj.Object, "status", "phase")
		if phase == "Failed" {
			return false, errs.New(errs.Invalid, "hook Pod %s failed", obj.GetName())
		}
		return phase == "Succeeded", nil
	}
	res, err := kstatus.Compute(obj)
	if err != nil {
		return false, nil
	}
	return res.Status == kstatus.CurrentStatus, nil
}

func hasPolicy(policies []string, p string) bool {
	for _, x := range policies {
		if x == p {
			return true
		}
	}
	return false
}

// maybeTerminated records Terminated once no cluster holds anything of the DIG.
func (e *Engine) maybeTerminated(ctx context.Context, dig string) error {
	resp, err := e.opts.Client.Get(ctx, e.appliedPrefix(dig), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return err
	}
	if resp.Count > 0 {
		return nil
	}
	k, ok := model.Schema.ParseKey(dig)
	if !ok {
		return fmt.Errorf("rsync: %q is not a DIG key", dig)
	}
	if err := e.opts.Lifecycle.Terminated(ctx, k); err != nil {
		return err
	}
	e.log.Info("DIG terminated on every cluster", "dig", dig)
	return nil
}

func (e *Engine) putRecord(ctx context.Context, prefix string, r record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = e.opts.Client.Put(ctx, recordKey(prefix, r.Ref), string(data))
	return err
}

func (e *Engine) records(ctx context.Context, dig, cluster string) ([]record, error) {
	resp, err := e.opts.Client.Get(ctx, e.clusterPrefix(dig, cluster), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make([]record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r record
		if err := json.Unmarshal(kv.Value, &r); err == nil {
			out = append(out, r)
		}
	}
	return out, nil
}

func (e *Engine) report(dig, app, cluster string, ref plan.Ref, state, msg string) {
	if e.opts.Sink != nil {
		e.opts.Sink.Deployed(dig, app, cluster, ref, state, msg)
	}
}

type plannedResource struct {
	app  string
	deps []plan.Dependency
	res  plan.Resource
}

// resourcesOn lists what the plan puts on cluster, app by app in dependency
// order (apps without an order between them by name), each app's CRDs first.
func resourcesOn(p *plan.Plan, cluster string) []plannedResource {
	byApp := map[string]plan.AppPlan{}
	for _, a := range p.Apps {
		byApp[a.App] = a
	}
	var out []plannedResource
	for _, name := range topoOrder(p.Apps) {
		a := byApp[name]
		var crds, rest []plannedResource
		for _, c := range a.Clusters {
			if c.Cluster != cluster {
				continue
			}
			for _, r := range c.Resources {
				if r.Phase == "crd" {
					crds = append(crds, plannedResource{a.App, a.DependsOn, r})
				} else {
					rest = append(rest, plannedResource{a.App, a.DependsOn, r})
				}
			}
		}
		out = append(append(out, crds...), rest...)
	}
	return out
}

// topoOrder sorts apps so that each comes after the apps it depends on (the API
// refuses cycles; any left are broken by name order).
func topoOrder(apps []plan.AppPlan) []string {
	deps := map[string][]string{}
	var names []string
	for _, a := range apps {
		names = append(names, a.App)
		for _, d := range a.DependsOn {
			deps[a.App] = append(deps[a.App], d.App)
		}
	}
	sort.Strings(names)
	state := map[string]int{} // 1 visiting, 2 done
	var out []string
	var visit func(string)
	visit = func(n string) {
		if state[n] != 0 {
			return
		}
		state[n] = 1
		for _, d := range deps[n] {
			visit(d)
		}
		state[n] = 2
		out = append(out, n)
	}
	for _, n := range names {
		visit(n)
	}
	known := map[string]bool{}
	for _, n := range names {
		known[n] = true
	}
	filtered := out[:0]
	for _, n := range out {
		if known[n] {
			filtered = append(filtered, n)
		}
	}
	return filtered
}

// appOnCluster is one app's resources on one cluster.
type appOnCluster struct {
	name string
	deps []plan.Dependency
	res  []plannedResource
}

func appsOn(desired []plannedResource) []appOnCluster {
	var out []appOnCluster
	for _, d := range desired {
		if len(out) == 0 || out[len(out)-1].name != d.app {
			out = append(out, appOnCluster{name: d.app, deps: d.deps})
		}
		out[len(out)-1].res = append(out[len(out)-1].res, d)
	}
	return out
}

// depsMet says whether app may start on cluster: each app it depends on that is
// placed there has been applied in this pass (Deployed) and, for Ready, is ready
// there; then its wait has passed. When not, it says when to look again.
func (e *Engine) depsMet(dig, cluster string, app appOnCluster, deployed map[string]bool) (bool, time.Duration) {
	const poll = time.Second
	for _, d := range app.deps {
		done, placed := deployed[d.App]
		key := dig + "|" + cluster + "|" + app.name + "|" + d.App
		if !placed {
			continue // not on this cluster: nothing to wait for here
		}
		met := done && (d.OpStatus != "Ready" || (e.opts.Ready != nil && e.opts.Ready.AppReady(dig, cluster, d.App)))
		e.mu.Lock()
		if !met {
			delete(e.metAt, key)
			e.mu.Unlock()
			return false, poll
		}
		at, ok := e.metAt[key]
		if !ok {
			at = time.Now()
			e.metAt[key] = at
		}
		e.mu.Unlock()
		if left := time.Duration(d.Wait)*time.Second - time.Since(at); left > 0 {
			return false, left
		}
	}
	return true, 0
}

func toApplyRef(r plan.Ref) apply.ObjectRef {
	return apply.ObjectRef{APIVersion: r.APIVersion, Kind: r.Kind, Namespace: r.Namespace, Name: r.Name}
}
