package plan

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/atoll-edge/atoll/internal/blob"
	"github.com/atoll-edge/atoll/internal/chart"
	"github.com/atoll-edge/atoll/internal/cluster"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/placement"
	"github.com/atoll-edge/atoll/internal/render"
	"github.com/atoll-edge/atoll/internal/store"
)

// ClusterInfo is what planning needs of the cluster manager.
type ClusterInfo interface {
	Status(key store.Key) (cluster.Status, bool)
	Capabilities(key store.Key) (kubeVersion string, apiVersions []string, ok bool)
}

// Builder makes plans: it reads a DIG and everything it refers to, places its
// apps, renders each app for each of its clusters, and stores the result. Its
// fields must be set.
type Builder struct {
	Store    *store.Store
	Blobs    *blob.Store
	Plans    *Store
	Renderer *render.Renderer
	Clusters ClusterInfo
}

// Plan makes the plan of revision of the DIG at dig durable and returns its digest
// (lifecycle.Planner). Nothing it writes is visible before the lifecycle records
// the digest; a DIG that cannot be planned gives an errs.Invalid error naming why.
func (b *Builder) Plan(ctx context.Context, dig store.Key, revision int64) (string, error) {
	p, err := b.Build(ctx, dig, revision)
	if err != nil {
		return "", err
	}
	return b.Plans.Put(ctx, p)
}

