// Package hub wires Atoll's hub together: the store on etcd (embedded or
// external), the secret keyring, the cluster registry and its connectivity
// manager, and the REST API. `atoll serve` is a thin wrapper around it, and tests
// start the hub the same way:
//
//	cfg := hub.NewConfig()
//	cfg.DataDir = t.TempDir()
//	cfg.Listen = "127.0.0.1:0"
//	h, err := hub.Start(ctx, cfg)
//	...
//	<-h.Ready()
//	defer h.Close()
package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/atoll-edge/atoll/internal/api"
	"github.com/atoll-edge/atoll/internal/blob"
	"github.com/atoll-edge/atoll/internal/cluster"
	"github.com/atoll-edge/atoll/internal/etcdembed"
	"github.com/atoll-edge/atoll/internal/kubeconfig"
	"github.com/atoll-edge/atoll/internal/lifecycle"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/plan"
	"github.com/atoll-edge/atoll/internal/registry"
	"github.com/atoll-edge/atoll/internal/render"
	"github.com/atoll-edge/atoll/internal/rsync"
	"github.com/atoll-edge/atoll/internal/secret"
	"github.com/atoll-edge/atoll/internal/status"
	"github.com/atoll-edge/atoll/internal/store"
	"github.com/atoll-edge/atoll/internal/ztp"
)

// Config is everything `atoll serve` can be told.
type Config struct {
	// DataDir holds the embedded etcd's data and the generated secret key.
	DataDir string
	// Listen is the API's host:port.
	Listen string
	// EtcdEndpoints, when set, use an external etcd cluster instead of the embedded one.
	EtcdEndpoints []string
	// EtcdPrefix is the key prefix of everything the hub stores.
	EtcdPrefix string
	// SecretKeyFile is the key that seals kubeconfigs; empty means DataDir/secret.key,
	// created on first start.
	SecretKeyFile string
	// AllowKubeconfigExec accepts kubeconfigs with exec or auth-provider plugins.
	AllowKubeconfigExec bool
	// MaxBlobBytes caps one uploaded file kept in the blob store.
	MaxBlobBytes int64
	// ProbeInterval, BackoffCap: connectivity probes of reachable clusters, and the
	// cap of the backoff between probes of unreachable ones.
	ProbeInterval, BackoffCap time.Duration
	// LeaseTTL is how long a hub replica's claim on its clusters outlives it:
	// the others take its clusters over within this time after it dies.
	LeaseTTL time.Duration
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// Logger, when set, replaces the JSON logger on stdout (tests).
	Logger *slog.Logger
}

// NewConfig returns the defaults.
func NewConfig() Config {
	return Config{
		DataDir:       "atoll-data",
		Listen:        "127.0.0.1:9015",
		EtcdPrefix:    "/atoll",
		MaxBlobBytes:  blob.DefaultMaxSize,
		ProbeInterval: 15 * time.Second,
		BackoffCap:    60 * time.Second,
		LeaseTTL:      10 * time.Second,
		LogLevel:      "info",
	}
}

// AddFlags binds the config to command-line flags.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the embedded etcd's data and the generated secret key")
	fs.StringVar(&c.Listen, "listen", c.Listen, "host:port of the REST API")
	fs.StringSliceVar(&c.EtcdEndpoints, "etcd-endpoints", c.EtcdEndpoints, "use this external etcd cluster (comma-separated URLs) instead of the embedded etcd")
	fs.StringVar(&c.EtcdPrefix, "etcd-prefix", c.EtcdPrefix, "key prefix of everything the hub stores in etcd")
	fs.StringVar(&c.SecretKeyFile, "secret-key-file", c.SecretKeyFile, "file with the 32-byte key that seals kubeconfigs (default: <data-dir>/secret.key, created on first start)")
	fs.BoolVar(&c.AllowKubeconfigExec, "allow-kubeconfig-exec", c.AllowKubeconfigExec, "accept kubeconfigs with exec or auth-provider plugins (they run programs on the hub)")
	fs.Int64Var(&c.MaxBlobBytes, "max-blob-bytes", c.MaxBlobBytes, "cap on one uploaded file (charts, profiles) in bytes")
	fs.DurationVar(&c.ProbeInterval, "cluster-probe-interval", c.ProbeInterval, "time between connectivity probes of a reachable cluster")
	fs.DurationVar(&c.BackoffCap, "cluster-backoff-cap", c.BackoffCap, "longest wait between probes of an unreachable cluster")
	fs.DurationVar(&c.LeaseTTL, "cluster-lease-ttl", c.LeaseTTL, "how long a dead hub replica keeps its clusters before the other replicas take them (whole seconds)")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
}

