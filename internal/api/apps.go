package api

import (
	"bytes"
	"context"
	"net/http"
	"strings"

	"github.com/atoll-edge/atoll/internal/chart"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/lifecycle"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/store"
)

// Lifecycle drives deployment intent groups.
type Lifecycle interface {
	Approve(ctx context.Context, dig store.Key) (lifecycle.Record, error)
	Instantiate(ctx context.Context, dig store.Key) (lifecycle.Record, error)
	Terminate(ctx context.Context, dig store.Key) (lifecycle.Record, error)
	Stop(ctx context.Context, dig store.Key) (lifecycle.Record, error)
	Update(ctx context.Context, dig store.Key) (lifecycle.Record, error)
	Rollback(ctx context.Context, dig store.Key, revision int64) (lifecycle.Record, error)
	DeleteGuard(ctx context.Context, dig store.Key) (store.Guard, error)
	Forget(ctx context.Context, dig store.Key) error
}

// StatusQuery is what GET .../status asks for (EMCO's query parameters).
type StatusQuery struct {
	Type      string // "deployed" or "ready"
	Output    string // "summary", "all" or "detail"
	Apps      []string
	Clusters  []string
	Resources []string
}

// DIGStatus answers the status of a DIG.
type DIGStatus interface {
	Status(ctx context.Context, dig store.Key, q StatusQuery) (any, error)
}

var (
	pCompositeApp     = param{"compositeApp", "composite app"}
	pVersion          = param{"version", "composite app version"}
	pApp              = param{"app", "app"}
	pCompositeProfile = param{"compositeProfile", "composite profile"}
	pProfile          = param{"profile", "profile"}
	pDIG              = param{"deploymentIntentGroup", "deployment intent group"}
	pGPI              = param{"genericPlacementIntent", "generic placement intent"}
	pAppIntent        = param{"appIntent", "app intent"}
	pIntent           = param{"intent", "intent"}
	pDependency       = param{"dependency", "dependency"}
)

const (
	compositeAppsPath = "/v2/projects/{project}/composite-apps"
	compositeAppPath  = compositeAppsPath + "/{compositeApp}/{version}"
	appsPath          = compositeAppPath + "/apps"
	cprofilesPath     = compositeAppPath + "/composite-profiles"
	profilesPath      = cprofilesPath + "/{compositeProfile}/profiles"
	digsPath          = compositeAppPath + "/deployment-intent-groups"
	digPath           = digsPath + "/{deploymentIntentGroup}"
	gpisPath          = digPath + "/generic-placement-intents"
	appIntentsPath    = gpisPath + "/{genericPlacementIntent}/app-intents"
	digIntentsPath    = digPath + "/intents"
)

var caParams = []param{pProject, pCompositeApp, pVersion}

