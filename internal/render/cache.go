package render

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"sync"

	"github.com/atoll-edge/atoll/internal/errs"
)

// cacheKey is the canonical encoding of everything that shapes a render. JSON
// with sorted map keys (encoding/json) makes equal inputs encode equal.
type cacheKey struct {
	Chart         string           `json:"chart"`
	Release       string           `json:"release"`
	Namespace     string           `json:"namespace"`
	Values        []map[string]any `json:"values"`
	ProfileFiles  [][2]string      `json:"profileFiles"` // chartpath, sha256 of data
	KubeVersion   string           `json:"kubeVersion"`
	APIVersions   []string         `json:"apiVersions"`
	ClusterScoped []string         `json:"clusterScoped"`
}

// key returns the cache key of the render: hex SHA-256 of its canonical
// encoding.
func (n *normalized) key() (string, error) {
	k := cacheKey{
		Chart:       n.ChartDigest,
		Release:     n.ReleaseName,
		Namespace:   n.Namespace,
		Values:      n.Values,
		KubeVersion: n.KubeVersion,
		APIVersions: n.APIVersions,
	}
	if n.kubeVersion != nil {
		k.KubeVersion = n.kubeVersion.Version
	}
	for _, pf := range n.ProfileFiles {
		sum := sha256.Sum256(pf.Data)
		k.ProfileFiles = append(k.ProfileFiles, [2]string{pf.ChartPath, hex.EncodeToString(sum[:])})
	}
	for _, gk := range n.ClusterScoped {
		k.ClusterScoped = append(k.ClusterScoped, gk.String())
	}
	sort.Strings(k.ClusterScoped)
	b, err := json.Marshal(k)
	if err != nil {
		return "", errs.Wrap(errs.Invalid, err, "render chart %q: %v", n.name, errNotJSON)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// lru is a mutex-guarded LRU of rendered outputs with hit and miss counters.
type lru struct {
	mu     sync.Mutex
	size   int
	ll     *list.List // of *lruEntry, most recently used first
	items  map[string]*list.Element
	hits   int
	misses int
}

type lruEntry struct {
	key string
	out *Output
}

func newLRU(size int) *lru {
	return &lru{size: size, ll: list.New(), items: map[string]*list.Element{}}
}

// get returns the output cached under key and counts a hit or a miss.
func (c *lru) get(key string) (*Output, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.ll.MoveToFront(el)
		c.hits++
		return el.Value.(*lruEntry).out, true
	}
	c.misses++
	return nil, false
}

// add caches out under key, evicting the least recently used output when full.
func (c *lru) add(key string, out *Output) {
	if c.size <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		el.Value.(*lruEntry).out = out
		c.ll.MoveToFront(el)
		return
	}
	c.items[key] = c.ll.PushFront(&lruEntry{key: key, out: out})
	for c.ll.Len() > c.size {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.items, last.Value.(*lruEntry).key)
	}
}

func (c *lru) stats() (hits, misses int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses
}

// clone returns a deep copy of o, so that a caller can modify what it gets
// without touching the cached output.
func (o *Output) clone() *Output {
	out := &Output{Notes: o.Notes}
	out.CRDs = cloneResources(o.CRDs)
	out.Resources = cloneResources(o.Resources)
	if o.Hooks != nil {
		out.Hooks = make([]Hook, len(o.Hooks))
		for i, h := range o.Hooks {
			out.Hooks[i] = Hook{
				Resource:       cloneResource(h.Resource),
				Events:         append([]string(nil), h.Events...),
				Weight:         h.Weight,
				DeletePolicies: append([]string(nil), h.DeletePolicies...),
			}
		}
	}
	return out
}

func cloneResources(rs []Resource) []Resource {
	if rs == nil {
		return nil
	}
	out := make([]Resource, len(rs))
	for i, r := range rs {
		out[i] = cloneResource(r)
	}
	return out
}

func cloneResource(r Resource) Resource {
	return Resource{Object: r.Object.DeepCopy(), Source: r.Source, Hash: r.Hash}
}
