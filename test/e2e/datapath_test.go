package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/atoll-edge/atoll/pkg/client"
	"github.com/atoll-edge/atoll/test/edge"
)

// chartDir holds the charts written for the tests (shared with the render tests).
const chartDir = "../../internal/render/testdata"

// tgz packs dir as a chart archive whose top folder is the chart's name.
func tgz(t *testing.T, dir, top string) []byte { return packChart(t, dir, top) }

// tgzFiles packs name → content pairs.
func tgzFiles(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(content))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

type meta = client.Metadata

func obj(name string, spec any) map[string]any {
	m := map[string]any{"metadata": meta{Name: name}}
	if spec != nil {
		m["spec"] = spec
	}
	return m
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantCode(t *testing.T, what string, err error, code int, contains string) {
	t.Helper()
	apiErr, ok := err.(*client.Error)
	if !ok || apiErr.Code != code || !strings.Contains(apiErr.Message, contains) {
		t.Fatalf("%s: got %v, want %d containing %q", what, err, code, contains)
	}
}

type digStatus struct {
	Status         string         `json:"status"`
	DeployedCounts map[string]int `json:"deployedCounts"`
	ReadyCounts    map[string]int `json:"readyCounts"`
	Apps           []struct {
		Name     string `json:"name"`
		Clusters []struct {
			Cluster   string `json:"cluster"`
			Resources []struct {
				Name           string `json:"name"`
				DeployedStatus string `json:"deployedStatus"`
				ReadyStatus    string `json:"readyStatus"`
			} `json:"resources"`
		} `json:"clusters"`
	} `json:"apps"`
	States struct {
		Actions []struct {
			State string `json:"state"`
		} `json:"actions"`
	} `json:"states"`
}

func waitDIG(t *testing.T, c *client.Client, path, query, what string, ok func(digStatus) bool) digStatus {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var st digStatus
	var err error
	for time.Now().Before(deadline) {
		st = digStatus{}
		err = c.Do(context.Background(), "GET", path+"/status?"+query, nil, &st)
		if err == nil && ok(st) {
			return st
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("DIG not %s within 90s: last status %+v, error %v", what, st, err)
	return st
}

// TestDataPath deploys a composite app of two charts to three real clusters by
// label and by anyOf, watches it become ready, terminates it and deploys it again.
func TestDataPath(t *testing.T) {
	ctx := context.Background()
	clusters := edge.Start(t, 3, edge.Options{Workloads: true})
	hub := startHubProcess(t, t.TempDir(), freeAddr(t))
	c := client.New(hub.url)

	must(t, "provider", c.CreateClusterProvider(ctx, "telco"))
	for i, l := range []string{"edge", "edge", "core"} {
		must(t, "register", c.RegisterCluster(ctx, "telco", fmt.Sprintf("site-%d", i), clusters[i].Kubeconfig(), l))
	}
	for i := range clusters {
		waitStatus(t, c, "telco", fmt.Sprintf("site-%d", i), 30*time.Second, "reachable", reachable)
	}
	must(t, "project", c.CreateProject(ctx, "shop"))
	ca := "/v2/projects/shop/composite-apps/retail/v1"
	must(t, "composite app", c.Do(ctx, "POST", "/v2/projects/shop/composite-apps", obj("retail", map[string]any{"compositeAppVersion": "v1"}), nil))
	must(t, "app web", c.Multipart(ctx, "POST", ca+"/apps", obj("web", nil), tgz(t, filepath.Join(chartDir, "web"), "web"), nil))
	must(t, "app widgets", c.Multipart(ctx, "POST", ca+"/apps", obj("widgets", nil), tgz(t, filepath.Join(chartDir, "crdapp"), "crdapp"), nil))

	// A chart archive that escapes its folder is refused and nothing is stored.
	evil := tgzFiles(t, map[string]string{"web/Chart.yaml": "apiVersion: v2\nname: web\nversion: 0.1.0\n", "web/../../etc/x": "x"})
	wantCode(t, "chart with ../", c.Multipart(ctx, "POST", ca+"/apps", obj("evil", nil), evil, nil), 400, "..")
	wantCode(t, "refused chart not stored", c.Do(ctx, "GET", ca+"/apps/evil", nil, nil), 404, "does not exist")

	must(t, "composite profile", c.Do(ctx, "POST", ca+"/composite-profiles", obj("standard", nil), nil))
	profile := tgzFiles(t, map[string]string{
		"manifest.yaml":        "version: v1\ntype:\n  values: override_values.yaml\n",
		"override_values.yaml": "greeting: from-profile\nreplicas: 1\n",
	})
	must(t, "profile", c.Multipart(ctx, "POST", ca+"/composite-profiles/standard/profiles", obj("web-profile", map[string]any{"app": "web"}), profile, nil))

	digs := ca + "/deployment-intent-groups"
	dig := digs + "/launch"
	must(t, "dig", c.Do(ctx, "POST", digs, obj("launch", map[string]any{
		"compositeProfile": "standard", "version": "r1", "namespace": "retail",
		"overrideValues": []map[string]any{{"app": "web", "values": map[string]any{"replicas": 3}}},
	}), nil))
	must(t, "gpi", c.Do(ctx, "POST", dig+"/generic-placement-intents", obj("placement", nil), nil))
	wantCode(t, "unknown label", c.Do(ctx, "POST", dig+"/generic-placement-intents/placement/app-intents", obj("nowhere", map[string]any{
		"app": "web", "intent": map[string]any{"allOf": []map[string]any{{"clusterProvider": "telco", "clusterLabel": "moon"}}},
	}), nil), 422, `"moon"`)
	must(t, "web intent", c.Do(ctx, "POST", dig+"/generic-placement-intents/placement/app-intents", obj("web-edge", map[string]any{
		"app": "web", "intent": map[string]any{"allOf": []map[string]any{{"clusterProvider": "telco", "clusterLabel": "edge"}}},
	}), nil))
	must(t, "widgets intent", c.Do(ctx, "POST", dig+"/generic-placement-intents/placement/app-intents", obj("widgets-any", map[string]any{
		"app": "widgets", "intent": map[string]any{"anyOf": []map[string]any{{"clusterProvider": "telco", "cluster": "site-1"}, {"clusterProvider": "telco", "cluster": "site-2"}}},
	}), nil))
	must(t, "dig intent", c.Do(ctx, "POST", dig+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "placement"}}), nil))

	must(t, "approve", c.Do(ctx, "POST", dig+"/approve", map[string]any{"metadata": meta{}}, nil))
	// Two concurrent instantiates: exactly one wins.
	var wg sync.WaitGroup
	results := make([]error, 2)
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i] = c.Do(ctx, "POST", dig+"/instantiate", nil, nil)
		}(i)
	}
	wg.Wait()
	won := 0
	for _, err := range results {
		if err == nil {
			won++
		} else {
			wantCode(t, "losing instantiate", err, 409, "")
		}
	}
	if won != 1 {
		t.Fatalf("concurrent instantiates: %v, want exactly one success", results)
	}

	// Everything Applied; 3 web objects on each edge cluster + the CRD and a widget on site-1.
	st := waitDIG(t, c, dig, "status=deployed", "applied", func(s digStatus) bool {
		return s.DeployedCounts["Applied"] == 8 && len(s.DeployedCounts) == 1
	})
	if st.Status != "Instantiated" {
		t.Errorf("state %q, want Instantiated", st.Status)
	}
	kube := make([]*kubernetes.Clientset, 3)
	dyn := make([]*dynamic.DynamicClient, 3)
	for i, cl := range clusters {
		kube[i] = kubernetes.NewForConfigOrDie(cl.RESTConfig())
		dyn[i] = dynamic.NewForConfigOrDie(cl.RESTConfig())
	}
	widgets := schema.GroupVersionResource{Group: "example.atoll.dev", Version: "v1", Resource: "widgets"}
	for i := range clusters {
		cms, err := kube[i].CoreV1().ConfigMaps("retail").List(ctx, metav1.ListOptions{LabelSelector: "atoll.dev/app=web"})
		must(t, "list configmaps", err)
		deps, err := kube[i].AppsV1().Deployments("retail").List(ctx, metav1.ListOptions{LabelSelector: "atoll.dev/dig=launch"})
		must(t, "list deployments", err)
		ws, werr := dyn[i].Resource(widgets).Namespace("retail").List(ctx, metav1.ListOptions{})
		onEdge := i < 2
		if onEdge != (len(cms.Items) == 1) || onEdge != (len(deps.Items) == 1) {
			t.Errorf("site-%d: %d web configmaps, %d deployments; want them only on the edge clusters", i, len(cms.Items), len(deps.Items))
		}
		if onEdge {
			if g := cms.Items[0].Data["greeting"]; g != "from-profile" {
				t.Errorf("site-%d configmap greeting %q: want the profile's value over the chart's", i, g)
			}
			if r := deps.Items[0].Spec.Replicas; r == nil || *r != 3 {
				t.Errorf("site-%d replicas %v, want 3 from the DIG over 1 from the profile", i, r)
			}
		}
		hasWidget := werr == nil && len(ws.Items) == 1
		if hasWidget != (i == 1) {
			t.Errorf("site-%d has widget: %v (%v); want it on site-1 only", i, hasWidget, werr)
		}
	}

	// Ready once the Deployments are really Available (kwok + controllers do it).
	waitDIG(t, c, dig, "status=ready", "ready", func(s digStatus) bool {
		return s.ReadyCounts["Ready"] == 8 && len(s.ReadyCounts) == 1
	})

	// Terminate: everything goes, and the status says so.
	must(t, "terminate", c.Do(ctx, "POST", dig+"/terminate", nil, nil))
	waitDIG(t, c, dig, "status=deployed", "terminated", func(s digStatus) bool {
		return s.Status == "Terminated" && s.DeployedCounts["Deleted"] == 8 && len(s.DeployedCounts) == 1
	})
	for i := range clusters {
		deps, err := kube[i].AppsV1().Deployments("retail").List(ctx, metav1.ListOptions{LabelSelector: "atoll.dev/dig=launch"})
		must(t, "list", err)
		cms, _ := kube[i].CoreV1().ConfigMaps("retail").List(ctx, metav1.ListOptions{LabelSelector: "atoll.dev/dig=launch"})
		if len(deps.Items)+len(cms.Items) != 0 {
			t.Errorf("site-%d still has %d deployments and %d configmaps of the DIG", i, len(deps.Items), len(cms.Items))
		}
		_, err = kube[i].CoreV1().Services("retail").Get(ctx, "web-web", metav1.GetOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("site-%d service web: %v, want not found", i, err)
		}
	}

	// Instantiating again after a terminate works.
	must(t, "instantiate again", c.Do(ctx, "POST", dig+"/instantiate", nil, nil))
	st = waitDIG(t, c, dig, "status=deployed", "applied again", func(s digStatus) bool {
		return s.Status == "Instantiated" && s.DeployedCounts["Applied"] == 8 && len(s.DeployedCounts) == 1
	})
	var states []string
	for _, a := range st.States.Actions {
		states = append(states, a.State)
	}
	if got := strings.Join(states, ","); got != "Created,Approved,Instantiated,Terminating,Terminated,Instantiated" {
		t.Errorf("stateInfo %s", got)
	}
	wantCode(t, "delete a deployed DIG", c.Do(ctx, "DELETE", dig, nil, nil), 409, "terminate it")
}

