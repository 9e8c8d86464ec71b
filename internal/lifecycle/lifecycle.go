// Package lifecycle is the state machine of deployment intent groups (DIGs):
// Created → Approved → Instantiated → Terminating → Terminated, and again.
//
// A DIG's state lives in one etcd key beside the DIG (not inside it, so that
// editing the DIG and driving its lifecycle never conflict). Every transition is
// one transaction that compares the state key's revision, so of two concurrent
// calls exactly one wins and the other gets a conflict (409). The history of
// transitions is kept as EMCO's stateInfo.
package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/store"
)

// State is a DIG's lifecycle state.
type State string

// The states. A DIG without a state record is Created.
const (
	Created      State = "Created"
	Approved     State = "Approved"
	Instantiated State = "Instantiated"
	Terminating  State = "Terminating"
	Terminated   State = "Terminated"
	// Stopped: the resource sync leaves the DIG's clusters alone (no applies, no
	// deletes, no retries) until it is terminated (or updated).
	Stopped State = "Stopped"
)

// maxHistory bounds the plan revisions kept for rollback.
const maxHistory = 20

// PlanRevision is one plan the DIG was deployed with.
type PlanRevision struct {
	Revision int64     `json:"revision"`
	Plan     string    `json:"plan"`
	Time     time.Time `json:"time"`
}

// Action is one entry of the DIG's history (EMCO's stateInfo.actions).
type Action struct {
	State    State     `json:"state"`
	Instance string    `json:"instance,omitempty"`
	Time     time.Time `json:"time"`
	Revision int64     `json:"revision,omitempty"`
}

// Record is a DIG's lifecycle state.
type Record struct {
	State State `json:"state"`
	// Plan is the blob digest of the plan the DIG is deployed with (or was, while
	// Terminating: what to delete).
	Plan string `json:"plan,omitempty"`
	// Revision counts the plans made for the DIG.
	Revision int64    `json:"revision"`
	Actions  []Action `json:"actions"`
	// History holds the latest plan revisions, oldest first, for rollback.
	History []PlanRevision `json:"history,omitempty"`
	// StoppedFrom is the state a Stopped DIG was in.
	StoppedFrom State `json:"stoppedFrom,omitempty"`
}

func (r *Record) addPlan(digest string, at time.Time) {
	r.Plan = digest
	r.History = append(append([]PlanRevision(nil), r.History...), PlanRevision{Revision: r.Revision, Plan: digest, Time: at})
	if len(r.History) > maxHistory {
		r.History = r.History[len(r.History)-maxHistory:]
	}
}

// Planner makes the plan of a DIG durable and returns its digest.
type Planner interface {
	Plan(ctx context.Context, dig store.Key, revision int64) (digest string, err error)
}

// Machine drives DIG lifecycles.
type Machine struct {
	cli     *clientv3.Client
	store   *store.Store
	root    string
	planner Planner
	now     func() time.Time
}

// New returns a machine keeping states under root (the hub's etcd prefix). The
// planner is used by Instantiate.
func New(cli *clientv3.Client, st *store.Store, root string, planner Planner) *Machine {
	return &Machine{cli: cli, store: st, root: strings.TrimSuffix(root, "/") + "/lifecycle/", planner: planner, now: func() time.Time { return time.Now().UTC() }}
}

func (m *Machine) key(dig store.Key) string { return m.root + dig.Path() }

// Get returns the DIG's state record and its revision (0 when the DIG was never
// approved: then the record says Created).
func (m *Machine) Get(ctx context.Context, dig store.Key) (Record, int64, error) {
	resp, err := m.cli.Get(ctx, m.key(dig))
	if err != nil {
		return Record{}, 0, errs.Wrap(errs.Unavailable, err, "read the state of %s", dig)
	}
	if len(resp.Kvs) == 0 {
		return Record{State: Created}, 0, nil
	}
	var rec Record
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return Record{}, 0, fmt.Errorf("decode the state of %s: %w", dig, err)
	}
	return rec, resp.Kvs[0].ModRevision, nil
}

// transition writes next if the state is still at rev and the DIG still exists.
func (m *Machine) transition(ctx context.Context, dig store.Key, rev int64, next Record) (int64, error) {
	data, err := json.Marshal(next)
	if err != nil {
		return 0, fmt.Errorf("encode state: %w", err)
	}
	cmp := clientv3.Compare(clientv3.ModRevision(m.key(dig)), "=", rev)
	if rev == 0 {
		cmp = clientv3.Compare(clientv3.CreateRevision(m.key(dig)), "=", 0)
	}
	resp, err := m.cli.Txn(ctx).
		If(cmp, clientv3.Compare(clientv3.CreateRevision(m.store.EtcdKey(dig)), ">", 0)).
		Then(clientv3.OpPut(m.key(dig), string(data))).
		Commit()
	if err != nil {
		return 0, errs.Wrap(errs.Unavailable, err, "record the state of %s", dig)
	}
	if !resp.Succeeded {
		if _, err := m.store.Get(ctx, dig, nil); err != nil {
			return 0, err
		}
		cur, _, _ := m.Get(ctx, dig)
		return 0, errs.New(errs.Conflict, "another lifecycle call on %s won; it is now %s", dig, cur.State)
	}
	return resp.Header.Revision, nil
}

