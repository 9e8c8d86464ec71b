package edge_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/atoll-edge/atoll/test/edge"
)

const wantGitVersion = "v1.37.2"

// clientFor builds a clientset from kubeconfig bytes, as an Atoll user would.
func clientFor(t *testing.T, kubeconfig []byte) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		t.Fatalf("RESTConfigFromKubeConfig: %v", err)
	}
	cfg.Timeout = 10 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("NewForConfig: %v", err)
	}
	return cs
}

var serverPattern = regexp.MustCompile(`^https://127\.0\.0\.1:[0-9]+$`)

// checkSelfContained asserts the kubeconfig embeds everything and names no file.
func checkSelfContained(t *testing.T, kubeconfig []byte) {
	t.Helper()
	kc, err := clientcmd.Load(kubeconfig)
	if err != nil {
		t.Fatalf("clientcmd.Load: %v", err)
	}
	kctx, ok := kc.Contexts[kc.CurrentContext]
	if kc.CurrentContext == "" || !ok {
		t.Fatalf("current-context %q does not name a context", kc.CurrentContext)
	}
	cluster, user := kc.Clusters[kctx.Cluster], kc.AuthInfos[kctx.AuthInfo]
	if cluster == nil || user == nil {
		t.Fatalf("context %q names cluster %q and user %q, got cluster %v user %v", kc.CurrentContext, kctx.Cluster, kctx.AuthInfo, cluster, user)
	}
	if !serverPattern.MatchString(cluster.Server) {
		t.Errorf("server = %q, want https://127.0.0.1:PORT", cluster.Server)
	}
	if cluster.CertificateAuthority != "" || len(cluster.CertificateAuthorityData) == 0 {
		t.Errorf("certificate-authority = %q, %d bytes of data; want embedded data only", cluster.CertificateAuthority, len(cluster.CertificateAuthorityData))
	}
	if user.ClientCertificate != "" || user.ClientKey != "" || user.TokenFile != "" {
		t.Errorf("user names files: client-certificate %q client-key %q tokenFile %q", user.ClientCertificate, user.ClientKey, user.TokenFile)
	}
	if (len(user.ClientCertificateData) == 0 || len(user.ClientKeyData) == 0) && user.Token == "" {
		t.Errorf("user has no embedded client certificate/key nor token")
	}
}

func TestStartParallel(t *testing.T) {
	begin := time.Now()
	clusters := edge.Start(t, 3, edge.Options{})
	t.Logf("3 clusters up in %s", time.Since(begin).Round(time.Millisecond))
	if len(clusters) != 3 {
		t.Fatalf("Start returned %d clusters, want 3", len(clusters))
	}

	hosts := map[string]string{}
	for _, c := range clusters {
		if other, dup := hosts[c.RESTConfig().Host]; dup {
			t.Errorf("clusters %s and %s share %s", other, c.Name(), c.RESTConfig().Host)
		}
		hosts[c.RESTConfig().Host] = c.Name()

		t.Run(c.Name(), func(t *testing.T) {
			checkSelfContained(t, c.Kubeconfig())
			cs := clientFor(t, c.Kubeconfig())

			v, err := cs.Discovery().ServerVersion()
			if err != nil {
				t.Fatalf("/version: %v", err)
			}
			if v.GitVersion != wantGitVersion {
				t.Errorf("/version gitVersion = %q, want %q", v.GitVersion, wantGitVersion)
			}

			review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(), &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{
					ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "*", Group: "*", Resource: "*"},
				},
			}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("SelfSubjectAccessReview: %v", err)
			}
			if !review.Status.Allowed {
				t.Errorf("kubeconfig user may not do everything: %+v", review.Status)
			}
		})
	}
}

