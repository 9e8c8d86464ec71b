package status

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/atoll-edge/atoll/internal/lifecycle"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/plan"
	"github.com/atoll-edge/atoll/internal/readiness"
	"github.com/atoll-edge/atoll/internal/store"
)

// Configs gives the client config of a registered cluster.
type Configs interface {
	Config(key store.Key) (*rest.Config, bool)
}

// Watchers runs one readiness watcher per cluster that a plan deploys to,
// watching the kinds the plans put there, and feeds what they see to an Aggregate.
type Watchers struct {
	lc      *lifecycle.Machine
	plans   *plan.Store
	configs Configs
	agg     *Aggregate
	log     *slog.Logger

	mu   sync.Mutex
	byCl map[string]*clusterWatch // by cluster path
}

type clusterWatch struct {
	host    string
	w       *readiness.Watcher
	cancel  context.CancelFunc
	tracked map[schema.GroupVersionKind]bool
}

// NewWatchers returns the watchers; Run starts them.
func NewWatchers(lc *lifecycle.Machine, plans *plan.Store, configs Configs, agg *Aggregate, log *slog.Logger) *Watchers {
	if log == nil {
		log = slog.Default()
	}
	return &Watchers{lc: lc, plans: plans, configs: configs, agg: agg, log: log.With("component", "readiness"),
		byCl: map[string]*clusterWatch{}}
}

// Run follows the DIG states until ctx ends. It looks again every few seconds,
// so that kinds a cluster did not serve yet (a CRD being applied) and clusters
// whose client appears later are picked up.
func (ws *Watchers) Run(ctx context.Context) error {
	defer ws.stopAll()
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		ws.refresh(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (ws *Watchers) refresh(ctx context.Context) {
	entries, _, err := ws.lc.List(ctx)
	if err != nil {
		return
	}
	want := map[string]map[schema.GroupVersionKind]bool{}
	for _, e := range entries {
		if e.Record.Plan == "" || e.Record.State == lifecycle.Created || e.Record.State == lifecycle.Approved {
			continue
		}
		p, err := ws.plans.Get(ctx, e.Record.Plan)
		if err != nil {
			continue
		}
		for _, a := range p.Apps {
			for _, c := range a.Clusters {
				m := want[c.Cluster]
				if m == nil {
					m = map[schema.GroupVersionKind]bool{}
					want[c.Cluster] = m
				}
				for _, r := range c.Resources {
					m[schema.FromAPIVersionAndKind(r.Ref.APIVersion, r.Ref.Kind)] = true
				}
			}
		}
	}
	for cl, kinds := range want {
		ws.ensure(ctx, cl, kinds)
	}
}

func (ws *Watchers) ensure(ctx context.Context, clusterPath string, kinds map[schema.GroupVersionKind]bool) {
	parts := strings.Split(clusterPath, "/")
	if len(parts) != 3 {
		return
	}
	cfg, ok := ws.configs.Config(store.K(model.Clusters, parts[1], parts[2]))
	if !ok {
		return
	}
	ws.mu.Lock()
	cw := ws.byCl[clusterPath]
	if cw != nil && cw.host != cfg.Host {
		cw.cancel()
		cw = nil
	}
	if cw == nil {
		sel, _ := labels.Parse(plan.LabelInstance)
		w, err := readiness.NewWatcher(cfg, sel, readiness.WatcherOptions{Logger: ws.log,
			OnChange: func(ev readiness.Event) {
				ref := plan.Ref{APIVersion: ev.Ref.APIVersion, Kind: ev.Ref.Kind, Namespace: ev.Ref.Namespace, Name: ev.Ref.Name}
				ws.agg.Observed(clusterPath, ref, ev.Labels[plan.LabelInstance], string(ev.Status), ev.Present, ev.Message)
			}})
		if err != nil {
			ws.mu.Unlock()
			ws.log.Warn("cannot watch a cluster", "cluster", clusterPath, "error", err.Error())
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		cw = &clusterWatch{host: cfg.Host, w: w, cancel: cancel, tracked: map[schema.GroupVersionKind]bool{}}
		ws.byCl[clusterPath] = cw
		go func() { _ = w.Run(wctx) }()
	}
	var todo []schema.GroupVersionKind
	for k := range kinds {
		if !cw.tracked[k] {
			todo = append(todo, k)
		}
	}
	ws.mu.Unlock()
	for _, k := range todo {
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := cw.w.TrackKind(tctx, k)
		cancel()
		if err == nil {
			ws.mu.Lock()
			cw.tracked[k] = true
			ws.mu.Unlock()
		}
	}
}

func (ws *Watchers) stopAll() {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, cw := range ws.byCl {
		cw.cancel()
	}
	ws.byCl = map[string]*clusterWatch{}
}