// Build makes the plan without storing the plan itself (its objects are stored).
func (b *Builder) Build(ctx context.Context, dig store.Key, revision int64) (*Plan, error) {
	var d model.DeploymentIntentGroup
	if _, err := b.Store.Get(ctx, dig, &d); err != nil {
		return nil, err
	}
	ca, _ := dig.Parent()
	apps, err := b.apps(ctx, ca)
	if err != nil {
		return nil, err
	}
	profiles, err := b.profiles(ctx, ca, d.Spec.Profile)
	if err != nil {
		return nil, err
	}
	intents, err := b.intents(ctx, dig)
	if err != nil {
		return nil, err
	}
	registry, err := b.registry(ctx, intents)
	if err != nil {
		return nil, err
	}
	ns := d.Spec.Namespace
	if ns == "" {
		ns = "default"
	}
	p := &Plan{DIG: dig.Path(), Project: dig.Names[0], CompositeApp: dig.Names[1], Version: dig.Names[2], Name: dig.Names[3],
		Profile: d.Spec.Profile, Namespace: ns, Instance: InstanceOf(dig.Path()), Revision: revision}
	overrides := map[string]map[string]any{}
	for _, o := range d.Spec.OverrideValues {
		if _, ok := apps[o.App]; !ok {
			return nil, errs.New(errs.Invalid, "spec.overrideValues names app %q, which %s does not have", o.App, ca)
		}
		overrides[o.App] = mergeMaps(overrides[o.App], expandDotted(o.Values))
	}
	names := make([]string, 0, len(apps))
	for n := range apps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		app := apps[name]
		its := intents[name]
		if len(its) == 0 {
			return nil, errs.New(errs.Invalid, "app %q has no placement intent in %s; add an app intent for it", name, dig)
		}
		var placed []placement.Cluster
		seen := map[string]bool{}
		for _, it := range its {
			cs, err := placement.Resolve(name, it, registry)
			if err != nil {
				return nil, err
			}
			for _, c := range cs {
				if !seen[c.ID()] {
					seen[c.ID()] = true
					placed = append(placed, c)
				}
			}
		}
		sort.Slice(placed, func(i, j int) bool { return placed[i].ID() < placed[j].ID() })
		data, err := b.Blobs.Get(ctx, app.Chart.Digest)
		if err != nil {
			return nil, fmt.Errorf("read the chart of app %q: %w", name, err)
		}
		ch, err := chart.CheckChart(data, chart.DefaultLimits())
		if err != nil {
			return nil, err
		}
		layers := []map[string]any{}
		var files []chart.ProfileFile
		if prof, ok := profiles[name]; ok {
			pdata, err := b.Blobs.Get(ctx, prof.Archive.Digest)
			if err != nil {
				return nil, fmt.Errorf("read the profile of app %q: %w", name, err)
			}
			pr, err := chart.CheckProfile(pdata, chart.DefaultLimits())
			if err != nil {
				return nil, err
			}
			layers = append(layers, pr.Values())
			files = pr.Files()
		}
		if ov := overrides[name]; ov != nil {
			layers = append(layers, ov)
		}
		ap := AppPlan{App: name}
		deps, _, err := b.Store.List(ctx, model.AppDependencies, append(append([]string(nil), ca.Names...), name)...)
		if err != nil {
			return nil, err
		}
		for _, it := range deps {
			var d model.AppDependency
			if err := it.Decode(&d); err != nil {
				return nil, err
			}
			ap.DependsOn = append(ap.DependsOn, Dependency{App: d.Spec.App, OpStatus: d.Spec.OpStatus, Wait: d.Spec.Wait})
		}
		for _, c := range placed {
			ck := store.K(model.Clusters, c.Provider, c.Name)
			kv, apiVersions, _ := b.Clusters.Capabilities(ck)
			out, err := b.Renderer.Render(ctx, render.Input{
				Chart: ch.Loaded(), ChartDigest: app.Chart.Digest, ReleaseName: name, Namespace: ns,
				Values: layers, ProfileFiles: files, KubeVersion: kv, APIVersions: apiVersions,
			})
			if err != nil {
				return nil, fmt.Errorf("app %q for cluster %s: %w", name, c.ID(), err)
			}
			cp := ClusterPlan{Cluster: ck.Path(), Provider: c.Provider, Name: c.Name}
			add := func(obj *unstructured.Unstructured, phase string, weight int, policies []string) error {
				obj = obj.DeepCopy()
				labels := obj.GetLabels()
				if labels == nil {
					labels = map[string]string{}
				}
				labels[LabelDIG] = p.Name
				labels[LabelApp] = name
				labels[LabelInstance] = p.Instance
				obj.SetLabels(labels)
				hash, data, err := HashObject(obj)
				if err != nil {
					return err
				}
				digest, err := b.Plans.PutObject(ctx, data)
				if err != nil {
					return err
				}
				cp.Resources = append(cp.Resources, Resource{
					Ref:  Ref{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()},
					Hash: hash, Blob: digest, Phase: phase, Weight: weight, DeletePolicies: policies,
				})
				return nil
			}
			for _, r := range out.CRDs {
				if err := add(r.Object, "crd", 0, nil); err != nil {
					return nil, err
				}
			}
			// Each hook object is planned once, under the first of its events in
			// this order; main resources go between the install hooks.
			seen := map[string]bool{}
			hooks := func(event string) error {
				for _, h := range hooksFor(out.Hooks, event) {
					id := h.Object.GetAPIVersion() + "/" + h.Object.GetKind() + "/" + h.Object.GetNamespace() + "/" + h.Object.GetName()
					if seen[id] {
						continue
					}
					seen[id] = true
					if err := add(h.Object, "hook:"+event, h.Weight, h.DeletePolicies); err != nil {
						return err
					}
				}
				return nil
			}
			if err := hooks("pre-install"); err != nil {
				return nil, err
			}
			for _, r := range out.Resources {
				if err := add(r.Object, "main", 0, nil); err != nil {
					return nil, err
				}
			}
			for _, ev := range []string{"post-install", "pre-delete", "post-delete"} {
				if err := hooks(ev); err != nil {
					return nil, err
				}
			}
			ap.Clusters = append(ap.Clusters, cp)
		}
		p.Apps = append(p.Apps, ap)
	}
	if len(p.Apps) == 0 {
		return nil, errs.New(errs.Invalid, "%s has no apps to deploy", ca)
	}
	return p, nil
}

