package e2e

// The resilience suite (issue 4): offline clusters, terminate while offline,
// SIGKILLed hubs, hub replicas on one etcd, update / rollback and dependency
// ordering. Run it alone with
//
//	go test ./test/e2e/ -run Resilience
//
// The crash test is replayed with ATOLL_CRASH_SEED=<the seed it logged>;
// ATOLL_CRASH_ROUNDS sets its number of kill points (default 20) and
// ATOLL_CRASH_EARLY the share of kills drawn from the first 150 ms after the
// call, while the call and its applies run (default 0: all are drawn from
// 0–1500 ms; 0.5 makes a stress run, where the redundant share can pass 5%:
// every kill during the sync costs up to one apply again per cluster).

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/atoll-edge/atoll/pkg/client"
	"github.com/atoll-edge/atoll/test/edge"
)

// Timings given to every hub of the suite (startHubProcess already sets the
// backoff cap to 2s and the probe interval to 500ms).
const (
	resBackoffCap = 2 * time.Second
	resLeaseTTL   = 2 * time.Second
	resProvider   = "telco"
	// resEtcdPrefix is the hub's default --etcd-prefix.
	resEtcdPrefix = "/atoll"
)

var resHubFlags = []string{"--cluster-backoff-cap", "2s", "--cluster-lease-ttl", "2s"}

// ---------------------------------------------------------------------------
// Helpers that also work for benchmarks (testing.TB).

// mustTB is must for testing.TB.
func mustTB(tb testing.TB, what string, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("%s: %v", what, err)
	}
}

// freePort is freeAddr for testing.TB.
func freePort(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	mustTB(tb, "free port", err)
	defer l.Close()
	return l.Addr().String()
}

// packChart is tgz for testing.TB.
func packChart(tb testing.TB, dir, top string) []byte {
	tb.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: top + "/" + filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	mustTB(tb, "pack chart "+dir, err)
	mustTB(tb, "pack chart", tw.Close())
	mustTB(tb, "pack chart", gz.Close())
	return buf.Bytes()
}