// current reads the state of a DIG that must exist.
func (m *Machine) current(ctx context.Context, dig store.Key) (Record, int64, error) {
	if _, err := m.store.Get(ctx, dig, nil); err != nil {
		return Record{}, 0, err
	}
	return m.Get(ctx, dig)
}

// deploy records digest as the DIG's new plan revision, Instantiated; note
// says how it came (a rollback).
func (m *Machine) deploy(ctx context.Context, dig store.Key, rev int64, rec Record, digest, note string) (Record, error) {
	rec.Revision++
	next := m.next(rec, Instantiated)
	next.StoppedFrom = ""
	next.addPlan(digest, m.now())
	next.Actions[len(next.Actions)-1].Instance = note
	if _, err := m.transition(ctx, dig, rev, next); err != nil {
		return Record{}, err
	}
	return next, nil
}

func (m *Machine) next(rec Record, s State) Record {
	out := rec
	out.State = s
	out.Actions = append(append([]Action(nil), rec.Actions...), Action{State: s, Time: m.now(), Revision: rec.Revision})
	if len(out.Actions) > 200 {
		out.Actions = out.Actions[len(out.Actions)-200:]
	}
	return out
}

// Approve moves a Created (or Terminated) DIG to Approved.
func (m *Machine) Approve(ctx context.Context, dig store.Key) (Record, error) {
	rec, rev, err := m.current(ctx, dig)
	if err != nil {
		return Record{}, err
	}
	switch rec.State {
	case Created, Terminated:
	case Approved:
		return Record{}, errs.New(errs.Conflict, "%s is already approved; instantiate it", dig)
	default:
		return Record{}, errs.New(errs.Conflict, "%s is %s; only a created or terminated one can be approved", dig, rec.State)
	}
	if len(rec.Actions) == 0 {
		rec.Actions = []Action{{State: Created, Time: m.now()}}
	}
	next := m.next(rec, Approved)
	_, err = m.transition(ctx, dig, rev, next)
	return next, err
}

// Instantiate plans an Approved (or Terminated) DIG and moves it to Instantiated.
// It returns once the plan is durable; the edges apply it afterwards. A plan that
// cannot be made (a chart that fails to render, a placement that matches nothing)
// fails the call and changes nothing.
func (m *Machine) Instantiate(ctx context.Context, dig store.Key) (Record, error) {
	rec, rev, err := m.current(ctx, dig)
	if err != nil {
		return Record{}, err
	}
	switch rec.State {
	case Approved, Terminated:
	case Created:
		return Record{}, errs.New(errs.Conflict, "%s is not approved yet; approve it first", dig)
	case Instantiated:
		return Record{}, errs.New(errs.Conflict, "%s is already instantiated; terminate it first, or update it", dig)
	default:
		return Record{}, errs.New(errs.Conflict, "%s is %s; wait until it is terminated", dig, rec.State)
	}
	digest, err := m.planner.Plan(ctx, dig, rec.Revision+1)
	if err != nil {
		return Record{}, err
	}
	return m.deploy(ctx, dig, rev, rec, digest, "")
}

// Update plans a changed DIG (its version, override values, placement) again
// and deploys the new plan in place of the old one: changed resources are
// applied, removed ones (and those of removed clusters) deleted, unchanged ones
// left alone. It works on an Instantiated or Stopped DIG.
func (m *Machine) Update(ctx context.Context, dig store.Key) (Record, error) {
	rec, rev, err := m.current(ctx, dig)
	if err != nil {
		return Record{}, err
	}
	if rec.State != Instantiated && rec.State != Stopped {
		return Record{}, errs.New(errs.Conflict, "%s is %s; only an instantiated (or stopped) one can be updated", dig, rec.State)
	}
	digest, err := m.planner.Plan(ctx, dig, rec.Revision+1)
	if err != nil {
		return Record{}, err
	}
	return m.deploy(ctx, dig, rev, rec, digest, "")
}

// Rollback deploys the plan of an earlier revision again, as a new revision.
func (m *Machine) Rollback(ctx context.Context, dig store.Key, revision int64) (Record, error) {
	rec, rev, err := m.current(ctx, dig)
	if err != nil {
		return Record{}, err
	}
	if rec.State != Instantiated && rec.State != Stopped {
		return Record{}, errs.New(errs.Conflict, "%s is %s; only an instantiated (or stopped) one can be rolled back", dig, rec.State)
	}
	var target string
	var known []string
	for _, h := range rec.History {
		known = append(known, fmt.Sprint(h.Revision))
		if h.Revision == revision {
			target = h.Plan
		}
	}
	if target == "" {
		return Record{}, errs.New(errs.Invalid, "%s has no revision %d to roll back to; it has revisions %s", dig, revision, strings.Join(known, ", "))
	}
	return m.deploy(ctx, dig, rev, rec, target, fmt.Sprintf("rollback to revision %d", revision))
}