func TestStopRestart(t *testing.T) {
	clusters := edge.Start(t, 2, edge.Options{})
	offline, bystander := clusters[0], clusters[1]
	ctx := t.Context()

	kubeconfig := offline.Kubeconfig()
	host := offline.RESTConfig().Host
	cs := clientFor(t, kubeconfig)
	want := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "survives-restart", Namespace: "default"},
		Data:       map[string]string{"edge": offline.Name()},
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, want, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ConfigMap: %v", err)
	}

	begin := time.Now()
	if err := offline.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("Stop took %s", time.Since(begin).Round(time.Millisecond))

	_, err := cs.CoreV1().ConfigMaps("default").Get(ctx, want.Name, metav1.GetOptions{})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Get after Stop: err = %v, want connection refused", err)
	}
	if _, err := clientFor(t, bystander.Kubeconfig()).Discovery().ServerVersion(); err != nil {
		t.Errorf("cluster %s should be unaffected by stopping %s: %v", bystander.Name(), offline.Name(), err)
	}
	if err := offline.Stop(ctx); err != nil {
		t.Errorf("second Stop = %v, want nil", err)
	}

	begin = time.Now()
	if err := offline.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("Restart took %s", time.Since(begin).Round(time.Millisecond))

	if got := offline.RESTConfig().Host; got != host {
		t.Errorf("host after Restart = %s, want %s", got, host)
	}
	if !bytes.Equal(offline.Kubeconfig(), kubeconfig) {
		t.Errorf("Kubeconfig changed across Restart")
	}
	// The client built before Stop, from the old kubeconfig.
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, want.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Get after Restart: %v", err)
	}
	if got.Data["edge"] != offline.Name() {
		t.Errorf("ConfigMap data after Restart = %v, want %v", got.Data, want.Data)
	}
	after := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after-restart", Namespace: "default"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, after, metav1.CreateOptions{}); err != nil {
		t.Errorf("create after Restart: %v", err)
	}
}

func TestWorkloads(t *testing.T) {
	begin := time.Now()
	c := edge.Start(t, 1, edge.Options{Workloads: true})[0]
	t.Logf("cluster with workloads up in %s", time.Since(begin).Round(time.Millisecond))
	ctx := t.Context()
	cs := clientFor(t, c.Kubeconfig())

	node, err := cs.CoreV1().Nodes().Get(ctx, c.Name()+"-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	if node.Labels["type"] != "kwok" {
		t.Errorf("node label type = %q, want kwok", node.Labels["type"])
	}
	for name, want := range map[corev1.ResourceName]string{"cpu": "4", "memory": "8Gi", "pods": "110"} {
		if got := node.Status.Allocatable[name]; got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("node allocatable %s = %s, want %s", name, got.String(), want)
		}
	}

	const ns, name = "workloads", "web"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	labels := map[string]string{"app": name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "fake"}}},
			},
		},
	}
	begin = time.Now()
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create deployment: %v", err)
	}
	waitAvailable(t, cs, ns, name, 2)
	t.Logf("2 replicas Available in %s", time.Since(begin).Round(time.Millisecond))

	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	if len(pods.Items) != 2 {
		t.Fatalf("%d pods, want 2", len(pods.Items))
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != node.Name || p.Status.Phase != corev1.PodRunning {
			t.Errorf("pod %s on node %q phase %s, want node %s phase Running", p.Name, p.Spec.NodeName, p.Status.Phase, node.Name)
		}
	}

	// The workload processes come back with the API server.
	begin = time.Now()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	t.Logf("Stop+Restart with workloads took %s", time.Since(begin).Round(time.Millisecond))
	begin = time.Now()
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 3}}
	if _, err := cs.AppsV1().Deployments(ns).UpdateScale(ctx, name, scale, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("scale to 3: %v", err)
	}
	waitAvailable(t, cs, ns, name, 3)
	t.Logf("scaled to 3 Available after Restart in %s", time.Since(begin).Round(time.Millisecond))

	begin = time.Now()
	if err := cs.AppsV1().Deployments(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete deployment: %v", err)
	}
	poll(t, "pods and replicasets of the deleted deployment are gone", func() (bool, string, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, "", err
		}
		rss, err := cs.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, "", err
		}
		return len(pods.Items) == 0 && len(rss.Items) == 0, fmt.Sprintf("%d pods, %d replicasets", len(pods.Items), len(rss.Items)), nil
	})
	t.Logf("deployment's pods gone in %s", time.Since(begin).Round(time.Millisecond))

	begin = time.Now()
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace: %v", err)
	}
	poll(t, "namespace is deleted", func() (bool, string, error) {
		got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, "", nil
		}
		if err != nil {
			return false, "", err
		}
		return false, fmt.Sprintf("phase %s", got.Status.Phase), nil
	})
	t.Logf("namespace gone in %s", time.Since(begin).Round(time.Millisecond))
}