// launchHub is startHubProcess for testing.TB, with the suite's timings. The
// hub's log is printed (its end) when the test fails.
func launchHub(tb testing.TB, dataDir string, extra ...string) *hubProcess {
	tb.Helper()
	listen := freePort(tb)
	logFile, err := os.CreateTemp(tb.TempDir(), "hub-*.log")
	mustTB(tb, "hub log", err)
	args := append([]string{"serve", "--data-dir", dataDir, "--listen", listen,
		"--cluster-probe-interval", "500ms"}, append(slices.Clone(resHubFlags), extra...)...)
	cmd := exec.Command(atollBin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	mustTB(tb, "start hub", cmd.Start())
	h := &hubProcess{cmd: cmd, url: "http://" + listen, logPath: logFile.Name()}
	tb.Cleanup(func() {
		h.terminate(tb)
		logFile.Close()
		if tb.Failed() {
			tb.Logf("hub pid %d (%s), end of its log:\n%s", cmd.Process.Pid, h.url, fileTail(h.logPath, 30))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(h.url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return h
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("hub not ready after 60s; its log:\n%s", fileTail(h.logPath, 50))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// terminate is hubProcess.stop for testing.TB.
func (h *hubProcess) terminate(tb testing.TB) {
	if h.cmd.ProcessState != nil {
		return
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- h.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = h.cmd.Process.Kill()
		<-done
		tb.Errorf("hub did not stop within 20s of SIGTERM; killed")
	}
}

// kill ends the hub with SIGKILL, as a crash would, and reaps it.
func (h *hubProcess) kill() {
	if h.cmd.ProcessState != nil {
		return
	}
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}

// dumpHubOnFailure logs the end of a startHubProcess hub's log if the test fails.
func dumpHubOnFailure(t *testing.T, name string, h *hubProcess) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s (pid %d, %s), end of its log:\n%s", name, h.cmd.Process.Pid, h.url, fileTail(h.logPath, 30))
		}
	})
}

func fileTail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// hubClient talks to one hub process without keeping connections, so that a
// hub killed and started again never leaves a dead pooled connection behind.
func hubClient(url string) *client.Client {
	c := client.New(url)
	c.HTTP = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{DisableKeepAlives: true}}
	return c
}

// startExternalEtcd is internal/hub's startEtcd: the etcd binary of
// KUBEBUILDER_ASSETS on free ports, killed in cleanup. It returns the client URL.
func startExternalEtcd(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "etcd")
	if _, err := os.Stat(bin); err != nil {
		tb.Fatalf("no etcd binary at %s: set KUBEBUILDER_ASSETS (make test, or hack/testbin.sh)", bin)
	}
	clientAddr, peer := freePort(tb), freePort(tb)
	cmd := exec.Command(bin, "--data-dir", tb.TempDir(), "--name", "ext",
		"--listen-client-urls", "http://"+clientAddr, "--advertise-client-urls", "http://"+clientAddr,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "ext=http://"+peer, "--log-level", "error")
	logFile, err := os.Create(filepath.Join(tb.TempDir(), "etcd.log"))
	mustTB(tb, "etcd log", err)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	mustTB(tb, "start etcd", cmd.Start())
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", clientAddr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return "http://" + clientAddr
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(logFile.Name())
			tb.Fatalf("etcd did not start: %s", data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func etcdClient(tb testing.TB, endpoint string) *clientv3.Client {
	tb.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	mustTB(tb, "etcd client", err)
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// eventually calls cond every 200ms until it says true, and returns how long
// that took; after timeout it fails the test with what cond said last.
func eventually(tb testing.TB, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	tb.Helper()
	start := time.Now()
	last := ""
	for {
		ok, msg := cond()
		if ok {
			return time.Since(start)
		}
		last = msg
		if time.Since(start) > timeout {
			tb.Fatalf("not %s within %s; last: %s", what, timeout, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ---------------------------------------------------------------------------
// The DIG's status, as GET .../status answers it.

type resResource struct {
	GVK struct {
		Kind string `json:"Kind"`
	} `json:"GVK"`
	Name           string `json:"name"`
	DeployedStatus string `json:"deployedStatus"`
	ReadyStatus    string `json:"readyStatus"`
	Message        string `json:"message"`
}

type resCluster struct {
	Cluster      string        `json:"cluster"`
	Connectivity string        `json:"connectivity"`
	Waiting      *int          `json:"waiting"`
	LastError    string        `json:"lastError"`
	Resources    []resResource `json:"resources"`
}

type resAction struct {
	State    string `json:"state"`
	Instance string `json:"instance"`
	Revision int64  `json:"revision"`
}

type digView struct {
	Status         string         `json:"status"`
	Revision       int64          `json:"revision"`
	Revisions      []int64        `json:"revisions"`
	DeployedCounts map[string]int `json:"deployedCounts"`
	ReadyCounts    map[string]int `json:"readyCounts"`
	Clusters       []resCluster   `json:"clusters"`
	Apps           []struct {
		Name     string       `json:"name"`
		Clusters []resCluster `json:"clusters"`
	} `json:"apps"`
	States struct {
		Actions []resAction `json:"actions"`
	} `json:"states"`
}

func getDIG(c *client.Client, dig, query string) (digView, error) {
	var v digView
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.Do(ctx, "GET", dig+"/status?"+query, nil, &v)
	return v, err
}

// on counts the states (deployed or ready, per query) of the resources on a cluster.
func (v digView) on(cluster string) map[string]int {
	out := map[string]int{}
	for _, a := range v.Apps {
		for _, c := range a.Clusters {
			if c.Cluster != cluster {
				continue
			}
			for _, r := range c.Resources {
				s := r.DeployedStatus
				if s == "" {
					s = r.ReadyStatus
				}
				out[s]++
			}
		}
	}
	return out
}

func (v digView) cluster(name string) (resCluster, bool) {
	for _, c := range v.Clusters {
		if c.Cluster == name {
			return c, true
		}
	}
	return resCluster{}, false
}

func (v digView) actions() []string {
	var out []string
	for _, a := range v.States.Actions {
		out = append(out, a.State)
	}
	return out
}

// allIn says whether the counts are exactly n resources in state.
func allIn(counts map[string]int, state string, n int) bool {
	return counts[state] == n && len(counts) == 1
}

// String is a one-line summary for failure messages.
func (v digView) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "state=%s revision=%d deployed=%v ready=%v", v.Status, v.Revision, v.DeployedCounts, v.ReadyCounts)
	for _, c := range v.Clusters {
		w := "-"
		if c.Waiting != nil {
			w = strconv.Itoa(*c.Waiting)
		}
		fmt.Fprintf(&b, " | %s %s waiting=%s %v", c.Cluster, c.Connectivity, w, v.on(c.Cluster))
		if c.LastError != "" {
			fmt.Fprintf(&b, " lastError=%.120q", c.LastError)
		}
	}
	for _, a := range v.Apps {
		for _, c := range a.Clusters {
			for _, r := range c.Resources {
				if r.Message != "" {
					fmt.Fprintf(&b, " | %s/%s %s: %.160q", c.Cluster, a.Name, r.Name, r.Message)
				}
			}
		}
	}
	fmt.Fprintf(&b, " | actions=%s", strings.Join(v.actions(), ","))
	return b.String()
}

// ---------------------------------------------------------------------------
// What the clusters hold.

type kubeObj struct {
	Kind, Namespace, Name string
	App                   string
	UID, RV               string
	Replicas              int32  // Deployments
	Greeting              string // ConfigMaps
	Created               time.Time
}

// digObjects lists the ConfigMaps, Deployments and Services labelled with the
// DIG (any DIG when dig is ""), in every namespace, by "Kind/namespace/name".
func digObjects(cs *kubernetes.Clientset, dig string) (map[string]kubeObj, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: "atoll.dev/dig"}
	if dig != "" {
		sel.LabelSelector = "atoll.dev/dig=" + dig
	}
	out := map[string]kubeObj{}
	add := func(kind string, m metav1.ObjectMeta, o kubeObj) {
		o.Kind, o.Namespace, o.Name, o.App = kind, m.Namespace, m.Name, m.Labels["atoll.dev/app"]
		o.UID, o.RV, o.Created = string(m.UID), m.ResourceVersion, m.CreationTimestamp.Time
		out[kind+"/"+m.Namespace+"/"+m.Name] = o
	}
	cms, err := cs.CoreV1().ConfigMaps("").List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, cm := range cms.Items {
		add("ConfigMap", cm.ObjectMeta, kubeObj{Greeting: cm.Data["greeting"]})
	}
	deps, err := cs.AppsV1().Deployments("").List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, d := range deps.Items {
		var r int32
		if d.Spec.Replicas != nil {
			r = *d.Spec.Replicas
		}
		add("Deployment", d.ObjectMeta, kubeObj{Replicas: r})
	}
	svcs, err := cs.CoreV1().Services("").List(ctx, sel)
	if err != nil {
		return nil, err
	}
	for _, s := range svcs.Items {
		add("Service", s.ObjectMeta, kubeObj{})
	}
	return out, nil
}

func objKeys(m map[string]kubeObj) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ---------------------------------------------------------------------------
// Setting up a deployment of the web chart.

// fleet is a few edge clusters registered at a hub as site-0 … site-<n-1>.
type fleet struct {
	clusters []*edge.Cluster
	kube     []*kubernetes.Clientset
	names    []string
}

func newFleet(tb testing.TB, clusters []*edge.Cluster) *fleet {
	f := &fleet{clusters: clusters}
	for i, cl := range clusters {
		cs, err := kubernetes.NewForConfig(cl.RESTConfig())
		mustTB(tb, "kube client", err)
		f.kube = append(f.kube, cs)
		f.names = append(f.names, fmt.Sprintf("site-%d", i))
	}
	return f
}

// register creates the provider and registers every cluster labelled edge,
// then waits until the hub reaches them.
func (f *fleet) register(tb testing.TB, c *client.Client) {
	tb.Helper()
	ctx := context.Background()
	mustTB(tb, "provider", c.CreateClusterProvider(ctx, resProvider))
	for i, cl := range f.clusters {
		mustTB(tb, "register "+f.names[i], c.RegisterCluster(ctx, resProvider, f.names[i], cl.Kubeconfig(), "edge"))
	}
	f.waitReachable(tb, c)
}

func (f *fleet) waitReachable(tb testing.TB, c *client.Client, which ...int) {
	tb.Helper()
	if len(which) == 0 {
		for i := range f.clusters {
			which = append(which, i)
		}
	}
	for _, i := range which {
		eventually(tb, 30*time.Second, f.names[i]+" reachable", func() (bool, string) {
			st, err := c.ClusterStatus(context.Background(), resProvider, f.names[i])
			return err == nil && reachable(st), fmt.Sprintf("%+v %v", st, err)
		})
	}
}

// objects lists the DIG's objects on every cluster (dig "" for any DIG's).
func (f *fleet) objects(dig string) ([]map[string]kubeObj, error) {
	out := make([]map[string]kubeObj, len(f.kube))
	for i, cs := range f.kube {
		m, err := digObjects(cs, dig)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.names[i], err)
		}
		out[i] = m
	}
	return out, nil
}

// digSetup describes a composite app of web-chart apps and one DIG of it.
type digSetup struct {
	project, compositeApp, dig, namespace string
	apps                                  []string                  // app names, each the web chart
	intents                               map[string]map[string]any // app → placement intent
	values                                map[string]map[string]any // app → override values
	dependsOn                             map[string]string         // app → the app it needs Ready
}

func (s digSetup) caPath() string {
	return "/v2/projects/" + s.project + "/composite-apps/" + s.compositeApp + "/v1"
}

func (s digSetup) digPath() string { return s.caPath() + "/deployment-intent-groups/" + s.dig }

func (s digSetup) digBody() map[string]any {
	var overrides []map[string]any
	for _, app := range s.apps {
		if v := s.values[app]; v != nil {
			overrides = append(overrides, map[string]any{"app": app, "values": v})
		}
	}
	return obj(s.dig, map[string]any{"compositeProfile": "none", "version": "r1", "namespace": s.namespace, "overrideValues": overrides})
}

// byLabel places an app on every cluster labelled edge; onClusters on the named ones.
func byLabel() map[string]any {
	return map[string]any{"allOf": []map[string]any{{"clusterProvider": resProvider, "clusterLabel": "edge"}}}
}

func onClusters(names ...string) map[string]any {
	var terms []map[string]any
	for _, n := range names {
		terms = append(terms, map[string]any{"clusterProvider": resProvider, "cluster": n})
	}
	return map[string]any{"allOf": terms}
}

// create makes the project, the composite app, its apps and dependencies, the
// DIG and its intents, and approves it. It returns the DIG's path.
func (s digSetup) create(tb testing.TB, c *client.Client) string {
	tb.Helper()
	ctx := context.Background()
	mustTB(tb, "project", c.CreateProject(ctx, s.project))
	ca := s.caPath()
	mustTB(tb, "composite app", c.Do(ctx, "POST", "/v2/projects/"+s.project+"/composite-apps", obj(s.compositeApp, map[string]any{"compositeAppVersion": "v1"}), nil))
	chart := packChart(tb, filepath.Join(chartDir, "web"), "web")
	for _, app := range s.apps {
		mustTB(tb, "app "+app, c.Multipart(ctx, "POST", ca+"/apps", obj(app, nil), chart, nil))
	}
	for app, dep := range s.dependsOn {
		mustTB(tb, "dependency of "+app, c.Do(ctx, "POST", ca+"/apps/"+app+"/dependency", obj("needs-"+dep, map[string]any{"app": dep, "opStatus": "Ready"}), nil))
	}
	mustTB(tb, "composite profile", c.Do(ctx, "POST", ca+"/composite-profiles", obj("none", nil), nil))
	mustTB(tb, "dig", c.Do(ctx, "POST", ca+"/deployment-intent-groups", s.digBody(), nil))
	dig := s.digPath()
	mustTB(tb, "gpi", c.Do(ctx, "POST", dig+"/generic-placement-intents", obj("placement", nil), nil))
	for _, app := range s.apps {
		mustTB(tb, "intent "+app, c.Do(ctx, "POST", dig+"/generic-placement-intents/placement/app-intents", obj(app, map[string]any{"app": app, "intent": s.intents[app]}), nil))
	}
	mustTB(tb, "dig intent", c.Do(ctx, "POST", dig+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "placement"}}), nil))
	mustTB(tb, "approve", c.Do(ctx, "POST", dig+"/approve", nil, nil))
	return dig
}

