package render

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/atoll-edge/atoll/internal/chart"
	"github.com/atoll-edge/atoll/internal/errs"
)

// DefaultNamespace is the release namespace when Input.Namespace is empty.
const DefaultNamespace = "default"

// notesFile is the name of a chart's notes template (templates/NOTES.txt).
const notesFile = "NOTES.txt"

// Input is everything one render depends on.
type Input struct {
	// Chart is the chart, as the Helm v4 loader for v2 charts loaded it
	// (chart.CheckChart(...).Loaded(), loader.Load). Render works on a fresh copy
	// loaded from its Raw files, so one *chart.Chart may be shared by concurrent
	// renders: it is never modified, and it must have its Raw files.
	Chart *chartv2.Chart
	// ChartDigest identifies the chart in the cache key ("sha256:<hex>" of the
	// uploaded archive: chart.Chart.Digest). If empty, a digest of Chart.Raw is
	// computed.
	ChartDigest string
	// ReleaseName is .Release.Name (a DNS-1123 name of at most 53 characters).
	ReleaseName string
	// Namespace is .Release.Namespace and the namespace given to namespaced
	// objects that have none; DefaultNamespace if empty.
	Namespace string
	// Values are layers of values applied in order over the chart's defaults
	// (profile values, then the DIG's override values), each deep-merged over
	// the ones before as `helm template -f a.yaml -f b.yaml` merges: maps merge
	// key by key, anything else replaces, and a null removes the chart's default.
	// They must be JSON-compatible (what YAML or JSON decoding gives). Render
	// does not modify them.
	Values []map[string]any
	// ProfileFiles replace or add files of the chart before it is rendered:
	// ChartPath "mychart/templates/config.yaml" is the chart's
	// templates/config.yaml (the first element, the chart's directory in the
	// archive, is dropped, whatever its name). Later files win.
	ProfileFiles []chart.ProfileFile
	// KubeVersion is the target cluster's Kubernetes version ("v1.37.2"), seen
	// as .Capabilities.KubeVersion. If empty, Helm's default is used (the
	// version of the client-go Atoll is built with).
	KubeVersion string
	// APIVersions are the target cluster's API versions from discovery
	// ("apps/v1", "apps/v1/Deployment", "bpa.akraino.org/v1alpha1", ...),
	// appended to Helm's built-in set as `helm template --api-versions` does.
	// Their order does not matter: they are sorted and deduplicated.
	APIVersions []string
	// ClusterScoped names kinds the target cluster serves as cluster-scoped
	// (from discovery), beyond the built-in ones Render knows: their objects get
	// no namespace. Optional.
	ClusterScoped []schema.GroupKind
}

// Resource is one rendered Kubernetes object.
type Resource struct {
	// Object is the object, with metadata.namespace set if it is namespaced.
	Object *unstructured.Unstructured
	// Source is the file it was rendered from, as Helm names it:
	// "web/templates/deployment.yaml", "crdapp/crds/widgets.yaml".
	Source string
	// Hash is "sha256:<hex>" of the object's canonical JSON encoding (keys
	// sorted).
	Hash string
}

// Hook is one rendered Helm hook.
type Hook struct {
	Resource
	// Events are the hook's events ("pre-install", "post-install", ...), from
	// the helm.sh/hook annotation.
	Events []string
	// Weight orders the hooks of one event (helm.sh/hook-weight; 0 if absent or
	// not a number).
	Weight int
	// DeletePolicies are from helm.sh/hook-delete-policy ("before-hook-creation",
	// "hook-succeeded", "hook-failed"). When empty, Helm applies
	// "before-hook-creation".
	DeletePolicies []string
}

// Output is a rendered chart. Every Output Render returns belongs to its
// caller, who may modify it.
type Output struct {
	// CRDs are the documents of the crds/ directories, to apply (and wait for)
	// first.
	CRDs []Resource
	// Resources are the other manifests, in Helm's install order.
	Resources []Resource
	// Hooks are the hook manifests, sorted by weight then name.
	Hooks []Hook
	// Notes is the rendered templates/NOTES.txt of the top chart.
	Notes string
}

// HooksFor returns the hooks that run on event ("pre-install", ...), in the
// order Helm runs them.
func (o *Output) HooksFor(event string) []Hook {
	var out []Hook
	for _, h := range o.Hooks {
		if slices.Contains(h.Events, event) {
			out = append(out, h)
		}
	}
	return out
}

// Renderer renders charts and caches identical renders. It is safe for
// concurrent use.
type Renderer struct {
	cache *lru
}

// New returns a Renderer that keeps the outputs of the last cacheSize distinct
// renders; cacheSize <= 0 disables the cache.
func New(cacheSize int) *Renderer {
	return &Renderer{cache: newLRU(cacheSize)}
}

// Stats returns how many renders were served from the cache and how many were
// rendered.
func (r *Renderer) Stats() (hits, misses int) { return r.cache.stats() }