// waitAvailable waits until the deployment is Available with replicas available replicas.
func waitAvailable(t *testing.T, cs kubernetes.Interface, ns, name string, replicas int32) {
	t.Helper()
	poll(t, fmt.Sprintf("deployment %s/%s Available with %d replicas", ns, name, replicas), func() (bool, string, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		available := false
		for _, cond := range d.Status.Conditions {
			if cond.Type == appsv1.DeploymentAvailable && cond.Status == corev1.ConditionTrue {
				available = true
			}
		}
		ok := available && d.Status.ObservedGeneration == d.Generation &&
			d.Status.AvailableReplicas == replicas && d.Status.UpdatedReplicas == replicas
		return ok, fmt.Sprintf("conditions %v, %d/%d available", d.Status.Conditions, d.Status.AvailableReplicas, replicas), nil
	})
}

// poll calls cond until it is done, failing the test after 60 s with the last state.
func poll(t *testing.T, what string, cond func() (done bool, state string, err error)) {
	t.Helper()
	var state string
	err := wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		done, s, err := cond()
		if err != nil {
			state = err.Error()
			return false, nil
		}
		state = s
		return done, nil
	})
	if err != nil {
		t.Fatalf("waiting until %s: %v; last: %s", what, err, state)
	}
}

func TestStartOneChecksAssets(t *testing.T) {
	onlyControlPlane := t.TempDir()
	for _, f := range []string{"kube-apiserver", "etcd"} {
		if err := os.WriteFile(filepath.Join(onlyControlPlane, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name     string
		assets   string
		opts     edge.Options
		cluster  string
		wantText []string
	}{
		{"unset", "", edge.Options{}, "edge-0", []string{"KUBEBUILDER_ASSETS is not set", "make test", "hack/testbin.sh"}},
		{"empty folder", t.TempDir(), edge.Options{}, "edge-0", []string{"lacks kube-apiserver, etcd", "hack/testbin.sh"}},
		{"no workload binaries", onlyControlPlane, edge.Options{Workloads: true}, "edge-0", []string{"lacks kube-controller-manager, kube-scheduler, kwok, kwok-stages.yaml"}},
		{"bad name", onlyControlPlane, edge.Options{}, "Edge_0", []string{`invalid cluster name "Edge_0"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("KUBEBUILDER_ASSETS", tt.assets)
			c, err := edge.StartOne(t.Context(), tt.cluster, tt.opts)
			if err == nil {
				_ = c.Close()
				t.Fatalf("StartOne succeeded, want an error")
			}
			for _, want := range tt.wantText {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// fatalRecorder is a testing.TB whose Fatal and Skip record the call and end the goroutine.
type fatalRecorder struct {
	testing.TB
	fatal, skipped string
}

func (r *fatalRecorder) Helper()                   {}
func (r *fatalRecorder) Fatal(args ...any)         { r.fatal = fmt.Sprint(args...); runtime.Goexit() }
func (r *fatalRecorder) Fatalf(f string, a ...any) { r.fatal = fmt.Sprintf(f, a...); runtime.Goexit() }
func (r *fatalRecorder) Skip(args ...any)          { r.skipped = fmt.Sprint(args...); runtime.Goexit() }
func (r *fatalRecorder) Skipf(f string, a ...any)  { r.skipped = fmt.Sprintf(f, a...); runtime.Goexit() }
func (r *fatalRecorder) SkipNow()                  { r.skipped = "SkipNow"; runtime.Goexit() }

func TestStartFailsWithoutAssets(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", "")
	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		edge.Start(rec, 1, edge.Options{})
	}()
	<-done
	if rec.skipped != "" {
		t.Errorf("Start skipped (%q), want a fatal failure", rec.skipped)
	}
	if !strings.Contains(rec.fatal, "hack/testbin.sh") {
		t.Errorf("Start's fatal message = %q, want it to mention hack/testbin.sh", rec.fatal)
	}
}
