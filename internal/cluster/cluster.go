// Package cluster keeps one client per registered edge cluster and knows, at any
// moment, whether each one answers.
//
// The Manager follows the registry through a watch on the store (so it sees
// clusters registered by any hub replica and everything stored before a restart),
// builds each cluster's client in memory from its decrypted kubeconfig (never a
// file), and probes it: /version, API discovery and node capacity. A cluster that
// fails is probed again with capped exponential backoff and jitter; one slow or dead
// cluster never delays the probes of another.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/registry"
	"github.com/atoll-edge/atoll/internal/store"
)

// State is a cluster's connectivity.
type State string

// The connectivity states.
const (
	Pending     State = "Pending"     // registered, not probed yet
	Reachable   State = "Reachable"   // the last probe succeeded
	Unreachable State = "Unreachable" // the last probe failed
)

// Capacity sums the allocatable resources of a cluster's nodes.
type Capacity struct {
	Nodes  int    `json:"nodes"`
	CPU    string `json:"cpu"`    // a Kubernetes quantity, "0" without nodes
	Memory string `json:"memory"` // a Kubernetes quantity, "0" without nodes
	Pods   int64  `json:"pods"`
}

// Status is what the hub knows of one cluster's connectivity.
type Status struct {
	State             State     `json:"state"`
	Reachable         bool      `json:"reachable"`
	Server            string    `json:"server,omitempty"`
	KubernetesVersion string    `json:"kubernetesVersion,omitempty"`
	APIGroups         int       `json:"apiGroups,omitempty"`
	LastError         string    `json:"lastError,omitempty"`
	Since             time.Time `json:"since"`
	LastProbe         time.Time `json:"lastProbe,omitzero"`
	NextProbe         time.Time `json:"nextProbe,omitzero"`
	Failures          int       `json:"consecutiveFailures"`
	Capacity          Capacity  `json:"capacity"`
}

// Options configure a Manager. Store and Registry must be set.
type Options struct {
	Store    *store.Store
	Registry *registry.Registry
	Logger   *slog.Logger
	// ProbeInterval is the time between probes of a reachable cluster (default 15s).
	ProbeInterval time.Duration
	// BackoffBase is the first wait after a failed probe (default 1s), doubled on
	// each further failure up to BackoffCap (default 60s).
	BackoffBase, BackoffCap time.Duration
	// ProbeTimeout bounds one probe (default 10s).
	ProbeTimeout time.Duration
	// OnReachable, when set, is called (in its own goroutine) each time a cluster
	// answers after it did not: the resource sync resumes its work at once
	// instead of waiting out its backoff.
	OnReachable func(key store.Key)
}

// Manager owns the members. Create it with New and run it with Run.
type Manager struct {
	opts    Options
	log     *slog.Logger
	mu      sync.RWMutex
	members map[string]*member // by key path
}

type member struct {
	key    store.Key
	rev    int64
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.RWMutex
	status Status
	config *rest.Config
	client kubernetes.Interface
	// apiVersions are "group/version" and "group/version/Kind" entries from
	// discovery, as Helm's .Capabilities.APIVersions has them; groupsSig is the
	// group list they were read for, so they are read again only when it changes.
	apiVersions []string
	groupsSig   string
}

// New checks opts and fills defaults.
func New(opts Options) (*Manager, error) {
	if opts.Store == nil || opts.Registry == nil {
		return nil, errors.New("cluster manager: Store and Registry must be set")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = 15 * time.Second
	}
	if opts.BackoffBase <= 0 {
		opts.BackoffBase = time.Second
	}
	if opts.BackoffCap <= 0 {
		opts.BackoffCap = 60 * time.Second
	}
	if opts.BackoffCap < opts.BackoffBase {
		opts.BackoffCap = opts.BackoffBase
	}
	if opts.ProbeTimeout <= 0 {
		opts.ProbeTimeout = 10 * time.Second
	}
	return &Manager{opts: opts, log: opts.Logger.With("component", "cluster"), members: map[string]*member{}}, nil
}