// Stop cancels the work still waiting for an Instantiated or Terminating DIG:
// the resource sync leaves its clusters as they are. A stopped DIG can be
// terminated (or updated) afterwards.
func (m *Machine) Stop(ctx context.Context, dig store.Key) (Record, error) {
	rec, rev, err := m.current(ctx, dig)
	if err != nil {
		return Record{}, err
	}
	if rec.State != Instantiated && rec.State != Terminating {
		return Record{}, errs.New(errs.Conflict, "%s is %s; only an instantiated or terminating one can be stopped", dig, rec.State)
	}
	next := m.next(rec, Stopped)
	next.StoppedFrom = rec.State
	_, err = m.transition(ctx, dig, rev, next)
	return next, err
}

// Terminate moves an Instantiated DIG to Terminating; the resource sync deletes
// what the plan applied and then calls Terminated.
func (m *Machine) Terminate(ctx context.Context, dig store.Key) (Record, error) {
	rec, rev, err := m.current(ctx, dig)
	if err != nil {
		return Record{}, err
	}
	switch rec.State {
	case Instantiated, Stopped:
	case Terminating:
		return Record{}, errs.New(errs.Conflict, "%s is already terminating", dig)
	default:
		return Record{}, errs.New(errs.Conflict, "%s is %s; only an instantiated one can be terminated", dig, rec.State)
	}
	next := m.next(rec, Terminating)
	next.StoppedFrom = ""
	_, err = m.transition(ctx, dig, rev, next)
	return next, err
}

// Terminated records that nothing of the DIG's plan is left on any cluster. It is
// idempotent: a DIG that is not Terminating is left as it is.
func (m *Machine) Terminated(ctx context.Context, dig store.Key) error {
	rec, rev, err := m.Get(ctx, dig)
	if err != nil || rec.State != Terminating {
		return err
	}
	_, err = m.transition(ctx, dig, rev, m.next(rec, Terminated))
	if errs.KindOf(err) == errs.Conflict || errs.KindOf(err) == errs.NotFound {
		return nil
	}
	return err
}

// CanDelete says whether the DIG can be deleted: never while it is deployed.
func (m *Machine) CanDelete(ctx context.Context, dig store.Key) error {
	rec, _, err := m.Get(ctx, dig)
	if err != nil {
		return err
	}
	if rec.State == Instantiated || rec.State == Terminating || rec.State == Stopped {
		return errs.New(errs.Conflict, "%s is %s; terminate it before deleting it", dig, rec.State)
	}
	return nil
}

// DeleteGuard checks that the DIG can be deleted (see CanDelete) and returns
// the guard that makes the store's delete fail if its state changes meanwhile.
func (m *Machine) DeleteGuard(ctx context.Context, dig store.Key) (store.Guard, error) {
	rec, rev, err := m.Get(ctx, dig)
	if err != nil {
		return store.Guard{}, err
	}
	if rec.State == Instantiated || rec.State == Terminating || rec.State == Stopped {
		return store.Guard{}, errs.New(errs.Conflict, "%s is %s; terminate it before deleting it", dig, rec.State)
	}
	return store.Guard{Key: m.key(dig), ModRevision: rev, Why: "its lifecycle state changed during the delete"}, nil
}

// Forget removes the state of a deleted DIG.
func (m *Machine) Forget(ctx context.Context, dig store.Key) error {
	if _, err := m.cli.Delete(ctx, m.key(dig)); err != nil {
		return errs.Wrap(errs.Unavailable, err, "forget the state of %s", dig)
	}
	return nil
}

// Entry is one DIG's state, as List and Watch report it.
type Entry struct {
	DIG     string // the DIG's key path
	Record  Record
	Deleted bool
}

// List returns every DIG's state and the revision to watch from.
func (m *Machine) List(ctx context.Context) ([]Entry, int64, error) {
	resp, err := m.cli.Get(ctx, m.root, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, errs.Wrap(errs.Unavailable, err, "list DIG states")
	}
	out := make([]Entry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var rec Record
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			continue
		}
		out = append(out, Entry{DIG: strings.TrimPrefix(string(kv.Key), m.root), Record: rec})
	}
	return out, resp.Header.Revision, nil
}

// Watch calls fn for every state change after rev until ctx ends or the watch fails.
func (m *Machine) Watch(ctx context.Context, rev int64, fn func(Entry)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range m.cli.Watch(wctx, m.root, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch DIG states: %w", err)
		}
		for _, ev := range resp.Events {
			e := Entry{DIG: strings.TrimPrefix(string(ev.Kv.Key), m.root)}
			if ev.Type == clientv3.EventTypeDelete {
				e.Deleted = true
			} else if err := json.Unmarshal(ev.Kv.Value, &e.Record); err != nil {
				continue
			}
			fn(e)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("watch DIG states: closed")
}
