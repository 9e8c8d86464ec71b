package edge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	// assetsEnv names the folder holding the binaries (the envtest convention).
	assetsEnv = "KUBEBUILDER_ASSETS"

	// processStartTimeout bounds how long etcd or kube-apiserver may take to become
	// healthy. envtest's default of 20 s is too tight on a busy 2-core machine running
	// several clusters at once.
	processStartTimeout = 60 * time.Second
	// processStopTimeout bounds a graceful stop before the process group is killed.
	processStopTimeout = 20 * time.Second
	// apiServerStopTimeout is short: an API server with open watches waits for them
	// up to its request timeout (60 s) before it exits, and Stop stands for an edge
	// that goes offline, so after this it is killed (see stopLocked).
	apiServerStopTimeout = 3 * time.Second
	// readyTimeout bounds the wait for /readyz and, with workloads, for the Node.
	readyTimeout = 60 * time.Second

	adminUser = "atoll-admin"

	// dirPrefix starts the name of every cluster folder in os.TempDir().
	dirPrefix = "atoll-edge-"
	// ownerFile, in a cluster folder, holds the PID of the process that owns the
	// cluster, until Close; see sweepOrphans.
	ownerFile = "owner.pid"
)

// sweepOnce runs sweepOrphans once per process, before the first cluster starts.
var sweepOnce sync.Once

// controlPlaneFiles and workloadFiles are what a cluster needs in KUBEBUILDER_ASSETS.
var (
	controlPlaneFiles = []string{"kube-apiserver", "etcd"}
	workloadFiles     = []string{"kube-controller-manager", "kube-scheduler", "kwok", "kwok-stages.yaml"}
)

// errClosed is returned by Stop and Restart after Close.
var errClosed = errors.New("edge: cluster is closed")

// Options for Start.
type Options struct {
	// Workloads also runs kube-controller-manager (the deployment, replicaset,
	// node-lifecycle, namespace and garbage-collector controllers), kube-scheduler and
	// kwok with one fake Node (allocatable cpu "4", memory "8Gi", pods "110"), so that
	// Deployments really become Available, Namespaces can be deleted and deleting a
	// Deployment removes its ReplicaSets and Pods. Off by default (API server + etcd only).
	Workloads bool
}

// Cluster is one running edge cluster: an etcd, a kube-apiserver and, with
// Options.Workloads, the processes that make workloads run.
//
// Its methods are safe for concurrent use.
type Cluster struct {
	name   string
	opts   Options
	assets string
	dir    string // certs/, etcd/, logs/ and, with workloads, kubeconfig

	plane      *envtest.ControlPlane
	cfg        *rest.Config
	kubeconfig []byte
	logFiles   []*os.File // etcd's and kube-apiserver's, open for the cluster's life

	mu      sync.Mutex
	running bool    // the API server (and the workload processes) are up
	closed  bool    // Close was called
	procs   []*proc // the workload processes while running
}

