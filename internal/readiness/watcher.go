// Package readiness watches, from the hub, the objects Atoll applied to one
// edge cluster and judges each one with kstatus: no agent runs on the edge.
//
// A Watcher keeps one dynamic informer per tracked resource type, filtered by a
// label selector (the DIG's labels, see apply.LabelDIG), and calls OnChange with
// an Event on every add, update and delete; Snapshot gives the current state of
// every object in its caches:
//
//	sel := labels.SelectorFromSet(labels.Set{apply.LabelDIG: "d1"})
//	w, err := readiness.NewWatcher(cfg, sel, readiness.WatcherOptions{OnChange: aggregate.Update})
//	if err != nil { ... }
//	w.Track(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"})
//	go w.Run(ctx)
//	...
//	w.TrackKind(ctx, crGVK) // types can be added while it runs
//
// When the cluster goes away, the informers keep retrying on their own (with
// client-go's backoff) and resume with a fresh list when it is back, which fires
// the events of whatever changed meanwhile. The caches hold slimmed objects: no
// managedFields, no ConfigMap or Secret data.
package readiness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"

	"github.com/atoll-edge/atoll/internal/errs"
)

// WatcherOptions configure a Watcher.
type WatcherOptions struct {
	// OnChange is called with the Event of every add, update and delete of a
	// watched object, including the adds of the first list of each type. Calls
	// for one resource type come one at a time, in order; calls for different
	// types may run concurrently. It must not block for long. Optional.
	OnChange func(Event)
	// Namespace limits the watches to one namespace; empty watches them all.
	Namespace string
	// ResyncPeriod, when set, replays every cached object to OnChange that often.
	ResyncPeriod time.Duration
	// Logger receives watch errors (default slog.Default()).
	Logger *slog.Logger
}

// Watcher watches the labelled objects of one cluster. Create it with
// NewWatcher, add types with Track or TrackKind, and run it with Run. Its
// methods are safe for concurrent use.
type Watcher struct {
	client   dynamic.Interface
	mapper   *restmapper.DeferredDiscoveryRESTMapper
	selector string
	opts     WatcherOptions
	host     string

	wake chan struct{} // tells Run that a type was tracked

	mu      sync.Mutex
	types   map[schema.GroupVersionResource]*tracked
	running bool // Run has been called
	stopped bool // Run has returned
}

// tracked is the informer of one resource type.
type tracked struct {
	gvr      schema.GroupVersionResource
	informer cache.SharedIndexInformer
	started  bool
}

// NewWatcher returns a Watcher of the objects that selector matches in the
// cluster cfg points at. It does not contact the cluster.
func NewWatcher(cfg *rest.Config, selector labels.Selector, opts WatcherOptions) (*Watcher, error) {
	if cfg == nil {
		return nil, errs.New(errs.Invalid, "readiness: no rest config")
	}
	if selector == nil {
		return nil, errs.New(errs.Invalid, "readiness: no label selector (use labels.Everything() to watch every object)")
	}
	if opts.ResyncPeriod < 0 {
		return nil, errs.New(errs.Invalid, "readiness: negative resync period %s", opts.ResyncPeriod)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 0 // watches are long requests; the informers bound their own
	if cfg.UserAgent == "" {
		cfg.UserAgent = "atoll-readiness"
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("readiness: building the HTTP client of %s: %w", cfg.Host, err)
	}
	client, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("readiness: building the dynamic client of %s: %w", cfg.Host, err)
	}
	disco, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("readiness: building the discovery client of %s: %w", cfg.Host, err)
	}
	return &Watcher{
		client:   client,
		mapper:   restmapper.NewDeferredDiscoveryRESTMapperWithContext(memory.NewMemCacheClientWithContext(disco)),
		selector: selector.String(),
		opts:     opts,
		host:     cfg.Host,
		wake:     make(chan struct{}, 1),
		types:    make(map[schema.GroupVersionResource]*tracked),
	}, nil
}

