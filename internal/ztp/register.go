package ztp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/kubeconfig"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/store"
)

var (
	errExists   = errs.E(errs.Exists)
	errNotFound = errs.E(errs.NotFound)
)

func errNoConnection(s site) error {
	return errs.New(errs.Unavailable, "the hub has no usable connection to site %s yet; see GET /v2/cluster-providers/%s/clusters/%s/status", s, s.Provider, s.Cluster)
}

// terminalError is a registration that retrying cannot fix.
type terminalError struct{ err error }

func (e *terminalError) Error() string { return e.err.Error() }
func (e *terminalError) Unwrap() error { return e.err }

// clusterRef names a cluster of the registry.
type clusterRef struct{ Provider, Name string }

func (c clusterRef) String() string { return c.Provider + "/" + c.Name }

// target reads where a Provisioning's cluster is to be registered.
func target(p *bpav1.Provisioning) (clusterRef, []string, error) {
	a := p.Annotations
	t := clusterRef{Provider: a[AnnotationProvider], Name: a[AnnotationCluster]}
	if t.Provider == "" || t.Name == "" {
		return t, nil, fmt.Errorf("Provisioning %s/%s lacks the annotations %s and %s", p.Namespace, p.Name, AnnotationProvider, AnnotationCluster)
	}
	labels, err := parseLabels(a[AnnotationLabels])
	return t, labels, err
}

// register makes the registry hold cluster t with kubeconfig data and labels:
// it creates the cluster, or refreshes the kubeconfig of one this Provisioning
// registered before, and adds the missing labels. A cluster of that name that
// someone else registered is left alone (a terminal error).
func (z *Controller) register(ctx context.Context, s site, p *bpav1.Provisioning, t clusterRef, labels []string, data []byte) error {
	key := store.K(model.Clusters, t.Provider, t.Name)
	desc := fmt.Sprintf(registeredByDescription, s.Provider, s.Cluster, p.Namespace, p.Name)
	var rec model.ClusterRecord
	_, err := z.opts.Store.Get(ctx, key, &rec)
	switch {
	case errors.Is(err, errNotFound):
		c := model.Cluster{Metadata: model.Metadata{Name: t.Name, Description: desc}}
		if _, err := z.opts.Registry.CreateCluster(ctx, t.Provider, c, data); err != nil {
			if k := errs.KindOf(err); k == errs.Invalid || k == errs.Malformed || k == errs.TooLarge {
				return &terminalError{fmt.Errorf("register cluster %s: %w", t, err)}
			}
			return fmt.Errorf("register cluster %s: %w", t, err)
		}
		z.log.Info("cluster registered by zero-touch provisioning", "cluster", t.String(), "site", s.String(), "provisioning", p.Namespace+"/"+p.Name)
	case err != nil:
		return err
	case rec.Metadata.Description != desc:
		return &terminalError{fmt.Errorf("cluster %s already exists and was not registered from Provisioning %s/%s of site %s; choose another register.cluster", t, p.Namespace, p.Name, s)}
	default:
		same, err := z.sameKubeconfig(key, rec, data)
		if err != nil {
			return err
		}
		if !same {
			if _, err := z.opts.Registry.UpdateCluster(ctx, t.Provider, rec.Cluster, data, 0); err != nil {
				return fmt.Errorf("refresh the kubeconfig of cluster %s: %w", t, err)
			}
			z.log.Info("cluster kubeconfig refreshed by zero-touch provisioning", "cluster", t.String())
		}
	}
	for _, l := range labels {
		_, err := z.opts.Store.Create(ctx, store.K(model.ClusterLabels, t.Provider, t.Name, l), model.ClusterLabel{ClusterLabel: l})
		if err != nil && !errors.Is(err, errExists) {
			return fmt.Errorf("label cluster %s %q: %w", t, l, err)
		}
	}
	return nil
}

// sameKubeconfig compares the stored kubeconfig with data by what a client would
// use: the server, its CA and the credentials.
func (z *Controller) sameKubeconfig(key store.Key, rec model.ClusterRecord, data []byte) (bool, error) {
	old, err := z.opts.Registry.OpenKubeconfig(key, rec)
	if err != nil {
		return false, nil // unusable: replace it
	}
	nk, err := kubeconfig.Parse(data, z.opts.Registry.Kubeconfig)
	if err != nil {
		return false, &terminalError{fmt.Errorf("the kubeconfig of %s is refused: %w", key, err)}
	}
	a, err1 := old.RESTConfig()
	b, err2 := nk.RESTConfig()
	if err1 != nil || err2 != nil {
		return false, nil
	}
	fa, _ := json.Marshal([]any{a.Host, a.CAData, a.CertData, a.KeyData, a.BearerToken, a.Username, a.Password})
	fb, _ := json.Marshal([]any{b.Host, b.CAData, b.CertData, b.KeyData, b.BearerToken, b.Username, b.Password})
	return bytes.Equal(fa, fb), nil
}