// putValues replaces the DIG's override values.
func (s *digSetup) putValues(tb testing.TB, c *client.Client, app string, values map[string]any) {
	tb.Helper()
	if s.values == nil {
		s.values = map[string]map[string]any{}
	}
	s.values[app] = values
	mustTB(tb, "PUT the DIG", c.Do(context.Background(), "PUT", s.digPath(), s.digBody(), nil))
}

func lifecycleCall(c *client.Client, dig, op string, body any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return c.Do(ctx, "POST", dig+"/"+op, body, nil)
}

// ---------------------------------------------------------------------------
// Apply counters.

// applyCounts are atoll_rsync_applies_total by result.
type applyCounts map[string]float64

var resultLabel = regexp.MustCompile(`result="([a-z]+)"`)

func scrapeApplies(url string) (applyCounts, error) {
	hc := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	out := applyCounts{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "atoll_rsync_applies_total{") {
			continue
		}
		m := resultLabel.FindStringSubmatch(line)
		f := strings.Fields(line)
		if m == nil || len(f) < 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return nil, fmt.Errorf("metric line %q: %w", line, err)
		}
		out[m[1]] += v
	}
	return out, nil
}

func (a applyCounts) add(b applyCounts) {
	for k, v := range b {
		a[k] += v
	}
}

func (a applyCounts) total() float64 {
	t := 0.0
	for _, v := range a {
		t += v
	}
	return t
}

// share is the redundant share: unchanged applies over all applies, and over
// the applies that reached the cluster (failed ones left out).
func (a applyCounts) share() (ofAll, ofSucceeded float64) {
	if t := a.total(); t > 0 {
		ofAll = a["unchanged"] / t
	}
	if t := a.total() - a["failed"]; t > 0 {
		ofSucceeded = a["unchanged"] / t
	}
	return ofAll, ofSucceeded
}

func (a applyCounts) String() string {
	return fmt.Sprintf("created=%.0f configured=%.0f unchanged=%.0f failed=%.0f", a["created"], a["configured"], a["unchanged"], a["failed"])
}

// ---------------------------------------------------------------------------
// 1. A cluster offline during instantiate.

