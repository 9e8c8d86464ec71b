// Package e2e runs the hub as a real process (the atoll binary) against real
// Kubernetes API servers, one per simulated edge cluster.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/atoll-edge/atoll/pkg/client"
	"github.com/atoll-edge/atoll/test/edge"
)

var atollBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "atoll-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	atollBin = filepath.Join(dir, "atoll")
	build := exec.Command("go", "build", "-o", atollBin, "github.com/atoll-edge/atoll/cmd/atoll")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build atoll:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// hubProcess is `atoll serve` running as a child process.
type hubProcess struct {
	cmd     *exec.Cmd
	url     string
	logPath string
}

func startHubProcess(t *testing.T, dataDir, listen string, extra ...string) *hubProcess {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), "hub.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve", "--data-dir", dataDir, "--listen", listen,
		"--cluster-probe-interval", "500ms", "--cluster-backoff-cap", "2s"}, extra...)
	cmd := exec.Command(atollBin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &hubProcess{cmd: cmd, url: "http://" + listen, logPath: logPath}
	t.Cleanup(func() {
		h.stop(t)
		logFile.Close()
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
			data, _ := os.ReadFile(logPath)
			t.Fatalf("hub not ready after 60s; its log:\n%s", data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the hub with SIGTERM and waits for it.
func (h *hubProcess) stop(t *testing.T) { h.terminate(t) }

func freeAddr(t *testing.T) string { return freePort(t) }

// waitStatus polls a cluster's status until ok says it is what the test waits for.
func waitStatus(t *testing.T, c *client.Client, provider, name string, timeout time.Duration, what string, ok func(client.ClusterStatus) bool) client.ClusterStatus {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var st client.ClusterStatus
	var err error
	for time.Now().Before(deadline) {
		st, err = c.ClusterStatus(context.Background(), provider, name)
		if err == nil && ok(st) {
			return st
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("cluster %s/%s not %s within %s: last status %+v, error %v", provider, name, what, timeout, st, err)
	return st
}

func reachable(st client.ClusterStatus) bool   { return st.State == "Reachable" && st.Reachable }
func unreachable(st client.ClusterStatus) bool { return st.State == "Unreachable" && !st.Reachable }

// TestRegistryAgainstRealClusters registers three real API servers through the REST
// API, watches one go offline and come back, and restarts the hub.
func TestRegistryAgainstRealClusters(t *testing.T) {
	ctx := context.Background()
	clusters := edge.Start(t, 3, edge.Options{})

	// One cluster gets a node, so that its capacity is not zero.
	addNode(t, clusters[0], "node-1", "4", "8Gi", "110")

	dataDir := t.TempDir()
	listen := freeAddr(t)
	hub := startHubProcess(t, dataDir, listen)
	c := client.New(hub.url)

	if err := c.CreateClusterProvider(ctx, "telco"); err != nil {
		t.Fatal(err)
	}
	labels := []string{"edge", "edge", "core"}
	for i, cl := range clusters {
		if err := c.RegisterCluster(ctx, "telco", fmt.Sprintf("site-%d", i), cl.Kubeconfig(), labels[i]); err != nil {
			t.Fatalf("register site-%d: %v", i, err)
		}
	}
	edgeNames, err := c.ClustersWithLabel(ctx, "telco", "edge")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(edgeNames, ",") != "site-0,site-1" {
		t.Fatalf("clusters labelled edge = %v, want [site-0 site-1]", edgeNames)
	}

	for i := range clusters {
		st := waitStatus(t, c, "telco", fmt.Sprintf("site-%d", i), 30*time.Second, "reachable", reachable)
		if st.KubernetesVersion != "v1.37.2" {
			t.Errorf("site-%d version %q, want v1.37.2", i, st.KubernetesVersion)
		}
	}
	st := waitStatus(t, c, "telco", "site-0", 10*time.Second, "showing its node's capacity", func(st client.ClusterStatus) bool {
		return st.Capacity.Nodes == 1
	})
	if st.Capacity.CPU != "4" || st.Capacity.Memory != "8Gi" || st.Capacity.Pods != 110 {
		t.Errorf("site-0 capacity %+v, want 1 node, cpu 4, memory 8Gi, pods 110", st.Capacity)
	}
	if st1, _ := c.ClusterStatus(ctx, "telco", "site-1"); st1.Capacity.Nodes != 0 || st1.Capacity.CPU != "0" || st1.Capacity.Pods != 0 {
		t.Errorf("site-1 has no node; capacity %+v, want zeros", st1.Capacity)
	}

	// site-1 goes offline: its status turns unreachable, with the error and the time.
	stoppedAt := time.Now().UTC()
	if err := clusters[1].Stop(ctx); err != nil {
		t.Fatal(err)
	}
	down := waitStatus(t, c, "telco", "site-1", 30*time.Second, "unreachable", unreachable)
	if !strings.Contains(down.LastError, "connection refused") {
		t.Errorf("lastError %q does not say the connection was refused", down.LastError)
	}
	since, err := time.Parse(time.RFC3339Nano, down.Since)
	if err != nil || since.Before(stoppedAt.Add(-time.Second)) {
		t.Errorf("since %q (%v) is not after the stop at %s", down.Since, err, stoppedAt)
	}
	for _, other := range []string{"site-0", "site-2"} {
		if st, err := c.ClusterStatus(ctx, "telco", other); err != nil || !reachable(st) {
			t.Errorf("%s while site-1 is down: %+v, %v; want reachable", other, st, err)
		}
	}

	// Started again on the same port with the same data: reachable again.
	if err := clusters[1].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	back := waitStatus(t, c, "telco", "site-1", 30*time.Second, "reachable again", reachable)
	if back.LastError != "" || back.Since == down.Since {
		t.Errorf("after restart: %+v", back)
	}

	// The hub restarts on the same data dir and has everything.
	hub.stop(t)
	hub2 := startHubProcess(t, dataDir, listen)
	c2 := client.New(hub2.url)
	var listed []client.Object
	if err := c2.Do(ctx, "GET", "/v2/cluster-providers/telco/clusters", nil, &listed); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 3 {
		t.Fatalf("clusters after hub restart: %+v", listed)
	}
	for i := range clusters {
		waitStatus(t, c2, "telco", fmt.Sprintf("site-%d", i), 30*time.Second, "reachable after the hub restarted", reachable)
	}
	if edgeNames, err := c2.ClustersWithLabel(ctx, "telco", "edge"); err != nil || len(edgeNames) != 2 {
		t.Errorf("labels after hub restart: %v, %v", edgeNames, err)
	}
}

func addNode(t *testing.T, cl *edge.Cluster, name, cpu, memory, pods string) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cl.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourcePods:   resource.MustParse(pods),
	}
	node, err := cs.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Allocatable, node.Status.Capacity = alloc, alloc
	if _, err := cs.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
