package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/etcdembed"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/store"
)

// fakePlanner is a Planner for the state machine's own logic: it makes no plan,
// it answers a digest (or an error) after an optional delay, and counts calls.
type fakePlanner struct {
	delay  time.Duration
	err    error
	during func(ctx context.Context, dig store.Key) // runs inside Plan, before it answers

	calls     atomic.Int32
	inFlight  atomic.Int32
	maxFlight atomic.Int32
	mu        sync.Mutex
	revisions []int64
}

func (p *fakePlanner) Plan(ctx context.Context, dig store.Key, revision int64) (string, error) {
	p.calls.Add(1)
	n := p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	for {
		m := p.maxFlight.Load()
		if n <= m || p.maxFlight.CompareAndSwap(m, n) {
			break
		}
	}
	p.mu.Lock()
	p.revisions = append(p.revisions, revision)
	p.mu.Unlock()
	if p.during != nil {
		p.during(ctx, dig)
	}
	if p.delay > 0 {
		select {
		case <-time.After(p.delay):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if p.err != nil {
		return "", p.err
	}
	return fakeDigest(revision), nil
}

func fakeDigest(revision int64) string {
	return "sha256:" + strings.Repeat(string(rune('0'+revision%10)), 64)
}

// fixture is a real embedded etcd with the model's store and a machine on it.
type fixture struct {
	st      *store.Store
	m       *Machine
	planner *fakePlanner
	clock   *fakeClock
}

// fakeClock ticks one second on every reading, so that action times are distinct
// and ordered.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv, err := etcdembed.Start(context.Background(), etcdembed.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	st := store.New(srv.Client(), model.Schema, "/test")
	ctx := context.Background()
	must(t, "create project", create(ctx, st, store.K(model.Projects, "p"), &model.Project{Metadata: model.Metadata{Name: "p"}}))
	must(t, "create composite app", create(ctx, st, store.K(model.CompositeApps, "p", "ca", "v1"),
		&model.CompositeApp{Metadata: model.Metadata{Name: "ca"}, Spec: model.CompositeAppSpec{Version: "v1"}}))
	f := &fixture{st: st, planner: &fakePlanner{}, clock: &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}}
	f.m = New(srv.Client(), st, "/test", f.planner)
	f.m.now = f.clock.now
	return f
}

func create(ctx context.Context, st *store.Store, k store.Key, v any) error {
	_, err := st.Create(ctx, k, v)
	return err
}