// TestRenderFailure checks that a chart that fails to render fails the instantiate
// with 422 and Helm's message, and that nothing is applied anywhere.
func TestRenderFailure(t *testing.T) {
	ctx := context.Background()
	clusters := edge.Start(t, 1, edge.Options{})
	hub := startHubProcess(t, t.TempDir(), freeAddr(t))
	c := client.New(hub.url)
	must(t, "provider", c.CreateClusterProvider(ctx, "cp"))
	must(t, "register", c.RegisterCluster(ctx, "cp", "only", clusters[0].Kubeconfig(), "edge"))
	waitStatus(t, c, "cp", "only", 30*time.Second, "reachable", reachable)
	must(t, "project", c.CreateProject(ctx, "p"))
	ca := "/v2/projects/p/composite-apps/bad/v1"
	must(t, "composite app", c.Do(ctx, "POST", "/v2/projects/p/composite-apps", obj("bad", map[string]any{"compositeAppVersion": "v1"}), nil))
	must(t, "app web", c.Multipart(ctx, "POST", ca+"/apps", obj("web", nil), tgz(t, filepath.Join(chartDir, "web"), "web"), nil))
	must(t, "app broken", c.Multipart(ctx, "POST", ca+"/apps", obj("broken", nil), tgz(t, filepath.Join(chartDir, "broken"), "broken"), nil))
	must(t, "composite profile", c.Do(ctx, "POST", ca+"/composite-profiles", obj("none", nil), nil))
	dig := ca + "/deployment-intent-groups/d"
	must(t, "dig", c.Do(ctx, "POST", ca+"/deployment-intent-groups", obj("d", map[string]any{"compositeProfile": "none", "version": "1"}), nil))
	must(t, "gpi", c.Do(ctx, "POST", dig+"/generic-placement-intents", obj("g", nil), nil))
	for _, app := range []string{"web", "broken"} {
		must(t, "intent "+app, c.Do(ctx, "POST", dig+"/generic-placement-intents/g/app-intents", obj(app, map[string]any{
			"app": app, "intent": map[string]any{"allOf": []map[string]any{{"clusterProvider": "cp", "cluster": "only"}}},
		}), nil))
	}
	must(t, "dig intent", c.Do(ctx, "POST", dig+"/intents", obj("i", map[string]any{"intent": map[string]any{"genericPlacementIntent": "g"}}), nil))
	must(t, "approve", c.Do(ctx, "POST", dig+"/approve", nil, nil))
	wantCode(t, "instantiate with a broken chart", c.Do(ctx, "POST", dig+"/instantiate", nil, nil), 422, "broken")

	var st digStatus
	must(t, "status", c.Do(ctx, "GET", dig+"/status", nil, &st))
	if st.Status != "Approved" {
		t.Errorf("state after the failed instantiate %q, want Approved", st.Status)
	}
	time.Sleep(2 * time.Second)
	kube := kubernetes.NewForConfigOrDie(clusters[0].RESTConfig())
	cms, err := kube.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: "atoll.dev/dig"})
	must(t, "list", err)
	deps, _ := kube.AppsV1().Deployments("default").List(ctx, metav1.ListOptions{})
	if len(cms.Items)+len(deps.Items) != 0 {
		t.Fatalf("objects were applied although the instantiate failed: %d configmaps, %d deployments", len(cms.Items), len(deps.Items))
	}
}

