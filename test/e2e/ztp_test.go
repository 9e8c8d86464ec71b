package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
	"github.com/atoll-edge/atoll/internal/bpa/baremetal"
	"github.com/atoll-edge/atoll/internal/bpa/bpatest"
	"github.com/atoll-edge/atoll/internal/bpa/installer"
	pkgclient "github.com/atoll-edge/atoll/pkg/client"
	"github.com/atoll-edge/atoll/test/edge"
)

// ztpView is the part of the hub's answer for a Provisioning that the test reads.
type ztpView struct {
	Metadata pkgclient.Metadata `json:"metadata"`
	Spec     struct {
		Namespace string `json:"namespace"`
		Register  struct {
			ClusterProvider string   `json:"clusterProvider"`
			Cluster         string   `json:"cluster"`
			Labels          []string `json:"labels"`
		} `json:"register"`
	} `json:"spec"`
	Status struct {
		Conditions          []metav1.Condition      `json:"conditions"`
		Hosts               []bpav1.ProvisionedHost `json:"hosts"`
		KubeconfigSecretRef *bpav1.SecretKeyRef     `json:"kubeconfigSecretRef"`
		Site                string                  `json:"site"`
		Registered          bool                    `json:"registered"`
		RegisteredAs        string                  `json:"registeredAs"`
		RegistrationError   string                  `json:"registrationError"`
	} `json:"status"`
}