func (s *Server) appRoutes() []Route {
	if s.opts.Blobs == nil || s.opts.Lifecycle == nil {
		return nil
	}
	const tag = "composite apps"
	st := s.opts.Store
	maxUpload := s.opts.Blobs.MaxSize() + multipartOverhead
	rs := []Route{
		{Method: "POST", Pattern: compositeAppsPath, Summary: "Create a composite app version.", Request: "CompositeApp", Response: "CompositeApp", Status: 201, Tag: tag, Handler: s.createCompositeApp},
		{Method: "GET", Pattern: compositeAppsPath, Summary: "List the project's composite apps (every version).", Response: "[]CompositeApp", Status: 200, Tag: tag, Handler: s.listCompositeApps},
	}
	rs = append(rs, crud[model.CompositeApp, *model.CompositeApp]{st: st, kind: model.CompositeApps, base: compositeAppsPath + "/{compositeApp}",
		parents: []param{pProject, pCompositeApp}, own: pVersion, schema: "CompositeApp", versioned: true, named: "composite app",
		validate: func(c *model.CompositeApp) error { c.Spec.Version = ""; return nil },
	}.itemRoutes(tag, "composite app version")...)
	rs = append(rs,
		Route{Method: "POST", Pattern: appsPath, Summary: "Add an app: multipart with a metadata field and the Helm chart (.tgz) as the file part.", Request: "multipart:App", Response: "App", Status: 201, MaxBody: maxUpload, Tag: tag, Handler: s.createApp},
		Route{Method: "GET", Pattern: appsPath, Summary: "List the composite app's apps.", Response: "[]App", Status: 200, Tag: tag, Handler: s.listApps},
		Route{Method: "GET", Pattern: appsPath + "/{app}", Summary: "Get an app.", Response: "App", Status: 200, Tag: tag, Handler: s.getApp},
		Route{Method: "PUT", Pattern: appsPath + "/{app}", Summary: "Replace an app and its chart (multipart).", Request: "multipart:App", Response: "App", Status: 200, MaxBody: maxUpload, Tag: tag, Handler: s.updateApp},
		Route{Method: "DELETE", Pattern: appsPath + "/{app}", Summary: "Delete an app (refused while a profile or intent refers to it).", Status: 204, Tag: tag, Handler: s.deleteApp},
	)
	rs = append(rs, crud[model.AppDependency, *model.AppDependency]{st: st, kind: model.AppDependencies, base: appsPath + "/{app}/dependency",
		parents: append(append([]param(nil), caParams...), pApp), own: pDependency, schema: "AppDependency",
		check: s.checkDependency,
		refs: func(parents []string, d *model.AppDependency) ([]store.Key, error) {
			return []store.Key{store.K(model.Apps, append(append([]string(nil), parents[:3]...), d.Spec.App)...)}, nil
		},
	}.routes(tag)...)
	rs = append(rs, crud[model.CompositeProfile, *model.CompositeProfile]{st: st, kind: model.CompositeProfiles, base: cprofilesPath,
		parents: caParams, own: pCompositeProfile, schema: "CompositeProfile"}.routes(tag)...)
	rs = append(rs,
		Route{Method: "POST", Pattern: profilesPath, Summary: "Add a profile of an app: multipart with a metadata field (spec.app) and the profile archive (.tgz with manifest.yaml) as the file part.", Request: "multipart:Profile", Response: "Profile", Status: 201, MaxBody: maxUpload, Tag: tag, Handler: s.createProfile},
		Route{Method: "GET", Pattern: profilesPath, Summary: "List the composite profile's profiles.", Response: "[]Profile", Status: 200, Tag: tag, Handler: s.listProfiles},
		Route{Method: "GET", Pattern: profilesPath + "/{profile}", Summary: "Get a profile.", Response: "Profile", Status: 200, Tag: tag, Handler: s.getProfile},
		Route{Method: "PUT", Pattern: profilesPath + "/{profile}", Summary: "Replace a profile and its archive (multipart).", Request: "multipart:Profile", Response: "Profile", Status: 200, MaxBody: maxUpload, Tag: tag, Handler: s.updateProfile},
		Route{Method: "DELETE", Pattern: profilesPath + "/{profile}", Summary: "Delete a profile.", Status: 204, Tag: tag, Handler: s.deleteProfile},
	)
	const dtag = "deployment intent groups"
	rs = append(rs, crud[model.DeploymentIntentGroup, *model.DeploymentIntentGroup]{st: st, kind: model.DIGs, base: digsPath,
		parents: caParams, own: pDIG, schema: "DeploymentIntentGroup",
		validate: validateDIG, refs: digRefs,
		guard: s.opts.Lifecycle.DeleteGuard, afterDelete: s.opts.Lifecycle.Forget,
	}.routes(dtag)...)
	rs = append(rs, crud[model.GenericPlacementIntent, *model.GenericPlacementIntent]{st: st, kind: model.GenericPlacementIntents, base: gpisPath,
		parents: append(caParams, pDIG), own: pGPI, schema: "GenericPlacementIntent"}.routes(dtag)...)
	rs = append(rs, crud[model.AppIntent, *model.AppIntent]{st: st, kind: model.AppIntents, base: appIntentsPath,
		parents: append(caParams, pDIG, pGPI), own: pAppIntent, schema: "AppIntent",
		validate: func(a *model.AppIntent) error {
			if a.Spec.App == "" {
				return errs.New(errs.Invalid, "spec.app is empty; name the app this intent places")
			}
			return model.ValidatePlacement(a.Spec.Intent)
		},
		refs: appIntentRefs, check: s.checkLabels,
	}.routes(dtag)...)
	rs = append(rs, crud[model.DIGIntent, *model.DIGIntent]{st: st, kind: model.DIGIntents, base: digIntentsPath,
		parents: append(caParams, pDIG), own: pIntent, schema: "DIGIntent",
		validate: func(d *model.DIGIntent) error {
			if d.Spec.Intent["genericPlacementIntent"] == "" {
				return errs.New(errs.Invalid, "spec.intent.genericPlacementIntent is empty; name the DIG's generic placement intent")
			}
			return nil
		},
		refs: func(parents []string, d *model.DIGIntent) ([]store.Key, error) {
			return []store.Key{store.K(model.GenericPlacementIntents, append(append([]string(nil), parents...), d.Spec.Intent["genericPlacementIntent"])...)}, nil
		},
	}.routes(dtag)...)
	rs = append(rs,
		Route{Method: "POST", Pattern: digPath + "/approve", Summary: "Approve the DIG.", Response: "LifecycleState", Status: 202, Tag: dtag, Handler: s.lifecycleCall(s.opts.Lifecycle.Approve)},
		Route{Method: "POST", Pattern: digPath + "/instantiate", Summary: "Plan the DIG and deploy it; answers 202 once the plan is durable.", Response: "LifecycleState", Status: 202, Tag: dtag, Handler: s.lifecycleCall(s.opts.Lifecycle.Instantiate)},
		Route{Method: "POST", Pattern: digPath + "/terminate", Summary: "Delete everything the DIG deployed; the DIG is Terminating until every cluster is done.", Response: "LifecycleState", Status: 202, Tag: dtag, Handler: s.lifecycleCall(s.opts.Lifecycle.Terminate)},
		Route{Method: "POST", Pattern: digPath + "/stop", Summary: "Cancel the DIG's waiting work: the clusters are left as they are; terminate or update it afterwards.", Response: "LifecycleState", Status: 202, Tag: dtag, Handler: s.lifecycleCall(s.opts.Lifecycle.Stop)},
		Route{Method: "POST", Pattern: digPath + "/update", Summary: "Plan the changed DIG again and deploy the difference: changed resources applied, removed ones deleted, unchanged ones untouched.", Response: "LifecycleState", Status: 202, Tag: dtag, Handler: s.lifecycleCall(s.opts.Lifecycle.Update)},
		Route{Method: "POST", Pattern: digPath + "/rollback", Summary: "Deploy the plan of an earlier revision (spec.revision) again, as a new revision.", Request: "Rollback", Response: "LifecycleState", Status: 202, Tag: dtag, Handler: s.rollback},
	)
	if s.opts.Status != nil {
		rs = append(rs, Route{Method: "GET", Pattern: digPath + "/status", Summary: "The DIG's state and its resources' deployed and ready status (query: status=deployed|ready, output=summary|all|detail, app, cluster, resource).", Response: "DIGStatus", Status: 200, Tag: dtag, Handler: s.digStatus})
	}
	return rs
}