// dig creates a new DIG named name and returns its key.
func (f *fixture) dig(t *testing.T, name string) store.Key {
	t.Helper()
	k := store.K(model.DIGs, "p", "ca", "v1", name)
	must(t, "create DIG "+name, create(context.Background(), f.st, k,
		&model.DeploymentIntentGroup{Metadata: model.Metadata{Name: name}, Spec: model.DIGSpec{Profile: "none", Version: "1"}}))
	return k
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// step is one lifecycle call by name.
type step string

const (
	approve     step = "approve"
	instantiate step = "instantiate"
	terminate   step = "terminate"
	terminated  step = "terminated" // the resource sync's call
)

func (f *fixture) do(ctx context.Context, s step, dig store.Key) error {
	var err error
	switch s {
	case approve:
		_, err = f.m.Approve(ctx, dig)
	case instantiate:
		_, err = f.m.Instantiate(ctx, dig)
	case terminate:
		_, err = f.m.Terminate(ctx, dig)
	case terminated:
		err = f.m.Terminated(ctx, dig)
	default:
		panic("unknown step " + s)
	}
	return err
}

func (f *fixture) state(t *testing.T, dig store.Key) State {
	t.Helper()
	rec, _, err := f.m.Get(context.Background(), dig)
	must(t, "get state", err)
	return rec.State
}

func TestTransitions(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tests := []struct {
		name      string
		before    []step // each must succeed
		call      step
		wantKind  errs.Kind // "" for success
		wantMsg   string    // part of the error message
		wantState State     // the state after the call
	}{
		{name: "approve a created DIG", call: approve, wantState: Approved},
		{name: "approve twice", before: []step{approve}, call: approve, wantKind: errs.Conflict, wantMsg: "already approved; instantiate it", wantState: Approved},
		{name: "instantiate before approve", call: instantiate, wantKind: errs.Conflict, wantMsg: "not approved yet; approve it first", wantState: Created},
		{name: "instantiate an approved DIG", before: []step{approve}, call: instantiate, wantState: Instantiated},
		{name: "instantiate twice", before: []step{approve, instantiate}, call: instantiate, wantKind: errs.Conflict, wantMsg: "already instantiated", wantState: Instantiated},
		{name: "approve an instantiated DIG", before: []step{approve, instantiate}, call: approve, wantKind: errs.Conflict, wantMsg: "is Instantiated; only a created or terminated one can be approved", wantState: Instantiated},
		{name: "terminate a created DIG", call: terminate, wantKind: errs.Conflict, wantMsg: "is Created; only an instantiated one can be terminated", wantState: Created},
		{name: "terminate from approved", before: []step{approve}, call: terminate, wantKind: errs.Conflict, wantMsg: "is Approved; only an instantiated one can be terminated", wantState: Approved},
		{name: "terminate an instantiated DIG", before: []step{approve, instantiate}, call: terminate, wantState: Terminating},
		{name: "terminate twice", before: []step{approve, instantiate, terminate}, call: terminate, wantKind: errs.Conflict, wantMsg: "already terminating", wantState: Terminating},
		{name: "instantiate while terminating", before: []step{approve, instantiate, terminate}, call: instantiate, wantKind: errs.Conflict, wantMsg: "is Terminating; wait until it is terminated", wantState: Terminating},
		{name: "approve while terminating", before: []step{approve, instantiate, terminate}, call: approve, wantKind: errs.Conflict, wantMsg: "is Terminating", wantState: Terminating},
		{name: "terminated ends terminating", before: []step{approve, instantiate, terminate}, call: terminated, wantState: Terminated},
		{name: "terminated twice is a no-op", before: []step{approve, instantiate, terminate, terminated}, call: terminated, wantState: Terminated},
		{name: "terminated leaves a created DIG alone", call: terminated, wantState: Created},
		{name: "terminated leaves an approved DIG alone", before: []step{approve}, call: terminated, wantState: Approved},
		{name: "terminated leaves an instantiated DIG alone", before: []step{approve, instantiate}, call: terminated, wantState: Instantiated},
		{name: "terminate a terminated DIG", before: []step{approve, instantiate, terminate, terminated}, call: terminate, wantKind: errs.Conflict, wantMsg: "is Terminated", wantState: Terminated},
		{name: "approve again after terminated", before: []step{approve, instantiate, terminate, terminated}, call: approve, wantState: Approved},
		{name: "instantiate again after terminated", before: []step{approve, instantiate, terminate, terminated}, call: instantiate, wantState: Instantiated},
		{name: "instantiate after re-approval", before: []step{approve, instantiate, terminate, terminated, approve}, call: instantiate, wantState: Instantiated},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dig := f.dig(t, "d"+string(rune('a'+i)))
			for _, s := range tc.before {
				must(t, string(s), f.do(ctx, s, dig))
			}
			before, beforeRev, err := f.m.Get(ctx, dig)
			must(t, "get", err)
			err = f.do(ctx, tc.call, dig)
			if tc.wantKind == "" {
				if err != nil {
					t.Fatalf("%s: got error %v, want success", tc.call, err)
				}
			} else {
				if !errors.Is(err, errs.E(tc.wantKind)) || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Fatalf("%s: got error %v (kind %q), want kind %q containing %q", tc.call, err, errs.KindOf(err), tc.wantKind, tc.wantMsg)
				}
				if !strings.Contains(err.Error(), dig.String()) {
					t.Errorf("%s: message %q does not name the DIG (%s)", tc.call, err, dig)
				}
				after, afterRev, _ := f.m.Get(ctx, dig)
				if afterRev != beforeRev || len(after.Actions) != len(before.Actions) {
					t.Errorf("%s: a refused call wrote the state: revision %d → %d, actions %d → %d", tc.call, beforeRev, afterRev, len(before.Actions), len(after.Actions))
				}
			}
			if got := f.state(t, dig); got != tc.wantState {
				t.Errorf("state after %s: got %s, want %s", tc.call, got, tc.wantState)
			}
		})
	}
}