// Run follows the registered clusters until ctx ends, then stops every member.
func (m *Manager) Run(ctx context.Context) error {
	defer m.stopAll()
	for {
		items, rev, err := m.opts.Store.ListAll(ctx, model.Clusters)
		if err == nil {
			m.sync(ctx, items)
			err = m.opts.Store.Watch(ctx, model.Clusters, rev, func(e store.Event) {
				if e.Type == store.Deleted {
					m.remove(e.Item.Key)
					return
				}
				m.upsert(ctx, e.Item)
			})
		}
		if ctx.Err() != nil {
			return nil
		}
		m.log.Warn("cluster watch ended; listing again", "error", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// sync makes the members match items after a (re)list.
func (m *Manager) sync(ctx context.Context, items []store.Item) {
	seen := map[string]bool{}
	for _, it := range items {
		seen[it.Key.Path()] = true
		m.upsert(ctx, it)
	}
	m.mu.RLock()
	var gone []store.Key
	for p, mem := range m.members {
		if !seen[p] {
			gone = append(gone, mem.key)
		}
	}
	m.mu.RUnlock()
	for _, k := range gone {
		m.remove(k)
	}
}

func (m *Manager) upsert(ctx context.Context, it store.Item) {
	m.mu.RLock()
	old := m.members[it.Key.Path()]
	m.mu.RUnlock()
	if old != nil && old.rev == it.Rev {
		return
	}
	mem := &member{key: it.Key, rev: it.Rev, done: make(chan struct{}),
		status: Status{State: Pending, Since: time.Now().UTC(), LastError: "not probed yet"}}
	cfg, client, server, err := m.connect(it)
	mem.status.Server = server
	mem.config, mem.client = cfg, client
	if err != nil {
		mem.status.State = Unreachable
		mem.status.LastError = err.Error()
		m.log.Warn("cluster cannot be used", "cluster", it.Key.Path(), "error", err.Error())
	}

	mctx, cancel := context.WithCancel(ctx)
	mem.cancel = cancel
	m.mu.Lock()
	old = m.members[it.Key.Path()]
	m.members[it.Key.Path()] = mem
	m.mu.Unlock()
	if old != nil {
		old.cancel()
		<-old.done
	}
	if err != nil {
		close(mem.done)
		return
	}
	go m.probeLoop(mctx, mem)
}

// connect builds the cluster's client in memory from its stored, sealed kubeconfig.
func (m *Manager) connect(it store.Item) (*rest.Config, kubernetes.Interface, string, error) {
	var rec model.ClusterRecord
	if err := json.Unmarshal(it.Data, &rec); err != nil {
		return nil, nil, "", fmt.Errorf("decode the stored cluster: %w", err)
	}
	kc, err := m.opts.Registry.OpenKubeconfig(it.Key, rec)
	if err != nil {
		return nil, nil, rec.Server, err
	}
	cfg, err := kc.RESTConfig()
	if err != nil {
		return nil, nil, rec.Server, err
	}
	cfg.Timeout = m.opts.ProbeTimeout
	cfg.UserAgent = "atoll-hub"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, rec.Server, fmt.Errorf("build a client for %s: %w", it.Key, err)
	}
	return cfg, client, rec.Server, nil
}

func (m *Manager) remove(k store.Key) {
	m.mu.Lock()
	mem := m.members[k.Path()]
	delete(m.members, k.Path())
	m.mu.Unlock()
	if mem != nil {
		mem.cancel()
		<-mem.done
	}
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	members := m.members
	m.members = map[string]*member{}
	m.mu.Unlock()
	for _, mem := range members {
		mem.cancel()
		<-mem.done
	}
}

func (m *Manager) probeLoop(ctx context.Context, mem *member) {
	defer close(mem.done)
	backoff := m.newBackoff()
	for {
		err := m.probe(ctx, mem)
		if ctx.Err() != nil {
			return
		}
		wait := m.opts.ProbeInterval
		if err != nil {
			wait = backoff.Step()
		} else {
			backoff = m.newBackoff()
		}
		mem.mu.Lock()
		mem.status.NextProbe = time.Now().Add(wait).UTC()
		mem.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (m *Manager) newBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: m.opts.BackoffBase, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: m.opts.BackoffCap}
}

// probe asks the cluster for its version, its API groups and its nodes.
func (m *Manager) probe(ctx context.Context, mem *member) error {
	pctx, cancel := context.WithTimeout(ctx, m.opts.ProbeTimeout)
	defer cancel()
	now := time.Now().UTC()
	body, err := mem.client.Discovery().RESTClient().Get().AbsPath("/version").Do(pctx).Raw()
	var version struct {
		GitVersion string `json:"gitVersion"`
	}
	if err == nil {
		err = json.Unmarshal(body, &version)
	}
	var groups *metav1.APIGroupList
	if err == nil {
		groups, err = mem.client.Discovery().ServerGroups()
	}
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		m.fail(mem, err)
		return err
	}
	capacity, capErr := nodeCapacity(pctx, mem.client)
	sig := groupsSignature(groups)
	mem.mu.RLock()
	stale := sig != mem.groupsSig
	mem.mu.RUnlock()
	var apiVersions []string
	if stale {
		apiVersions = discoverAPIVersions(mem.client)
	}
	mem.mu.Lock()
	if stale {
		mem.apiVersions, mem.groupsSig = apiVersions, sig
	}
	defer mem.mu.Unlock()
	if mem.status.State != Reachable {
		m.log.Info("cluster reachable", "cluster", mem.key.Path(), "version", version.GitVersion)
		mem.status.Since = now
		if m.opts.OnReachable != nil {
			go m.opts.OnReachable(mem.key)
		}
	}
	mem.status.State = Reachable
	mem.status.Reachable = true
	mem.status.KubernetesVersion = version.GitVersion
	mem.status.APIGroups = len(groups.Groups)
	mem.status.LastProbe = now
	mem.status.Failures = 0
	mem.status.LastError = ""
	if capErr != nil {
		mem.status.LastError = "cannot read node capacity: " + capErr.Error()
	} else {
		mem.status.Capacity = capacity
	}
	return nil
}

func (m *Manager) fail(mem *member, err error) {
	mem.mu.Lock()
	defer mem.mu.Unlock()
	now := time.Now().UTC()
	if mem.status.State != Unreachable {
		m.log.Warn("cluster unreachable", "cluster", mem.key.Path(), "error", err.Error())
		mem.status.Since = now
	}
	mem.status.State = Unreachable
	mem.status.Reachable = false
	mem.status.LastError = err.Error()
	mem.status.LastProbe = now
	mem.status.Failures++
}

// nodeCapacity sums the allocatable cpu, memory and pods of every node.
func nodeCapacity(ctx context.Context, c kubernetes.Interface) (Capacity, error) {
	cpu, mem := resource.NewQuantity(0, resource.DecimalSI), resource.NewQuantity(0, resource.BinarySI)
	var out Capacity
	opts := metav1.ListOptions{Limit: 500}
	for {
		nodes, err := c.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return Capacity{}, err
		}
		for _, n := range nodes.Items {
			out.Nodes++
			a := n.Status.Allocatable
			if q, ok := a[corev1.ResourceCPU]; ok {
				cpu.Add(q)
			}
			if q, ok := a[corev1.ResourceMemory]; ok {
				mem.Add(q)
			}
			if q, ok := a[corev1.ResourcePods]; ok {
				out.Pods += q.Value()
			}
		}
		if nodes.Continue == "" {
			break
		}
		opts.Continue = nodes.Continue
	}
	out.CPU, out.Memory = cpu.String(), mem.String()
	return out, nil
}

