package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/atoll-edge/atoll/internal/errs"
)

// Store keeps typed objects in etcd under a root prefix.
type Store struct {
	cli    *clientv3.Client
	schema *Schema
	root   string
}

// New returns a store on cli for the kinds of schema, keeping keys below root
// (for example "/atoll"); several stores with different roots can share one etcd.
func New(cli *clientv3.Client, schema *Schema, root string) *Store {
	return &Store{cli: cli, schema: schema, root: strings.TrimSuffix(root, "/")}
}

// record is what one etcd value holds: the object and the keys it references.
type record struct {
	Refs []string        `json:"refs,omitempty"`
	Data json.RawMessage `json:"data"`
}

// Item is one object returned by List.
type Item struct {
	Key  Key
	Rev  int64
	Data json.RawMessage
}

// Decode unmarshals the item's object into v.
func (i Item) Decode(v any) error {
	if err := json.Unmarshal(i.Data, v); err != nil {
		return fmt.Errorf("decode %s: %w", i.Key, err)
	}
	return nil
}

const maxRetries = 16

func (s *Store) etcdKey(k Key) string { return s.root + "/o/" + k.Path() }

// childPrefix is the prefix under which objects of kind child below k live.
func (s *Store) childPrefix(child *Kind, k Key) string {
	return s.root + "/o/" + child.Name + "/" + strings.Join(k.Names, "/") + "/"
}

func (s *Store) kindPrefix(kind *Kind, parents []string) string {
	if len(parents) == 0 {
		return s.root + "/o/" + kind.Name + "/"
	}
	return s.root + "/o/" + kind.Name + "/" + strings.Join(parents, "/") + "/"
}

// refPrefix is the prefix of the back-references pointing at k.
func (s *Store) refPrefix(k Key) string { return s.root + "/r/" + k.Path() + "/@/" }

func (s *Store) refKey(target, source Key) string { return s.refPrefix(target) + source.Path() }

func unavailable(err error, what string) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	if errors.Is(err, rpctypes.ErrRequestTooLarge) || errors.Is(err, rpctypes.ErrGRPCRequestTooLarge) {
		return errs.New(errs.TooLarge, "%s: the object is larger than the store accepts in one request", what)
	}
	return errs.Wrap(errs.Unavailable, err, "%s: the store (etcd) did not answer", what)
}

// Create stores v as a new object at k, which must not exist, whose parent must
// exist, and which references refs (each must exist; none can then be deleted while
// this object refers to it). It returns the new revision.
func (s *Store) Create(ctx context.Context, k Key, v any, refs ...Key) (int64, error) {
	refs = dedupe(refs)
	val, err := encode(v, refs)
	if err != nil {
		return 0, err
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.etcdKey(k)), "=", 0)}
	elses := []clientv3.Op{clientv3.OpGet(s.etcdKey(k), clientv3.WithKeysOnly())}
	parent, hasParent := k.Parent()
	if hasParent {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.etcdKey(parent)), ">", 0))
		elses = append(elses, clientv3.OpGet(s.etcdKey(parent), clientv3.WithKeysOnly()))
	}
	ops := []clientv3.Op{clientv3.OpPut(s.etcdKey(k), val)}
	for _, r := range refs {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.etcdKey(r)), ">", 0))
		elses = append(elses, clientv3.OpGet(s.etcdKey(r), clientv3.WithKeysOnly()))
		ops = append(ops, clientv3.OpPut(s.refKey(r, k), ""))
	}
	resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Else(elses...).Commit()
	if err != nil {
		return 0, unavailable(err, "create "+k.String())
	}
	if resp.Succeeded {
		return resp.Header.Revision, nil
	}
	if len(resp.Responses[0].GetResponseRange().Kvs) > 0 {
		return 0, errs.New(errs.Exists, "%s already exists", k)
	}
	i := 1
	if hasParent {
		if len(resp.Responses[1].GetResponseRange().Kvs) == 0 {
			return 0, errs.New(errs.NotFound, "%s does not exist", parent)
		}
		i++
	}
	for j, r := range refs {
		if len(resp.Responses[i+j].GetResponseRange().Kvs) == 0 {
			return 0, errs.New(errs.Invalid, "%s refers to %s, which does not exist", k, r)
		}
	}
	return 0, errs.New(errs.Conflict, "%s changed during the create; try again", k)
}

// Get reads the object at k into v (which may be nil) and returns its revision.
func (s *Store) Get(ctx context.Context, k Key, v any) (int64, error) {
	rec, rev, err := s.get(ctx, k)
	if err != nil {
		return 0, err
	}
	if v != nil {
		if err := json.Unmarshal(rec.Data, v); err != nil {
			return 0, fmt.Errorf("decode %s: %w", k, err)
		}
	}
	return rev, nil
}

