package api

import (
	"net/http"
	"time"

	"github.com/atoll-edge/atoll/internal/cluster"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/kubeconfig"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/store"
)

var (
	pProject  = param{"project", "project"}
	pProvider = param{"clusterProvider", "cluster provider"}
	pCluster  = param{"cluster", "cluster"}
	pLabel    = param{"clusterLabel", "cluster label"}
	pKvPair   = param{"kvPair", "kv-pairs"}
)

const (
	providersPath = "/v2/cluster-providers"
	clustersPath  = providersPath + "/{clusterProvider}/clusters"
	clusterPath   = clustersPath + "/{cluster}"
	labelsPath    = clusterPath + "/labels"
	kvPairsPath   = clusterPath + "/kv-pairs"
)

func (s *Server) projectRoutes() []Route {
	return crud[model.Project, *model.Project]{
		st: s.opts.Store, kind: model.Projects, base: "/v2/projects", own: pProject, schema: "Project",
	}.routes("projects")
}

func (s *Server) clusterRoutes() []Route {
	var rs []Route
	rs = append(rs, crud[model.ClusterProvider, *model.ClusterProvider]{
		st: s.opts.Store, kind: model.ClusterProviders, base: providersPath, own: pProvider, schema: "ClusterProvider",
	}.routes("cluster registry")...)
	maxUpload := int64(kubeconfig.MaxSize) + multipartOverhead
	rs = append(rs,
		Route{Method: "POST", Pattern: clustersPath, Summary: "Register a cluster: multipart with a metadata field and its kubeconfig as the file part.", Request: "multipart:Cluster", Response: "Cluster", Status: 201, MaxBody: maxUpload, Tag: "cluster registry", Handler: s.createCluster},
		Route{Method: "GET", Pattern: clustersPath, Summary: "List the provider's clusters; with ?label=L, the names of those labelled L.", Response: "[]Cluster", Status: 200, Tag: "cluster registry", Handler: s.listClusters},
		Route{Method: "GET", Pattern: clusterPath, Summary: "Get a cluster (never its kubeconfig).", Response: "Cluster", Status: 200, Tag: "cluster registry", Handler: s.getCluster},
		Route{Method: "PUT", Pattern: clusterPath, Summary: "Replace a cluster; multipart with a file replaces its kubeconfig, JSON keeps it.", Request: "multipart:Cluster", Response: "Cluster", Status: 200, MaxBody: maxUpload, Tag: "cluster registry", Handler: s.updateCluster},
		Route{Method: "DELETE", Pattern: clusterPath, Summary: "Delete a cluster (its labels and kv-pairs first).", Status: 204, Tag: "cluster registry", Handler: s.deleteCluster},
		Route{Method: "GET", Pattern: clusterPath + "/status", Summary: "The cluster's connectivity: reachable, version, last error, since when, capacity.", Response: "ClusterStatus", Status: 200, Tag: "cluster registry", Handler: s.clusterStatus},
		Route{Method: "POST", Pattern: labelsPath, Summary: "Add a label to a cluster.", Request: "ClusterLabel", Response: "ClusterLabel", Status: 201, Tag: "cluster registry", Handler: s.createLabel},
		Route{Method: "GET", Pattern: labelsPath, Summary: "List a cluster's labels.", Response: "[]ClusterLabel", Status: 200, Tag: "cluster registry", Handler: s.listLabels},
		Route{Method: "GET", Pattern: labelsPath + "/{clusterLabel}", Summary: "Get a cluster label.", Response: "ClusterLabel", Status: 200, Tag: "cluster registry", Handler: s.getLabel},
		Route{Method: "PUT", Pattern: labelsPath + "/{clusterLabel}", Summary: "Replace a cluster label (the label itself cannot change).", Request: "ClusterLabel", Response: "ClusterLabel", Status: 200, Tag: "cluster registry", Handler: s.updateLabel},
		Route{Method: "DELETE", Pattern: labelsPath + "/{clusterLabel}", Summary: "Remove a label from a cluster.", Status: 204, Tag: "cluster registry", Handler: s.deleteLabel},
	)
	rs = append(rs, crud[model.ClusterKvPairs, *model.ClusterKvPairs]{
		st: s.opts.Store, kind: model.ClusterKvPairsKind, base: kvPairsPath, parents: []param{pProvider, pCluster}, own: pKvPair, schema: "ClusterKvPairs",
		validate: model.ValidateKvPairs,
	}.routes("cluster registry")...)
	return rs
}