func hooksFor(hooks []render.Hook, event string) []render.Hook {
	var out []render.Hook
	for _, h := range hooks {
		for _, e := range h.Events {
			if e == event {
				out = append(out, h)
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Weight < out[j].Weight })
	return out
}

func (b *Builder) apps(ctx context.Context, ca store.Key) (map[string]model.AppRecord, error) {
	items, _, err := b.Store.List(ctx, model.Apps, ca.Names...)
	if err != nil {
		return nil, err
	}
	out := map[string]model.AppRecord{}
	for _, it := range items {
		var a model.AppRecord
		if err := it.Decode(&a); err != nil {
			return nil, err
		}
		out[it.Key.Name()] = a
	}
	return out, nil
}

func (b *Builder) profiles(ctx context.Context, ca store.Key, compositeProfile string) (map[string]model.ProfileRecord, error) {
	items, _, err := b.Store.List(ctx, model.Profiles, append(append([]string(nil), ca.Names...), compositeProfile)...)
	if err != nil {
		if errs.KindOf(err) == errs.NotFound {
			return nil, errs.New(errs.Invalid, "the DIG's composite profile %q does not exist in %s", compositeProfile, ca)
		}
		return nil, err
	}
	out := map[string]model.ProfileRecord{}
	for _, it := range items {
		var p model.ProfileRecord
		if err := it.Decode(&p); err != nil {
			return nil, err
		}
		if _, dup := out[p.Spec.App]; dup {
			return nil, errs.New(errs.Invalid, "composite profile %q has two profiles for app %q", compositeProfile, p.Spec.App)
		}
		out[p.Spec.App] = p
	}
	return out, nil
}

// intents returns the placement intents of each app, from the generic placement
// intents the DIG's intents name.
func (b *Builder) intents(ctx context.Context, dig store.Key) (map[string][]model.PlacementIntent, error) {
	items, _, err := b.Store.List(ctx, model.DIGIntents, dig.Names...)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, errs.New(errs.Invalid, "%s has no intents; add one naming its genericPlacementIntent", dig)
	}
	out := map[string][]model.PlacementIntent{}
	for _, it := range items {
		var di model.DIGIntent
		if err := it.Decode(&di); err != nil {
			return nil, err
		}
		gpi := di.Spec.Intent["genericPlacementIntent"]
		ais, _, err := b.Store.List(ctx, model.AppIntents, append(append([]string(nil), dig.Names...), gpi)...)
		if err != nil {
			if errs.KindOf(err) == errs.NotFound {
				return nil, errs.New(errs.Invalid, "intent %q names generic placement intent %q, which does not exist", it.Key.Name(), gpi)
			}
			return nil, err
		}
		for _, ai := range ais {
			var a model.AppIntent
			if err := ai.Decode(&a); err != nil {
				return nil, err
			}
			out[a.Spec.App] = append(out[a.Spec.App], a.Spec.Intent)
		}
	}
	return out, nil
}

// registry lists the clusters of every provider the intents name, with their
// labels and whether they answer now.
func (b *Builder) registry(ctx context.Context, intents map[string][]model.PlacementIntent) ([]placement.Cluster, error) {
	providers := map[string]bool{}
	for _, its := range intents {
		for _, it := range its {
			for _, t := range append(append([]model.PlacementTerm(nil), it.AllOf...), it.AnyOf...) {
				providers[t.ClusterProvider] = true
				for _, a := range t.AnyOf {
					providers[a.ClusterProvider] = true
				}
			}
		}
	}
	var out []placement.Cluster
	for prov := range providers {
		if prov == "" {
			continue
		}
		items, _, err := b.Store.List(ctx, model.Clusters, prov)
		if err != nil {
			if errs.KindOf(err) == errs.NotFound {
				return nil, errs.New(errs.Invalid, "placement names cluster provider %q, which does not exist", prov)
			}
			return nil, err
		}
		labels, err := b.Store.ListUnder(ctx, model.ClusterLabels, prov)
		if err != nil {
			return nil, err
		}
		byCluster := map[string][]string{}
		for _, l := range labels {
			byCluster[l.Key.Names[1]] = append(byCluster[l.Key.Names[1]], l.Key.Name())
		}
		for _, it := range items {
			c := placement.Cluster{Provider: prov, Name: it.Key.Name(), Labels: byCluster[it.Key.Name()]}
			if st, ok := b.Clusters.Status(it.Key); ok {
				c.Reachable = st.Reachable
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// expandDotted turns EMCO's flat override maps ("image.tag": "1.2") into nested
// Helm values; nested maps are taken as they are. Keys are taken in sorted order,
// so that when two keys set the same path ("image": "x" and "image.tag": "1.2")
// the more specific one wins, always: in map order the result (and the plan's
// hashes) would change from one plan to the next.
func expandDotted(in map[string]any) map[string]any {
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := map[string]any{}
	for _, k := range keys {
		v := in[k]
		if m, ok := v.(map[string]any); ok {
			v = expandDotted(m)
		}
		parts := strings.Split(k, ".")
		cur := out
		for _, p := range parts[:len(parts)-1] {
			next, ok := cur[p].(map[string]any)
			if !ok {
				next = map[string]any{}
				cur[p] = next
			}
			cur = next
		}
		last := parts[len(parts)-1]
		if existing, ok := cur[last].(map[string]any); ok {
			if vm, ok := v.(map[string]any); ok {
				cur[last] = mergeMaps(existing, vm)
				continue
			}
		}
		cur[last] = v
	}
	return out
}

// mergeMaps deep-merges b over a into a new map.
func mergeMaps(a, b map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}
