package ztp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/etcdembed"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/registry"
	"github.com/atoll-edge/atoll/internal/secret"
	"github.com/atoll-edge/atoll/internal/store"
)

type noSites struct{}

func (noSites) Config(store.Key) (*rest.Config, bool) { return nil, false }

// newController returns a Controller on a real embedded etcd, with provider telco.
func newController(t *testing.T) *Controller {
	t.Helper()
	ctx := context.Background()
	e, err := etcdembed.Start(ctx, etcdembed.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	key := make([]byte, 32)
	copy(key, "0123456789abcdef0123456789abcdef")
	kr, err := secret.NewKeyring(key)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(e.Client(), model.Schema, "/ztp-test")
	z, err := New(Options{Store: st, Registry: &registry.Registry{Store: st, Keyring: kr}, Sites: noSites{}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, store.K(model.ClusterProviders, "telco"), model.ClusterProvider{Metadata: model.Metadata{Name: "telco"}}); err != nil {
		t.Fatal(err)
	}
	return z
}

func kubeconfigFor(t *testing.T, server string, exec bool) []byte {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: server}
	kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: "t0ken"}
	if exec {
		kc.AuthInfos["u"] = &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{Command: "/bin/true", APIVersion: "client.authentication.k8s.io/v1", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}}
	}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	kc.CurrentContext = "c"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestRegister: registering is idempotent, refreshes a kubeconfig that changed,
// adds labels, and leaves alone a cluster someone else registered.
func TestRegister(t *testing.T) {
	ctx := context.Background()
	z := newController(t)
	s := site{Provider: "sites", Cluster: "site-1"}
	p := &bpav1.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "rack1", Namespace: "ztp"}}
	target := clusterRef{Provider: "telco", Name: "edge-1"}
	key := store.K(model.Clusters, "telco", "edge-1")
	get := func() (model.ClusterRecord, int64) {
		t.Helper()
		var rec model.ClusterRecord
		rev, err := z.opts.Store.Get(ctx, key, &rec)
		if err != nil {
			t.Fatal(err)
		}
		return rec, rev
	}
	labels := func() []string {
		t.Helper()
		items, _, err := z.opts.Store.List(ctx, model.ClusterLabels, "telco", "edge-1")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, it := range items {
			out = append(out, it.Key.Name())
		}
		return out
	}

	if err := z.register(ctx, s, p, target, []string{"edge", "ztp"}, kubeconfigFor(t, "https://192.0.2.1:6443", false)); err != nil {
		t.Fatal(err)
	}
	rec, rev := get()
	if rec.Server != "https://192.0.2.1:6443" || !strings.Contains(rec.Metadata.Description, "site sites/site-1, Provisioning ztp/rack1") {
		t.Fatalf("registered %+v", rec.Cluster)
	}
	if stored, _ := json.Marshal(rec); strings.Contains(string(stored), "t0ken") || strings.Contains(string(stored), "192.0.2.1:6443\\n") {
		t.Fatalf("the kubeconfig is stored in clear: %s", stored)
	}
	if got := labels(); !slices.Equal(got, []string{"edge", "ztp"}) {
		t.Fatalf("labels %v", got)
	}

	// Again, as after a hub restart: nothing changes.
	if err := z.register(ctx, s, p, target, []string{"edge", "ztp"}, kubeconfigFor(t, "https://192.0.2.1:6443", false)); err != nil {
		t.Fatal(err)
	}
	if _, rev2 := get(); rev2 != rev {
		t.Fatalf("registering again rewrote the cluster (revision %d → %d)", rev, rev2)
	}

	// The cluster was installed again: its new kubeconfig replaces the old one.
	if err := z.register(ctx, s, p, target, []string{"edge", "ztp", "rack-1"}, kubeconfigFor(t, "https://192.0.2.2:6443", false)); err != nil {
		t.Fatal(err)
	}
	if rec, _ := get(); rec.Server != "https://192.0.2.2:6443" {
		t.Fatalf("server after refresh %q", rec.Server)
	}
	if got := labels(); !slices.Equal(got, []string{"edge", "rack-1", "ztp"}) {
		t.Fatalf("labels %v", got)
	}

	// Another Provisioning naming the same cluster does not take it over.
	other := &bpav1.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "rack2", Namespace: "ztp"}}
	err := z.register(ctx, s, other, target, nil, kubeconfigFor(t, "https://192.0.2.9:6443", false))
	var term *terminalError
	if !errors.As(err, &term) || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("a foreign registration: %v, want a terminal error", err)
	}
	if rec, _ := get(); rec.Server != "https://192.0.2.2:6443" {
		t.Fatalf("the foreign registration changed the server to %q", rec.Server)
	}

	// A kubeconfig the hub refuses (an exec plugin) is terminal: retrying the same
	// Secret cannot help.
	err = z.register(ctx, s, p, clusterRef{Provider: "telco", Name: "edge-2"}, nil, kubeconfigFor(t, "https://192.0.2.3:6443", true))
	if !errors.As(err, &term) || !strings.Contains(err.Error(), "exec plugin") {
		t.Fatalf("an exec kubeconfig: %v, want a terminal error saying why", err)
	}
	if _, err := z.opts.Store.Get(ctx, store.K(model.Clusters, "telco", "edge-2"), nil); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("the refused cluster: %v, want not found", err)
	}
}