// readCluster reads a cluster body: multipart (metadata field + optional file) or,
// when allowJSON, a JSON body without a kubeconfig.
func readCluster(r *http.Request, allowJSON bool) (model.Cluster, []byte, error) {
	var c model.Cluster
	if !isMultipart(r) {
		if !allowJSON {
			return c, nil, errs.New(errs.Unsupported, "a cluster is registered with multipart/form-data: a \"metadata\" field with {\"metadata\":{\"name\":...}} and its kubeconfig as the \"file\" part")
		}
		// A JSON body carries no kubeconfig: hold it to the JSON limit, not the upload's.
		r.Body = http.MaxBytesReader(nil, r.Body, maxJSONBody)
		err := decodeJSON(r, &c)
		return c, nil, err
	}
	up, err := readMultipart(r, kubeconfig.MaxSize)
	if err != nil {
		return c, nil, err
	}
	if err := unmarshal(up.metadata, &c, "metadata field"); err != nil {
		return c, nil, err
	}
	return c, up.file, nil
}

func (s *Server) createCluster(w http.ResponseWriter, r *http.Request) error {
	provider, err := pathName(r, pProvider.wildcard, pProvider.what)
	if err != nil {
		return err
	}
	c, file, err := readCluster(r, false)
	if err != nil {
		return err
	}
	if err := model.ValidateMetadata("cluster", &c.Metadata); err != nil {
		return err
	}
	if file == nil {
		return errs.New(errs.Invalid, "cluster %q has no kubeconfig: add it as the \"file\" part", c.Metadata.Name)
	}
	rev, err := s.opts.Registry.CreateCluster(r.Context(), provider, c, file)
	if err != nil {
		return err
	}
	setETag(w, rev)
	writeJSON(w, http.StatusCreated, c)
	return nil
}

