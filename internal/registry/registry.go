// Package registry is the cluster registry (EMCO's clm): it checks uploaded
// kubeconfigs, seals them with the hub's key before they reach the store, and
// answers which clusters carry a label.
package registry

import (
	"context"
	"fmt"

	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/kubeconfig"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/secret"
	"github.com/atoll-edge/atoll/internal/store"
)

// Registry registers clusters. Its fields must be set.
type Registry struct {
	Store      *store.Store
	Keyring    *secret.Keyring
	Kubeconfig kubeconfig.Options
}

// CreateCluster checks the kubeconfig, seals it and stores the cluster under provider.
func (r *Registry) CreateCluster(ctx context.Context, provider string, c model.Cluster, kubeconfigData []byte) (int64, error) {
	key := store.K(model.Clusters, provider, c.Metadata.Name)
	rec, err := r.record(key, c, kubeconfigData)
	if err != nil {
		return 0, err
	}
	return r.Store.Create(ctx, key, rec)
}

// UpdateCluster replaces the cluster's metadata and spec, and its kubeconfig when
// kubeconfigData is not nil (else the stored one is kept). rev > 0 asks for
// compare-and-swap on that revision.
func (r *Registry) UpdateCluster(ctx context.Context, provider string, c model.Cluster, kubeconfigData []byte, rev int64) (int64, error) {
	key := store.K(model.Clusters, provider, c.Metadata.Name)
	if kubeconfigData != nil {
		rec, err := r.record(key, c, kubeconfigData)
		if err != nil {
			return 0, err
		}
		return r.Store.Update(ctx, key, rec, rev)
	}
	// Keep the stored kubeconfig: read-modify-write, retried on a concurrent change
	// unless the caller asked for a revision.
	for attempt := 0; ; attempt++ {
		var old model.ClusterRecord
		cur, err := r.Store.Get(ctx, key, &old)
		if err != nil {
			return 0, err
		}
		if rev > 0 && cur != rev {
			return 0, errs.New(errs.Conflict, "%s was changed since revision %d (now %d); read it again and retry", key, rev, cur)
		}
		old.Cluster = c
		newRev, err := r.Store.Update(ctx, key, old, cur)
		if errs.KindOf(err) == errs.Conflict && rev == 0 && attempt < 8 {
			continue
		}
		return newRev, err
	}
}

func (r *Registry) record(key store.Key, c model.Cluster, data []byte) (model.ClusterRecord, error) {
	kc, err := kubeconfig.Parse(data, r.Kubeconfig)
	if err != nil {
		return model.ClusterRecord{}, err
	}
	sealed, err := r.Keyring.Seal(data, []byte(key.Path()))
	if err != nil {
		return model.ClusterRecord{}, fmt.Errorf("seal the kubeconfig of %s: %w", key, err)
	}
	return model.ClusterRecord{Cluster: c, Kubeconfig: sealed, Server: kc.Server()}, nil
}

// OpenKubeconfig decrypts the kubeconfig of the cluster stored at key.
func (r *Registry) OpenKubeconfig(key store.Key, rec model.ClusterRecord) (*kubeconfig.Kubeconfig, error) {
	data, err := r.Keyring.Open(rec.Kubeconfig, []byte(key.Path()))
	if err != nil {
		return nil, fmt.Errorf("open the kubeconfig of %s: %w", key, err)
	}
	// Checked at upload; parse again with exec allowed so that a kubeconfig accepted
	// by an earlier, more permissive start keeps working.
	kc, err := kubeconfig.Parse(data, kubeconfig.Options{AllowExec: r.Kubeconfig.AllowExec})
	if err != nil {
		return nil, fmt.Errorf("the stored kubeconfig of %s is no longer accepted: %w", key, err)
	}
	return kc, nil
}

// ClustersWithLabel returns the names of provider's clusters that carry label, sorted.
func (r *Registry) ClustersWithLabel(ctx context.Context, provider, label string) ([]string, error) {
	if _, err := r.Store.Get(ctx, store.K(model.ClusterProviders, provider), nil); err != nil {
		return nil, err
	}
	items, err := r.Store.ListUnder(ctx, model.ClusterLabels, provider)
	if err != nil {
		return nil, err
	}
	names := []string{}
	for _, it := range items {
		if it.Key.Name() == label {
			names = append(names, it.Key.Names[1])
		}
	}
	return names, nil
}