func TestTarget(t *testing.T) {
	tests := []struct {
		name        string
		annotations map[string]string
		want        string
		labels      []string
		wantErr     string
	}{
		{"complete", map[string]string{AnnotationProvider: "telco", AnnotationCluster: "e1", AnnotationLabels: `["a","b"]`}, "telco/e1", []string{"a", "b"}, ""},
		{"no labels", map[string]string{AnnotationProvider: "telco", AnnotationCluster: "e1"}, "telco/e1", nil, ""},
		{"no provider", map[string]string{AnnotationCluster: "e1"}, "", nil, "lacks the annotations"},
		{"bad labels", map[string]string{AnnotationProvider: "telco", AnnotationCluster: "e1", AnnotationLabels: `a,b`}, "", nil, "not a JSON list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &bpav1.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n", Annotations: tt.annotations}}
			got, labels, err := target(p)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.String() != tt.want || !slices.Equal(labels, tt.labels) {
				t.Fatalf("target = %s %v %v, want %s %v", got, labels, err, tt.want, tt.labels)
			}
		})
	}
}

func TestSiteError(t *testing.T) {
	gr := schema.GroupResource{Group: "bpa.akraino.org", Resource: "provisionings"}
	gk := schema.GroupKind{Group: "bpa.akraino.org", Kind: "Provisioning"}
	tests := []struct {
		err  error
		want errs.Kind
	}{
		{apierrors.NewAlreadyExists(gr, "p"), errs.Exists},
		{apierrors.NewInvalid(gk, "p", field.ErrorList{field.Invalid(field.NewPath("spec", "masters"), 0, "bad")}), errs.Invalid},
		{apierrors.NewNotFound(gr, "p"), errs.NotFound},
		{apierrors.NewConflict(gr, "p", fmt.Errorf("changed")), errs.Conflict},
		{apierrors.NewForbidden(gr, "p", fmt.Errorf("no")), errs.Invalid},
		{fmt.Errorf("dial tcp: connection refused"), errs.Unavailable},
	}
	s := site{Provider: "sites", Cluster: "s1"}
	for _, tt := range tests {
		got := siteError(s, "create", tt.err)
		if errs.KindOf(got) != tt.want || !strings.Contains(got.Error(), "site sites/s1") {
			t.Errorf("siteError(%v) = %v (%s), want kind %s", tt.err, got, errs.KindOf(got), tt.want)
		}
	}
}
