package bpa

import (
	"context"
	"errors"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/atoll-edge/atoll/internal/bpa/installer"
)

// stalledError is a terminal error: the spec (or what it names) is wrong, and
// retrying will not help until something changes. Reconcile sets the Failed
// condition with its reason and message and does not requeue.
type stalledError struct{ reason, msg string }

func (e *stalledError) Error() string { return e.reason + ": " + e.msg }

func stalled(reason, format string, args ...any) error {
	return &stalledError{reason: reason, msg: fmt.Sprintf(format, args...)}
}

// ensureOwned creates obj or updates the object of that name, with mutate applied
// and owner as its controller. An object of that name that owner does not control
// is not touched: that is a terminal error (two clusters of the same name, or a
// user's object in the way).
func ensureOwned(ctx context.Context, c client.Client, scheme *runtime.Scheme, owner client.Object, obj client.Object, mutate func()) error {
	kind := fmt.Sprintf("%T", obj)
	kind = kind[strings.LastIndex(kind, ".")+1:]
	_, err := controllerutil.CreateOrUpdate(ctx, c, obj, func() error {
		if created := obj.GetCreationTimestamp(); !created.IsZero() && !metav1.IsControlledBy(obj, owner) {
			return stalled("NameTaken", "%s %s/%s exists and does not belong to %s; rename the cluster or remove that object",
				kind, obj.GetNamespace(), obj.GetName(), owner.GetName())
		}
		mutate()
		labels := obj.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[installer.LabelOwnerUID] = string(owner.GetUID())
		obj.SetLabels(labels)
		return controllerutil.SetControllerReference(owner, obj, scheme)
	})
	var st *stalledError
	if err != nil && !errors.As(err, &st) {
		return fmt.Errorf("write %s %s/%s: %w", kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return err
}

// ownedJobs lists the Jobs that owner controls.
func ownedJobs(ctx context.Context, c client.Reader, owner client.Object) ([]batchv1.Job, error) {
	var list batchv1.JobList
	if err := c.List(ctx, &list, client.InNamespace(owner.GetNamespace()),
		client.MatchingLabels{installer.LabelOwnerUID: string(owner.GetUID())}); err != nil {
		return nil, fmt.Errorf("list the Jobs of %s: %w", owner.GetName(), err)
	}
	var out []batchv1.Job
	for _, j := range list.Items {
		if metav1.IsControlledBy(&j, owner) {
			out = append(out, j)
		}
	}
	return out, nil
}

// jobState is where a Job is.
type jobState int

const (
	jobActive jobState = iota
	jobComplete
	jobFailed
)

// stateOf reads a Job's conditions; for a failed Job, msg is its reason and message.
func stateOf(j *batchv1.Job) (state jobState, msg string) {
	for _, c := range j.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return jobComplete, ""
		case batchv1.JobFailed:
			return jobFailed, strings.TrimSuffix(c.Reason+": "+c.Message, ": ")
		}
	}
	return jobActive, ""
}

func findJob(jobs []batchv1.Job, name string) *batchv1.Job {
	for i := range jobs {
		if jobs[i].Name == name {
			return &jobs[i]
		}
	}
	return nil
}

func activeJob(jobs []batchv1.Job) *batchv1.Job {
	for i := range jobs {
		if s, _ := stateOf(&jobs[i]); s == jobActive && jobs[i].DeletionTimestamp.IsZero() {
			return &jobs[i]
		}
	}
	return nil
}

// createJob creates the Job owned by owner, after deleting owner's finished Jobs of
// the same operation (the new one supersedes them).
func createJob(ctx context.Context, c client.Client, scheme *runtime.Scheme, owner client.Object, jobs []batchv1.Job, job *batchv1.Job) error {
	for i := range jobs {
		old := &jobs[i]
		if old.Labels[installer.LabelOperation] != job.Labels[installer.LabelOperation] || old.Name == job.Name {
			continue
		}
		if s, _ := stateOf(old); s != jobActive {
			if err := c.Delete(ctx, old, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("delete the superseded Job %s: %w", old.Name, err)
			}
		}
	}
	if job.Labels == nil {
		job.Labels = map[string]string{}
	}
	job.Labels[installer.LabelOwnerUID] = string(owner.GetUID())
	job.Spec.Template.Labels[installer.LabelOwnerUID] = string(owner.GetUID())
	if err := controllerutil.SetControllerReference(owner, job, scheme); err != nil {
		return err
	}
	if err := c.Create(ctx, job); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Job %s: %w", job.Name, err)
	}
	return nil
}

// deleteOwned deletes the objects of owner's namespace labelled with its UID, of
// each of the given kinds (garbage collection would too, where it runs; the
// finalizer does not wait for it).
func deleteOwned(ctx context.Context, c client.Client, owner client.Object, kinds ...client.Object) error {
	for _, kind := range kinds {
		opts := []client.DeleteAllOfOption{client.InNamespace(owner.GetNamespace()),
			client.MatchingLabels{installer.LabelOwnerUID: string(owner.GetUID())},
			client.PropagationPolicy(metav1.DeletePropagationBackground)}
		if err := c.DeleteAllOf(ctx, kind, opts...); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete the %T objects of %s: %w", kind, owner.GetName(), err)
		}
	}
	return nil
}
