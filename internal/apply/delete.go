package apply

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/atoll-edge/atoll/internal/errs"
)

// Delete deletes the object ref names with Options.Propagation and returns
// without waiting for it to be gone (see WaitGone). An object that does not
// exist, or whose kind the cluster no longer serves, counts as deleted. A
// namespaced ref without a namespace means Options.DefaultNamespace, as in Apply.
func (a *Applier) Delete(ctx context.Context, ref ObjectRef) error {
	if err := ref.Validate(); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	mapping, err := a.mapping(ctx, ref.GroupVersionKind())
	if meta.IsNoMatchError(err) {
		return nil // no such kind, so no such object
	}
	if err != nil {
		return classify("delete", ref, err)
	}
	ref = a.scoped(mapping, ref)
	if isNamespace(ref) {
		a.forgetNamespace(ref.Name)
	}
	rctx, cancel := context.WithTimeout(ctx, a.opts.RequestTimeout)
	defer cancel()
	err = a.resource(mapping, ref.Namespace).Delete(rctx, ref.Name, metav1.DeleteOptions{PropagationPolicy: &a.opts.Propagation})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify("delete", ref, err)
	}
	return nil
}

// WaitGone returns once the object ref names does not exist any more, or its
// kind is no longer served, polling with backoff. After Options.DeleteTimeout
// it returns an errs.Conflict error saying what holds the object (its
// finalizers, or that it is not being deleted).
func (a *Applier) WaitGone(ctx context.Context, ref ObjectRef) error {
	if err := ref.Validate(); err != nil {
		return fmt.Errorf("wait for deletion: %w", err)
	}
	mapping, err := a.mapping(ctx, ref.GroupVersionKind())
	if meta.IsNoMatchError(err) {
		return nil
	}
	if err != nil {
		return classify("wait for deletion of", ref, err)
	}
	ref = a.scoped(mapping, ref)
	ri := a.resource(mapping, ref.Namespace)

	wctx, cancel := context.WithTimeout(ctx, a.opts.DeleteTimeout)
	defer cancel()
	state := "still present"
	for delay := firstPoll; ; delay = min(2*delay, maxPoll) {
		obj, err := a.get(wctx, ri, ref.Name)
		switch {
		case apierrors.IsNotFound(err):
			return nil
		case err == nil:
			if ts := obj.GetDeletionTimestamp(); ts == nil {
				state = "still present and not being deleted (was it deleted?)"
			} else {
				state = fmt.Sprintf("still present, being deleted since %s, finalizers %q",
					ts.UTC().Format(time.RFC3339), obj.GetFinalizers())
			}
		case wctx.Err() == nil:
			return classify("wait for deletion of", ref, err)
		}

		timer := time.NewTimer(delay)
		select {
		case <-wctx.Done():
			timer.Stop()
			if err := ctx.Err(); err != nil {
				return classify("wait for deletion of", ref, err)
			}
			return errs.New(errs.Conflict, "wait for deletion of %s: %s after %s", ref, state, a.opts.DeleteTimeout)
		case <-timer.C:
		}
	}
}

// scoped returns ref with its namespace defaulted (namespaced kinds) or dropped
// (cluster-scoped kinds), as Apply does for objects.
func (a *Applier) scoped(m *meta.RESTMapping, ref ObjectRef) ObjectRef {
	switch {
	case m.Scope.Name() != meta.RESTScopeNameNamespace:
		ref.Namespace = ""
	case ref.Namespace == "":
		ref.Namespace = a.opts.DefaultNamespace
	}
	return ref
}

func isNamespace(ref ObjectRef) bool {
	return ref.GroupVersionKind().GroupKind() == schema.GroupKind{Kind: "Namespace"}
}

// Get reads the object ref names; an object (or kind) that does not exist gives
// an errs.NotFound error.
func (a *Applier) Get(ctx context.Context, ref ObjectRef) (*unstructured.Unstructured, error) {
	if err := ref.Validate(); err != nil {
		return nil, fmt.Errorf("get: %w", err)
	}
	mapping, err := a.mapping(ctx, ref.GroupVersionKind())
	if meta.IsNoMatchError(err) {
		return nil, errs.New(errs.NotFound, "get %s: the cluster does not serve its kind", ref)
	}
	if err != nil {
		return nil, classify("get", ref, err)
	}
	ref = a.scoped(mapping, ref)
	obj, err := a.get(ctx, a.resource(mapping, ref.Namespace), ref.Name)
	if err != nil {
		return nil, classify("get", ref, err)
	}
	return obj, nil
}