// Render renders in.Chart for one target cluster. A template that fails, values
// that do not meet the chart's schema, a chart whose kubeVersion excludes the
// cluster, or a manifest that is not a Kubernetes object is an errs.Invalid
// error with Helm's message (`render chart "web": template: web/templates/...`)
// and no output.
func (r *Renderer) Render(ctx context.Context, in Input) (*Output, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n, err := normalize(in)
	if err != nil {
		return nil, err
	}
	key, err := n.key()
	if err != nil {
		return nil, err
	}
	if out, ok := r.cache.get(key); ok {
		return out.clone(), nil
	}
	out, err := n.render(ctx)
	if err != nil {
		return nil, err
	}
	r.cache.add(key, out)
	return out.clone(), nil
}

// normalized is an Input checked and put in canonical form.
type normalized struct {
	Input
	name        string // chart name, for messages
	kubeVersion *common.KubeVersion
}

func normalize(in Input) (*normalized, error) {
	if in.Chart == nil || in.Chart.Metadata == nil {
		return nil, errs.New(errs.Invalid, "render: no chart")
	}
	n := &normalized{Input: in, name: in.Chart.Name()}
	if len(in.Chart.Raw) == 0 {
		return nil, errs.New(errs.Invalid, "render chart %q: the chart has no raw files; load it with the Helm loader or chart.CheckChart", n.name)
	}
	if n.Namespace == "" {
		n.Namespace = DefaultNamespace
	}
	if n.ChartDigest == "" {
		n.ChartDigest = rawDigest(in.Chart.Raw)
	}
	if in.KubeVersion != "" {
		kv, err := common.ParseKubeVersion(in.KubeVersion)
		if err != nil {
			return nil, errs.Wrap(errs.Invalid, err, "render chart %q: invalid kube version %q", n.name, in.KubeVersion)
		}
		n.kubeVersion = kv
	}
	apis := slices.Clone(in.APIVersions)
	slices.Sort(apis)
	n.APIVersions = slices.Compact(apis)
	return n, nil
}

