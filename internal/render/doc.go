// Package render renders a Helm chart for one target cluster, with the Helm v4
// SDK, as `helm template --kube-version V --api-versions A...` would.
//
// Render mirrors the client-only (dry-run) install that `helm template` runs
// (helm.sh/helm/v4/pkg/action.Install with DryRunStrategy "client") step by
// step, calling the same SDK functions in the same order:
//
//  1. chartutil.ValidateReleaseName on the release name;
//  2. chartutil.ProcessDependencies (conditions, tags, import-values);
//  3. capabilities: common.DefaultCapabilities with the target cluster's
//     KubeVersion, and its APIVersions appended to Helm's built-in set;
//  4. util.ToRenderValuesWithSchemaValidation (chart defaults coalesced under
//     the user values, values.schema.json checked; Release.Revision 1,
//     Release.IsInstall true);
//  5. the chart's kubeVersion constraint (chartutil.IsCompatibleRange);
//  6. engine.Engine{}.RenderWithContext (no cluster access: lookup returns
//     nothing, DNS lookups are off);
//  7. NOTES.txt of the top chart kept as Notes, every NOTES.txt dropped;
//  8. releaseutil.SortManifests with releaseutil.InstallOrder, which splits the
//     hooks (helm.sh/hook annotations, weights, delete policies) from the other
//     manifests and sorts both by kind.
//
// It does not go through action.Install itself because the action only hands
// back the manifests joined into one text stream, which would have to be split
// again, and because it pulls in Helm's Kubernetes client, storage drivers and
// registry client, none of which a client-only render uses. Calling the same
// pieces directly gives the same output and the sorted manifests, hooks and CRDs
// as values.
//
// What Render returns on top of Helm:
//
//   - CRDs: the files of the chart's (and its enabled subcharts') crds/
//     directories, one Resource per YAML document, in Helm's order; CRDs a
//     template renders stay in Resources, where Helm's install order puts them.
//   - Resources: every other manifest as an unstructured object, in Helm's
//     install order (Namespace, NetworkPolicy, ..., ServiceAccount, Secret,
//     ConfigMap, ..., CustomResourceDefinition, ClusterRole, ..., Service,
//     DaemonSet, Pod, ..., Deployment, ..., Job, CronJob, Ingress, ...; unknown
//     kinds last), each with the template it came from and a hash.
//   - Hooks: the hook manifests, sorted by weight then name (the order Helm runs
//     the hooks of one event in), with their events and delete policies.
//   - Namespaces: a namespaced object without metadata.namespace gets the
//     release namespace, as Helm's client does when it applies. An object is
//     cluster-scoped if its kind is in a static list of the cluster-scoped kinds
//     of Kubernetes itself (Namespace, Node, PersistentVolume, StorageClass,
//     ClusterRole, ClusterRoleBinding, CustomResourceDefinition, PriorityClass,
//     IngressClass, webhook configurations, APIService, ...), or a CRD rendered
//     by the same chart (crds/ or templates) declares it with scope Cluster, or
//     Input.ClusterScoped names it. Any other kind is taken as namespaced. An
//     explicit namespace is never changed.
//   - A hash of each object: "sha256:<hex>" of its JSON encoding (keys sorted),
//     after namespace defaulting, so the same render always hashes the same.
//
// Identical renders are cached: a Renderer keeps the last cacheSize outputs in
// an LRU, keyed by a SHA-256 of a canonical encoding of everything that shapes
// the output (chart digest, values layers, profile files, release name,
// namespace, KubeVersion, APIVersions, ClusterScoped).
//
// Usage:
//
//	r := render.New(256)
//	out, err := r.Render(ctx, render.Input{
//		Chart:       c.Loaded(), // *chart.Chart from internal/chart.CheckChart
//		ChartDigest: c.Digest,
//		ReleaseName: "web",
//		Namespace:   "default",
//		Values:      []map[string]any{profile.Values(), digOverrides},
//		ProfileFiles: profile.Files(),
//		KubeVersion: "v1.37.2",
//		APIVersions: []string{"apps/v1", "apps/v1/Deployment", "bpa.akraino.org/v1alpha1"},
//	})
//	if err != nil {
//		return err // errs.Invalid with Helm's message: nothing is applied
//	}
//	// apply out.CRDs, then out.Hooks with "pre-install", then out.Resources ...
package render