func TestInstantiatePlannerFails(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tests := []struct {
		name     string
		before   []step
		err      error
		wantKind errs.Kind
	}{
		{"render failure from approved", []step{approve}, errs.New(errs.Invalid, `app "broken" for cluster cp/c1: render chart "broken": need x`), errs.Invalid},
		{"store failure from terminated", []step{approve, instantiate, terminate, terminated}, errs.New(errs.Unavailable, "the store (etcd) did not answer"), errs.Unavailable},
		{"plain error", []step{approve}, errors.New("boom"), ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dig := f.dig(t, "fail"+string(rune('a'+i)))
			f.planner.err = nil
			for _, s := range tc.before {
				must(t, string(s), f.do(ctx, s, dig))
			}
			before, beforeRev, _ := f.m.Get(ctx, dig)
			f.planner.err = tc.err
			defer func() { f.planner.err = nil }()
			rec, err := f.m.Instantiate(ctx, dig)
			if !errors.Is(err, tc.err) || errs.KindOf(err) != tc.wantKind {
				t.Fatalf("got error %v (kind %q), want the planner's error %v (kind %q)", err, errs.KindOf(err), tc.err, tc.wantKind)
			}
			if rec.State != "" {
				t.Errorf("got record %+v with the error, want none", rec)
			}
			after, afterRev, _ := f.m.Get(ctx, dig)
			if afterRev != beforeRev || after.State != before.State || after.Revision != before.Revision || after.Plan != before.Plan {
				t.Errorf("state after a failed plan: got %s rev %d plan %q (etcd rev %d), want %s rev %d plan %q (etcd rev %d)",
					after.State, after.Revision, after.Plan, afterRev, before.State, before.Revision, before.Plan, beforeRev)
			}
		})
	}
}

func TestActionsInOrder(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	dig := f.dig(t, "history")
	steps := []step{approve, instantiate, terminate, terminated, approve, instantiate, terminate, terminated, instantiate}
	for _, s := range steps {
		must(t, string(s), f.do(ctx, s, dig))
	}
	rec, _, err := f.m.Get(ctx, dig)
	must(t, "get", err)
	want := []struct {
		state    State
		revision int64
	}{
		{Created, 0}, {Approved, 0}, {Instantiated, 1}, {Terminating, 1}, {Terminated, 1},
		{Approved, 1}, {Instantiated, 2}, {Terminating, 2}, {Terminated, 2}, {Instantiated, 3},
	}
	if len(rec.Actions) != len(want) {
		t.Fatalf("got %d actions %+v, want %d", len(rec.Actions), rec.Actions, len(want))
	}
	for i, w := range want {
		a := rec.Actions[i]
		if a.State != w.state || a.Revision != w.revision {
			t.Errorf("action %d: got %s revision %d, want %s revision %d", i, a.State, a.Revision, w.state, w.revision)
		}
		if i > 0 && !a.Time.After(rec.Actions[i-1].Time) {
			t.Errorf("action %d time %s is not after action %d's %s", i, a.Time, i-1, rec.Actions[i-1].Time)
		}
	}
	if rec.Revision != 3 || rec.Plan != fakeDigest(3) {
		t.Errorf("record: got revision %d plan %q, want revision 3 plan %q", rec.Revision, rec.Plan, fakeDigest(3))
	}
	f.planner.mu.Lock()
	got := f.planner.revisions
	f.planner.mu.Unlock()
	if len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
		t.Errorf("planner asked for revisions %v, want [1 2 3]", got)
	}
}