// Validate checks the config and names the flag at fault.
func (c *Config) Validate() error {
	if c.Listen == "" {
		return errors.New("--listen is empty; give host:port, for example 127.0.0.1:9015")
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen %q is not host:port: %w", c.Listen, err)
	}
	if len(c.EtcdEndpoints) == 0 && c.DataDir == "" {
		return errors.New("--data-dir is empty; the embedded etcd needs a directory")
	}
	if c.SecretKeyFile == "" && c.DataDir == "" {
		return errors.New("--secret-key-file is needed when --data-dir is empty")
	}
	if !strings.HasPrefix(c.EtcdPrefix, "/") || strings.HasSuffix(c.EtcdPrefix, "/") {
		return fmt.Errorf("--etcd-prefix %q must start with / and not end with one", c.EtcdPrefix)
	}
	if c.MaxBlobBytes <= 0 {
		return fmt.Errorf("--max-blob-bytes %d must be positive", c.MaxBlobBytes)
	}
	if c.LeaseTTL < time.Second {
		return fmt.Errorf("--cluster-lease-ttl %s must be at least 1s", c.LeaseTTL)
	}
	if c.ProbeInterval <= 0 || c.BackoffCap <= 0 {
		return errors.New("--cluster-probe-interval and --cluster-backoff-cap must be positive")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	return nil
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("--log-level %q is not one of debug, info, warn, error", s)
	}
	return l, nil
}