func TestResilienceOfflineCluster(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, edge.Start(t, 3, edge.Options{}))
	hub := startHubProcess(t, t.TempDir(), freeAddr(t), resHubFlags...)
	dumpHubOnFailure(t, "hub", hub)
	c := hubClient(hub.url)
	f.register(t, c)
	s := digSetup{project: "shop", compositeApp: "retail", dig: "launch", namespace: "retail", apps: []string{"web"},
		intents: map[string]map[string]any{"web": byLabel()}, values: map[string]map[string]any{"web": {"replicas": 3}}}
	dig := s.create(t, c)

	// site-2 goes offline before the instantiate.
	must(t, "stop site-2", f.clusters[2].Stop(ctx))
	waitStatus(t, c, resProvider, "site-2", 30*time.Second, "unreachable", unreachable)
	instantiated := time.Now()
	must(t, "instantiate", lifecycleCall(c, dig, "instantiate", nil))

	// The other two finish at normal speed; site-2's resources wait, and its
	// cluster entry says why and how much.
	var st digView
	took := eventually(t, 30*time.Second, "Applied on site-0 and site-1, Pending on unreachable site-2", func() (bool, string) {
		var err error
		st, err = getDIG(c, dig, "status=deployed")
		if err != nil {
			return false, err.Error()
		}
		down, _ := st.cluster("site-2")
		ok := st.Status == "Instantiated" && allIn(st.on("site-0"), "Applied", 3) && allIn(st.on("site-1"), "Applied", 3) &&
			allIn(st.on("site-2"), "Pending", 3) && down.Connectivity == "Unreachable" && down.Waiting != nil && *down.Waiting > 0
		return ok, st.String()
	})
	down, _ := st.cluster("site-2")
	t.Logf("healthy clusters Applied %s after the instantiate; site-2: %s, waiting %d, lastError %q", took.Round(time.Millisecond), down.Connectivity, *down.Waiting, down.LastError)
	if took > 15*time.Second {
		t.Errorf("the healthy clusters took %s: the offline one slowed them down", took)
	}
	if down.LastError == "" {
		t.Errorf("site-2's entry has no lastError: %s", st)
	}
	before := make([]map[string]kubeObj, 2) // site-2 does not answer
	for i := range before {
		var err error
		before[i], err = digObjects(f.kube[i], "launch")
		must(t, "objects", err)
		if len(before[i]) != 3 {
			t.Fatalf("%s holds %v, want the web chart's 3 objects", f.names[i], objKeys(before[i]))
		}
	}

	// Stay offline beyond the backoff cap; the healthy clusters are left alone.
	time.Sleep(time.Until(instantiated.Add(2*resBackoffCap + time.Second)))
	st, err := getDIG(c, dig, "status=deployed")
	must(t, "status", err)
	if !allIn(st.on("site-2"), "Pending", 3) || !allIn(st.on("site-0"), "Applied", 3) {
		t.Fatalf("while site-2 is still offline: %s", st)
	}

	restarting := time.Now()
	must(t, "restart site-2", f.clusters[2].Restart(ctx))
	restartTook := time.Since(restarting)
	conv := eventually(t, 30*time.Second, "Applied on site-2 after it returned", func() (bool, string) {
		st, err := getDIG(c, dig, "status=deployed")
		if err != nil {
			return false, err.Error()
		}
		objs, err := digObjects(f.kube[2], "launch")
		if err != nil {
			return false, err.Error()
		}
		return allIn(st.DeployedCounts, "Applied", 9) && len(objs) == 3, fmt.Sprintf("%s; site-2 holds %v", st, objKeys(objs))
	})
	t.Logf("site-2 converged %s after its restart returned (the restart took %s, waiting for /readyz; %s after the instantiate)",
		conv.Round(time.Millisecond), restartTook.Round(time.Millisecond), time.Since(instantiated).Round(time.Millisecond))
	if conv > resBackoffCap+10*time.Second {
		t.Errorf("site-2 took %s to converge after it returned; the backoff cap is %s", conv, resBackoffCap)
	}

	// Nothing on the healthy clusters was deleted, recreated or even touched.
	after, err := f.objects("launch")
	must(t, "objects", err)
	for i := 0; i < 2; i++ {
		for k, b := range before[i] {
			a, ok := after[i][k]
			switch {
			case !ok:
				t.Errorf("%s: %s was deleted across the reconnect", f.names[i], k)
			case a.UID != b.UID:
				t.Errorf("%s: %s was recreated across the reconnect (uid %s → %s)", f.names[i], k, b.UID, a.UID)
			case a.RV != b.RV:
				t.Errorf("%s: %s was modified across the reconnect (resourceVersion %s → %s)", f.names[i], k, b.RV, a.RV)
			}
		}
		if len(after[i]) != len(before[i]) {
			t.Errorf("%s: objects %v after, %v before", f.names[i], objKeys(after[i]), objKeys(before[i]))
		}
	}
	for _, o := range after[2] {
		if o.Kind == "Deployment" && o.Replicas != 3 {
			t.Errorf("site-2 Deployment replicas %d, want 3", o.Replicas)
		}
	}
	counts, err := scrapeApplies(hub.url)
	must(t, "metrics", err)
	t.Logf("applies: %s", counts)
	if counts["unchanged"] > 0 || counts["created"] != 9 {
		t.Errorf("applies %s: want exactly the 9 creations, nothing applied again", counts)
	}
}

// ---------------------------------------------------------------------------
// 2. Terminate while a cluster is offline.