// TestHooks deploys a chart with Helm hooks: the pre-install Job runs (and is
// complete) before the app's ConfigMap is applied, hooks with hook-succeeded
// are deleted once complete, and a terminate leaves nothing behind.
func TestHooks(t *testing.T) {
	ctx := context.Background()
	clusters := edge.Start(t, 1, edge.Options{Workloads: true})
	hub := startHubProcess(t, t.TempDir(), freeAddr(t))
	c := client.New(hub.url)
	must(t, "provider", c.CreateClusterProvider(ctx, "cp"))
	must(t, "register", c.RegisterCluster(ctx, "cp", "only", clusters[0].Kubeconfig(), "edge"))
	waitStatus(t, c, "cp", "only", 30*time.Second, "reachable", reachable)
	must(t, "project", c.CreateProject(ctx, "p"))
	ca := "/v2/projects/p/composite-apps/hooked/v1"
	must(t, "composite app", c.Do(ctx, "POST", "/v2/projects/p/composite-apps", obj("hooked", map[string]any{"compositeAppVersion": "v1"}), nil))
	must(t, "app", c.Multipart(ctx, "POST", ca+"/apps", obj("db", nil), tgz(t, filepath.Join(chartDir, "hooks"), "hooks"), nil))
	must(t, "composite profile", c.Do(ctx, "POST", ca+"/composite-profiles", obj("none", nil), nil))
	dig := ca + "/deployment-intent-groups/d"
	must(t, "dig", c.Do(ctx, "POST", ca+"/deployment-intent-groups", obj("d", map[string]any{"compositeProfile": "none", "version": "1"}), nil))
	must(t, "gpi", c.Do(ctx, "POST", dig+"/generic-placement-intents", obj("g", nil), nil))
	must(t, "intent", c.Do(ctx, "POST", dig+"/generic-placement-intents/g/app-intents", obj("db", map[string]any{
		"app": "db", "intent": map[string]any{"allOf": []map[string]any{{"clusterProvider": "cp", "cluster": "only"}}},
	}), nil))
	must(t, "dig intent", c.Do(ctx, "POST", dig+"/intents", obj("i", map[string]any{"intent": map[string]any{"genericPlacementIntent": "g"}}), nil))
	must(t, "approve", c.Do(ctx, "POST", dig+"/approve", nil, nil))
	must(t, "instantiate", c.Do(ctx, "POST", dig+"/instantiate", nil, nil))

	kube := kubernetes.NewForConfigOrDie(clusters[0].RESTConfig())
	// Watch, by polling both, for the pre-install Job's completion and the app's
	// ConfigMap; the Job must have completed first.
	deadline := time.Now().Add(90 * time.Second)
	var jobDone, appCreated time.Time
	for time.Now().Before(deadline) && appCreated.IsZero() {
		if job, err := kube.BatchV1().Jobs("default").Get(ctx, "db-migrate", metav1.GetOptions{}); err == nil && job.Status.CompletionTime != nil {
			jobDone = job.Status.CompletionTime.Time
		}
		if cm, err := kube.CoreV1().ConfigMaps("default").Get(ctx, "db-app", metav1.GetOptions{}); err == nil {
			appCreated = cm.CreationTimestamp.Time
		}
		time.Sleep(50 * time.Millisecond)
	}
	if appCreated.IsZero() {
		var st digStatus
		_ = c.Do(ctx, "GET", dig+"/status?status=deployed&output=detail", nil, &st)
		t.Fatalf("the app's ConfigMap never appeared; status %+v", st)
	}
	if jobDone.IsZero() || jobDone.After(appCreated) {
		t.Errorf("pre-install Job completed at %v, the app's ConfigMap created at %v: want the hook complete first", jobDone, appCreated)
	}
	// The pre-install Job completed before the app's ConfigMap was created, and
	// was then deleted (hook-succeeded); the hook ConfigMap without that policy stays.
	if _, err := kube.CoreV1().ConfigMaps("default").Get(ctx, "db-pre-config", metav1.GetOptions{}); err != nil {
		t.Errorf("pre-install ConfigMap hook: %v", err)
	}
	waitGone := func(what string, get func() error) {
		t.Helper()
		for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			if apierrors.IsNotFound(get()) {
				return
			}
		}
		t.Errorf("%s was not deleted", what)
	}
	waitGone("the pre-install Job (hook-succeeded)", func() error {
		_, err := kube.BatchV1().Jobs("default").Get(ctx, "db-migrate", metav1.GetOptions{})
		return err
	})
	waitGone("the post-install Job (hook-succeeded)", func() error {
		_, err := kube.BatchV1().Jobs("default").Get(ctx, "db-notify", metav1.GetOptions{})
		return err
	})
	must(t, "terminate", c.Do(ctx, "POST", dig+"/terminate", nil, nil))
	waitDIG(t, c, dig, "status=deployed", "terminated", func(s digStatus) bool { return s.Status == "Terminated" })
	cms, err := kube.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{LabelSelector: "atoll.dev/dig=d"})
	must(t, "list", err)
	if len(cms.Items) != 0 {
		t.Errorf("%d ConfigMaps of the DIG left after terminate", len(cms.Items))
	}
}