func (s *Store) get(ctx context.Context, k Key) (record, int64, error) {
	resp, err := s.cli.Get(ctx, s.etcdKey(k))
	if err != nil {
		return record{}, 0, unavailable(err, "read "+k.String())
	}
	if len(resp.Kvs) == 0 {
		if p, ok := k.Parent(); ok {
			if _, err := s.Get(ctx, p, nil); err != nil {
				return record{}, 0, err
			}
		}
		return record{}, 0, errs.New(errs.NotFound, "%s does not exist", k)
	}
	var rec record
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return record{}, 0, fmt.Errorf("decode %s: %w", k, err)
	}
	return rec, resp.Kvs[0].ModRevision, nil
}

// Update replaces the object at k with v and its references with refs. With rev > 0
// the object must still be at that revision (compare-and-swap), else the update
// fails with a conflict; with rev == 0 it must only exist. It returns the new revision.
func (s *Store) Update(ctx context.Context, k Key, v any, rev int64, refs ...Key) (int64, error) {
	val, err := encode(v, refs)
	if err != nil {
		return 0, err
	}
	newRefs := map[string]Key{}
	for _, r := range refs {
		newRefs[r.Path()] = r
	}
	for attempt := 0; attempt < maxRetries; attempt++ {
		old, cur, err := s.get(ctx, k)
		if err != nil {
			return 0, err
		}
		if rev > 0 && cur != rev {
			return 0, errs.New(errs.Conflict, "%s was changed since revision %d (now %d); read it again and retry", k, rev, cur)
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.etcdKey(k)), "=", cur)}
		ops := []clientv3.Op{clientv3.OpPut(s.etcdKey(k), val)}
		var checked []Key
		for p, r := range newRefs {
			if !contains(old.Refs, p) {
				cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.etcdKey(r)), ">", 0))
				ops = append(ops, clientv3.OpPut(s.refKey(r, k), ""))
				checked = append(checked, r)
			}
		}
		for _, p := range old.Refs {
			if _, keep := newRefs[p]; !keep {
				ops = append(ops, clientv3.OpDelete(s.root+"/r/"+p+"/@/"+k.Path()))
			}
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return 0, unavailable(err, "update "+k.String())
		}
		if resp.Succeeded {
			return resp.Header.Revision, nil
		}
		for _, r := range checked {
			if _, err := s.Get(ctx, r, nil); errs.KindOf(err) == errs.NotFound {
				return 0, errs.New(errs.Invalid, "%s refers to %s, which does not exist", k, r)
			}
		}
		if rev > 0 {
			return 0, errs.New(errs.Conflict, "%s was changed since revision %d; read it again and retry", k, rev)
		}
	}
	return 0, errs.New(errs.Conflict, "%s is changing too often to update; try again", k)
}

// Guard is a condition on another etcd key that a Delete checks in its own
// transaction: the key is still at ModRevision (0: the key does not exist). The
// lifecycle guards a DIG's delete with its state key, so that no instantiate can
// slip in between the check and the delete.
type Guard struct {
	Key         string
	ModRevision int64
	// Why says, for the conflict message, what changed when the guard fails.
	Why string
}

// Delete removes the object at k. With rev > 0 it must still be at that revision.
// It fails with a conflict while the object has children or is referenced, or
// when a guard no longer holds.
func (s *Store) Delete(ctx context.Context, k Key, rev int64, guards ...Guard) error {
	children := s.schema.Children(k.Kind)
	for attempt := 0; attempt < maxRetries; attempt++ {
		old, cur, err := s.get(ctx, k)
		if err != nil {
			return err
		}
		if rev > 0 && cur != rev {
			return errs.New(errs.Conflict, "%s was changed since revision %d (now %d); read it again and retry", k, rev, cur)
		}
		cmps := []clientv3.Cmp{
			clientv3.Compare(clientv3.ModRevision(s.etcdKey(k)), "=", cur),
			clientv3.Compare(clientv3.CreateRevision(s.refPrefix(k)), "=", 0).WithPrefix(),
		}
		for _, c := range children {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.childPrefix(c, k)), "=", 0).WithPrefix())
		}
		for _, g := range guards {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(g.Key), "=", g.ModRevision))
		}
		ops := []clientv3.Op{clientv3.OpDelete(s.etcdKey(k)), clientv3.OpDelete(s.refPrefix(k), clientv3.WithPrefix())}
		for _, p := range old.Refs {
			ops = append(ops, clientv3.OpDelete(s.root+"/r/"+p+"/@/"+k.Path()))
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return unavailable(err, "delete "+k.String())
		}
		if resp.Succeeded {
			return nil
		}
		if err := s.blockers(ctx, k, children); err != nil {
			return err
		}
		for _, g := range guards {
			resp, err := s.cli.Get(ctx, g.Key, clientv3.WithKeysOnly())
			if err != nil {
				return unavailable(err, "delete "+k.String())
			}
			cur := int64(0)
			if len(resp.Kvs) > 0 {
				cur = resp.Kvs[0].ModRevision
			}
			if cur != g.ModRevision {
				return errs.New(errs.Conflict, "%s: %s; try again", k, g.Why)
			}
		}
		if rev > 0 {
			return errs.New(errs.Conflict, "%s was changed since revision %d; read it again and retry", k, rev)
		}
	}
	return errs.New(errs.Conflict, "%s is changing too often to delete; try again", k)
}

