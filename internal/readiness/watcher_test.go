package readiness_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/atoll-edge/atoll/internal/apply"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/readiness"
	"github.com/atoll-edge/atoll/test/edge"
)

// readyTimeout bounds the wait for a Deployment to become Available on a busy
// 2-core machine (scheduling, kwok marking the pods Ready, the controllers' sync).
const readyTimeout = 2 * time.Minute

var deployments = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}

// TestWatcher watches Deployments and ConfigMaps labelled atoll.dev/dig=d1 on a
// cluster whose Deployments really become Available (kwok, scheduler,
// controller-manager); the test never writes a status.
func TestWatcher(t *testing.T) {
	cluster := edge.Start(t, 1, edge.Options{Workloads: true})[0]
	cfg := cluster.RESTConfig()
	cs := clientset(t, cfg)
	ns := uniqueName(t, "ready")
	if _, err := cs.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}

	rec := &recorder{}
	w, err := readiness.NewWatcher(cfg, labels.SelectorFromSet(labels.Set{apply.LabelDIG: "d1"}),
		readiness.WatcherOptions{OnChange: rec.add})
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	if err := w.Track(deployments); err != nil {
		t.Fatalf("Track deployments: %v", err)
	}
	run(t, w)
	waitSynced(t, w)
	// Tracking while running starts the informer on demand.
	gvr, err := w.TrackKind(t.Context(), schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	if err != nil || gvr != (schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}) {
		t.Fatalf("TrackKind ConfigMap = %v, %v", gvr, err)
	}
	waitSynced(t, w)

	d1 := map[string]string{apply.LabelDIG: "d1", apply.LabelApp: "a1"}
	objects := []struct {
		name      string
		create    func(context.Context) error
		ref       apply.ObjectRef
		watched   bool              // matches the selector
		wantFirst readiness.Status  // status of the first event
		wantFinal readiness.Status  // status it reaches
		wantMsg   string            // in the final event's message
		labels    map[string]string // of the object
	}{
		{
			name:      "labelled Deployment becomes Current when Available",
			create:    createDeployment(cs, ns, "web", 2, d1),
			ref:       apply.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "web"},
			watched:   true,
			wantFirst: readiness.InProgress,
			wantFinal: readiness.Current,
			wantMsg:   "Replicas: 2",
			labels:    d1,
		},
		{
			name:      "labelled ConfigMap is Current at once",
			create:    createConfigMap(cs, ns, "settings", d1),
			ref:       apply.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "settings"},
			watched:   true,
			wantFirst: readiness.Current,
			wantFinal: readiness.Current,
			labels:    d1,
		},
		{
			name:   "unlabelled Deployment is not watched",
			create: createDeployment(cs, ns, "other", 1, nil),
			ref:    apply.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "other"},
		},
		{
			name:   "Deployment of another DIG is not watched",
			create: createDeployment(cs, ns, "foreign", 1, map[string]string{apply.LabelDIG: "d2"}),
			ref:    apply.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "foreign"},
		},
		{
			name:   "unlabelled ConfigMap is not watched",
			create: createConfigMap(cs, ns, "plain", nil),
			ref:    apply.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "plain"},
		},
	}
	start := time.Now()
	for _, o := range objects {
		if err := o.create(t.Context()); err != nil {
			t.Fatalf("%s: creating %s: %v", o.name, o.ref, err)
		}
	}
	for _, o := range objects {
		if !o.watched {
			continue
		}
		t.Run(o.name, func(t *testing.T) {
			final := rec.waitFor(t, readyTimeout, func(ev readiness.Event) bool {
				return ev.Ref == o.ref && ev.Present && ev.Status == o.wantFinal
			})
			t.Logf("%s %s after %s: %s", o.ref, final.Status, time.Since(start).Round(100*time.Millisecond), final.Message)
			evs := rec.of(o.ref)
			if first := evs[0]; first.Status != o.wantFirst || !first.Present {
				t.Errorf("first event %+v, want present and %s", first, o.wantFirst)
			}
			if !strings.Contains(final.Message, o.wantMsg) {
				t.Errorf("final message %q does not contain %q", final.Message, o.wantMsg)
			}
			if final.Labels[apply.LabelApp] != o.labels[apply.LabelApp] || final.Labels[apply.LabelDIG] != "d1" {
				t.Errorf("event labels %v, want %v", final.Labels, o.labels)
			}
			t.Logf("statuses seen: %v", statuses(evs))
		})
	}
	// The watched objects reached their state after the unwatched ones were
	// created, so any event about those would be here by now.
	for _, o := range objects {
		if !o.watched {
			if evs := rec.of(o.ref); len(evs) > 0 {
				t.Errorf("%s: got events %+v, want none", o.name, evs)
			}
		}
	}

	web := objects[0].ref
	t.Run("Snapshot holds the watched objects and their state", func(t *testing.T) {
		got := refsAndStatuses(w.Snapshot())
		want := []string{fmt.Sprintf("%s=Current", web), fmt.Sprintf("%s=Current", objects[1].ref)}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("Snapshot = %v, want %v", got, want)
		}
	})

	t.Run("deleting the Deployment gives a not-present event", func(t *testing.T) {
		if err := cs.AppsV1().Deployments(ns).Delete(t.Context(), "web", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting: %v", err)
		}
		ev := rec.waitFor(t, 30*time.Second, func(ev readiness.Event) bool { return ev.Ref == web && !ev.Present })
		if ev.Status != readiness.NotFound || ev.Ready() || ev.Labels[apply.LabelDIG] != "d1" {
			t.Fatalf("event %+v, want NotFound with the last labels", ev)
		}
		for _, ev := range w.Snapshot() {
			if ev.Ref == web {
				t.Fatalf("Snapshot still holds %s: %+v", web, ev)
			}
		}
	})

	t.Run("the watches resume after the cluster was away", func(t *testing.T) {
		// kube-apiserver's graceful stop waits (up to its 60s request timeout)
		// for open watches, ours, to end; edge kills it after 20s and says so.
		// Either way it is down, as an edge that goes offline.
		stopping := time.Now()
		if err := cluster.Stop(t.Context()); err != nil && !strings.Contains(err.Error(), "timeout waiting for process kube-apiserver to stop") {
			t.Fatalf("Stop: %v", err)
		}
		t.Logf("cluster stopped in %s", time.Since(stopping).Round(100*time.Millisecond))
		time.Sleep(2 * time.Second) // let the watches notice
		if !w.Synced() {
			t.Errorf("Synced() = false while the cluster is away; the caches keep the last state")
		}
		if err := cluster.Restart(t.Context()); err != nil {
			t.Fatalf("Restart: %v", err)
		}
		restarted := time.Now()
		if err := createConfigMap(cs, ns, "after", d1)(t.Context()); err != nil {
			t.Fatalf("creating a ConfigMap after the restart: %v", err)
		}
		ref := apply.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Name: "after"}
		rec.waitFor(t, time.Minute, func(ev readiness.Event) bool { return ev.Ref == ref && ev.Ready() })
		t.Logf("event of a ConfigMap created after the restart came %s after it", time.Since(restarted).Round(100*time.Millisecond))
	})
}

