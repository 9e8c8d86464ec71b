package status

import (
	"context"
	"reflect"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/atoll-edge/atoll/internal/api"
	"github.com/atoll-edge/atoll/internal/lifecycle"
	"github.com/atoll-edge/atoll/internal/plan"
	"github.com/atoll-edge/atoll/internal/store"
	"github.com/atoll-edge/atoll/test/edge"
)

// edgeConfigs has the config of one cluster.
type edgeConfigs struct {
	path string
	cfg  *rest.Config
}

func (c edgeConfigs) Config(k store.Key) (*rest.Config, bool) {
	if k.Path() != c.path {
		return nil, false
	}
	return c.cfg, true
}

// edgePlanner plans the objects of TestWatchers on clusters/cp/edge.
type edgePlanner struct {
	plans *plan.Store
}

const (
	edgePath = "clusters/cp/edge"
	edgeNS   = "watched"
)

var (
	readyCM   = plan.Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: edgeNS, Name: "ready"}
	foreignCM = plan.Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: edgeNS, Name: "foreign"}
	missingCM = plan.Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: edgeNS, Name: "missing"}
	slowDep   = plan.Ref{APIVersion: "apps/v1", Kind: "Deployment", Namespace: edgeNS, Name: "slow"}
)

func (p edgePlanner) Plan(ctx context.Context, dig store.Key, revision int64) (string, error) {
	return p.plans.Put(ctx, &plan.Plan{DIG: dig.Path(), Project: dig.Names[0], CompositeApp: dig.Names[1], Version: dig.Names[2], Name: dig.Names[3],
		Namespace: edgeNS, Instance: plan.InstanceOf(dig.Path()), Revision: revision,
		Apps: []plan.AppPlan{{App: "web", Clusters: []plan.ClusterPlan{clusterPlan(edgePath, readyCM, foreignCM, missingCM, slowDep)}}}})
}

// TestWatchers runs the readiness watches against a real API server (no
// controllers: a Deployment never becomes available).
func TestWatchers(t *testing.T) {
	cl := edge.Start(t, 1, edge.Options{})[0]
	f := newFixtureWith(t, func(ps *plan.Store) lifecycle.Planner { return edgePlanner{ps} })
	ctx, cancel := context.WithCancel(context.Background())
	agg := New(nil, "/atoll", f.lc, f.plans, nil, nil)
	ws := NewWatchers(f.lc, f.plans, edgeConfigs{edgePath, cl.RESTConfig()}, agg, nil)
	done := make(chan struct{}, 2)
	go func() { _ = agg.Run(ctx); done <- struct{}{} }()
	go func() { _ = ws.Run(ctx); done <- struct{}{} }()
	t.Cleanup(func() {
		cancel()
		<-done
		<-done
	})

	dig := f.instantiated(t, "watched")
	inst := plan.InstanceOf(dig.Path())
	kube := kubernetes.NewForConfigOrDie(cl.RESTConfig())
	labels := func(instance string) map[string]string {
		return map[string]string{plan.LabelInstance: instance, plan.LabelDIG: "watched", plan.LabelApp: "web"}
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: edgeNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, instance := range map[string]string{"ready": inst, "foreign": "iother"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: edgeNS, Labels: labels(instance)}}
		if _, err := kube.CoreV1().ConfigMaps(edgeNS).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sel := map[string]string{"app": "slow"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "slow", Namespace: edgeNS, Labels: labels(inst)},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: sel},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example/slow:1"}}}}}}
	if _, err := kube.AppsV1().Deployments(edgeNS).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ready := func() map[string]string {
		ans := query(t, agg, dig, api.StatusQuery{Type: "ready", Output: "all"})
		out := map[string]string{}
		for _, r := range rows(ans) {
			out[r.name] = r.ready
		}
		return out
	}
	want := map[string]string{"ready": Ready, "foreign": NotPresent, "missing": NotPresent, "slow": NotReady}
	waitReady(t, "the watches to report", ready, want)

	if err := kube.CoreV1().ConfigMaps(edgeNS).Delete(ctx, "ready", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want["ready"] = NotPresent
	waitReady(t, "the deleted ConfigMap to be NotPresent", ready, want)
}

func waitReady(t *testing.T, what string, ready func() map[string]string, want map[string]string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for got := ready(); !reflect.DeepEqual(got, want); got = ready() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 15s for %s: got %v, want %v", what, got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
