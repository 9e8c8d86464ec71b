// Package operator runs the BPA controllers in a controller-runtime manager, with
// leader election, a metrics endpoint and health probes: `atoll bpa` is a thin
// wrapper around it.
package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/atoll-edge/atoll/internal/bpa"
	"github.com/atoll-edge/atoll/internal/bpa/baremetal"
	"github.com/atoll-edge/atoll/internal/bpa/hostselect"
)

// Config is everything `atoll bpa` can be told.
type Config struct {
	// Kubeconfig is the local controller cluster's kubeconfig; empty means the
	// in-cluster config (or $KUBECONFIG).
	Kubeconfig string
	// LeaderElect makes replicas elect one active operator (a Lease in
	// LeaderElectionNamespace).
	LeaderElect             bool
	LeaderElectionNamespace string
	// MetricsAddr and ProbeAddr are host:port of the Prometheus metrics and of
	// /healthz and /readyz; "0" turns one off.
	MetricsAddr, ProbeAddr string
	// WatchNamespaces restricts the Provisionings and Softwares served (and the
	// Jobs, ConfigMaps and Secrets watched) to these namespaces; empty means all.
	WatchNamespaces []string
	// HostNamespaces are the namespaces whose BareMetalHosts may be used (all when empty).
	HostNamespaces []string
	// HostStates are the provisioning states in which a free host may be taken.
	HostStates []string
	// BackoffLimit is the installer Jobs' backoffLimit.
	BackoffLimit int32
	// HandoffTimeout bounds the wait for the kubeconfig after the install Job completes.
	HandoffTimeout time.Duration
	// LogLevel is debug, info, warn or error.
	LogLevel string
	// Logger, when set, replaces the JSON logger on stdout (tests).
	Logger *slog.Logger
	// SeveralInProcess lets tests run more than one operator in a process
	// (controller-runtime otherwise refuses two controllers of the same name).
	SeveralInProcess bool
}

// NewConfig returns the defaults.
func NewConfig() Config {
	return Config{
		MetricsAddr:    ":8080",
		ProbeAddr:      ":8081",
		HostStates:     append([]string(nil), hostselect.DefaultStates...),
		BackoffLimit:   1,
		HandoffTimeout: 2 * time.Minute,
		LogLevel:       "info",
	}
}

// AddFlags binds the config to command-line flags.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig of the site's local controller cluster (default: in-cluster, or $KUBECONFIG)")
	fs.BoolVar(&c.LeaderElect, "leader-elect", c.LeaderElect, "elect one active operator among replicas (a Lease)")
	fs.StringVar(&c.LeaderElectionNamespace, "leader-election-namespace", c.LeaderElectionNamespace, "namespace of the leader election Lease (default: the pod's namespace)")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", c.MetricsAddr, "host:port of the Prometheus metrics; 0 turns them off")
	fs.StringVar(&c.ProbeAddr, "health-probe-bind-address", c.ProbeAddr, "host:port of /healthz and /readyz; 0 turns them off")
	fs.StringSliceVar(&c.WatchNamespaces, "watch-namespace", c.WatchNamespaces, "namespace whose Provisionings and Softwares this operator serves (repeat or comma-separate; default: all)")
	fs.StringSliceVar(&c.HostNamespaces, "namespace", c.HostNamespaces, "namespace whose BareMetalHosts may be used (repeat or comma-separate; default: all)")
	fs.StringSliceVar(&c.HostStates, "host-states", c.HostStates, "provisioning states in which a free BareMetalHost may be taken")
	fs.Int32Var(&c.BackoffLimit, "job-backoff-limit", c.BackoffLimit, "backoffLimit of the installer Jobs")
	fs.DurationVar(&c.HandoffTimeout, "kubeconfig-handoff-timeout", c.HandoffTimeout, "how long after the install Job completes the kubeconfig may take to appear")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
}

// Validate checks the config and names the flag at fault.
func (c *Config) Validate() error {
	if c.BackoffLimit < 0 {
		return fmt.Errorf("--job-backoff-limit %d must not be negative", c.BackoffLimit)
	}
	if c.HandoffTimeout <= 0 {
		return fmt.Errorf("--kubeconfig-handoff-timeout %s must be positive", c.HandoffTimeout)
	}
	if len(c.HostStates) == 0 {
		return errors.New("--host-states is empty: no host could ever be taken")
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return fmt.Errorf("--log-level %q is not one of debug, info, warn, error", c.LogLevel)
	}
	return nil
}

// RESTConfig loads the cluster's client config from --kubeconfig, else in-cluster
// or $KUBECONFIG.
func (c *Config) RESTConfig() (*rest.Config, error) {
	if c.Kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load --kubeconfig %s: %w", c.Kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("no --kubeconfig given and no in-cluster config: %w", err)
	}
	return cfg, nil
}

// New builds the manager with both controllers for the cluster at restCfg.
func New(cfg Config, restCfg *rest.Config) (manager.Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		var level slog.Level
		_ = level.UnmarshalText([]byte(cfg.LogLevel))
		log = slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: level}))
	}
	logger := logr.FromSlogHandler(log.With("component", "bpa").Handler())
	ctrl.SetLogger(logger)
	scheme, err := bpa.NewScheme()
	if err != nil {
		return nil, err
	}
	cacheOpts := cache.Options{}
	if len(cfg.WatchNamespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, n := range cfg.WatchNamespaces {
			cacheOpts.DefaultNamespaces[n] = cache.Config{}
		}
	}
	if len(cfg.HostNamespaces) > 0 {
		ns := map[string]cache.Config{}
		for _, n := range cfg.HostNamespaces {
			ns[n] = cache.Config{}
		}
		cacheOpts.ByObject = map[client.Object]cache.ByObject{baremetal.New(): {Namespaces: ns}}
	}
	restCfg = rest.CopyConfig(restCfg)
	if restCfg.QPS == 0 {
		// client-go's default (5 requests/s) is too few for a pass that reads the
		// hosts and writes claims, inventory, Jobs and status.
		restCfg.QPS, restCfg.Burst = 50, 100
	}
	mgr, err := ctrl.NewManager(restCfg, ctrl.Options{
		Scheme:                  scheme,
		Logger:                  logger,
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: cfg.MetricsAddr},
		HealthProbeBindAddress:  cfg.ProbeAddr,
		LeaderElection:          cfg.LeaderElect,
		LeaderElectionID:        "bpa-operator.bpa.akraino.org",
		LeaderElectionNamespace: cfg.LeaderElectionNamespace,
		// Stepping down ends the process quickly, so a new leader can start at once.
		LeaderElectionReleaseOnCancel: true,
		Controller:                    config.Controller{SkipNameValidation: ptr.To(cfg.SeveralInProcess)},
	})
	if err != nil {
		return nil, fmt.Errorf("create the controller manager: %w", err)
	}
	if err := bpa.Setup(mgr, bpa.Options{HostNamespaces: cfg.HostNamespaces, HostStates: cfg.HostStates,
		BackoffLimit: cfg.BackoffLimit, HandoffTimeout: cfg.HandoffTimeout}); err != nil {
		return nil, err
	}
	if cfg.ProbeAddr != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
	}
	return mgr, nil
}

// Run runs the operator until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	restCfg, err := cfg.RESTConfig()
	if err != nil {
		return err
	}
	mgr, err := New(cfg, restCfg)
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}