func TestActionsBounded(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	dig := f.dig(t, "long")
	// A DIG with a long history: 199 actions, the last one Approved.
	long := Record{State: Approved, Revision: 99}
	for i := range 199 {
		long.Actions = append(long.Actions, Action{State: Approved, Revision: int64(i)})
	}
	data, err := json.Marshal(long)
	must(t, "encode", err)
	_, err = f.m.cli.Put(ctx, f.m.key(dig), string(data))
	must(t, "write the long history", err)

	must(t, "instantiate", f.do(ctx, instantiate, dig))
	must(t, "terminate", f.do(ctx, terminate, dig))
	rec, _, err := f.m.Get(ctx, dig)
	must(t, "get", err)
	if len(rec.Actions) != 200 {
		t.Fatalf("got %d actions, want the latest 200", len(rec.Actions))
	}
	if first := rec.Actions[0]; first.Revision != 1 {
		t.Errorf("first action kept: got revision %d, want 1 (the oldest one dropped)", first.Revision)
	}
	if last := rec.Actions[len(rec.Actions)-1]; last.State != Terminating || last.Revision != 100 {
		t.Errorf("last action: got %s revision %d, want Terminating revision 100", last.State, last.Revision)
	}
}

func TestConcurrentInstantiate(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	dig := f.dig(t, "race")
	must(t, "approve", f.do(ctx, approve, dig))
	f.planner.delay = 300 * time.Millisecond

	const n = 20
	start := make(chan struct{})
	errsOut := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			_, errsOut[i] = f.m.Instantiate(ctx, dig)
		})
	}
	close(start)
	wg.Wait()

	won := 0
	for i, err := range errsOut {
		switch {
		case err == nil:
			won++
		case errs.KindOf(err) != errs.Conflict:
			t.Errorf("call %d: got %v (kind %q), want success or a conflict", i, err, errs.KindOf(err))
		}
	}
	if won != 1 {
		t.Fatalf("got %d successful instantiates of %d, want exactly 1: %v", won, n, errsOut)
	}
	if f.planner.maxFlight.Load() < 2 {
		t.Errorf("at most %d plans ran at once: the calls did not overlap, so the test proves nothing", f.planner.maxFlight.Load())
	}
	rec, _, err := f.m.Get(ctx, dig)
	must(t, "get", err)
	instantiated := 0
	for _, a := range rec.Actions {
		if a.State == Instantiated {
			instantiated++
		}
	}
	if rec.State != Instantiated || rec.Revision != 1 || instantiated != 1 {
		t.Errorf("got state %s revision %d with %d Instantiated actions, want Instantiated revision 1 with 1", rec.State, rec.Revision, instantiated)
	}
}

func TestDeletedDIG(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tests := []struct {
		name   string
		before []step
		call   step
		// deleteDuringPlan deletes the DIG while the planner runs (the race the
		// transaction's existence check closes) instead of before the call.
		deleteDuringPlan bool
	}{
		{name: "approve a deleted DIG", call: approve},
		{name: "instantiate a deleted DIG", before: []step{approve}, call: instantiate},
		{name: "terminate a deleted DIG", before: []step{approve, instantiate}, call: terminate},
		{name: "DIG deleted while it is planned", before: []step{approve}, call: instantiate, deleteDuringPlan: true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dig := f.dig(t, "gone"+string(rune('a'+i)))
			for _, s := range tc.before {
				must(t, string(s), f.do(ctx, s, dig))
			}
			del := func(ctx context.Context, k store.Key) {
				if err := f.st.Delete(ctx, k, 0); err != nil {
					t.Errorf("delete DIG: %v", err)
				}
			}
			if tc.deleteDuringPlan {
				f.planner.during = del
				defer func() { f.planner.during = nil }()
			} else {
				del(ctx, dig)
			}
			before, beforeRev, _ := f.m.Get(ctx, dig)
			err := f.do(ctx, tc.call, dig)
			if errs.KindOf(err) != errs.NotFound || !strings.Contains(err.Error(), "does not exist") {
				t.Fatalf("%s: got %v (kind %q), want not found", tc.call, err, errs.KindOf(err))
			}
			after, afterRev, _ := f.m.Get(ctx, dig)
			if afterRev != beforeRev || after.State != before.State {
				t.Errorf("state of a deleted DIG changed: %s (rev %d) → %s (rev %d)", before.State, beforeRev, after.State, afterRev)
			}
		})
	}

	t.Run("terminated on a deleted DIG is a no-op", func(t *testing.T) {
		dig := f.dig(t, "gone-terminating")
		for _, s := range []step{approve, instantiate, terminate} {
			must(t, string(s), f.do(ctx, s, dig))
		}
		must(t, "delete DIG", f.st.Delete(ctx, dig, 0))
		if err := f.m.Terminated(ctx, dig); err != nil {
			t.Fatalf("Terminated: got %v, want nil", err)
		}
		if got := f.state(t, dig); got != Terminating {
			t.Errorf("state: got %s, want it left Terminating", got)
		}
	})
}