// rawDigest is a digest of a chart's raw files, for charts without an archive
// digest.
func rawDigest(files []*common.File) string {
	sorted := slices.Clone(files)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	h := sha256.New()
	for _, f := range sorted {
		fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// render does the work of Render, in the order of Helm's client-only install
// (see the package documentation).
func (n *normalized) render(ctx context.Context) (*Output, error) {
	ch, err := n.loadChart()
	if err != nil {
		return nil, err
	}
	if err := chartutil.ValidateReleaseName(n.ReleaseName); err != nil {
		return nil, n.invalid(fmt.Errorf("release name %q: %w", n.ReleaseName, err))
	}
	vals := mergeLayers(n.Values)
	if err := chartutil.ProcessDependencies(ch, vals); err != nil {
		return nil, n.invalid(fmt.Errorf("chart dependencies processing failed: %w", err))
	}

	caps := common.DefaultCapabilities.Copy()
	if n.kubeVersion != nil {
		caps.KubeVersion = *n.kubeVersion
	}
	caps.APIVersions = append(slices.Clone(caps.APIVersions), n.APIVersions...)

	options := common.ReleaseOptions{Name: n.ReleaseName, Namespace: n.Namespace, Revision: 1, IsInstall: true}
	top, err := util.ToRenderValuesWithSchemaValidation(ch, vals, options, caps, false)
	if err != nil {
		return nil, n.invalid(err)
	}
	if c := ch.Metadata.KubeVersion; c != "" && !chartutil.IsCompatibleRange(c, caps.KubeVersion.String()) {
		return nil, n.invalid(fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", c, caps.KubeVersion.Version))
	}

	files, err := engine.Engine{}.RenderWithContext(ctx, ch, top)
	if err != nil {
		return nil, n.invalid(err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := &Output{}
	var notes bytes.Buffer
	topNotes := path.Join(ch.Name(), "templates", notesFile)
	for name, content := range files {
		if strings.HasSuffix(name, notesFile) {
			if name == topNotes {
				notes.WriteString(content)
			}
			delete(files, name)
		}
	}
	out.Notes = notes.String()

	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, n.invalid(err)
	}
	return n.build(ch, out, hooks, manifests)
}

// loadChart loads a fresh copy of the chart from its raw files, with the profile
// files put in place.
func (n *normalized) loadChart() (*chartv2.Chart, error) {
	files := make([]*archive.BufferedFile, 0, len(n.Chart.Raw)+len(n.ProfileFiles))
	index := make(map[string]int, len(n.Chart.Raw))
	for _, f := range n.Chart.Raw {
		index[f.Name] = len(files)
		files = append(files, &archive.BufferedFile{Name: f.Name, ModTime: f.ModTime, Data: f.Data})
	}
	for _, pf := range n.ProfileFiles {
		name, err := profileTarget(pf.ChartPath)
		if err != nil {
			return nil, errs.Wrap(errs.Invalid, err, "render chart %q: profile file %q", n.name, pf.Path)
		}
		f := &archive.BufferedFile{Name: name, Data: pf.Data}
		if i, ok := index[name]; ok {
			f.ModTime = files[i].ModTime
			files[i] = f
			continue
		}
		index[name] = len(files)
		files = append(files, f)
	}
	ch, err := loader.LoadFiles(files)
	if err != nil {
		if len(n.ProfileFiles) > 0 {
			return nil, errs.Wrap(errs.Invalid, err, "render chart %q: the chart with the profile's files cannot be loaded", n.name)
		}
		return nil, errs.Wrap(errs.Invalid, err, "render chart %q: the chart cannot be loaded", n.name)
	}
	return ch, nil
}

// profileTarget turns a profile chartpath ("mychart/templates/x.yaml") into the
// name of a chart file ("templates/x.yaml").
func profileTarget(chartPath string) (string, error) {
	if strings.HasPrefix(chartPath, "/") || strings.ContainsRune(chartPath, '\\') {
		return "", fmt.Errorf("chartpath %q is not a relative slash-separated path", chartPath)
	}
	for el := range strings.SplitSeq(chartPath, "/") {
		if el == ".." {
			return "", fmt.Errorf("chartpath %q escapes the chart directory", chartPath)
		}
	}
	_, rest, ok := strings.Cut(path.Clean(chartPath), "/")
	if !ok || rest == "" {
		return "", fmt.Errorf("chartpath %q must start with the chart's directory, as in mychart/templates/config.yaml", chartPath)
	}
	return rest, nil
}

// invalid wraps a Helm error as the errs.Invalid error of this render.
func (n *normalized) invalid(err error) error {
	var e *errs.Error
	if errors.As(err, &e) {
		return err
	}
	return errs.Wrap(errs.Invalid, err, "render chart %q", n.name)
}

// build turns Helm's sorted manifests, hooks and the chart's CRDs into
// objects.
func (n *normalized) build(ch *chartv2.Chart, out *Output, hooks []*release.Hook, manifests []releaseutil.Manifest) (*Output, error) {
	sc := newScopes(n.ClusterScoped)

	type pending struct {
		source string
		objs   []map[string]any
	}
	var crdDocs, manifestDocs []pending
	for _, crd := range ch.CRDObjects() {
		docs := releaseutil.SplitManifests(string(crd.File.Data))
		keys := make([]string, 0, len(docs))
		for k := range docs {
			keys = append(keys, k)
		}
		sort.Sort(releaseutil.BySplitManifestsOrder(keys))
		for _, k := range keys {
			objs, err := decodeObjects(crd.Filename, docs[k])
			if err != nil {
				return nil, n.invalid(err)
			}
			for _, o := range objs {
				sc.learnCRD(o)
			}
			crdDocs = append(crdDocs, pending{crd.Filename, objs})
		}
	}
	for _, m := range manifests {
		objs, err := decodeObjects(m.Name, m.Content)
		if err != nil {
			return nil, n.invalid(err)
		}
		for _, o := range objs {
			sc.learnCRD(o)
		}
		manifestDocs = append(manifestDocs, pending{m.Name, objs})
	}
	hookObjs := make([][]map[string]any, len(hooks))
	for i, h := range hooks {
		objs, err := decodeObjects(h.Path, h.Manifest)
		if err != nil {
			return nil, n.invalid(err)
		}
		for _, o := range objs {
			sc.learnCRD(o)
		}
		hookObjs[i] = objs
	}

	// Every CRD is known now: default namespaces and hash.
	var err error
	for _, p := range crdDocs {
		for _, o := range p.objs {
			var res Resource
			if res, err = n.resource(sc, p.source, o); err != nil {
				return nil, err
			}
			out.CRDs = append(out.CRDs, res)
		}
	}
	for _, p := range manifestDocs {
		for _, o := range p.objs {
			var res Resource
			if res, err = n.resource(sc, p.source, o); err != nil {
				return nil, err
			}
			out.Resources = append(out.Resources, res)
		}
	}
	for i, h := range hooks {
		for _, o := range hookObjs[i] {
			res, err := n.resource(sc, h.Path, o)
			if err != nil {
				return nil, err
			}
			hk := Hook{Resource: res, Weight: h.Weight}
			for _, e := range h.Events {
				hk.Events = append(hk.Events, string(e))
			}
			for _, p := range h.DeletePolicies {
				hk.DeletePolicies = append(hk.DeletePolicies, string(p))
			}
			out.Hooks = append(out.Hooks, hk)
		}
	}
	// The order Helm runs the hooks of one event in (action/hooks.go
	// hookByWeight): by weight, then by name, stable over the kind order.
	sort.SliceStable(out.Hooks, func(i, j int) bool {
		a, b := out.Hooks[i], out.Hooks[j]
		if a.Weight != b.Weight {
			return a.Weight < b.Weight
		}
		return a.Object.GetName() < b.Object.GetName()
	})
	return out, nil
}

// resource defaults the namespace of obj and hashes it.
func (n *normalized) resource(sc *scopes, source string, obj map[string]any) (Resource, error) {
	u := &unstructured.Unstructured{Object: obj}
	gk := u.GroupVersionKind().GroupKind()
	if u.GetNamespace() == "" && sc.namespaced(gk) {
		u.SetNamespace(n.Namespace)
	}
	h, err := hashObject(obj)
	if err != nil {
		return Resource{}, n.invalid(fmt.Errorf("%s: %w", source, err))
	}
	return Resource{Object: u, Source: source, Hash: h}, nil
}