// Track adds a resource type to watch. Tracking a type twice does nothing. Its
// informer starts with Run, or at once when Run is running. A type the cluster
// does not serve (yet) is listed again with backoff until it is.
func (w *Watcher) Track(gvr schema.GroupVersionResource) error {
	if gvr.Version == "" || gvr.Resource == "" {
		return errs.New(errs.Invalid, "readiness: resource %q has no version or resource name", gvr)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return errs.New(errs.Conflict, "readiness: cannot track %s: the watcher has stopped", gvr)
	}
	if _, ok := w.types[gvr]; ok {
		return nil
	}
	selector := w.selector
	inf := dynamicinformer.NewFilteredDynamicInformer(w.client, gvr, w.opts.Namespace, w.opts.ResyncPeriod,
		cache.Indexers{}, func(o *metav1.ListOptions) { o.LabelSelector = selector }).Informer()
	// The informer has not started, so none of these can fail.
	if err := inf.SetTransform(slim); err != nil {
		return fmt.Errorf("readiness: tracking %s: %w", gvr, err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(w.watchError(gvr)); err != nil {
		return fmt.Errorf("readiness: tracking %s: %w", gvr, err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.changed(obj) },
		UpdateFunc: func(_, obj any) { w.changed(obj) },
		DeleteFunc: func(obj any) {
			if ev, ok := goneEvent(obj); ok {
				w.emit(ev)
			}
		},
	}); err != nil {
		return fmt.Errorf("readiness: tracking %s: %w", gvr, err)
	}
	w.types[gvr] = &tracked{gvr: gvr, informer: inf}
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return nil
}

// TrackKind tracks the resource type of gvk, found through the cluster's
// discovery (read again when the kind is unknown, as after a CRD was applied),
// and returns it.
func (w *Watcher) TrackKind(ctx context.Context, gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
	m, err := w.mapper.RESTMappingWithContext(ctx, gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		w.mapper.ResetWithContext(ctx)
		m, err = w.mapper.RESTMappingWithContext(ctx, gvk.GroupKind(), gvk.Version)
	}
	switch {
	case meta.IsNoMatchError(err):
		return schema.GroupVersionResource{}, errs.Wrap(errs.NotFound, err, "readiness: cluster %s does not serve %s", w.host, gvk)
	case err != nil:
		return schema.GroupVersionResource{}, errs.Wrap(errs.Unavailable, err, "readiness: reading the discovery of cluster %s", w.host)
	}
	return m.Resource, w.Track(m.Resource)
}

// Run starts the informers of the tracked types, and of types tracked later,
// and returns nil once ctx is done and they have stopped. It can be called once;
// Track fails after it has returned.
func (w *Watcher) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("readiness: Run called twice")
	}
	w.running = true
	w.mu.Unlock()

	var wg sync.WaitGroup
	defer func() {
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
		wg.Wait()
	}()
	for {
		w.mu.Lock()
		for _, t := range w.types {
			if !t.started {
				t.started = true
				wg.Go(func() { t.informer.RunWithContext(ctx) })
			}
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-w.wake:
		}
	}
}

// Synced reports whether Run is running and every tracked type has been listed
// once. It stays true while the cluster is away (the caches then hold the last
// state seen), and false while a tracked type is not served by the cluster.
func (w *Watcher) Synced() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.running || w.stopped {
		return false
	}
	for _, t := range w.types {
		if !t.started || !t.informer.HasSynced() {
			return false
		}
	}
	return true
}

// Snapshot returns the Event of every object in the caches (present objects
// only), sorted by kind, namespace and name.
func (w *Watcher) Snapshot() []Event {
	w.mu.Lock()
	stores := make([]cache.Store, 0, len(w.types))
	for _, t := range w.types {
		stores = append(stores, t.informer.GetStore())
	}
	w.mu.Unlock()

	var events []Event
	for _, s := range stores {
		for _, obj := range s.List() {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				events = append(events, eventFor(u))
			}
		}
	}
	slices.SortFunc(events, func(a, b Event) int {
		return cmp.Or(
			cmp.Compare(a.Ref.APIVersion, b.Ref.APIVersion),
			cmp.Compare(a.Ref.Kind, b.Ref.Kind),
			cmp.Compare(a.Ref.Namespace, b.Ref.Namespace),
			cmp.Compare(a.Ref.Name, b.Ref.Name))
	})
	return events
}

func (w *Watcher) changed(obj any) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		w.emit(eventFor(u))
	}
}

func (w *Watcher) emit(ev Event) {
	if w.opts.OnChange != nil {
		w.opts.OnChange(ev)
	}
}

// watchError logs a failed list or watch; the reflector retries by itself.
func (w *Watcher) watchError(gvr schema.GroupVersionResource) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, _ *cache.Reflector, err error) {
		if ctx.Err() != nil {
			return // shutting down
		}
		w.opts.Logger.Warn("readiness: watch failed, retrying",
			"cluster", w.host, "resource", gvr.String(), "err", err)
	}
}