// checkDependency validates a dependency of the app parents[3] and refuses one
// that would close a cycle, naming it.
func (s *Server) checkDependency(ctx context.Context, parents []string, d *model.AppDependency) error {
	self := parents[3]
	if err := model.ValidateDependency(self, d); err != nil {
		return err
	}
	items, err := s.opts.Store.ListUnder(ctx, model.AppDependencies, parents[:3]...)
	if err != nil {
		return err
	}
	edges := map[string][]string{}
	for _, it := range items {
		var other model.AppDependency
		if err := it.Decode(&other); err != nil {
			return err
		}
		from := it.Key.Names[3]
		if from == self && it.Key.Name() == d.Metadata.Name {
			continue // the dependency being replaced
		}
		edges[from] = append(edges[from], other.Spec.App)
	}
	edges[self] = append(edges[self], d.Spec.App)
	// A cycle through the new edge is a path from its target back to self.
	var path []string
	seen := map[string]bool{}
	var walk func(app string) bool
	walk = func(app string) bool {
		path = append(path, app)
		if app == self {
			return true
		}
		if !seen[app] {
			seen[app] = true
			for _, next := range edges[app] {
				if walk(next) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		return false
	}
	if walk(d.Spec.App) {
		return errs.New(errs.Invalid, "the dependency would make a cycle: %s", strings.Join(append([]string{self}, path...), " → "))
	}
	return nil
}

func validateDIG(d *model.DeploymentIntentGroup) error {
	if d.Spec.Profile == "" {
		return errs.New(errs.Invalid, "spec.compositeProfile is empty; name the composite profile to deploy with")
	}
	if d.Spec.Version == "" {
		return errs.New(errs.Invalid, "spec.version is empty")
	}
	if d.Spec.Namespace == "" {
		d.Spec.Namespace = "default"
	}
	if err := model.ValidateName("namespace", d.Spec.Namespace); err != nil {
		return err
	}
	for i, o := range d.Spec.OverrideValues {
		if o.App == "" {
			return errs.New(errs.Invalid, "spec.overrideValues[%d].app is empty", i)
		}
	}
	return nil
}

func digRefs(parents []string, d *model.DeploymentIntentGroup) ([]store.Key, error) {
	refs := []store.Key{store.K(model.CompositeProfiles, append(append([]string(nil), parents...), d.Spec.Profile)...)}
	for _, o := range d.Spec.OverrideValues {
		refs = append(refs, store.K(model.Apps, append(append([]string(nil), parents...), o.App)...))
	}
	return refs, nil
}

func appIntentRefs(parents []string, a *model.AppIntent) ([]store.Key, error) {
	ca := parents[:3]
	refs := []store.Key{store.K(model.Apps, append(append([]string(nil), ca...), a.Spec.App)...)}
	each(a.Spec.Intent, func(t model.PlacementTerm) {
		refs = append(refs, store.K(model.ClusterProviders, t.ClusterProvider))
		if t.Cluster != "" {
			refs = append(refs, store.K(model.Clusters, t.ClusterProvider, t.Cluster))
		}
	})
	return refs, nil
}

func each(p model.PlacementIntent, fn func(model.PlacementTerm)) {
	for _, t := range append(append([]model.PlacementTerm(nil), p.AllOf...), p.AnyOf...) {
		if len(t.AnyOf) > 0 {
			for _, a := range t.AnyOf {
				fn(a)
			}
			continue
		}
		fn(t)
	}
}

// checkLabels refuses a placement by a label that no cluster of the provider has.
func (s *Server) checkLabels(ctx context.Context, _ []string, a *model.AppIntent) error {
	var err error
	each(a.Spec.Intent, func(t model.PlacementTerm) {
		if err != nil || t.ClusterLabel == "" {
			return
		}
		if _, e := s.opts.Store.Get(ctx, store.K(model.ClusterProviders, t.ClusterProvider), nil); e != nil {
			if errs.KindOf(e) == errs.NotFound {
				err = errs.New(errs.Invalid, "app intent refers to cluster provider %q, which does not exist", t.ClusterProvider)
			} else {
				err = e
			}
			return
		}
		names, e := s.opts.Registry.ClustersWithLabel(ctx, t.ClusterProvider, t.ClusterLabel)
		if e != nil {
			err = e
			return
		}
		if len(names) == 0 {
			err = errs.New(errs.Invalid, "no cluster of cluster provider %q has the label %q; label a cluster first", t.ClusterProvider, t.ClusterLabel)
		}
	})
	return err
}

func (s *Server) createCompositeApp(w http.ResponseWriter, r *http.Request) error {
	project, err := pathName(r, pProject.wildcard, pProject.what)
	if err != nil {
		return err
	}
	var ca model.CompositeApp
	if err := decodeJSON(r, &ca); err != nil {
		return err
	}
	if err := model.ValidateMetadata("composite app", &ca.Metadata); err != nil {
		return err
	}
	if ca.Spec.Version == "" {
		// ValidateName's message would say to set metadata.name.
		return errs.New(errs.Invalid, "spec.compositeAppVersion is empty; name the version, for example v1")
	}
	if err := model.ValidateName("composite app version", ca.Spec.Version); err != nil {
		return errs.New(errs.Invalid, "spec.compositeAppVersion: %s", err.Error())
	}
	stored := ca
	stored.Spec.Version = ""
	rev, err := s.opts.Store.Create(r.Context(), store.K(model.CompositeApps, project, ca.Metadata.Name, ca.Spec.Version), stored)
	if err != nil {
		return err
	}
	setETag(w, rev)
	writeJSON(w, http.StatusCreated, ca)
	return nil
}

func (s *Server) listCompositeApps(w http.ResponseWriter, r *http.Request) error {
	project, err := pathName(r, pProject.wildcard, pProject.what)
	if err != nil {
		return err
	}
	items, _, err := s.opts.Store.List(r.Context(), model.CompositeApps, project)
	if err != nil {
		return err
	}
	out := make([]model.CompositeApp, 0, len(items))
	for _, it := range items {
		var ca model.CompositeApp
		if err := it.Decode(&ca); err != nil {
			return err
		}
		ca.Spec.Version = it.Key.Name()
		out = append(out, ca)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// itemRoutes are GET, PUT and DELETE of one object (its collection is served elsewhere).
func (c crud[T, PT]) itemRoutes(tag, what string) []Route {
	item := c.base + "/{" + c.own.wildcard + "}"
	return []Route{
		{Method: "GET", Pattern: item, Summary: "Get a " + what + ".", Response: c.schema, Status: 200, Tag: tag, Handler: c.get},
		{Method: "PUT", Pattern: item, Summary: "Replace a " + what + " (If-Match: its ETag, for compare-and-swap).", Request: c.schema, Response: c.schema, Status: 200, Tag: tag, Handler: c.update},
		{Method: "DELETE", Pattern: item, Summary: "Delete a " + what + " (its apps, profiles and DIGs first).", Status: 204, Tag: tag, Handler: c.delete},
	}
}

func withVersion(obj any, version string) any {
	if ca, ok := obj.(*model.CompositeApp); ok {
		out := *ca
		out.Spec.Version = version
		return out
	}
	return obj
}

func (s *Server) readUpload(r *http.Request, v model.Object, allowJSON bool) ([]byte, error) {
	if !isMultipart(r) {
		if !allowJSON {
			return nil, errs.New(errs.Unsupported, "send multipart/form-data: a \"metadata\" field with the JSON object and the archive as the \"file\" part")
		}
		r.Body = http.MaxBytesReader(nil, r.Body, maxJSONBody)
		return nil, decodeJSON(r, v)
	}
	up, err := readMultipart(r, s.opts.Blobs.MaxSize())
	if err != nil {
		return nil, err
	}
	if err := unmarshal(up.metadata, v, "metadata field"); err != nil {
		return nil, err
	}
	return up.file, nil
}

func (s *Server) storeChart(ctx context.Context, file []byte) (model.ChartRef, error) {
	c, err := chart.CheckChart(file, chart.DefaultLimits())
	if err != nil {
		return model.ChartRef{}, err
	}
	info, err := s.opts.Blobs.Put(ctx, bytes.NewReader(file))
	if err != nil {
		return model.ChartRef{}, err
	}
	return model.ChartRef{Digest: info.Digest, Size: info.Size, Name: c.Name(), Version: c.Version()}, nil
}

func (s *Server) storeProfile(ctx context.Context, file []byte) (model.ChartRef, error) {
	if _, err := chart.CheckProfile(file, chart.DefaultLimits()); err != nil {
		return model.ChartRef{}, err
	}
	info, err := s.opts.Blobs.Put(ctx, bytes.NewReader(file))
	if err != nil {
		return model.ChartRef{}, err
	}
	return model.ChartRef{Digest: info.Digest, Size: info.Size}, nil
}

// canCreate checks, before an upload is kept in the blob store, what the store's
// Create checks again: key's parent and refs exist and key does not, so that a
// refused upload leaves no blob behind.
func (s *Server) canCreate(ctx context.Context, key store.Key, refs ...store.Key) error {
	if parent, ok := key.Parent(); ok {
		if _, err := s.opts.Store.Get(ctx, parent, nil); err != nil {
			return err
		}
	}
	if _, err := s.opts.Store.Get(ctx, key, nil); err == nil {
		return errs.New(errs.Exists, "%s already exists", key)
	} else if errs.KindOf(err) != errs.NotFound {
		return err
	}
	for _, ref := range refs {
		if _, err := s.opts.Store.Get(ctx, ref, nil); errs.KindOf(err) == errs.NotFound {
			return errs.New(errs.Invalid, "%s refers to %s, which does not exist", key, ref)
		} else if err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) createApp(w http.ResponseWriter, r *http.Request) error {
	parents, err := names(r, caParams)
	if err != nil {
		return err
	}
	var app model.App
	file, err := s.readUpload(r, &app, false)
	if err != nil {
		return err
	}
	if err := model.ValidateMetadata("app", &app.Metadata); err != nil {
		return err
	}
	if file == nil {
		return errs.New(errs.Invalid, "app %q has no chart: add the Helm chart archive as the \"file\" part", app.Metadata.Name)
	}
	key := store.K(model.Apps, append(parents, app.Metadata.Name)...)
	if err := s.canCreate(r.Context(), key); err != nil {
		return err
	}
	ref, err := s.storeChart(r.Context(), file)
	if err != nil {
		return err
	}
	rev, err := s.opts.Store.Create(r.Context(), key, model.AppRecord{App: app, Chart: ref})
	if err != nil {
		return err
	}
	setETag(w, rev)
	writeJSON(w, http.StatusCreated, app)
	return nil
}

func (s *Server) listApps(w http.ResponseWriter, r *http.Request) error {
	parents, err := names(r, caParams)
	if err != nil {
		return err
	}
	items, _, err := s.opts.Store.List(r.Context(), model.Apps, parents...)
	if err != nil {
		return err
	}
	out := make([]model.App, 0, len(items))
	for _, it := range items {
		var rec model.AppRecord
		if err := it.Decode(&rec); err != nil {
			return err
		}
		out = append(out, rec.App)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func appKey(r *http.Request) (store.Key, error) {
	ns, err := names(r, append(append([]param(nil), caParams...), pApp))
	if err != nil {
		return store.Key{}, err
	}
	return store.K(model.Apps, ns...), nil
}

func (s *Server) getApp(w http.ResponseWriter, r *http.Request) error {
	return getView(s.opts.Store, w, r, appKey, func(rec *model.AppRecord) any { return rec.App })
}

func (s *Server) updateApp(w http.ResponseWriter, r *http.Request) error {
	k, err := appKey(r)
	if err != nil {
		return err
	}
	rev, err := ifMatch(r)
	if err != nil {
		return err
	}
	var app model.App
	file, err := s.readUpload(r, &app, true)
	if err != nil {
		return err
	}
	if err := sameName(&app.Metadata, k.Name(), "app"); err != nil {
		return err
	}
	if err := model.ValidateMetadata("app", &app.Metadata); err != nil {
		return err
	}
	var old model.AppRecord
	cur, err := s.opts.Store.Get(r.Context(), k, &old)
	if err != nil {
		return err
	}
	if rev > 0 && rev != cur {
		return errs.New(errs.Conflict, "%s was changed since revision %d (now %d); read it again and retry", k, rev, cur)
	}
	rec := model.AppRecord{App: app, Chart: old.Chart}
	if file != nil {
		if rec.Chart, err = s.storeChart(r.Context(), file); err != nil {
			return err
		}
	}
	newRev, err := s.opts.Store.Update(r.Context(), k, rec, cur)
	if err != nil {
		return err
	}
	setETag(w, newRev)
	writeJSON(w, http.StatusOK, app)
	return nil
}

func (s *Server) deleteApp(w http.ResponseWriter, r *http.Request) error {
	return deleteAt(s.opts.Store, w, r, appKey)
}

var profileParams = append(append([]param(nil), caParams...), pCompositeProfile)

func (s *Server) createProfile(w http.ResponseWriter, r *http.Request) error {
	parents, err := names(r, profileParams)
	if err != nil {
		return err
	}
	var p model.Profile
	file, err := s.readUpload(r, &p, false)
	if err != nil {
		return err
	}
	if err := model.ValidateMetadata("profile", &p.Metadata); err != nil {
		return err
	}
	if p.Spec.App == "" {
		return errs.New(errs.Invalid, "spec.app is empty; name the app this profile is for")
	}
	if file == nil {
		return errs.New(errs.Invalid, "profile %q has no archive: add it as the \"file\" part", p.Metadata.Name)
	}
	key := store.K(model.Profiles, append(parents, p.Metadata.Name)...)
	appRef := store.K(model.Apps, append(append([]string(nil), parents[:3]...), p.Spec.App)...)
	if err := s.canCreate(r.Context(), key, appRef); err != nil {
		return err
	}
	ref, err := s.storeProfile(r.Context(), file)
	if err != nil {
		return err
	}
	rev, err := s.opts.Store.Create(r.Context(), key, model.ProfileRecord{Profile: p, Archive: ref}, appRef)
	if err != nil {
		return err
	}
	setETag(w, rev)
	writeJSON(w, http.StatusCreated, p)
	return nil
}

func (s *Server) listProfiles(w http.ResponseWriter, r *http.Request) error {
	parents, err := names(r, profileParams)
	if err != nil {
		return err
	}
	items, _, err := s.opts.Store.List(r.Context(), model.Profiles, parents...)
	if err != nil {
		return err
	}
	out := make([]model.Profile, 0, len(items))
	for _, it := range items {
		var rec model.ProfileRecord
		if err := it.Decode(&rec); err != nil {
			return err
		}
		out = append(out, rec.Profile)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func profileKey(r *http.Request) (store.Key, error) {
	ns, err := names(r, append(append([]param(nil), profileParams...), pProfile))
	if err != nil {
		return store.Key{}, err
	}
	return store.K(model.Profiles, ns...), nil
}

func (s *Server) getProfile(w http.ResponseWriter, r *http.Request) error {
	return getView(s.opts.Store, w, r, profileKey, func(rec *model.ProfileRecord) any { return rec.Profile })
}

func (s *Server) updateProfile(w http.ResponseWriter, r *http.Request) error {
	k, err := profileKey(r)
	if err != nil {
		return err
	}
	rev, err := ifMatch(r)
	if err != nil {
		return err
	}
	var p model.Profile
	file, err := s.readUpload(r, &p, true)
	if err != nil {
		return err
	}
	if err := sameName(&p.Metadata, k.Name(), "profile"); err != nil {
		return err
	}
	if err := model.ValidateMetadata("profile", &p.Metadata); err != nil {
		return err
	}
	if p.Spec.App == "" {
		return errs.New(errs.Invalid, "spec.app is empty; name the app this profile is for")
	}
	var old model.ProfileRecord
	cur, err := s.opts.Store.Get(r.Context(), k, &old)
	if err != nil {
		return err
	}
	if rev > 0 && rev != cur {
		return errs.New(errs.Conflict, "%s was changed since revision %d (now %d); read it again and retry", k, rev, cur)
	}
	rec := model.ProfileRecord{Profile: p, Archive: old.Archive}
	if file != nil {
		if rec.Archive, err = s.storeProfile(r.Context(), file); err != nil {
			return err
		}
	}
	appRef := store.K(model.Apps, append(append([]string(nil), k.Names[:3]...), p.Spec.App)...)
	newRev, err := s.opts.Store.Update(r.Context(), k, rec, cur, appRef)
	if err != nil {
		return err
	}
	setETag(w, newRev)
	writeJSON(w, http.StatusOK, p)
	return nil
}

func (s *Server) deleteProfile(w http.ResponseWriter, r *http.Request) error {
	return deleteAt(s.opts.Store, w, r, profileKey)
}

func digKey(r *http.Request) (store.Key, error) {
	ns, err := names(r, append(append([]param(nil), caParams...), pDIG))
	if err != nil {
		return store.Key{}, err
	}
	return store.K(model.DIGs, ns...), nil
}

func (s *Server) lifecycleCall(call func(context.Context, store.Key) (lifecycle.Record, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		k, err := digKey(r)
		if err != nil {
			return err
		}
		var ignored map[string]any
		if err := decodeOptionalJSON(r, &ignored); err != nil {
			return err
		}
		rec, err := call(r.Context(), k)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusAccepted, lifecycleAnswer(rec))
		return nil
	}
}

func (s *Server) rollback(w http.ResponseWriter, r *http.Request) error {
	k, err := digKey(r)
	if err != nil {
		return err
	}
	var body struct {
		Spec struct {
			Revision *int64 `json:"revision"`
		} `json:"spec"`
	}
	if err := decodeJSON(r, &body); err != nil {
		return err
	}
	if body.Spec.Revision == nil || *body.Spec.Revision <= 0 {
		return errs.New(errs.Invalid, "spec.revision is missing; name the revision to roll back to (GET .../status shows them)")
	}
	rec, err := s.opts.Lifecycle.Rollback(r.Context(), k, *body.Spec.Revision)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, lifecycleAnswer(rec))
	return nil
}

func lifecycleAnswer(rec lifecycle.Record) map[string]any {
	revisions := make([]int64, 0, len(rec.History))
	for _, h := range rec.History {
		revisions = append(revisions, h.Revision)
	}
	return map[string]any{"state": rec.State, "revision": rec.Revision, "revisions": revisions, "stateInfo": map[string]any{"actions": rec.Actions}}
}

func (s *Server) digStatus(w http.ResponseWriter, r *http.Request) error {
	k, err := digKey(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	sq := StatusQuery{Type: q.Get("status"), Output: q.Get("output"), Apps: q["app"], Clusters: q["cluster"], Resources: q["resource"]}
	if sq.Type == "" {
		sq.Type = "ready"
	}
	if sq.Output == "" {
		sq.Output = "all"
	}
	if sq.Type != "ready" && sq.Type != "deployed" {
		return errs.New(errs.Malformed, "status=%q: use status=deployed or status=ready", sq.Type)
	}
	if sq.Output != "summary" && sq.Output != "all" && sq.Output != "detail" {
		return errs.New(errs.Malformed, "output=%q: use output=summary, all or detail", sq.Output)
	}
	if _, err := s.opts.Store.Get(r.Context(), k, nil); err != nil {
		return err
	}
	out, err := s.opts.Status.Status(r.Context(), k, sq)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