func TestResilienceTerminateWhileOffline(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, edge.Start(t, 2, edge.Options{}))
	hub := startHubProcess(t, t.TempDir(), freeAddr(t), resHubFlags...)
	dumpHubOnFailure(t, "hub", hub)
	c := hubClient(hub.url)
	f.register(t, c)
	s := digSetup{project: "shop", compositeApp: "retail", dig: "gone", namespace: "retail", apps: []string{"web"},
		intents: map[string]map[string]any{"web": byLabel()}}
	dig := s.create(t, c)
	must(t, "instantiate", lifecycleCall(c, dig, "instantiate", nil))
	eventually(t, 30*time.Second, "Applied on both clusters", func() (bool, string) {
		st, err := getDIG(c, dig, "status=deployed")
		return err == nil && allIn(st.DeployedCounts, "Applied", 6), fmt.Sprintf("%s %v", st, err)
	})

	must(t, "stop site-1", f.clusters[1].Stop(ctx))
	must(t, "terminate", lifecycleCall(c, dig, "terminate", nil))
	eventually(t, 30*time.Second, "deleted from site-0", func() (bool, string) {
		objs, err := digObjects(f.kube[0], "gone")
		return err == nil && len(objs) == 0, fmt.Sprintf("site-0 holds %v (%v)", objKeys(objs), err)
	})
	// Terminating, not Terminated, as long as site-1 still holds the DIG's objects.
	hold := time.Now().Add(2*resBackoffCap + time.Second)
	var st digView
	for time.Now().Before(hold) {
		var err error
		st, err = getDIG(c, dig, "status=deployed")
		must(t, "status", err)
		if st.Status != "Terminating" {
			t.Fatalf("while site-1 is offline the DIG is %s, want Terminating: %s", st.Status, st)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if e, _ := st.cluster("site-1"); e.Waiting == nil || *e.Waiting != 3 || e.Connectivity != "Unreachable" {
		t.Errorf("site-1's entry while offline and Terminating: %+v, want Unreachable with 3 deletes waiting; %s", e, st)
	}
	t.Logf("Terminating for %s with site-1 offline: %s", 2*resBackoffCap+time.Second, st)

	must(t, "restart site-1", f.clusters[1].Restart(ctx))
	took := eventually(t, 30*time.Second, "Terminated once site-1 returned", func() (bool, string) {
		var err error
		st, err = getDIG(c, dig, "status=deployed")
		return err == nil && st.Status == "Terminated", fmt.Sprintf("%s %v", st, err)
	})
	t.Logf("Terminated %s after site-1 returned", took.Round(time.Millisecond))
	objs, err := f.objects("")
	must(t, "objects", err)
	for i, m := range objs {
		if len(m) != 0 {
			t.Errorf("%s still holds %v", f.names[i], objKeys(m))
		}
	}
	if got, want := strings.Join(st.actions(), ","), "Created,Approved,Instantiated,Terminating,Terminated"; got != want {
		t.Errorf("stateInfo %s, want %s", got, want)
	}
}

// ---------------------------------------------------------------------------
// 3. SIGKILLed hubs.

// crashWorld is a DIG of the web chart on a few clusters, driven through hub
// processes that share an external etcd and a data dir (for the secret key).
type crashWorld struct {
	tb      testing.TB
	etcd    string
	dataDir string
	fleet   *fleet
	setup   digSetup
	dig     string
	cli     *clientv3.Client
	hub     *hubProcess
	c       *client.Client
	hubs    int         // processes started
	applies applyCounts // summed over the processes
	lost    int         // processes whose counters could not be read before the kill
}

func newCrashWorld(tb testing.TB, clusters int) *crashWorld {
	w := &crashWorld{tb: tb, etcd: startExternalEtcd(tb), dataDir: tb.TempDir(), applies: applyCounts{}}
	w.cli = etcdClient(tb, w.etcd)
	w.fleet = newFleet(tb, edge.Start(tb, clusters, edge.Options{}))
	w.startHub()
	w.fleet.register(tb, w.c)
	// Two apps of the web chart: the rounds change web's values; web-b stays
	// as it is and must never be applied again.
	w.setup = digSetup{project: "crash", compositeApp: "retail", dig: "crashy", namespace: "crash", apps: []string{"web", "web-b"},
		intents: map[string]map[string]any{"web": byLabel(), "web-b": byLabel()},
		values:  map[string]map[string]any{"web": {"replicas": 1, "greeting": "g0"}, "web-b": {"replicas": 1, "greeting": "b"}}}
	w.dig = w.setup.create(tb, w.c)
	return w
}

// perCluster is how many resources the DIG puts on each cluster.
func (w *crashWorld) perCluster() int { return 3 * len(w.setup.apps) }

func (w *crashWorld) startHub() {
	w.hub = launchHub(w.tb, w.dataDir, "--etcd-endpoints", w.etcd)
	w.c = hubClient(w.hub.url)
	w.hubs++
}

// killHub reads the hub's apply counters (best effort) and SIGKILLs it. It
// returns the counters read.
func (w *crashWorld) killHub() applyCounts {
	counts, err := scrapeApplies(w.hub.url)
	if err == nil {
		w.applies.add(counts)
	} else {
		w.lost++
	}
	w.hub.kill()
	return counts
}

// waitOwned waits until the current hub owns every cluster: a hub started
// after a kill owns none until the dead one's lease expires, and a kill before
// then would find it idle.
func (w *crashWorld) waitOwned() {
	pid := w.hub.cmd.Process.Pid
	eventually(w.tb, 2*resLeaseTTL+10*time.Second, fmt.Sprintf("every cluster owned by hub pid %d", pid), func() (bool, string) {
		own, err := clusterOwners(w.cli)
		ok := err == nil && len(own) == len(w.fleet.kube)
		for _, p := range own {
			ok = ok && p == pid
		}
		return ok, fmt.Sprintf("owners %v %v", own, err)
	})
}

// finish reads the last hub's counters.
func (w *crashWorld) finish() {
	counts, err := scrapeApplies(w.hub.url)
	mustTB(w.tb, "metrics of the last hub", err)
	w.applies.add(counts)
	w.checkRedone("the last hub", counts)
}

// checkRedone checks one hub process's redundant applies: it may apply again
// only what was in flight when the hub before it was killed, at most one apply
// per cluster (each cluster is synced by one worker at a time). More means it
// applied again what the records said was applied.
func (w *crashWorld) checkRedone(what string, counts applyCounts) {
	if n := len(w.fleet.kube); counts["unchanged"] > float64(n) {
		w.tb.Errorf("%s: the hub process applied %.0f unchanged objects (%s); at most %d applies can have been in flight when the hub before it was killed",
			what, counts["unchanged"], counts, n)
	}
}

type crashOp struct {
	op       string // instantiate, update or terminate
	replicas int
	greeting string
	delay    time.Duration
}

func (o crashOp) String() string {
	if o.op == "terminate" {
		return fmt.Sprintf("terminate, kill after %s", o.delay)
	}
	return fmt.Sprintf("%s replicas=%d greeting=%s, kill after %s", o.op, o.replicas, o.greeting, o.delay)
}

// crashPlan draws at least rounds lifecycle calls: cycles of an instantiate, 0–2
// updates and a terminate, each with a kill 0–1500 ms after the call is sent.
// The call and the applies it causes take tens of milliseconds on these
// clusters (about the first 150 ms), so a share early of the delays is drawn
// from 0–150 ms only, to cut more calls and syncs short; the others from all of
// 0–1500 ms.
func crashPlan(rng *rand.Rand, rounds int, early float64) []crashOp {
	var ops []crashOp
	n := 0
	next := func(op string) {
		n++
		limit := 1500
		if rng.Float64() < early {
			limit = 150
		}
		ops = append(ops, crashOp{op: op, replicas: 1 + rng.IntN(4), greeting: fmt.Sprintf("g%d", n),
			delay: time.Duration(rng.IntN(limit+1)) * time.Millisecond})
	}
	for len(ops) < rounds {
		next("instantiate")
		for range rng.IntN(3) {
			next("update")
		}
		next("terminate")
	}
	return ops
}

// crashEarly is ATOLL_CRASH_EARLY (see crashPlan), or def.
func crashEarly(tb testing.TB, def float64) float64 {
	if s := os.Getenv("ATOLL_CRASH_EARLY"); s != "" {
		f, err := strconv.ParseFloat(s, 64)
		mustTB(tb, "ATOLL_CRASH_EARLY", err)
		return f
	}
	return def
}

// crashSeed is ATOLL_CRASH_SEED, or a new seed.
func crashSeed(tb testing.TB) uint64 {
	if s := os.Getenv("ATOLL_CRASH_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		mustTB(tb, "ATOLL_CRASH_SEED", err)
		return seed
	}
	return uint64(time.Now().UnixNano())
}

type crashReport struct {
	kills     int
	ambiguous int // calls the kill cut off (no answer)
	reissued  int // of those, the ones the killed hub had not recorded
	converge  []time.Duration
}

// crashRounds runs the ops, killing the hub during each, and checks after each
// that the DIG converges to what the calls intended and that its history holds
// every transition once. It starts from the DIG's current (Approved or
// Terminated) state and ends Terminated.
func (w *crashWorld) crashRounds(ops []crashOp, budget time.Duration) crashReport {
	tb := w.tb
	tb.Helper()
	start := time.Now()
	var rep crashReport
	st, err := getDIG(w.c, w.dig, "status=deployed")
	mustTB(tb, "status", err)
	expected := st.actions()
	revision := st.Revision
	nClusters := len(w.fleet.kube)
	var want crashOp // the values the DIG was last instantiated or updated with
	for i, op := range ops {
		if time.Since(start) > budget {
			tb.Fatalf("round %d of %d: the crash rounds exceeded their budget of %s", i+1, len(ops), budget)
		}
		if revision > 0 {
			w.waitOwned()
		}
		if op.op != "terminate" {
			w.setup.putValues(tb, w.c, "web", map[string]any{"replicas": op.replicas, "greeting": op.greeting})
		}
		answered := make(chan error, 1)
		go func(c *client.Client) { answered <- lifecycleCall(c, w.dig, op.op, nil) }(w.c)
		time.Sleep(op.delay)
		killedHad := w.killHub()
		w.checkRedone(fmt.Sprintf("round %d (%s)", i+1, op), killedHad)
		var callErr error
		select {
		case callErr = <-answered:
		case <-time.After(30 * time.Second):
			tb.Fatalf("round %d (%s): the call did not end within 30s of the kill", i+1, op)
		}
		w.startHub()
		rep.kills++

		wantState := "Instantiated"
		if op.op == "terminate" {
			wantState = "Terminating"
		}
		outcome := "2xx"
		var apiErr *client.Error
		switch {
		case callErr == nil:
		case errors.As(callErr, &apiErr):
			tb.Fatalf("round %d (%s): the hub answered %v", i+1, op, callErr)
		default:
			// Cut off by the kill: the transition happened or it did not, once.
			rep.ambiguous++
			st, err := getDIG(w.c, w.dig, "status=deployed")
			mustTB(tb, "status after the kill", err)
			got := st.actions()
			switch {
			case len(got) == len(expected)+1 && got[len(got)-1] == wantState:
				outcome = "cut off, recorded"
			case len(got) == len(expected):
				outcome = "cut off, not recorded, sent again"
				rep.reissued++
				mustTB(tb, fmt.Sprintf("round %d: %s again", i+1, op.op), lifecycleCall(w.c, w.dig, op.op, nil))
			default:
				tb.Fatalf("round %d (%s, cut off: %v): history %v, expected %v plus at most %s", i+1, op, callErr, got, expected, wantState)
			}
		}
		expected = append(expected, wantState)
		if op.op != "terminate" {
			revision++
			want = op
		}

		var last digView
		ahead := ""
		took := eventually(tb, 60*time.Second, fmt.Sprintf("converged after round %d (%s)", i+1, op), func() (bool, string) {
			st, err := getDIG(w.c, w.dig, "status=deployed")
			if err != nil {
				return false, err.Error()
			}
			last = st
			objs, err := w.fleet.objects(w.setup.dig)
			if err != nil {
				return false, err.Error()
			}
			var wrong []string
			for ci, m := range objs {
				if op.op == "terminate" {
					if len(m) > 0 {
						wrong = append(wrong, fmt.Sprintf("%s holds %v", w.fleet.names[ci], objKeys(m)))
					}
					continue
				}
				if len(m) != w.perCluster() {
					wrong = append(wrong, fmt.Sprintf("%s holds %v", w.fleet.names[ci], objKeys(m)))
				}
				for _, o := range m {
					replicas, greeting := int32(want.replicas), want.greeting
					if o.App == "web-b" {
						replicas, greeting = 1, "b"
					}
					if (o.Kind == "Deployment" && o.Replicas != replicas) || (o.Kind == "ConfigMap" && o.Greeting != greeting) {
						wrong = append(wrong, fmt.Sprintf("%s %s/%s replicas=%d greeting=%q", w.fleet.names[ci], o.Kind, o.Name, o.Replicas, o.Greeting))
					}
				}
			}
			var said bool // the status says the call's work is done
			if op.op == "terminate" {
				said = st.Status == "Terminated"
			} else {
				said = st.Status == "Instantiated" && st.Revision == revision && allIn(st.DeployedCounts, "Applied", w.perCluster()*nClusters)
			}
			// The clusters were read after the status: they must show what it said.
			if said && len(wrong) > 0 && ahead == "" {
				ahead = fmt.Sprintf("status %s while the clusters show: %s", st, strings.Join(wrong, "; "))
			}
			return said && len(wrong) == 0, fmt.Sprintf("status %s; clusters: %s", st, strings.Join(wrong, "; "))
		})
		if ahead != "" {
			tb.Errorf("round %d (%s): the status said done before it was: %s", i+1, op, ahead)
		}
		if op.op == "terminate" {
			expected = append(expected, "Terminated")
		}
		rep.converge = append(rep.converge, took)
		if got := last.actions(); !slices.Equal(got, expected) {
			tb.Fatalf("round %d (%s): history %v, want %v (a transition lost or doubled)", i+1, op, got, expected)
		}
		tb.Logf("round %2d: %-55s call: %-34s killed hub's applies: %-50s converged in %s", i+1, op, outcome, killedHad, took.Round(10*time.Millisecond))
	}
	return rep
}

// TestResilienceHubCrash SIGKILLs the hub at 20 or more points of instantiate,
// update and terminate calls on a DIG of two apps on three clusters; after each
// it starts a new hub on the same etcd and checks that the DIG converges to what
// the call intended, with every transition in its history once. At the end
// nothing of the DIG is left anywhere, and the share of redundant applies
// (result "unchanged", summed over the hub processes) is at most 5%; each hub
// process applies again at most what was in flight at the kill before it.
func TestResilienceHubCrash(t *testing.T) {
	seed := crashSeed(t)
	rounds := 20
	if s := os.Getenv("ATOLL_CRASH_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		must(t, "ATOLL_CRASH_ROUNDS", err)
		rounds = n
	}
	early := crashEarly(t, 0)
	t.Logf("crash seed %d, %d rounds, %.0f%% of the kills within 150ms (replay with ATOLL_CRASH_SEED=%d ATOLL_CRASH_ROUNDS=%d ATOLL_CRASH_EARLY=%g)",
		seed, rounds, 100*early, seed, rounds, early)
	ops := crashPlan(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rounds, early)
	w := newCrashWorld(t, 3)
	rep := w.crashRounds(ops, time.Duration(len(ops))*20*time.Second)
	w.finish()

	// Nothing of any DIG is left anywhere, neither on the clusters nor in the
	// applied records.
	objs, err := w.fleet.objects("")
	must(t, "objects", err)
	for i, m := range objs {
		if len(m) != 0 {
			t.Errorf("orphans on %s after the final terminate: %v", w.fleet.names[i], objKeys(m))
		}
	}
	cli := etcdClient(t, w.etcd)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, resEtcdPrefix+"/applied/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	must(t, "applied records", err)
	if len(resp.Kvs) != 0 {
		t.Errorf("%d applied records left after the final terminate, e.g. %s", len(resp.Kvs), resp.Kvs[0].Key)
	}

	var total, worst time.Duration
	for _, d := range rep.converge {
		total += d
		worst = max(worst, d)
	}
	ofAll, ofSucceeded := w.applies.share()
	t.Logf("%d kills over %d hub processes (%d calls cut off, %d of them sent again); convergence mean %s, worst %s",
		rep.kills, w.hubs, rep.ambiguous, rep.reissued, (total / time.Duration(len(rep.converge))).Round(time.Millisecond), worst.Round(time.Millisecond))
	t.Logf("applies over all hub processes: %s (counters of %d killed processes unread); redundant share %.2f%% of all applies, %.2f%% of the successful ones; goal ≤ 1%%: %v",
		w.applies, w.lost, 100*ofAll, 100*ofSucceeded, ofSucceeded <= 0.01)
	if ofSucceeded > 0.05 {
		t.Errorf("redundant applies %.2f%% (%s), want at most 5%%", 100*ofSucceeded, w.applies)
	}
}

// ---------------------------------------------------------------------------
// 4. Two hub replicas on one etcd.

// replicaPID is the process id in a replica id (hostname-pid-nanoseconds).
func replicaPID(id string) int {
	parts := strings.Split(id, "-")
	if len(parts) < 3 {
		return 0
	}
	pid, _ := strconv.Atoi(parts[len(parts)-2])
	return pid
}

// clusterOwners reads the owner keys: cluster name → owner's pid.
func clusterOwners(cli *clientv3.Client) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	prefix := resEtcdPrefix + "/owners/clusters/" + resProvider + "/"
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, kv := range resp.Kvs {
		out[strings.TrimPrefix(string(kv.Key), prefix)] = replicaPID(string(kv.Value))
	}
	return out, nil
}