func TestCanDelete(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	tests := []struct {
		state   State
		steps   []step
		refused bool
	}{
		{Created, nil, false},
		{Approved, []step{approve}, false},
		{Instantiated, []step{approve, instantiate}, true},
		{Terminating, []step{approve, instantiate, terminate}, true},
		{Terminated, []step{approve, instantiate, terminate, terminated}, false},
	}
	for _, tc := range tests {
		t.Run(string(tc.state), func(t *testing.T) {
			dig := f.dig(t, "del-"+strings.ToLower(string(tc.state)))
			for _, s := range tc.steps {
				must(t, string(s), f.do(ctx, s, dig))
			}
			if got := f.state(t, dig); got != tc.state {
				t.Fatalf("setup: state %s, want %s", got, tc.state)
			}
			err := f.m.CanDelete(ctx, dig)
			if tc.refused {
				if errs.KindOf(err) != errs.Conflict || !strings.Contains(err.Error(), "terminate it before deleting it") {
					t.Fatalf("CanDelete: got %v, want a conflict asking to terminate first", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CanDelete: got %v, want nil", err)
			}
		})
	}
}

func TestListWatchForget(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b, never := f.dig(t, "a"), f.dig(t, "b"), f.dig(t, "never")
	_ = never
	must(t, "approve a", f.do(ctx, approve, a))
	must(t, "approve b", f.do(ctx, approve, b))
	must(t, "instantiate b", f.do(ctx, instantiate, b))

	entries, rev, err := f.m.List(ctx)
	must(t, "list", err)
	got := map[string]State{}
	for _, e := range entries {
		got[e.DIG] = e.Record.State
	}
	want := map[string]State{a.Path(): Approved, b.Path(): Instantiated}
	if len(got) != len(want) || got[a.Path()] != Approved || got[b.Path()] != Instantiated {
		t.Fatalf("List: got %v, want %v (a DIG never approved has no entry)", got, want)
	}

	events := make(chan Entry, 16)
	wctx, wcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- f.m.Watch(wctx, rev, func(e Entry) { events <- e }) }()

	must(t, "instantiate a", f.do(ctx, instantiate, a))
	must(t, "terminate b", f.do(ctx, terminate, b))
	must(t, "forget never-approved", f.m.Forget(ctx, never)) // no key: no event
	must(t, "forget a", f.m.Forget(ctx, a))

	wantEvents := []struct {
		dig     string
		state   State
		deleted bool
	}{
		{a.Path(), Instantiated, false},
		{b.Path(), Terminating, false},
		{a.Path(), "", true},
	}
	for i, w := range wantEvents {
		select {
		case e := <-events:
			if e.DIG != w.dig || e.Record.State != w.state || e.Deleted != w.deleted {
				t.Errorf("event %d: got %s %q deleted=%v, want %s %q deleted=%v", i, e.DIG, e.Record.State, e.Deleted, w.dig, w.state, w.deleted)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d: none within 10s, want %s %s", i, w.dig, w.state)
		}
	}
	wcancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Watch after cancel: got %v, want context.Canceled", err)
	}
	if got := f.state(t, a); got != Created {
		t.Errorf("state of a forgotten DIG: got %s, want Created", got)
	}
	entries, _, err = f.m.List(ctx)
	must(t, "list", err)
	if len(entries) != 1 || entries[0].DIG != b.Path() {
		t.Errorf("List after forget: got %+v, want only %s", entries, b.Path())
	}
}