func groupsSignature(groups *metav1.APIGroupList) string {
	var b strings.Builder
	for _, g := range groups.Groups {
		for _, v := range g.Versions {
			b.WriteString(v.GroupVersion)
			b.WriteByte(',')
		}
	}
	return b.String()
}

// discoverAPIVersions lists what the cluster serves, tolerating groups whose
// discovery fails (an aggregated API that is down).
func discoverAPIVersions(c kubernetes.Interface) []string {
	_, lists, _ := c.Discovery().ServerGroupsAndResources()
	var out []string
	for _, l := range lists {
		out = append(out, l.GroupVersion)
		for _, r := range l.APIResources {
			if !strings.Contains(r.Name, "/") {
				out = append(out, l.GroupVersion+"/"+r.Kind)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Capabilities returns what Helm needs to render for the cluster at key: its
// Kubernetes version and the API versions it serves; ok is false when the cluster
// has never answered a probe.
func (m *Manager) Capabilities(key store.Key) (kubeVersion string, apiVersions []string, ok bool) {
	m.mu.RLock()
	mem := m.members[key.Path()]
	m.mu.RUnlock()
	if mem == nil {
		return "", nil, false
	}
	mem.mu.RLock()
	defer mem.mu.RUnlock()
	if mem.status.KubernetesVersion == "" {
		return "", nil, false
	}
	return mem.status.KubernetesVersion, append([]string(nil), mem.apiVersions...), true
}

// Status returns the connectivity of the cluster at key; ok is false when the
// manager has not seen that cluster (yet).
func (m *Manager) Status(key store.Key) (Status, bool) {
	m.mu.RLock()
	mem := m.members[key.Path()]
	m.mu.RUnlock()
	if mem == nil {
		return Status{}, false
	}
	mem.mu.RLock()
	defer mem.mu.RUnlock()
	return mem.status, true
}

// Config returns a copy of the client config of the cluster at key, for the
// engines that talk to it; ok is false when there is none.
func (m *Manager) Config(key store.Key) (*rest.Config, bool) {
	m.mu.RLock()
	mem := m.members[key.Path()]
	m.mu.RUnlock()
	if mem == nil || mem.config == nil {
		return nil, false
	}
	return rest.CopyConfig(mem.config), true
}