// operatorProcess runs `atoll bpa` against the site until the test ends.
func operatorProcess(t *testing.T, kubeconfig []byte, namespace string) {
	t.Helper()
	dir := t.TempDir()
	kc := filepath.Join(dir, "site.kubeconfig")
	if err := os.WriteFile(kc, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "bpa.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	probe := freeAddr(t)
	cmd := exec.Command(atollBin, "bpa", "--kubeconfig", kc, "--namespace", namespace, "--watch-namespace", namespace,
		"--metrics-bind-address", "0", "--health-probe-bind-address", probe, "--leader-elect",
		"--leader-election-namespace", namespace, "--kubeconfig-handoff-timeout", "1m")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	op := &hubProcess{cmd: cmd, logPath: logPath}
	t.Cleanup(func() {
		op.stop(t)
		logFile.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logPath)
			t.Logf("atoll bpa log:\n%s", lastLines(string(data), 40))
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + probe + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(logPath)
			t.Fatalf("atoll bpa not healthy after 30s; its log:\n%s", data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestZTP is zero-touch provisioning end to end: a provisioning request to the
// hub → hosts chosen by hardware on the site → a valid hosts.ini → an install Job
// → the test completes the Job and hands back the new cluster's kubeconfig → the
// hub lists the new cluster, reachable, with its labels. The hub restarts on the
// way; the operator and the hub are the atoll binary (`atoll bpa`, `atoll serve`).
func TestZTP(t *testing.T) {
	ctx := context.Background()
	clusters := edge.Start(t, 2, edge.Options{})
	siteCluster, newCluster := clusters[0], clusters[1]
	if err := bpatest.InstallCRDs(siteCluster.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	site, err := bpatest.Client(siteCluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns := bpatest.Namespace(t, site, "ztp")
	bpatest.CreateHost(t, site, ns, "rack1-a", bpatest.Hardware{CPUs: 32, MemoryMiB: 131072, NICs: [][2]string{{"52:54:00:aa:00:01", "198.51.100.11"}}})
	bpatest.CreateHost(t, site, ns, "rack1-b", bpatest.Hardware{CPUs: 8, MemoryMiB: 16384, NICs: [][2]string{{"52:54:00:aa:00:02", "198.51.100.12"}}})
	bpatest.CreateHost(t, site, ns, "rack1-c", bpatest.Hardware{CPUs: 2, MemoryMiB: 2048, NICs: [][2]string{{"52:54:00:aa:00:03", "198.51.100.13"}}})
	operatorProcess(t, siteCluster.Kubeconfig(), ns)

	dataDir, listen := t.TempDir(), freeAddr(t)
	hub := startHubProcess(t, dataDir, listen)
	c := pkgclient.New(hub.url)
	for _, p := range []string{"sites", "telco"} {
		if err := c.CreateClusterProvider(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.RegisterCluster(ctx, "sites", "site-1", siteCluster.Kubeconfig()); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c, "sites", "site-1", 30*time.Second, "reachable", reachable)

	base := "/v2/cluster-providers/sites/clusters/site-1/provisionings"
	var doc struct {
		Paths      map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := c.Do(ctx, "GET", "/v2/openapi.json", nil, &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc.Paths["/v2/cluster-providers/{clusterProvider}/clusters/{cluster}/provisionings/{provisioning}"]["delete"]; !ok || doc.Components.Schemas["ProvisioningRequest"] == nil {
		t.Errorf("the OpenAPI document lacks the provisioning routes or their schemas")
	}
	request := func(masters int, name string) map[string]any {
		return map[string]any{
			"metadata": map[string]any{"name": name, "description": "first cluster of rack 1"},
			"spec": map[string]any{
				"namespace":         ns,
				"masters":           map[string]any{"count": masters, "minCPU": 16, "minMemoryMiB": 65536},
				"workers":           map[string]any{"count": 1, "minCPU": 4},
				"kubernetesVersion": "v1.31.4",
				"installerImage":    "quay.io/kubespray/kubespray:v2.27.0",
				"sshKeySecretName":  "ssh-key",
				"register":          map[string]any{"clusterProvider": "telco", "cluster": "edge-new", "labels": []string{"edge", "ztp"}},
			},
		}
	}

	// A malformed spec is refused by the site's CRD schema, and the hub says why.
	var apiErr *pkgclient.Error
	if err := c.Do(ctx, "POST", base, request(0, "broken"), nil); !errors.As(err, &apiErr) || apiErr.Code != 422 || !strings.Contains(apiErr.Message, "masters.count must be at least 1") {
		t.Fatalf("a Provisioning without masters: %v, want 422 naming masters.count", err)
	}
	// A provider that does not exist is refused by the hub.
	bad := request(1, "nowhere")
	bad["spec"].(map[string]any)["register"] = map[string]any{"clusterProvider": "missing"}
	if err := c.Do(ctx, "POST", base, bad, nil); !errors.As(err, &apiErr) || apiErr.Code != 404 {
		t.Fatalf("registering into a missing provider: %v, want 404", err)
	}

	var created ztpView
	if err := c.Do(ctx, "POST", base, request(1, "rack1"), &created); err != nil {
		t.Fatal(err)
	}
	if created.Status.Site != "sites/site-1" || created.Spec.Register.Cluster != "edge-new" || created.Metadata.Description != "first cluster of rack 1" {
		t.Fatalf("created %+v", created)
	}
	if err := c.Do(ctx, "POST", base, request(1, "rack1"), nil); !errors.As(err, &apiErr) || apiErr.Code != 409 {
		t.Fatalf("creating it twice: %v, want 409", err)
	}

	// On the site: hosts chosen by hardware, a hosts.ini that ansible reads, a Job.
	job := waitSiteJob(t, site, ns, installer.Install)
	var cm corev1.ConfigMap
	if err := site.Get(ctx, types.NamespacedName{Namespace: ns, Name: installer.InventoryName("rack1")}, &cm); err != nil {
		t.Fatal(err)
	}
	inv := bpatest.ParseInventory(t, cm.Data[installer.InventoryKey])
	if got := inv.Members("kube_control_plane"); !slices.Equal(got, []string{"rack1-a"}) {
		t.Errorf("kube_control_plane %v, want [rack1-a] (the host with 32 CPUs)", got)
	}
	if got := inv.Members("kube_node"); !slices.Equal(got, []string{"rack1-b"}) {
		t.Errorf("kube_node %v, want [rack1-b] (rack1-c has 2 CPUs)", got)
	}
	if inv.HostVars["rack1-a"]["ansible_host"] != "198.51.100.11" {
		t.Errorf("rack1-a vars %v", inv.HostVars["rack1-a"])
	}

	// The hub shows the site's provisionings and their conditions.
	var list []ztpView
	if err := c.Do(ctx, "GET", base, nil, &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Metadata.Name != "rack1" || !apimeta.IsStatusConditionTrue(list[0].Status.Conditions, bpav1.ConditionInstalling) {
		t.Fatalf("provisionings of site-1: %+v, want rack1 installing", list)
	}

	// The hub restarts while the cluster installs: it finds the site again.
	hub.stop(t)
	hub = startHubProcess(t, dataDir, listen)

	if err := bpatest.HandBack(ctx, site, ns, "rack1", newCluster.Kubeconfig()); err != nil {
		t.Fatal(err)
	}
	if err := bpatest.FinishJob(ctx, site, job, ""); err != nil {
		t.Fatal(err)
	}

	// The new cluster is registered, reachable, labelled.
	var names []string
	deadline := time.Now().Add(60 * time.Second)
	for !slices.Contains(names, "edge-new") {
		if time.Now().After(deadline) {
			var v ztpView
			_ = c.Do(ctx, "GET", base+"/rack1", nil, &v)
			t.Fatalf("edge-new is not registered with label edge after 60s: %v; provisioning %+v", names, v.Status)
		}
		time.Sleep(200 * time.Millisecond)
		names, _ = c.ClustersWithLabel(ctx, "telco", "edge")
	}
	st := waitStatus(t, c, "telco", "edge-new", 30*time.Second, "reachable", reachable)
	if st.Server != newCluster.RESTConfig().Host {
		t.Errorf("edge-new server %s, want the new cluster's %s", st.Server, newCluster.RESTConfig().Host)
	}
	if ztp, _ := c.ClustersWithLabel(ctx, "telco", "ztp"); !slices.Equal(ztp, []string{"edge-new"}) {
		t.Errorf("clusters labelled ztp %v, want [edge-new]", ztp)
	}
	var shown ztpView
	deadline = time.Now().Add(30 * time.Second)
	for {
		if err := c.Do(ctx, "GET", base+"/rack1", nil, &shown); err != nil {
			t.Fatal(err)
		}
		if shown.Status.Registered && apimeta.IsStatusConditionTrue(shown.Status.Conditions, bpav1.ConditionReady) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rack1 not shown Ready and registered: %+v", shown.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if shown.Status.RegisteredAs != "telco/edge-new" || shown.Status.KubeconfigSecretRef == nil || len(shown.Status.Hosts) != 2 {
		t.Errorf("rack1 status %+v", shown.Status)
	}

	// Delete: the Provisioning goes from the site and its hosts are free again;
	// the registered cluster stays.
	if err := c.Do(ctx, "DELETE", base+"/rack1", nil, nil); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		err := site.Get(ctx, types.NamespacedName{Namespace: ns, Name: "rack1"}, &bpav1.Provisioning{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rack1 still on the site 30s after DELETE: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	hosts := baremetal.NewList()
	if err := site.List(ctx, hosts, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts.Items {
		if id := h.GetLabels()[baremetal.LabelClaimUID]; id != "" {
			t.Errorf("host %s still claimed by %s", h.GetName(), id)
		}
	}
	if err := c.Do(ctx, "GET", base+"/rack1", nil, nil); !errors.As(err, &apiErr) || apiErr.Code != 404 {
		t.Errorf("GET after delete: %v, want 404", err)
	}
	if _, err := c.ClusterStatus(ctx, "telco", "edge-new"); err != nil {
		t.Errorf("the registered cluster went with the Provisioning: %v", err)
	}
}

// waitSiteJob waits for the one unfinished Job of operation op on the site.
func waitSiteJob(t *testing.T, c client.Client, ns string, op installer.Operation) *batchv1.Job {
	t.Helper()
	var job *batchv1.Job
	bpatest.Eventually(t, 60*time.Second, fmt.Sprintf("a %s Job on the site", op), func(ctx context.Context) (bool, string) {
		jobs, err := bpatest.Jobs(ctx, c, ns, op)
		if err != nil || len(jobs) != 1 {
			return false, fmt.Sprintf("%d Jobs, %v", len(jobs), err)
		}
		job = &jobs[0]
		return true, ""
	})
	return job
}