func TestResilienceReplicas(t *testing.T) {
	etcd := startExternalEtcd(t)
	cli := etcdClient(t, etcd)
	f := newFleet(t, edge.Start(t, 2, edge.Options{}))
	dirA := t.TempDir()
	hubs := []*hubProcess{startHubProcess(t, dirA, freeAddr(t), append([]string{"--etcd-endpoints", etcd}, resHubFlags...)...)}
	hubs = append(hubs, startHubProcess(t, t.TempDir(), freeAddr(t),
		append([]string{"--etcd-endpoints", etcd, "--secret-key-file", filepath.Join(dirA, "secret.key")}, resHubFlags...)...))
	clients := []*client.Client{hubClient(hubs[0].url), hubClient(hubs[1].url)}
	for i, h := range hubs {
		dumpHubOnFailure(t, fmt.Sprintf("replica %d", i), h)
	}
	f.register(t, clients[0])
	f.waitReachable(t, clients[1])
	s := digSetup{project: "shop", compositeApp: "retail", dig: "shared", namespace: "retail", apps: []string{"web"},
		intents: map[string]map[string]any{"web": byLabel()}, values: map[string]map[string]any{"web": {"replicas": 1, "greeting": "one"}}}
	dig := s.create(t, clients[1])

	// 50 concurrent instantiates, 25 on each replica: exactly one wins.
	const calls = 50
	results := make([]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() { results[i] = lifecycleCall(clients[i%2], dig, "instantiate", nil) })
	}
	wg.Wait()
	won := 0
	byCode := map[string]int{}
	for i, err := range results {
		var apiErr *client.Error
		switch {
		case err == nil:
			won++
			byCode["202"]++
		case errors.As(err, &apiErr) && apiErr.Code == 409:
			byCode["409"]++
		default:
			t.Errorf("instantiate %d on replica %d: %v, want 202 or 409", i, i%2, err)
		}
	}
	t.Logf("50 concurrent instantiates: %v", byCode)
	if won != 1 {
		t.Fatalf("%d instantiates won, want exactly one: %v", won, byCode)
	}
	for i, c := range clients {
		eventually(t, 30*time.Second, fmt.Sprintf("Applied as replica %d shows it", i), func() (bool, string) {
			st, err := getDIG(c, dig, "status=deployed")
			return err == nil && allIn(st.DeployedCounts, "Applied", 6) && strings.Join(st.actions(), ",") == "Created,Approved,Instantiated",
				fmt.Sprintf("%s %v", st, err)
		})
	}

	// Who owns the clusters? Kill the replica that owns most of them.
	pids := []int{hubs[0].cmd.Process.Pid, hubs[1].cmd.Process.Pid}
	var own map[string]int
	eventually(t, 10*time.Second, "both clusters owned by a live replica", func() (bool, string) {
		var err error
		own, err = clusterOwners(cli)
		ok := err == nil && len(own) == 2
		for _, pid := range own {
			ok = ok && slices.Contains(pids, pid)
		}
		return ok, fmt.Sprintf("owners %v (replica pids %v) %v", own, pids, err)
	})
	victim := 0
	counts := map[int]int{}
	for _, pid := range own {
		counts[pid]++
	}
	if counts[pids[1]] > counts[pids[0]] {
		victim = 1
	}
	survivor := 1 - victim
	t.Logf("owners before the kill: %v (replica 0 pid %d, replica 1 pid %d); killing replica %d", own, pids[0], pids[1], victim)
	hubs[victim].kill()
	killed := time.Now()

	// New work right away, through the survivor.
	s.putValues(t, clients[survivor], "web", map[string]any{"replicas": 2, "greeting": "two"})
	must(t, "update through the survivor", lifecycleCall(clients[survivor], dig, "update", nil))

	took := eventually(t, resLeaseTTL+10*time.Second, "every cluster owned by the survivor", func() (bool, string) {
		own, err := clusterOwners(cli)
		ok := err == nil && len(own) == 2
		for _, pid := range own {
			ok = ok && pid == pids[survivor]
		}
		return ok, fmt.Sprintf("owners %v %v", own, err)
	})
	t.Logf("the survivor owned every cluster %s after the kill (lease TTL %s)", took.Round(time.Millisecond), resLeaseTTL)
	// The dead replica's lease expires within the TTL of its last keep-alive;
	// the survivor watches the owner keys and claims at once. The slack is for
	// etcd's lease-expiry loop and a busy machine.
	if took > resLeaseTTL+3*time.Second {
		t.Errorf("takeover took %s, want within the lease TTL %s (plus 3s of slack)", took, resLeaseTTL)
	}
	eventually(t, 30*time.Second, "the update applied on every cluster", func() (bool, string) {
		st, err := getDIG(clients[survivor], dig, "status=deployed")
		if err != nil {
			return false, err.Error()
		}
		objs, err := f.objects("shared")
		if err != nil {
			return false, err.Error()
		}
		var wrong []string
		for i, m := range objs {
			for _, o := range m {
				if (o.Kind == "Deployment" && o.Replicas != 2) || (o.Kind == "ConfigMap" && o.Greeting != "two") {
					wrong = append(wrong, fmt.Sprintf("%s %s replicas=%d greeting=%q", f.names[i], o.Kind, o.Replicas, o.Greeting))
				}
			}
			if len(m) != 3 {
				wrong = append(wrong, fmt.Sprintf("%s holds %v", f.names[i], objKeys(m)))
			}
		}
		return len(wrong) == 0 && st.Revision == 2 && allIn(st.DeployedCounts, "Applied", 6), fmt.Sprintf("%s; %s", st, strings.Join(wrong, "; "))
	})
	t.Logf("the update was applied on every cluster %s after the kill", time.Since(killed).Round(time.Millisecond))
	st, err := getDIG(clients[survivor], dig, "status=deployed")
	must(t, "status", err)
	if got := strings.Join(st.actions(), ","); got != "Created,Approved,Instantiated,Instantiated" {
		t.Errorf("stateInfo %s, want Created,Approved,Instantiated,Instantiated", got)
	}
}