// blockers explains why k cannot be deleted: its children or the objects that refer to it.
func (s *Store) blockers(ctx context.Context, k Key, children []*Kind) error {
	for _, c := range children {
		resp, err := s.cli.Get(ctx, s.childPrefix(c, k), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(3))
		if err != nil {
			return unavailable(err, "delete "+k.String())
		}
		if resp.Count > 0 {
			names := make([]string, 0, len(resp.Kvs))
			for _, kv := range resp.Kvs {
				names = append(names, fmt.Sprintf("%q", lastSegment(string(kv.Key))))
			}
			more := ""
			if resp.Count > int64(len(names)) {
				more = fmt.Sprintf(" and %d more", resp.Count-int64(len(names)))
			}
			return errs.New(errs.Conflict, "%s still has %d %s (%s%s); delete them first", k, resp.Count, c.Name, strings.Join(names, ", "), more)
		}
	}
	resp, err := s.cli.Get(ctx, s.refPrefix(k), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(3))
	if err != nil {
		return unavailable(err, "delete "+k.String())
	}
	if resp.Count > 0 {
		var users []string
		for _, kv := range resp.Kvs {
			if src, ok := s.schema.parseKey(strings.TrimPrefix(string(kv.Key), s.refPrefix(k))); ok {
				users = append(users, src.String())
			}
		}
		more := ""
		if resp.Count > int64(len(resp.Kvs)) {
			more = fmt.Sprintf(" and %d more", resp.Count-int64(len(resp.Kvs)))
		}
		return errs.New(errs.Conflict, "%s is used by %s%s; remove those references first", k, strings.Join(users, ", "), more)
	}
	return nil
}

// List returns the objects of kind under the parent named by parents (the parents'
// names, empty for a top-level kind), sorted by name. The parent must exist.
func (s *Store) List(ctx context.Context, kind *Kind, parents ...string) ([]Item, int64, error) {
	if len(parents) != kind.depth-kind.own {
		panic(fmt.Sprintf("store: listing %q needs %d parent names, got %d", kind.Name, kind.depth-kind.own, len(parents)))
	}
	if kind.Parent != nil {
		if _, err := s.Get(ctx, K(kind.Parent, parents...), nil); err != nil {
			return nil, 0, err
		}
	}
	prefix := s.kindPrefix(kind, parents)
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, unavailable(err, "list "+kind.Name)
	}
	items := make([]Item, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		own := strings.Split(strings.TrimPrefix(string(kv.Key), prefix), "/")
		if len(own) != kind.own {
			return nil, 0, fmt.Errorf("store: key %q is not a %s", kv.Key, kind.Singular)
		}
		var rec record
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			return nil, 0, fmt.Errorf("decode %s %q: %w", kind.Singular, strings.Join(own, "/"), err)
		}
		items = append(items, Item{Key: K(kind, append(append([]string(nil), parents...), own...)...), Rev: kv.ModRevision, Data: rec.Data})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Key.Path() < items[j].Key.Path() })
	return items, resp.Header.Revision, nil
}

// dedupe drops repeated references (etcd refuses a transaction that writes one
// key twice).
func dedupe(refs []Key) []Key {
	seen := map[string]bool{}
	out := refs[:0:0]
	for _, r := range refs {
		if p := r.Path(); !seen[p] {
			seen[p] = true
			out = append(out, r)
		}
	}
	return out
}

func encode(v any, refs []Key) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("encode object: %w", err)
	}
	rec := record{Data: data}
	seen := map[string]bool{}
	for _, r := range refs {
		if p := r.Path(); !seen[p] {
			seen[p] = true
			rec.Refs = append(rec.Refs, p)
		}
	}
	sort.Strings(rec.Refs)
	out, err := json.Marshal(rec)
	if err != nil {
		return "", fmt.Errorf("encode object: %w", err)
	}
	return string(out), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func lastSegment(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[i+1:]
	}
	return key
}

// EtcdKey is the etcd key of the object at k, for packages that compare it inside
// their own transactions (the lifecycle checks that its DIG still exists).
func (s *Store) EtcdKey(k Key) string { return s.etcdKey(k) }
