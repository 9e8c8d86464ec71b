package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EventType says whether an object was written or deleted.
type EventType int

// The event types.
const (
	Put EventType = iota
	Deleted
)

// Event is one change to an object of a watched kind.
type Event struct {
	Type EventType
	Item Item // Data is nil for Deleted
}

// ListAll returns every object of kind, under all parents, sorted by path, and the
// store revision the list was read at (to watch from).
func (s *Store) ListAll(ctx context.Context, kind *Kind) ([]Item, int64, error) {
	prefix := s.root + "/o/" + kind.Name + "/"
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, unavailable(err, "list "+kind.Name)
	}
	items := make([]Item, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		it, err := s.item(kind, kv.Key, kv.Value, kv.ModRevision)
		if err != nil {
			return nil, 0, err
		}
		items = append(items, it)
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Key.Path() < items[j].Key.Path() })
	return items, resp.Header.Revision, nil
}

func (s *Store) item(kind *Kind, key, value []byte, rev int64) (Item, error) {
	path := strings.TrimPrefix(string(key), s.root+"/o/")
	k, ok := s.schema.parseKey(path)
	if !ok || k.Kind != kind {
		return Item{}, fmt.Errorf("store: key %q is not a %s", key, kind.Singular)
	}
	it := Item{Key: k, Rev: rev}
	if value != nil {
		var rec record
		if err := json.Unmarshal(value, &rec); err != nil {
			return Item{}, fmt.Errorf("decode %s: %w", k, err)
		}
		it.Data = rec.Data
	}
	return it, nil
}

// Watch calls fn for every change to objects of kind after revision rev, in order,
// until ctx ends or the watch fails (for example because rev was compacted: list
// again and watch from the new revision). It returns the error that ended it.
func (s *Store) Watch(ctx context.Context, kind *Kind, rev int64, fn func(Event)) error {
	prefix := s.root + "/o/" + kind.Name + "/"
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", kind.Name, err)
		}
		for _, ev := range resp.Events {
			var it Item
			var err error
			if ev.Type == clientv3.EventTypeDelete {
				it, err = s.item(kind, ev.Kv.Key, nil, ev.Kv.ModRevision)
			} else {
				it, err = s.item(kind, ev.Kv.Key, ev.Kv.Value, ev.Kv.ModRevision)
			}
			if err != nil {
				continue
			}
			t := Put
			if ev.Type == clientv3.EventTypeDelete {
				t = Deleted
			}
			fn(Event{Type: t, Item: it})
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("watch %s: closed", kind.Name)
}

// ListUnder returns every object of kind whose path starts with the given names
// (fewer than the kind's depth), sorted by path: all labels of one provider's
// clusters, say. Unlike List it does not check that the parents exist.
func (s *Store) ListUnder(ctx context.Context, kind *Kind, names ...string) ([]Item, error) {
	if len(names) >= kind.depth {
		panic(fmt.Sprintf("store: ListUnder %q takes fewer than %d names", kind.Name, kind.depth))
	}
	prefix := s.root + "/o/" + kind.Name + "/"
	if len(names) > 0 {
		prefix += strings.Join(names, "/") + "/"
	}
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable(err, "list "+kind.Name)
	}
	items := make([]Item, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		it, err := s.item(kind, kv.Key, kv.Value, kv.ModRevision)
		if err != nil {
			return nil, err
		}
		items = append(items, it)
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Key.Path() < items[j].Key.Path() })
	return items, nil
}