// ---------------------------------------------------------------------------
// 5. Update, rollback and dependencies.

// availableSince is when a Deployment's Available condition last turned True.
func availableSince(d *appsv1.Deployment) (time.Time, bool) {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == "True" {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

func TestResilienceUpdateRollbackDependencies(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t, edge.Start(t, 3, edge.Options{Workloads: true}))
	hub := startHubProcess(t, t.TempDir(), freeAddr(t), resHubFlags...)
	dumpHubOnFailure(t, "hub", hub)
	c := hubClient(hub.url)
	f.register(t, c)
	s := digSetup{project: "shop", compositeApp: "chain", dig: "rollout", namespace: "chain", apps: []string{"web1", "web2"},
		intents:   map[string]map[string]any{"web1": byLabel(), "web2": onClusters("site-0", "site-1", "site-2")},
		values:    map[string]map[string]any{"web1": {"replicas": 2}},
		dependsOn: map[string]string{"web2": "web1"}}
	dig := s.create(t, c)
	// The reverse dependency would close a cycle: refused, naming it.
	wantCode(t, "a dependency cycle", c.Do(ctx, "POST", s.caPath()+"/apps/web1/dependency", obj("loop", map[string]any{"app": "web2", "opStatus": "Ready"}), nil), 422, "web1 → web2 → web1")

	must(t, "instantiate", lifecycleCall(c, dig, "instantiate", nil))
	took := eventually(t, 120*time.Second, "Ready everywhere", func() (bool, string) {
		st, err := getDIG(c, dig, "status=ready")
		return err == nil && allIn(st.ReadyCounts, "Ready", 18), fmt.Sprintf("%s %v", st, err)
	})
	t.Logf("web1 then web2 Ready on 3 clusters %s after the instantiate", took.Round(time.Millisecond))

	// On each cluster web2 was created only once web1 was Available there.
	for i, cs := range f.kube {
		w1, err := cs.AppsV1().Deployments("chain").Get(ctx, "web1-web", metav1.GetOptions{})
		must(t, "web1", err)
		w2, err := cs.AppsV1().Deployments("chain").Get(ctx, "web2-web", metav1.GetOptions{})
		must(t, "web2", err)
		avail, ok := availableSince(w1)
		if !ok {
			t.Fatalf("%s: web1 is not Available: %+v", f.names[i], w1.Status)
		}
		created := w2.CreationTimestamp.Time
		t.Logf("%s: web1 created %s, Available %s; web2 created %s", f.names[i],
			w1.CreationTimestamp.Format(time.TimeOnly), avail.Format(time.TimeOnly), created.Format(time.TimeOnly))
		// Both are whole seconds: created in the same second counts as after.
		if created.Before(avail) {
			t.Errorf("%s: web2 was created at %s, before web1 became Available at %s", f.names[i], created, avail)
		}
		// web1 can become Available within the second it was created, so also:
		// the pass that creates web1 finds it not Ready and looks again a second
		// later, so web2 comes a whole second after it at least. Without the
		// dependency both come in the same pass, mostly in the same second.
		if !created.After(w1.CreationTimestamp.Time) {
			t.Errorf("%s: web2 was created at %s, in the same second as web1 (%s): it did not wait for web1", f.names[i], created, w1.CreationTimestamp)
		}
	}
	st, err := getDIG(c, dig, "status=deployed")
	must(t, "status", err)
	if !allIn(st.DeployedCounts, "Applied", 18) {
		t.Fatalf("after Ready: %s", st)
	}
	orig, err := f.objects("rollout")
	must(t, "objects", err)

	// Update: web1 gets 3 replicas, web2 leaves site-2.
	s.putValues(t, c, "web1", map[string]any{"replicas": 3})
	must(t, "move web2", c.Do(ctx, "PUT", dig+"/generic-placement-intents/placement/app-intents/web2",
		obj("web2", map[string]any{"app": "web2", "intent": onClusters("site-0", "site-1")}), nil))
	must(t, "update", lifecycleCall(c, dig, "update", nil))
	eventually(t, 60*time.Second, "the update applied", func() (bool, string) {
		st, err := getDIG(c, dig, "status=deployed")
		if err != nil {
			return false, err.Error()
		}
		objs, err := f.objects("rollout")
		if err != nil {
			return false, err.Error()
		}
		ok := st.Revision == 2 && allIn(st.DeployedCounts, "Applied", 15) && len(objs[2]) == 3
		for _, m := range objs {
			ok = ok && m["Deployment/chain/web1-web"].Replicas == 3
		}
		return ok, fmt.Sprintf("%s; site-2 holds %v", st, objKeys(objs[2]))
	})
	updated, err := f.objects("rollout")
	must(t, "objects", err)
	for i := range f.kube {
		for k, o := range orig[i] {
			u, ok := updated[i][k]
			switch {
			case i == 2 && o.App == "web2":
				if ok {
					t.Errorf("%s: %s is still there after web2 left the cluster", f.names[i], k)
				}
			case !ok:
				t.Errorf("%s: %s was deleted by the update", f.names[i], k)
			case u.UID != o.UID:
				t.Errorf("%s: %s was recreated by the update", f.names[i], k)
			case k == "Deployment/chain/web1-web":
				if u.RV == o.RV || u.Replicas != 3 {
					t.Errorf("%s: %s not changed by the update: replicas %d, resourceVersion %s → %s", f.names[i], k, u.Replicas, o.RV, u.RV)
				}
			case u.RV != o.RV:
				t.Errorf("%s: %s is unchanged in the plan but was modified (resourceVersion %s → %s)", f.names[i], k, o.RV, u.RV)
			}
		}
		want := len(orig[i])
		if i == 2 {
			want -= 3 // web2's objects
		}
		if len(updated[i]) != want {
			t.Errorf("%s: %v after the update, want %d objects", f.names[i], objKeys(updated[i]), want)
		}
	}

	// Rollback to revision 1: web1 back to 2 replicas, web2 back on site-2.
	must(t, "rollback", lifecycleCall(c, dig, "rollback", map[string]any{"spec": map[string]any{"revision": 1}}))
	eventually(t, 90*time.Second, "rolled back", func() (bool, string) {
		st, err := getDIG(c, dig, "status=deployed")
		if err != nil {
			return false, err.Error()
		}
		objs, err := f.objects("rollout")
		if err != nil {
			return false, err.Error()
		}
		ok := st.Revision == 3 && allIn(st.DeployedCounts, "Applied", 18) && len(objs[2]) == 6
		for _, m := range objs {
			ok = ok && m["Deployment/chain/web1-web"].Replicas == 2
		}
		return ok, fmt.Sprintf("%s; site-2 holds %v", st, objKeys(objs[2]))
	})
	rolled, err := f.objects("rollout")
	must(t, "objects", err)
	for i := range f.kube {
		if got, want := objKeys(rolled[i]), objKeys(orig[i]); !slices.Equal(got, want) {
			t.Errorf("%s after the rollback: %v, want %v", f.names[i], got, want)
		}
		for k, o := range orig[i] {
			r := rolled[i][k]
			switch {
			case i == 2 && o.App == "web2":
				if r.UID == o.UID {
					t.Errorf("%s: %s has its old uid; it was deleted by the update", f.names[i], k)
				}
			case r.UID != o.UID:
				t.Errorf("%s: %s was recreated by the rollback", f.names[i], k)
			case k == "Deployment/chain/web1-web":
			case r.RV != o.RV:
				t.Errorf("%s: %s was modified although no revision changed it (resourceVersion %s → %s)", f.names[i], k, o.RV, r.RV)
			}
		}
	}
	st, err = getDIG(c, dig, "status=deployed")
	must(t, "status", err)
	if got := strings.Join(st.actions(), ","); got != "Created,Approved,Instantiated,Instantiated,Instantiated" ||
		st.States.Actions[len(st.States.Actions)-1].Instance != "rollback to revision 1" || !slices.Equal(st.Revisions, []int64{1, 2, 3}) {
		t.Errorf("history after the rollback: %s, %+v, revisions %v", got, st.States.Actions, st.Revisions)
	}
	eventually(t, 60*time.Second, "Ready again after the rollback", func() (bool, string) {
		st, err := getDIG(c, dig, "status=ready")
		return err == nil && allIn(st.ReadyCounts, "Ready", 18), fmt.Sprintf("%s %v", st, err)
	})
}
