package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/etcdembed"
	"github.com/atoll-edge/atoll/internal/store"
)

type thing struct {
	Description string `json:"description"`
}

type fixture struct {
	s                     *store.Store
	cli                   *clientv3.Client
	providers, clusters   *store.Kind
	labels, projects, dig *store.Kind
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	srv, err := etcdembed.Start(context.Background(), etcdembed.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	sc := store.NewSchema()
	f := fixture{cli: srv.Client()}
	f.providers = sc.Add("cluster-providers", "cluster provider", nil)
	f.clusters = sc.Add("clusters", "cluster", f.providers)
	f.labels = sc.Add("labels", "label", f.clusters)
	f.projects = sc.Add("projects", "project", nil)
	f.dig = sc.Add("digs", "deployment intent group", f.projects)
	f.s = store.New(srv.Client(), sc, "/test")
	return f
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestStoreErrors(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	cp := store.K(f.providers, "cp")
	c1 := store.K(f.clusters, "cp", "c1")
	_, err := f.s.Create(ctx, cp, thing{"provider"})
	must(t, err)
	rev, err := f.s.Create(ctx, c1, thing{"one"})
	must(t, err)

	tests := []struct {
		name    string
		op      func() error
		want    errs.Kind
		message string
	}{
		{"create existing", func() error { _, err := f.s.Create(ctx, cp, thing{}); return err }, errs.Exists, `cluster provider "cp" already exists`},
		{"create without parent", func() error { _, err := f.s.Create(ctx, store.K(f.clusters, "nope", "c"), thing{}); return err }, errs.NotFound, `cluster provider "nope" does not exist`},
		{"create with missing reference", func() error {
			_, err := f.s.Create(ctx, store.K(f.projects, "p"), thing{}, store.K(f.clusters, "cp", "ghost"))
			return err
		}, errs.Invalid, `refers to cluster "ghost" of cluster provider "cp", which does not exist`},
		{"get missing", func() error { _, err := f.s.Get(ctx, store.K(f.clusters, "cp", "c9"), nil); return err }, errs.NotFound, `cluster "c9" of cluster provider "cp" does not exist`},
		{"get missing parent", func() error { _, err := f.s.Get(ctx, store.K(f.clusters, "x", "c1"), nil); return err }, errs.NotFound, `cluster provider "x" does not exist`},
		{"update stale revision", func() error { _, err := f.s.Update(ctx, c1, thing{"two"}, rev-1); return err }, errs.Conflict, "was changed since revision"},
		{"update missing", func() error { _, err := f.s.Update(ctx, store.K(f.clusters, "cp", "c9"), thing{}, 0); return err }, errs.NotFound, "does not exist"},
		{"delete with children", func() error { return f.s.Delete(ctx, cp, 0) }, errs.Conflict, `cluster provider "cp" still has 1 clusters ("c1"); delete them first`},
		{"delete stale revision", func() error { return f.s.Delete(ctx, c1, rev-1) }, errs.Conflict, "was changed since revision"},
		{"delete missing", func() error { return f.s.Delete(ctx, store.K(f.providers, "nope"), 0) }, errs.NotFound, "does not exist"},
		{"list missing parent", func() error { _, _, err := f.s.List(ctx, f.clusters, "nope"); return err }, errs.NotFound, `cluster provider "nope" does not exist`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.op()
			if got := errs.KindOf(err); got != tc.want {
				t.Fatalf("kind = %q (err %v), want %q", got, err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.message) {
				t.Fatalf("message %q does not contain %q", err.Error(), tc.message)
			}
		})
	}
	// Nothing above changed the stored object.
	var got thing
	r, err := f.s.Get(ctx, c1, &got)
	must(t, err)
	if r != rev || got.Description != "one" {
		t.Fatalf("after failed operations got rev %d %+v, want rev %d description one", r, got, rev)
	}
}

func TestStoreLifecycle(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	cp := store.K(f.providers, "cp")
	_, err := f.s.Create(ctx, cp, thing{"p"})
	must(t, err)
	for _, n := range []string{"b", "a", "c"} {
		_, err := f.s.Create(ctx, store.K(f.clusters, "cp", n), thing{n})
		must(t, err)
	}
	// A label under cluster "a" must not show up in the list of clusters.
	_, err = f.s.Create(ctx, store.K(f.labels, "cp", "a", "edge"), thing{})
	must(t, err)
	items, _, err := f.s.List(ctx, f.clusters, "cp")
	must(t, err)
	var names []string
	for _, it := range items {
		var v thing
		must(t, it.Decode(&v))
		names = append(names, it.Key.Name()+"="+v.Description)
	}
	if got, want := strings.Join(names, ","), "a=a,b=b,c=c"; got != want {
		t.Fatalf("list = %s, want %s", got, want)
	}

	a := store.K(f.clusters, "cp", "a")
	rev, err := f.s.Get(ctx, a, nil)
	must(t, err)
	rev2, err := f.s.Update(ctx, a, thing{"a2"}, rev)
	must(t, err)
	if rev2 <= rev {
		t.Fatalf("update revision %d not after %d", rev2, rev)
	}
	if _, err := f.s.Update(ctx, a, thing{"a3"}, rev); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("second update with the old revision: %v, want conflict", err)
	}
	if err := f.s.Delete(ctx, a, 0); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("delete of a cluster with a label: %v, want conflict", err)
	}
	must(t, f.s.Delete(ctx, store.K(f.labels, "cp", "a", "edge"), 0))
	must(t, f.s.Delete(ctx, a, rev2))
	if _, err := f.s.Get(ctx, a, nil); errs.KindOf(err) != errs.NotFound {
		t.Fatalf("get after delete: %v", err)
	}
}