func TestWatcherErrors(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	tests := []struct {
		name     string
		cfg      *rest.Config
		selector labels.Selector
		opts     readiness.WatcherOptions
		wantErr  string
	}{
		{"no config", nil, labels.Everything(), readiness.WatcherOptions{}, "no rest config"},
		{"no selector", cfg, nil, readiness.WatcherOptions{}, "no label selector"},
		{"negative resync", cfg, labels.Everything(), readiness.WatcherOptions{ResyncPeriod: -time.Second}, "negative resync"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readiness.NewWatcher(tc.cfg, tc.selector, tc.opts)
			if errs.KindOf(err) != errs.Invalid || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want invalid containing %q", err, tc.wantErr)
			}
		})
	}

	t.Run("Track validates and refuses after Run", func(t *testing.T) {
		w, err := readiness.NewWatcher(cfg, labels.Everything(), readiness.WatcherOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Track(schema.GroupVersionResource{Resource: "pods"}); errs.KindOf(err) != errs.Invalid {
			t.Fatalf("Track without version: %v, want invalid", err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		if err := w.Run(ctx); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if err := w.Run(t.Context()); err == nil {
			t.Fatal("second Run succeeded")
		}
		if err := w.Track(deployments); errs.KindOf(err) != errs.Conflict {
			t.Fatalf("Track after Run returned: %v, want conflict", err)
		}
		if w.Synced() {
			t.Fatal("Synced() after Run returned")
		}
	})
}

// recorder keeps every event in order.
type recorder struct {
	mu     sync.Mutex
	events []readiness.Event
}

func (r *recorder) add(ev readiness.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) of(ref apply.ObjectRef) []readiness.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []readiness.Event
	for _, ev := range r.events {
		if ev.Ref == ref {
			out = append(out, ev)
		}
	}
	return out
}

// waitFor returns the first event that matches, failing the test after timeout.
func (r *recorder) waitFor(t *testing.T, timeout time.Duration, match func(readiness.Event) bool) readiness.Event {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		r.mu.Lock()
		i := slices.IndexFunc(r.events, match)
		var ev readiness.Event
		if i >= 0 {
			ev = r.events[i]
		}
		n := len(r.events)
		r.mu.Unlock()
		if i >= 0 {
			return ev
		}
		if time.Now().After(deadline) {
			r.mu.Lock()
			last := r.events[max(0, n-10):n]
			r.mu.Unlock()
			t.Fatalf("no matching event after %s; the last of %d events: %+v", timeout, n, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func run(t *testing.T, w *readiness.Watcher) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("Run did not return 30s after its context was cancelled")
		}
	})
}

func waitSynced(t *testing.T, w *readiness.Watcher) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !w.Synced() {
		if time.Now().After(deadline) {
			t.Fatal("the watcher did not sync in 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func createDeployment(cs kubernetes.Interface, ns, name string, replicas int32, l map[string]string) func(context.Context) error {
	return func(ctx context.Context) error {
		pod := map[string]string{"app": name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(replicas),
				Selector: &metav1.LabelSelector{MatchLabels: pod},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: pod},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "fake"}}},
				},
			},
		}
		_, err := cs.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{})
		return err
	}
}

func createConfigMap(cs kubernetes.Interface, ns, name string, l map[string]string) func(context.Context) error {
	return func(ctx context.Context) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: l}, Data: map[string]string{"k": "v"}}
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		return err
	}
}

func clientset(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("kubernetes.NewForConfig: %v", err)
	}
	return cs
}

func statuses(evs []readiness.Event) []readiness.Status {
	out := make([]readiness.Status, 0, len(evs))
	for _, ev := range evs {
		if len(out) == 0 || out[len(out)-1] != ev.Status {
			out = append(out, ev.Status)
		}
	}
	return out
}

func refsAndStatuses(evs []readiness.Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%s=%s", ev.Ref, ev.Status))
	}
	slices.Sort(out)
	return out
}

// uniqueName returns a DNS label starting with prefix and unique to this run.
func uniqueName(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}