// Hub is a running hub.
type Hub struct {
	cfg      Config
	log      *slog.Logger
	etcd     *etcdembed.Server
	cli      *clientv3.Client
	Store    *store.Store
	Blobs    *blob.Store
	Registry *registry.Registry
	Clusters *cluster.Manager
	// ZTP drives the BPA operators of sites and registers the clusters they make.
	ZTP *ztp.Controller
	// The data path: plans, DIG lifecycles, resource sync and status.
	Plans     *plan.Store
	Lifecycle *lifecycle.Machine
	Sync      *rsync.Engine
	Status    *status.Aggregate
	Readiness *status.Watchers
	listener  net.Listener
	server    *http.Server

	ready     chan struct{}
	errc      chan error
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// Start starts the hub: the store, the cluster manager and the API. It returns once
// the API listens; Ready is closed when the store answers.
func Start(ctx context.Context, cfg Config) (h *Hub, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		level, _ := parseLevel(cfg.LogLevel)
		log = slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
	}
	h = &Hub{cfg: cfg, log: log, ready: make(chan struct{}), errc: make(chan error, 4)}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()

	keyFile := cfg.SecretKeyFile
	var keyring *secret.Keyring
	if keyFile == "" {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("create --data-dir: %w", err)
		}
		keyring, err = secret.LoadOrCreateKeyFile(filepath.Join(cfg.DataDir, "secret.key"))
	} else {
		keyring, err = secret.LoadKeyFile(keyFile)
	}
	if err != nil {
		return nil, err
	}

	if len(cfg.EtcdEndpoints) == 0 {
		h.etcd, err = etcdembed.Start(ctx, etcdembed.Options{Dir: filepath.Join(cfg.DataDir, "etcd")})
		if err != nil {
			return nil, err
		}
		h.cli = h.etcd.Client()
		log.Info("embedded etcd started", "dir", filepath.Join(cfg.DataDir, "etcd"))
	} else {
		h.cli, err = clientv3.New(clientv3.Config{Endpoints: cfg.EtcdEndpoints, DialTimeout: 5 * time.Second, Logger: nopZap()})
		if err != nil {
			return nil, fmt.Errorf("connect to --etcd-endpoints %s: %w", strings.Join(cfg.EtcdEndpoints, ","), err)
		}
	}
	h.Store = store.New(h.cli, model.Schema, cfg.EtcdPrefix)
	h.Blobs = blob.New(h.cli, blob.Options{Root: cfg.EtcdPrefix, MaxSize: cfg.MaxBlobBytes})
	h.Registry = &registry.Registry{Store: h.Store, Keyring: keyring, Kubeconfig: kubeconfig.Options{AllowExec: cfg.AllowKubeconfigExec}}
	h.Clusters, err = cluster.New(cluster.Options{Store: h.Store, Registry: h.Registry, Logger: log,
		ProbeInterval: cfg.ProbeInterval, BackoffCap: cfg.BackoffCap,
		// The sync is made below; a cluster can only come back once Run started.
		OnReachable: func(k store.Key) {
			if h.Sync != nil {
				h.Sync.ClusterBack(k)
			}
		}})
	if err != nil {
		return nil, err
	}
	h.ZTP, err = ztp.New(ztp.Options{Store: h.Store, Registry: h.Registry, Sites: h.Clusters, Logger: log})
	if err != nil {
		return nil, err
	}

	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Plans and rendered objects are blobs too, but not uploads: --max-blob-bytes
	// does not bound them.
	h.Plans = plan.NewStore(blob.New(h.cli, blob.Options{Root: cfg.EtcdPrefix, MaxSize: 1 << 30}))
	builder := &plan.Builder{Store: h.Store, Blobs: h.Blobs, Plans: h.Plans, Renderer: render.New(512), Clusters: h.Clusters}
	h.Lifecycle = lifecycle.New(h.cli, h.Store, cfg.EtcdPrefix, builder)
	h.Status = status.New(h.cli, cfg.EtcdPrefix, h.Lifecycle, h.Plans, h.Clusters, log)
	h.Sync, err = rsync.New(rsync.Options{Client: h.cli, Root: cfg.EtcdPrefix, Lifecycle: h.Lifecycle, Plans: h.Plans,
		Clusters: h.Clusters, Sink: h.Status, Ready: h.Status, Logger: log, BackoffCap: cfg.BackoffCap, Metrics: metrics, LeaseTTL: cfg.LeaseTTL})
	if err != nil {
		return nil, err
	}
	h.Readiness = status.NewWatchers(h.Lifecycle, h.Plans, h.Clusters, h.Status, log)

	apiServer, err := api.New(api.Options{Store: h.Store, Registry: h.Registry, Clusters: h.Clusters,
		Ready: h.checkStore, Logger: log, Metrics: metrics,
		Blobs: h.Blobs, Lifecycle: h.Lifecycle, Status: h.Status, Extra: h.ZTP.Routes()})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	mux.Handle("/", apiServer)

	h.listener, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on --listen %s: %w", cfg.Listen, err)
	}
	h.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 5 * time.Minute, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}

	runCtx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.wg.Add(7)
	for _, run := range []func(context.Context) error{h.Sync.Run, h.Status.Run, h.Readiness.Run, h.ZTP.Run} {
		go func() {
			defer h.wg.Done()
			if err := run(runCtx); err != nil && runCtx.Err() == nil {
				h.fail(err)
			}
		}()
	}
	go func() {
		defer h.wg.Done()
		if err := h.server.Serve(h.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.fail(fmt.Errorf("serve API: %w", err))
		}
	}()
	go func() {
		defer h.wg.Done()
		if err := h.Clusters.Run(runCtx); err != nil {
			h.fail(err)
		}
	}()
	go func() {
		defer h.wg.Done()
		for runCtx.Err() == nil {
			cctx, c := context.WithTimeout(runCtx, 5*time.Second)
			err := h.checkStore(cctx)
			c()
			if err == nil {
				close(h.ready)
				return
			}
			log.Warn("store not ready", "error", err.Error())
			time.Sleep(time.Second)
		}
	}()
	if h.etcd != nil {
		go func() {
			select {
			case err := <-h.etcd.Err():
				h.fail(fmt.Errorf("embedded etcd: %w", err))
			case <-runCtx.Done():
			}
		}()
	}
	log.Info("hub serving", "listen", h.listener.Addr().String(), "embeddedEtcd", h.etcd != nil, "keyID", keyring.ID())
	return h, nil
}

// fail reports an error that stops the hub; only the first few are kept.
func (h *Hub) fail(err error) {
	select {
	case h.errc <- err:
	default:
	}
}

func (h *Hub) checkStore(ctx context.Context) error {
	_, err := h.cli.Get(ctx, h.cfg.EtcdPrefix+"/readyz", clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("etcd does not answer: %w", err)
	}
	return nil
}

// Addr is the address the API listens on.
func (h *Hub) Addr() string { return h.listener.Addr().String() }

// URL is the API's base URL.
func (h *Hub) URL() string { return "http://" + h.Addr() }

// Ready is closed once the store answers.
func (h *Hub) Ready() <-chan struct{} { return h.ready }

// Err reports a failure that stops the hub.
func (h *Hub) Err() <-chan error { return h.errc }

// Close stops the API (letting requests in flight finish), the cluster manager and
// the store. It is safe to call more than once.
func (h *Hub) Close() error {
	h.closeOnce.Do(func() {
		if h.server != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = h.server.Shutdown(ctx)
			cancel()
		} else if h.listener != nil {
			h.listener.Close()
		}
		if h.cancel != nil {
			h.cancel()
		}
		h.wg.Wait()
		if h.etcd != nil {
			h.etcd.Close()
		} else if h.cli != nil {
			h.cli.Close()
		}
	})
	return nil
}