func TestStoreReferences(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	_, err := f.s.Create(ctx, store.K(f.providers, "cp"), thing{})
	must(t, err)
	c1, c2 := store.K(f.clusters, "cp", "c1"), store.K(f.clusters, "cp", "c2")
	for _, c := range []store.Key{c1, c2} {
		_, err := f.s.Create(ctx, c, thing{})
		must(t, err)
	}
	_, err = f.s.Create(ctx, store.K(f.projects, "p"), thing{})
	must(t, err)
	dig := store.K(f.dig, "p", "d")
	// The same reference twice (a provider named by two placement terms) is one.
	_, err = f.s.Create(ctx, dig, thing{}, c1, c1)
	must(t, err)

	err = f.s.Delete(ctx, c1, 0)
	if errs.KindOf(err) != errs.Conflict || !strings.Contains(err.Error(), `used by deployment intent group "d" of project "p"`) {
		t.Fatalf("delete of a referenced cluster: %v", err)
	}
	// Moving the reference frees c1 and pins c2.
	_, err = f.s.Update(ctx, dig, thing{}, 0, c2)
	must(t, err)
	must(t, f.s.Delete(ctx, c1, 0))
	if err := f.s.Delete(ctx, c2, 0); errs.KindOf(err) != errs.Conflict {
		t.Fatalf("delete of newly referenced cluster: %v", err)
	}
	// A reference to something missing is refused and changes nothing.
	if _, err := f.s.Update(ctx, dig, thing{"x"}, 0, c1); errs.KindOf(err) != errs.Invalid {
		t.Fatalf("update referencing a deleted cluster: %v, want invalid", err)
	}
	var got thing
	_, err = f.s.Get(ctx, dig, &got)
	must(t, err)
	if got.Description != "" {
		t.Fatalf("refused update was written: %+v", got)
	}
	// Deleting the referrer releases its references.
	must(t, f.s.Delete(ctx, dig, 0))
	must(t, f.s.Delete(ctx, c2, 0))
}

func TestStoreConcurrentCAS(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	k := store.K(f.projects, "p")
	rev, err := f.s.Create(ctx, k, thing{})
	must(t, err)
	const n = 20
	var wg sync.WaitGroup
	results := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := f.s.Update(ctx, k, thing{fmt.Sprint(i)}, rev)
			results <- err
		}(i)
	}
	wg.Wait()
	close(results)
	won, lost := 0, 0
	for err := range results {
		switch errs.KindOf(err) {
		case "":
			won++
		case errs.Conflict:
			lost++
		default:
			t.Fatalf("unexpected error: %v", err)
		}
	}
	if won != 1 || lost != n-1 {
		t.Fatalf("won %d lost %d, want exactly one winner", won, lost)
	}
}

func TestStoreWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newFixture(t)
	_, err := f.s.Create(ctx, store.K(f.providers, "cp"), thing{})
	must(t, err)
	_, err = f.s.Create(ctx, store.K(f.clusters, "cp", "before"), thing{})
	must(t, err)
	items, rev, err := f.s.ListAll(ctx, f.clusters)
	must(t, err)
	if len(items) != 1 || items[0].Key.Name() != "before" {
		t.Fatalf("ListAll = %+v", items)
	}
	events := make(chan store.Event, 10)
	go func() { _ = f.s.Watch(ctx, f.clusters, rev, func(e store.Event) { events <- e }) }()
	_, err = f.s.Create(ctx, store.K(f.clusters, "cp", "after"), thing{"new"})
	must(t, err)
	_, err = f.s.Create(ctx, store.K(f.labels, "cp", "after", "l"), thing{})
	must(t, err)
	must(t, f.s.Delete(ctx, store.K(f.clusters, "cp", "before"), 0))
	got := []store.Event{<-events, <-events}
	if got[0].Type != store.Put || got[0].Item.Key.Name() != "after" {
		t.Fatalf("first event %+v", got[0])
	}
	var v thing
	must(t, json.Unmarshal(got[0].Item.Data, &v))
	if v.Description != "new" {
		t.Fatalf("event data %+v", v)
	}
	if got[1].Type != store.Deleted || got[1].Item.Key.Name() != "before" {
		t.Fatalf("second event %+v (a label event would be a bug)", got[1])
	}
}

func TestStoreVersionedKind(t *testing.T) {
	ctx := context.Background()
	srv, err := etcdembed.Start(ctx, etcdembed.Options{Dir: t.TempDir()})
	must(t, err)
	t.Cleanup(srv.Close)
	sc := store.NewSchema()
	projects := sc.Add("projects", "project", nil)
	apps := sc.AddVersioned("composite-apps", "composite app", projects)
	charts := sc.Add("apps", "app", apps)
	s := store.New(srv.Client(), sc, "/v")
	_, err = s.Create(ctx, store.K(projects, "p"), thing{})
	must(t, err)
	for _, v := range []string{"v2", "v1"} {
		_, err := s.Create(ctx, store.K(apps, "p", "ca", v), thing{v})
		must(t, err)
	}
	_, err = s.Create(ctx, store.K(charts, "p", "ca", "v1", "web"), thing{})
	must(t, err)
	items, _, err := s.List(ctx, apps, "p")
	must(t, err)
	if len(items) != 2 || items[0].Key.Path() != "composite-apps/p/ca/v1" || items[1].Key.Path() != "composite-apps/p/ca/v2" {
		t.Fatalf("list = %+v", items)
	}
	err = s.Delete(ctx, store.K(apps, "p", "ca", "v1"), 0)
	if errs.KindOf(err) != errs.Conflict || !strings.Contains(err.Error(), `composite app "ca" version "v1" of project "p" still has 1 apps`) {
		t.Fatalf("delete with children: %v", err)
	}
	_, err = s.Get(ctx, store.K(charts, "p", "ca", "v3", "web"), nil)
	if errs.KindOf(err) != errs.NotFound || !strings.Contains(err.Error(), `composite app "ca" version "v3" of project "p" does not exist`) {
		t.Fatalf("get under a missing version: %v", err)
	}
}

func TestStoreDeleteGuard(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	k := store.K(f.projects, "p")
	_, err := f.s.Create(ctx, k, thing{})
	must(t, err)
	put, err := f.cli.Put(ctx, "/guard", "a")
	must(t, err)
	rev := put.Header.Revision
	_, err = f.cli.Put(ctx, "/guard", "b") // the guarded key moves on
	must(t, err)
	err = f.s.Delete(ctx, k, 0, store.Guard{Key: "/guard", ModRevision: rev, Why: "the guard moved"})
	if errs.KindOf(err) != errs.Conflict || !strings.Contains(err.Error(), "the guard moved") {
		t.Fatalf("delete with a stale guard: %v, want conflict naming the guard", err)
	}
	if _, err := f.s.Get(ctx, k, nil); err != nil {
		t.Fatalf("the object went although the guard failed: %v", err)
	}
	cur, err := f.cli.Get(ctx, "/guard")
	must(t, err)
	must(t, f.s.Delete(ctx, k, 0, store.Guard{Key: "/guard", ModRevision: cur.Kvs[0].ModRevision}))
	// A guard on a key that must not exist.
	_, err = f.s.Create(ctx, k, thing{})
	must(t, err)
	must(t, f.s.Delete(ctx, k, 0, store.Guard{Key: "/absent", ModRevision: 0}))
}
