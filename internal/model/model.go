// Package model holds the objects of Atoll's API as they are sent and stored
// (EMCO v2 shapes: metadata + spec, camelCase), the store schema that places them,
// and the validation of their names.
package model

import (
	"encoding/json"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/secret"
	"github.com/atoll-edge/atoll/internal/store"
)

// Metadata is the common header of every EMCO object.
type Metadata struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	UserData1   string `json:"userData1,omitempty"`
	UserData2   string `json:"userData2,omitempty"`
}

// Object is any API object with metadata.
type Object interface {
	Meta() *Metadata
}

// Project groups composite applications (EMCO's orchestrator projects).
type Project struct {
	Metadata Metadata `json:"metadata"`
}

// Meta returns the object's metadata.
func (p *Project) Meta() *Metadata { return &p.Metadata }

// ClusterProvider owns a set of clusters (EMCO clm).
type ClusterProvider struct {
	Metadata Metadata `json:"metadata"`
}

// Meta returns the object's metadata.
func (p *ClusterProvider) Meta() *Metadata { return &p.Metadata }

// Cluster is a registered edge cluster as the API shows it: never its kubeconfig.
type Cluster struct {
	Metadata Metadata        `json:"metadata"`
	Spec     json.RawMessage `json:"spec,omitempty"`
}

// Meta returns the object's metadata.
func (c *Cluster) Meta() *Metadata { return &c.Metadata }

// ClusterRecord is a cluster as it is stored: the API object and its kubeconfig,
// sealed with the hub's key and bound to the cluster's key.
type ClusterRecord struct {
	Cluster
	Kubeconfig secret.Sealed `json:"kubeconfig"`
	// Server is the API server URL of the kubeconfig's current context (not secret).
	Server string `json:"server,omitempty"`
}

// ClusterLabel is one label of a cluster; the label is also the object's name.
type ClusterLabel struct {
	Metadata     *Metadata `json:"metadata,omitempty"`
	ClusterLabel string    `json:"clusterLabel"`
}

// ClusterKvPairs is a named list of key-value pairs attached to a cluster.
type ClusterKvPairs struct {
	Metadata Metadata    `json:"metadata"`
	Spec     KvPairsSpec `json:"spec"`
}

// Meta returns the object's metadata.
func (c *ClusterKvPairs) Meta() *Metadata { return &c.Metadata }

// KvPairsSpec holds the pairs, each a one-entry map as EMCO sends them.
type KvPairsSpec struct {
	Kv []map[string]any `json:"kv"`
}

// The store schema: where each kind lives.
var (
	Schema             = store.NewSchema()
	Projects           = Schema.Add("projects", "project", nil)
	ClusterProviders   = Schema.Add("cluster-providers", "cluster provider", nil)
	Clusters           = Schema.Add("clusters", "cluster", ClusterProviders)
	ClusterLabels      = Schema.Add("cluster-labels", "label", Clusters)
	ClusterKvPairsKind = Schema.Add("cluster-kv-pairs", "kv-pairs", Clusters)
)

// ValidateName checks that name can name an object: a DNS-1123 label (lowercase
// letters, digits and '-', starting and ending with a letter or digit, at most 63
// characters). what says what is being named, for the message.
func ValidateName(what, name string) error {
	if name == "" {
		return errs.New(errs.Invalid, "%s name is empty; set metadata.name", what)
	}
	if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
		return errs.New(errs.Invalid, "%s name %q is not valid: %s", what, name, strings.Join(msgs, "; "))
	}
	return nil
}

// ValidateLabel checks a cluster label: a Kubernetes label value that is not empty.
func ValidateLabel(label string) error {
	if label == "" {
		return errs.New(errs.Invalid, "clusterLabel is empty")
	}
	if msgs := validation.IsValidLabelValue(label); len(msgs) > 0 {
		return errs.New(errs.Invalid, "cluster label %q is not valid: %s", label, strings.Join(msgs, "; "))
	}
	return nil
}

// ValidateMetadata checks the fields of metadata that have limits.
func ValidateMetadata(what string, m *Metadata) error {
	if err := ValidateName(what, m.Name); err != nil {
		return err
	}
	for field, v := range map[string]string{"description": m.Description, "userData1": m.UserData1, "userData2": m.UserData2} {
		if len(v) > 4096 {
			return errs.New(errs.Invalid, "%s metadata.%s is %d bytes long; the limit is 4096", what, field, len(v))
		}
	}
	return nil
}

// ValidateKvPairs checks that every entry of spec.kv is a single key with a value.
func ValidateKvPairs(kv *ClusterKvPairs) error {
	for i, m := range kv.Spec.Kv {
		if len(m) != 1 {
			return errs.New(errs.Invalid, "spec.kv[%d] has %d keys; each entry is one {\"key\": value}", i, len(m))
		}
		for k := range m {
			if k == "" {
				return errs.New(errs.Invalid, "spec.kv[%d] has an empty key", i)
			}
		}
	}
	return nil
}
