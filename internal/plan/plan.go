// Package plan is the seeds' "etcd context": for one revision of a deployment
// intent group, per app and per cluster, the ordered resources to apply, each with
// a content hash. A plan is made before anything is applied and stored as one
// content-addressed blob (its resources as blobs of their own, shared between
// clusters that render the same object), so it becomes visible in one step: when
// the lifecycle's transaction records its digest.
package plan

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/atoll-edge/atoll/internal/blob"
)

// Labels every applied object carries.
const (
	LabelDIG      = "atoll.dev/dig"
	LabelApp      = "atoll.dev/app"
	LabelInstance = "atoll.dev/instance"
)

// Ref names one Kubernetes object.
type Ref struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

// ID is "apiVersion/kind/namespace/name", unique within a cluster.
func (r Ref) ID() string { return r.APIVersion + "/" + r.Kind + "/" + r.Namespace + "/" + r.Name }

// String is "Kind namespace/name".
func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// Resource is one object of a plan.
type Resource struct {
	Ref  Ref    `json:"ref"`
	Hash string `json:"hash"` // sha256 of the object's canonical JSON, labels included
	Blob string `json:"blob"` // the object's JSON in the blob store
	// Phase orders the apply: "crd" (applied first and waited until Established),
	// "hook:pre-install", "main", "hook:post-install".
	Phase  string `json:"phase"`
	Weight int    `json:"weight,omitempty"` // hook weight
	// DeletePolicies are a hook's helm.sh/hook-delete-policy values.
	DeletePolicies []string `json:"deletePolicies,omitempty"`
}

// ClusterPlan is what one app puts on one cluster, in apply order.
type ClusterPlan struct {
	Cluster   string     `json:"cluster"` // the cluster's store key path
	Provider  string     `json:"provider"`
	Name      string     `json:"name"`
	Resources []Resource `json:"resources"`
}

// AppPlan is one app's clusters.
type AppPlan struct {
	App      string        `json:"app"`
	Clusters []ClusterPlan `json:"clusters"`
	// DependsOn: on each cluster, the app starts only when these apps have
	// reached their state there, plus their wait.
	DependsOn []Dependency `json:"dependsOn,omitempty"`
}

// Dependency is one app dependency of a plan.
type Dependency struct {
	App      string `json:"app"`
	OpStatus string `json:"opStatus"` // Ready or Deployed
	Wait     int    `json:"wait,omitempty"`
}

// Plan is one revision of a DIG's deployment.
type Plan struct {
	DIG          string    `json:"dig"` // the DIG's store key path
	Project      string    `json:"project"`
	CompositeApp string    `json:"compositeApp"`
	Version      string    `json:"compositeAppVersion"`
	Name         string    `json:"name"`
	Profile      string    `json:"compositeProfile"`
	Namespace    string    `json:"namespace"`
	Instance     string    `json:"instance"` // the atoll.dev/instance label value
	Revision     int64     `json:"revision"`
	Apps         []AppPlan `json:"apps"`
}

// Clusters returns the cluster key paths the plan touches, in order.
func (p *Plan) Clusters() []string {
	seen := map[string]bool{}
	var out []string
	for _, a := range p.Apps {
		for _, c := range a.Clusters {
			if !seen[c.Cluster] {
				seen[c.Cluster] = true
				out = append(out, c.Cluster)
			}
		}
	}
	return out
}

// InstanceOf is the atoll.dev/instance label value of a DIG: a short hash of its
// key path (label values are limited to 63 characters; DIG paths are longer).
func InstanceOf(digPath string) string {
	sum := sha256.Sum256([]byte(digPath))
	return "i" + hex.EncodeToString(sum[:])[:20]
}

// HashObject is the content hash of an object: sha256 of its JSON (encoding/json
// sorts map keys, so the same object always gives the same hash).
func HashObject(obj *unstructured.Unstructured) (string, []byte, error) {
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return "", nil, fmt.Errorf("encode %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:]), data, nil
}

// Store reads and writes plans and their resources in the blob store, with a
// cache of decoded plans and objects (both are immutable: named by their digest).
type Store struct {
	blobs *blob.Store
	mu    sync.Mutex
	plans map[string]*Plan
	objs  map[string][]byte
}

// NewStore returns a plan store on blobs.
func NewStore(blobs *blob.Store) *Store {
	return &Store{blobs: blobs, plans: map[string]*Plan{}, objs: map[string][]byte{}}
}

// PutObject stores an object's JSON and returns its blob digest.
func (s *Store) PutObject(ctx context.Context, data []byte) (string, error) {
	info, err := s.blobs.Put(ctx, bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("store a planned object: %w", err)
	}
	return info.Digest, nil
}

// Put stores the plan and returns its digest.
func (s *Store) Put(ctx context.Context, p *Plan) (string, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("encode plan: %w", err)
	}
	info, err := s.blobs.Put(ctx, bytes.NewReader(data))
	if err != nil {
		return "", fmt.Errorf("store plan: %w", err)
	}
	s.mu.Lock()
	s.plans[info.Digest] = p
	s.mu.Unlock()
	return info.Digest, nil
}

// Get returns the plan stored under digest.
func (s *Store) Get(ctx context.Context, digest string) (*Plan, error) {
	s.mu.Lock()
	p := s.plans[digest]
	s.mu.Unlock()
	if p != nil {
		return p, nil
	}
	data, err := s.blobs.Get(ctx, digest)
	if err != nil {
		return nil, fmt.Errorf("read plan %s: %w", digest, err)
	}
	p = &Plan{}
	if err := json.Unmarshal(data, p); err != nil {
		return nil, fmt.Errorf("decode plan %s: %w", digest, err)
	}
	s.mu.Lock()
	s.plans[digest] = p
	s.mu.Unlock()
	return p, nil
}

// Object returns a planned object, decoded.
func (s *Store) Object(ctx context.Context, r Resource) (*unstructured.Unstructured, error) {
	s.mu.Lock()
	data := s.objs[r.Blob]
	s.mu.Unlock()
	if data == nil {
		var err error
		if data, err = s.blobs.Get(ctx, r.Blob); err != nil {
			return nil, fmt.Errorf("read planned %s: %w", r.Ref, err)
		}
		s.mu.Lock()
		if len(s.objs) > 4096 {
			s.objs = map[string][]byte{}
		}
		s.objs[r.Blob] = data
		s.mu.Unlock()
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("decode planned %s: %w", r.Ref, err)
	}
	return obj, nil
}