// Start starts n clusters in parallel, named edge-0 … edge-<n-1>, and stops them in
// t.Cleanup. It fails the test with t.Fatal if any of them does not start, and when
// KUBEBUILDER_ASSETS is unset or lacks the binaries (it does not skip: a skipped
// end-to-end test hides failures).
//
// When the test has failed by cleanup time, the clusters' logs are kept and their
// folder is logged.
func Start(t testing.TB, n int, opts Options) []*Cluster {
	t.Helper()
	if _, err := assetsDir(opts); err != nil {
		t.Fatal(err)
	}
	if n < 1 {
		t.Fatalf("edge: Start needs at least one cluster, got n=%d", n)
	}

	clusters := make([]*Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			clusters[i], errs[i] = StartOne(t.Context(), fmt.Sprintf("edge-%d", i), opts)
		})
	}
	wg.Wait()

	started := slices.DeleteFunc(slices.Clone(clusters), func(c *Cluster) bool { return c == nil })
	t.Cleanup(func() {
		keepLogs := t.Failed()
		errs := make([]error, len(started))
		var wg sync.WaitGroup
		for i, c := range started {
			wg.Go(func() { errs[i] = c.shutdown(keepLogs) })
		}
		wg.Wait()
		for i, c := range started {
			if keepLogs {
				t.Logf("edge: cluster %s: logs kept in %s", c.name, c.logDir())
			}
			if errs[i] != nil {
				t.Errorf("edge: closing cluster %s (logs in %s): %v", c.name, c.logDir(), errs[i])
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return clusters
}

// StartOne starts one cluster named name (a DNS label; with workloads its Node is
// called <name>-node) and returns once its API server is ready and, with workloads,
// its Node is Ready and schedulable. The caller must Close it.
//
// ctx bounds the start; StartOne does not keep it.
func StartOne(ctx context.Context, name string, opts Options) (*Cluster, error) {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return nil, fmt.Errorf("edge: invalid cluster name %q: %s", name, strings.Join(errs, "; "))
	}
	assets, err := assetsDir(opts)
	if err != nil {
		return nil, err
	}
	sweepOnce.Do(sweepOrphans)
	dir, err := os.MkdirTemp("", dirPrefix+name+"-")
	if err != nil {
		return nil, fmt.Errorf("edge: creating the folder of cluster %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("edge: creating the folder of cluster %s: %w", name, err)
	}
	c := &Cluster{name: name, opts: opts, assets: assets, dir: dir}
	if err := c.start(ctx); err != nil {
		_ = c.shutdown(true)
		return nil, fmt.Errorf("edge: starting cluster %s (logs in %s): %w", name, c.logDir(), err)
	}
	return c, nil
}

// Name returns the cluster's name.
func (c *Cluster) Name() string { return c.name }

// Kubeconfig returns a self-contained kubeconfig for a cluster-admin (system:masters)
// user: the CA and the client certificate and key are embedded, the current context
// is set and the server is https://127.0.0.1:PORT. It stays valid across Stop and
// Restart.
func (c *Cluster) Kubeconfig() []byte { return bytes.Clone(c.kubeconfig) }

// RESTConfig returns a fresh copy of the cluster-admin REST config that Kubeconfig
// describes.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.cfg) }

// Stop stops the API server and the workload processes, as when an edge goes offline:
// requests to the cluster's port are then refused. etcd keeps running with its data.
// Stopping a stopped cluster does nothing.
//
// The graceful stop is bounded by the processes' own stop timeout, not by ctx.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := c.stopLocked(); err != nil {
		return fmt.Errorf("edge: stopping cluster %s (logs in %s): %w", c.name, c.logDir(), err)
	}
	return nil
}

// Restart starts the API server again on the same port, with the same etcd data and
// the same serving certificate and credentials, so objects created before Stop are
// still there and the old Kubeconfig keeps working; with workloads it starts the
// workload processes again. It returns once /readyz is ok. Restarting a running
// cluster stops it first.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errClosed
	}
	if err := c.restartLocked(ctx); err != nil {
		return fmt.Errorf("edge: restarting cluster %s (logs in %s): %w", c.name, c.logDir(), err)
	}
	return nil
}

// Close stops every process of the cluster and removes its folder. It is idempotent.
func (c *Cluster) Close() error { return c.shutdown(false) }

