package api

import (
	"context"
	"net/http"

	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/store"
)

func validName(v string) bool {
	if len(v) > 63 {
		return false
	}
	for _, c := range v {
		ok := c == '-' || c == '.' || c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// param is one name in a route's path: its pattern wildcard and what it names.
type param struct {
	wildcard string // "clusterProvider"
	what     string // "cluster provider"
}

// names reads the named path parameters in order.
func names(r *http.Request, params []param) ([]string, error) {
	out := make([]string, 0, len(params))
	for _, p := range params {
		v, err := pathName(r, p.wildcard, p.what)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// crud serves create, list, get, update and delete of a kind whose API object is
// stored as it is sent (projects, cluster providers, kv-pairs).
type crud[T any, PT interface {
	*T
	model.Object
}] struct {
	st       *store.Store
	kind     *store.Kind
	base     string  // collection path pattern
	parents  []param // wildcards of the parents, in order
	own      param   // wildcard of the object itself
	schema   string  // OpenAPI component name
	validate func(PT) error
	// refs returns the objects obj refers to (each must exist; none can be deleted
	// while obj refers to it). parents are the names of obj's parents.
	refs func(parents []string, obj PT) ([]store.Key, error)
	// check validates obj against other objects (for example that a label exists).
	check func(ctx context.Context, parents []string, obj PT) error
	// guard may refuse a delete (a deployed DIG), or return a condition the
	// delete checks in its transaction; afterDelete cleans up.
	guard       func(ctx context.Context, k store.Key) (store.Guard, error)
	afterDelete func(ctx context.Context, k store.Key) error
	// versioned is for kinds named by a name and a version (composite apps): the
	// path's last name is the version, metadata.name the one before, and answers
	// carry the version in the spec.
	versioned bool
	named     string // what metadata.name names, for messages, when versioned
}

// name is the key's name that metadata.name must match, and what it names.
func (c crud[T, PT]) name(k store.Key) (string, string) {
	if c.versioned {
		return k.Names[len(k.Names)-2], c.named
	}
	return k.Name(), c.own.what
}

func (c crud[T, PT]) answer(obj PT, k store.Key) any {
	if c.versioned {
		return withVersion(obj, k.Name())
	}
	return obj
}

func (c crud[T, PT]) references(ctx context.Context, parents []string, obj PT) ([]store.Key, error) {
	if c.check != nil {
		if err := c.check(ctx, parents, obj); err != nil {
			return nil, err
		}
	}
	if c.refs == nil {
		return nil, nil
	}
	return c.refs(parents, obj)
}

func (c crud[T, PT]) routes(tag string) []Route {
	item := c.base + "/{" + c.own.wildcard + "}"
	what := c.own.what
	return []Route{
		{Method: "POST", Pattern: c.base, Summary: "Create a " + what + ".", Request: c.schema, Response: c.schema, Status: 201, Tag: tag, Handler: c.create},
		{Method: "GET", Pattern: c.base, Summary: "List the " + what + "s.", Response: "[]" + c.schema, Status: 200, Tag: tag, Handler: c.list},
		{Method: "GET", Pattern: item, Summary: "Get a " + what + ".", Response: c.schema, Status: 200, Tag: tag, Handler: c.get},
		{Method: "PUT", Pattern: item, Summary: "Replace a " + what + " (If-Match: its ETag, for compare-and-swap).", Request: c.schema, Response: c.schema, Status: 200, Tag: tag, Handler: c.update},
		{Method: "DELETE", Pattern: item, Summary: "Delete a " + what + " (refused while it has children or is referenced).", Status: 204, Tag: tag, Handler: c.delete},
	}
}

func (c crud[T, PT]) decode(r *http.Request) (PT, error) {
	obj := PT(new(T))
	if err := decodeJSON(r, obj); err != nil {
		return nil, err
	}
	if err := model.ValidateMetadata(c.own.what, obj.Meta()); err != nil {
		return nil, err
	}
	if c.validate != nil {
		if err := c.validate(obj); err != nil {
			return nil, err
		}
	}
	return obj, nil
}

func (c crud[T, PT]) create(w http.ResponseWriter, r *http.Request) error {
	parents, err := names(r, c.parents)
	if err != nil {
		return err
	}
	obj, err := c.decode(r)
	if err != nil {
		return err
	}
	refs, err := c.references(r.Context(), parents, obj)
	if err != nil {
		return err
	}
	rev, err := c.st.Create(r.Context(), store.K(c.kind, append(parents, obj.Meta().Name)...), obj, refs...)
	if err != nil {
		return err
	}
	setETag(w, rev)
	writeJSON(w, http.StatusCreated, obj)
	return nil
}

func (c crud[T, PT]) list(w http.ResponseWriter, r *http.Request) error {
	parents, err := names(r, c.parents)
	if err != nil {
		return err
	}
	items, _, err := c.st.List(r.Context(), c.kind, parents...)
	if err != nil {
		return err
	}
	out := make([]PT, 0, len(items))
	for _, it := range items {
		obj := PT(new(T))
		if err := it.Decode(obj); err != nil {
			return err
		}
		out = append(out, obj)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (c crud[T, PT]) key(r *http.Request) (store.Key, error) {
	ns, err := names(r, append(append([]param(nil), c.parents...), c.own))
	if err != nil {
		return store.Key{}, err
	}
	return store.K(c.kind, ns...), nil
}

func (c crud[T, PT]) get(w http.ResponseWriter, r *http.Request) error {
	k, err := c.key(r)
	if err != nil {
		return err
	}
	obj := PT(new(T))
	rev, err := c.st.Get(r.Context(), k, obj)
	if err != nil {
		return err
	}
	setETag(w, rev)
	writeJSON(w, http.StatusOK, c.answer(obj, k))
	return nil
}

func (c crud[T, PT]) update(w http.ResponseWriter, r *http.Request) error {
	k, err := c.key(r)
	if err != nil {
		return err
	}
	rev, err := ifMatch(r)
	if err != nil {
		return err
	}
	obj := PT(new(T))
	if err := decodeJSON(r, obj); err != nil {
		return err
	}
	name, what := c.name(k)
	if err := sameName(obj.Meta(), name, what); err != nil {
		return err
	}
	if err := model.ValidateMetadata(what, obj.Meta()); err != nil {
		return err
	}
	if c.validate != nil {
		if err := c.validate(obj); err != nil {
			return err
		}
	}
	parent, _ := k.Parent()
	refs, err := c.references(r.Context(), parent.Names, obj)
	if err != nil {
		return err
	}
	newRev, err := c.st.Update(r.Context(), k, obj, rev, refs...)
	if err != nil {
		return err
	}
	setETag(w, newRev)
	writeJSON(w, http.StatusOK, c.answer(obj, k))
	return nil
}

func (c crud[T, PT]) delete(w http.ResponseWriter, r *http.Request) error {
	k, err := c.key(r)
	if err != nil {
		return err
	}
	rev, err := ifMatch(r)
	if err != nil {
		return err
	}
	var guards []store.Guard
	if c.guard != nil {
		g, err := c.guard(r.Context(), k)
		if err != nil {
			return err
		}
		guards = append(guards, g)
	}
	if err := c.st.Delete(r.Context(), k, rev, guards...); err != nil {
		return err
	}
	if c.afterDelete != nil {
		if err := c.afterDelete(r.Context(), k); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// sameName fills an empty metadata.name from the path and refuses a different one:
// objects are not renamed by PUT.
func sameName(m *model.Metadata, name, what string) error {
	if m.Name == "" {
		m.Name = name
	}
	if m.Name != name {
		return errs.New(errs.Invalid, "metadata.name %q does not match the %s %q in the path; a PUT cannot rename", m.Name, what, name)
	}
	return nil
}

// getView answers GET of the stored record at the path's key, as view shows it
// (a stored record may hold more than the API shows: a sealed kubeconfig, a chart
// digest), with the record's revision as ETag.
func getView[R any](st *store.Store, w http.ResponseWriter, r *http.Request, key func(*http.Request) (store.Key, error), view func(*R) any) error {
	k, err := key(r)
	if err != nil {
		return err
	}
	rec := new(R)
	rev, err := st.Get(r.Context(), k, rec)
	if err != nil {
		return err
	}
	setETag(w, rev)
	writeJSON(w, http.StatusOK, view(rec))
	return nil
}

// deleteAt answers DELETE of the object at the path's key (If-Match: its ETag).
func deleteAt(st *store.Store, w http.ResponseWriter, r *http.Request, key func(*http.Request) (store.Key, error)) error {
	k, err := key(r)
	if err != nil {
		return err
	}
	rev, err := ifMatch(r)
	if err != nil {
		return err
	}
	if err := st.Delete(r.Context(), k, rev); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
