// Package ztp is the hub side of zero-touch provisioning (the seeds'
// infra-global-controller): the hub creates Provisionings on the BPA operators of
// registered sites, follows them, and registers each new cluster into the hub
// when its kubeconfig Secret appears, so that no person copies a file.
//
// A site is a cluster of the hub's registry that runs the BPA operator (its
// kubeconfig sealed like any other). The REST routes (Routes) create, list, show
// and delete Provisionings on a site; each carries, in annotations, where its
// cluster is to be registered:
//
//	ztp.atoll.io/managed: "true"                         (label)
//	ztp.atoll.io/register-provider: <cluster provider>
//	ztp.atoll.io/register-cluster:  <cluster name>
//	ztp.atoll.io/register-labels:   <JSON list of cluster labels>
//
// The hub keeps one record per site it created Provisionings on (kind ztp-sites
// in the store), and Run follows every such site with an informer on its managed
// Provisionings. When a Provisioning reports status.kubeconfigSecretRef, the
// controller reads that Secret from the site and registers the cluster through the
// registry (checked and sealed like an uploaded kubeconfig), then adds the labels.
// Everything is derived from what exists — the records, the Provisionings on the
// sites, the clusters in the registry — so a restarted hub picks up where it was,
// and registering twice changes nothing.
package ztp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/atoll-edge/atoll/internal/bpa"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/registry"
	"github.com/atoll-edge/atoll/internal/store"
)

// Sites is the store kind of the sites the hub created Provisionings on; a site's
// name is "<cluster provider>.<cluster>" (names are DNS labels, without dots).
var Sites = model.Schema.Add("ztp-sites", "zero-touch site", nil)

// The marks of a Provisioning the hub manages.
const (
	LabelManaged          = "ztp.atoll.io/managed"
	AnnotationProvider    = "ztp.atoll.io/register-provider"
	AnnotationCluster     = "ztp.atoll.io/register-cluster"
	AnnotationLabels      = "ztp.atoll.io/register-labels"
	AnnotationDescription = "ztp.atoll.io/description"
	AnnotationUserData1   = "ztp.atoll.io/user-data-1"
	AnnotationUserData2   = "ztp.atoll.io/user-data-2"
)

const (
	defaultRetry       = 5 * time.Second
	siteRequestTimeout = 30 * time.Second
	// registeredByDescription is the description of a cluster the hub registered:
	// site provider, site cluster, namespace and name of the Provisioning. It tells
	// the clusters this controller may refresh from those it must leave alone.
	registeredByDescription  = "registered by zero-touch provisioning from site %s/%s, Provisioning %s/%s"
	maxRegistrationErrorSize = 1024
)

// SiteConfigs gives the client config of a registered cluster (the cluster
// manager's Config).
type SiteConfigs interface {
	Config(key store.Key) (*rest.Config, bool)
}

// Options configure a Controller. Store, Registry and Sites must be set.
type Options struct {
	Store    *store.Store
	Registry *registry.Registry
	Sites    SiteConfigs
	Logger   *slog.Logger
	// Retry is the wait before following a site again after it failed (default 5s).
	Retry time.Duration
}

// Controller follows the sites and registers their new clusters.
type Controller struct {
	opts   Options
	log    *slog.Logger
	scheme *runtime.Scheme

	mu       sync.Mutex
	watchers map[string]*watcher     // by site record name
	results  map[string]registration // by site/namespace/name
}

// registration is the last outcome of registering one Provisioning's cluster.
type registration struct {
	Cluster string // provider/cluster
	Err     string
}

// site is the record of one site.
type site struct {
	Provider string `json:"clusterProvider"`
	Cluster  string `json:"cluster"`
}

func (s site) name() string                    { return s.Provider + "." + s.Cluster }
func (s site) key() store.Key                  { return store.K(model.Clusters, s.Provider, s.Cluster) }
func (s site) String() string                  { return s.Provider + "/" + s.Cluster }
func siteKey(s site) store.Key                 { return store.K(Sites, s.name()) }
func resultKey(s site, ns, name string) string { return s.String() + "/" + ns + "/" + name }