// start runs etcd and the API server for the first time.
func (c *Cluster) start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, sub := range []string{"certs", "etcd", "logs"} {
		if err := os.Mkdir(filepath.Join(c.dir, sub), 0o700); err != nil {
			return err
		}
	}
	etcdLog, err := c.openLog("etcd.log")
	if err != nil {
		return err
	}
	apiLog, err := c.openLog("kube-apiserver.log")
	if err != nil {
		return err
	}

	timeout := startTimeout(ctx)
	// CertDir and DataDir are ours, so envtest keeps them when the API server stops:
	// a restart finds apiserver.crt and reuses it (and the service-account keys), and
	// the client-certificate CA lives in the APIServer's Authn, which Start reuses.
	// The port is picked on the first start and kept in APIServer.SecurePort.
	c.plane = &envtest.ControlPlane{
		Etcd: &envtest.Etcd{
			Path:         filepath.Join(c.assets, "etcd"),
			DataDir:      filepath.Join(c.dir, "etcd"),
			StartTimeout: timeout,
			StopTimeout:  processStopTimeout,
			Out:          etcdLog,
			Err:          etcdLog,
		},
		APIServer: &envtest.APIServer{
			Path:         filepath.Join(c.assets, "kube-apiserver"),
			CertDir:      filepath.Join(c.dir, "certs"),
			StartTimeout: timeout,
			StopTimeout:  apiServerStopTimeout,
			Out:          apiLog,
			Err:          apiLog,
		},
	}
	if err := c.plane.Start(); err != nil {
		// The API server's log, when it got that far, says more than etcd's shutdown.
		culprit := "kube-apiserver.log"
		if logTail(c.logPath(culprit)) == "" {
			culprit = "etcd.log"
		}
		return fmt.Errorf("starting etcd and kube-apiserver: %w%s", err, c.logTails(culprit))
	}
	c.running = true

	user, err := c.plane.AddUser(envtest.User{Name: adminUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("provisioning the admin user: %w", err)
	}
	c.cfg = rest.CopyConfig(user.Config())
	c.cfg.Host = "https://" + c.plane.APIServer.SecureServing.HostPort()
	if c.kubeconfig, err = kubeconfigFor(c.name, c.cfg); err != nil {
		return err
	}
	if err := waitReady(ctx, c.cfg, true); err != nil {
		return fmt.Errorf("waiting for kube-apiserver: %w%s", err, c.logTails("kube-apiserver.log"))
	}
	if c.opts.Workloads {
		if err := c.setUpWorkloads(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) stopLocked() error {
	if !c.running {
		return nil
	}
	err := c.stopWorkloads()
	if stopErr := c.plane.APIServer.Stop(); stopErr != nil {
		// A stop that timed out ends with SIGKILL; it counts as stopped once the
		// port is free again.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		freeErr := waitPortFree(ctx, c.plane.APIServer.SecureServing.HostPort())
		cancel()
		if freeErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping kube-apiserver: %w", stopErr))
		}
	}
	c.running = false
	return err
}

func (c *Cluster) restartLocked(ctx context.Context) error {
	if err := c.stopLocked(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	hostPort := c.plane.APIServer.SecureServing.HostPort()
	if err := waitPortFree(ctx, hostPort); err != nil {
		return err
	}
	c.plane.APIServer.StartTimeout = startTimeout(ctx)
	if err := c.plane.APIServer.Start(); err != nil {
		// A failed start may leave the process running: stop it, so that running=false holds.
		_ = c.plane.APIServer.Stop()
		return fmt.Errorf("starting kube-apiserver on %s: %w%s", hostPort, err, c.logTails("kube-apiserver.log"))
	}
	c.running = true
	if got := c.plane.APIServer.SecureServing.HostPort(); "https://"+got != c.cfg.Host {
		return fmt.Errorf("kube-apiserver came back on %s instead of %s", got, c.cfg.Host)
	}
	if err := waitReady(ctx, c.cfg, false); err != nil {
		return fmt.Errorf("waiting for kube-apiserver: %w%s", err, c.logTails("kube-apiserver.log"))
	}
	if c.opts.Workloads {
		if err := c.startWorkloads(); err != nil {
			return err
		}
	}
	return nil
}

// shutdown stops everything; keepLogs keeps the logs folder (and removes the rest).
func (c *Cluster) shutdown(keepLogs bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	err := c.stopWorkloads()
	if c.plane != nil {
		if stopErr := c.plane.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping etcd and kube-apiserver: %w", stopErr))
		}
	}
	c.running = false
	for _, f := range c.logFiles {
		_ = f.Close()
	}
	if keepLogs {
		removeAllButLogs(c.dir)
	} else if rmErr := os.RemoveAll(c.dir); rmErr != nil {
		err = errors.Join(err, rmErr)
	}
	return err
}

// removeAllButLogs empties a cluster folder but for its logs.
func removeAllButLogs(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.Name() != "logs" {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

func (c *Cluster) logDir() string { return filepath.Join(c.dir, "logs") }

func (c *Cluster) logPath(name string) string { return filepath.Join(c.logDir(), name) }

func (c *Cluster) openLog(name string) (*os.File, error) {
	f, err := os.OpenFile(c.logPath(name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	c.logFiles = append(c.logFiles, f)
	return f, nil
}

// logTails returns the last lines of the named logs, for error messages.
func (c *Cluster) logTails(names ...string) string {
	var b strings.Builder
	for _, name := range names {
		if tail := logTail(c.logPath(name)); tail != "" {
			fmt.Fprintf(&b, "\n--- last lines of %s:\n%s", c.logPath(name), tail)
		}
	}
	return b.String()
}

func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	tail := strings.Join(lines, "\n")
	if len(tail) > 4000 {
		tail = "…" + tail[len(tail)-4000:]
	}
	return tail
}

// assetsDir returns KUBEBUILDER_ASSETS after checking it holds what opts needs.
func assetsDir(opts Options) (string, error) {
	const howTo = "run `make test`, or build the binaries with `hack/testbin.sh` and `export " +
		assetsEnv + "=$(hack/testbin.sh)`"
	dir := os.Getenv(assetsEnv)
	if dir == "" {
		return "", fmt.Errorf("edge: %s is not set: %s", assetsEnv, howTo)
	}
	need := controlPlaneFiles
	if opts.Workloads {
		need = slices.Concat(controlPlaneFiles, workloadFiles)
	}
	var missing []string
	for _, name := range need {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || !fi.Mode().IsRegular() {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("edge: %s=%s lacks %s: %s", assetsEnv, dir, strings.Join(missing, ", "), howTo)
	}
	return dir, nil
}

// startTimeout is processStartTimeout, shortened to ctx's deadline.
func startTimeout(ctx context.Context) time.Duration {
	d := processStartTimeout
	if deadline, ok := ctx.Deadline(); ok {
		d = min(d, max(time.Until(deadline), time.Second))
	}
	return d
}

// kubeconfigFor writes cfg as a kubeconfig with embedded credentials; cluster and
// context are named after the edge cluster.
func kubeconfigFor(name string, cfg *rest.Config) ([]byte, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[name] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name+"-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name + "-admin"}
	kc.CurrentContext = name
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return nil, fmt.Errorf("writing the kubeconfig: %w", err)
	}
	return data, nil
}

// waitReady polls /readyz (and, on a first start, the default namespace, which the API
// server creates shortly after it is healthy) until they answer.
func waitReady(ctx context.Context, cfg *rest.Config, defaultNamespace bool) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, readyTimeout, true, func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			last = fmt.Errorf("/readyz: %w", err)
			return false, nil
		}
		if string(body) != "ok" {
			last = fmt.Errorf("/readyz said %q", body)
			return false, nil
		}
		if defaultNamespace {
			if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
				last = fmt.Errorf("namespace default: %w", err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last: %w)", err, last)
	}
	return err
}

// waitPortFree waits until hostPort can be bound again, in case something else took
// the port while the API server was down.
func waitPortFree(ctx context.Context, hostPort string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		l, err := net.Listen("tcp", hostPort)
		if err != nil {
			last = err
			return false, nil
		}
		return true, l.Close()
	})
	if err != nil && last != nil {
		return fmt.Errorf("the cluster's port %s is taken: %w", hostPort, last)
	}
	return err
}