func (s *Server) listClusters(w http.ResponseWriter, r *http.Request) error {
	provider, err := pathName(r, pProvider.wildcard, pProvider.what)
	if err != nil {
		return err
	}
	if r.URL.Query().Has("label") {
		label := r.URL.Query().Get("label")
		if err := model.ValidateLabel(label); err != nil {
			return errs.New(errs.Malformed, "query parameter label: %s", err.Error())
		}
		names, err := s.opts.Registry.ClustersWithLabel(r.Context(), provider, label)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, names)
		return nil
	}
	items, _, err := s.opts.Store.List(r.Context(), model.Clusters, provider)
	if err != nil {
		return err
	}
	out := make([]model.Cluster, 0, len(items))
	for _, it := range items {
		var rec model.ClusterRecord
		if err := it.Decode(&rec); err != nil {
			return err
		}
		out = append(out, rec.Cluster)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func clusterKey(r *http.Request) (store.Key, error) {
	ns, err := names(r, []param{pProvider, pCluster})
	if err != nil {
		return store.Key{}, err
	}
	return store.K(model.Clusters, ns...), nil
}

func (s *Server) getCluster(w http.ResponseWriter, r *http.Request) error {
	return getView(s.opts.Store, w, r, clusterKey, func(rec *model.ClusterRecord) any { return rec.Cluster })
}

func (s *Server) updateCluster(w http.ResponseWriter, r *http.Request) error {
	k, err := clusterKey(r)
	if err != nil {
		return err
	}
	rev, err := ifMatch(r)
	if err != nil {
		return err
	}
	c, file, err := readCluster(r, true)
	if err != nil {
		return err
	}
	if err := sameName(&c.Metadata, k.Name(), "cluster"); err != nil {
		return err
	}
	if err := model.ValidateMetadata("cluster", &c.Metadata); err != nil {
		return err
	}
	newRev, err := s.opts.Registry.UpdateCluster(r.Context(), k.Names[0], c, file, rev)
	if err != nil {
		return err
	}
	setETag(w, newRev)
	writeJSON(w, http.StatusOK, c)
	return nil
}

func (s *Server) deleteCluster(w http.ResponseWriter, r *http.Request) error {
	return deleteAt(s.opts.Store, w, r, clusterKey)
}

func (s *Server) clusterStatus(w http.ResponseWriter, r *http.Request) error {
	k, err := clusterKey(r)
	if err != nil {
		return err
	}
	var rec model.ClusterRecord
	if _, err := s.opts.Store.Get(r.Context(), k, &rec); err != nil {
		return err
	}
	st, ok := s.opts.Clusters.Status(k)
	if !ok {
		st = cluster.Status{State: cluster.Pending, Server: rec.Server, LastError: "not probed yet", Since: time.Now().UTC()}
	}
	writeJSON(w, http.StatusOK, struct {
		Metadata model.Metadata `json:"metadata"`
		cluster.Status
	}{rec.Metadata, st})
	return nil
}

func labelKey(r *http.Request) (store.Key, error) {
	ns, err := names(r, []param{pProvider, pCluster, pLabel})
	if err != nil {
		return store.Key{}, err
	}
	return store.K(model.ClusterLabels, ns...), nil
}

func decodeLabel(r *http.Request) (model.ClusterLabel, error) {
	var l model.ClusterLabel
	if err := decodeJSON(r, &l); err != nil {
		return l, err
	}
	if l.ClusterLabel == "" && l.Metadata != nil && l.Metadata.Name != "" {
		l.ClusterLabel = l.Metadata.Name
	}
	l.Metadata = nil
	return l, model.ValidateLabel(l.ClusterLabel)
}

func (s *Server) createLabel(w http.ResponseWriter, r *http.Request) error {
	ns, err := names(r, []param{pProvider, pCluster})
	if err != nil {
		return err
	}
	l, err := decodeLabel(r)
	if err != nil {
		return err
	}
	rev, err := s.opts.Store.Create(r.Context(), store.K(model.ClusterLabels, ns[0], ns[1], l.ClusterLabel), l)
	if err != nil {
		return err
	}
	setETag(w, rev)
	writeJSON(w, http.StatusCreated, l)
	return nil
}

func (s *Server) listLabels(w http.ResponseWriter, r *http.Request) error {
	ns, err := names(r, []param{pProvider, pCluster})
	if err != nil {
		return err
	}
	items, _, err := s.opts.Store.List(r.Context(), model.ClusterLabels, ns...)
	if err != nil {
		return err
	}
	out := make([]model.ClusterLabel, 0, len(items))
	for _, it := range items {
		var l model.ClusterLabel
		if err := it.Decode(&l); err != nil {
			return err
		}
		out = append(out, l)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getLabel(w http.ResponseWriter, r *http.Request) error {
	return getView(s.opts.Store, w, r, labelKey, func(l *model.ClusterLabel) any { return l })
}

func (s *Server) updateLabel(w http.ResponseWriter, r *http.Request) error {
	k, err := labelKey(r)
	if err != nil {
		return err
	}
	rev, err := ifMatch(r)
	if err != nil {
		return err
	}
	l, err := decodeLabel(r)
	if err != nil {
		return err
	}
	if l.ClusterLabel != k.Name() {
		return errs.New(errs.Invalid, "clusterLabel %q does not match the label %q in the path; delete the label and add the new one", l.ClusterLabel, k.Name())
	}
	newRev, err := s.opts.Store.Update(r.Context(), k, l, rev)
	if err != nil {
		return err
	}
	setETag(w, newRev)
	writeJSON(w, http.StatusOK, l)
	return nil
}

func (s *Server) deleteLabel(w http.ResponseWriter, r *http.Request) error {
	return deleteAt(s.opts.Store, w, r, labelKey)
}