// New checks opts and fills defaults.
func New(opts Options) (*Controller, error) {
	if opts.Store == nil || opts.Registry == nil || opts.Sites == nil {
		return nil, errors.New("ztp: Store, Registry and Sites must be set")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Retry <= 0 {
		opts.Retry = defaultRetry
	}
	scheme, err := bpa.NewScheme()
	if err != nil {
		return nil, err
	}
	return &Controller{opts: opts, log: opts.Logger.With("component", "ztp"), scheme: scheme,
		watchers: map[string]*watcher{}, results: map[string]registration{}}, nil
}

// Run follows the site records until ctx ends: one watcher per site.
func (z *Controller) Run(ctx context.Context) error {
	defer z.stopAll()
	for {
		items, rev, err := z.opts.Store.ListAll(ctx, Sites)
		if err == nil {
			seen := map[string]bool{}
			for _, it := range items {
				seen[it.Key.Name()] = true
				z.follow(ctx, it)
			}
			z.mu.Lock()
			var gone []string
			for name := range z.watchers {
				if !seen[name] {
					gone = append(gone, name)
				}
			}
			z.mu.Unlock()
			for _, name := range gone {
				z.unfollow(name)
			}
			err = z.opts.Store.Watch(ctx, Sites, rev, func(e store.Event) {
				if e.Type == store.Deleted {
					z.unfollow(e.Item.Key.Name())
					return
				}
				z.follow(ctx, e.Item)
			})
		}
		if ctx.Err() != nil {
			return nil
		}
		z.log.Warn("site watch ended; listing again", "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (z *Controller) follow(ctx context.Context, it store.Item) {
	var s site
	if err := json.Unmarshal(it.Data, &s); err != nil || s.Provider == "" || s.Cluster == "" {
		z.log.Error("undecodable site record", "key", it.Key.Path())
		return
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	if old, ok := z.watchers[s.name()]; ok {
		select {
		case <-old.done: // it gave the site up; follow it again
		default:
			return
		}
	}
	w := newWatcher(z, s)
	z.watchers[s.name()] = w
	go w.run(ctx)
	z.log.Info("following site", "site", s.String())
}

func (z *Controller) unfollow(name string) {
	z.mu.Lock()
	w := z.watchers[name]
	delete(z.watchers, name)
	z.mu.Unlock()
	if w != nil {
		w.stop()
	}
}

func (z *Controller) stopAll() {
	z.mu.Lock()
	ws := z.watchers
	z.watchers = map[string]*watcher{}
	z.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
}

// ensureSite records that the hub manages Provisionings on s (idempotent).
func (z *Controller) ensureSite(ctx context.Context, s site) error {
	_, err := z.opts.Store.Create(ctx, siteKey(s), s)
	if err != nil && errors.Is(err, errExists) {
		return nil
	}
	return err
}

// siteClient builds a client of site s from the connection the hub keeps to it.
// Watches need no overall timeout, so the config's is cleared; callers bound
// their requests with contexts.
func (z *Controller) siteClient(s site) (client.WithWatch, *rest.Config, error) {
	cfg, ok := z.opts.Sites.Config(s.key())
	if !ok {
		return nil, nil, errNoConnection(s)
	}
	cfg.Timeout = 0
	cfg.UserAgent = "atoll-hub-ztp"
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: z.scheme})
	if err != nil {
		return nil, nil, fmt.Errorf("a client of site %s: %w", s, err)
	}
	return c, cfg, nil
}

func (z *Controller) setResult(key string, r registration) {
	if len(r.Err) > maxRegistrationErrorSize {
		r.Err = r.Err[:maxRegistrationErrorSize] + "…"
	}
	z.mu.Lock()
	z.results[key] = r
	z.mu.Unlock()
}

func (z *Controller) result(key string) (registration, bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	r, ok := z.results[key]
	return r, ok
}

// parseLabels reads the labels annotation.
func parseLabels(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("annotation %s is not a JSON list of labels: %w", AnnotationLabels, err)
	}
	return out, nil
}
