package bpa

import (
	"context"
	"errors"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
	"github.com/atoll-edge/atoll/internal/bpa/installer"
)

// SoftwareReconciler keeps a Software's packages on the hosts of its cluster: one
// package-update Job per role, made again whenever the packages or the role's
// joined hosts change (so a new node gets them too). Its fields must be set.
type SoftwareReconciler struct {
	// Client reads from the cache and writes; Reader reads from the API server.
	Client  client.Client
	Reader  client.Reader
	Scheme  *runtime.Scheme
	Options Options
}

// Reconcile is one pass.
func (r *SoftwareReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	sw := &bpav1.Software{}
	if err := r.Reader.Get(ctx, req.NamespacedName, sw); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !sw.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil // its Jobs go with it (owner references)
	}
	before := sw.DeepCopy()
	err := r.reconcile(ctx, sw)
	if err == nil {
		sw.Status.ObservedGeneration = sw.Generation
	}
	if !equality.Semantic.DeepEqual(before.Status, sw.Status) {
		if perr := r.Client.Status().Patch(ctx, sw, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); perr != nil {
			err = errors.Join(err, fmt.Errorf("update the status of %s: %w", sw.Name, perr))
		}
	}
	return ctrl.Result{}, err
}

func setSWCondition(sw *bpav1.Software, typ string, status bool, reason, msg string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&sw.Status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: sw.Generation})
}

func (r *SoftwareReconciler) reconcile(ctx context.Context, sw *bpav1.Software) error {
	p, err := r.provisioning(ctx, sw)
	if err != nil {
		return err
	}
	if p == nil || p.Status.KubeconfigSecretRef == nil {
		msg := fmt.Sprintf("no Provisioning of this namespace has installed cluster %q yet", sw.Spec.ClusterName)
		setSWCondition(sw, bpav1.ConditionReady, false, "ClusterNotReady", msg)
		setSWCondition(sw, bpav1.ConditionUpdating, false, "ClusterNotReady", msg)
		sw.Status.Hosts = nil
		return nil
	}
	jobs, err := ownedJobs(ctx, r.Client, sw)
	if err != nil {
		return err
	}
	var hosts []bpav1.HostSoftware
	var running, failed []string
	for _, role := range []struct {
		role bpav1.Role
		op   installer.Operation
		pkgs []bpav1.Package
	}{
		{bpav1.RoleMaster, installer.UpdateMasters, sw.Spec.MasterSoftware},
		{bpav1.RoleWorker, installer.UpdateWorkers, sw.Spec.WorkerSoftware},
	} {
		var names, ids []string
		for _, h := range p.Status.Hosts {
			if h.Role == role.role && h.State == bpav1.HostJoined {
				names = append(names, h.HostName)
				ids = append(ids, h.Namespace+"/"+h.Name)
			}
		}
		if len(role.pkgs) == 0 || len(names) == 0 {
			continue
		}
		args, err := installer.PackageArgs(names, role.pkgs)
		if err != nil {
			return err
		}
		name := installer.JobName(p.Status.ClusterName, role.op, strings.Join(args, " "), p.Spec.InstallerImage, p.Spec.SSHKeySecretName)
		state := bpav1.SoftwareUpdating
		job := findJob(jobs, name)
		if job == nil {
			spec := installer.Job{Name: name, Namespace: sw.Namespace, Cluster: p.Status.ClusterName, Operation: role.op,
				Image: p.Spec.InstallerImage, SSHKeySecret: p.Spec.SSHKeySecretName, Args: args, Hosts: ids,
				BackoffLimit: r.Options.BackoffLimit}
			if err := createJob(ctx, r.Client, r.Scheme, sw, jobs, spec.Build()); err != nil {
				return err
			}
			ctrl.LoggerFrom(ctx).Info("package-update Job started", "job", name, "role", role.role, "hosts", names)
			running = append(running, name)
		} else {
			switch s, msg := stateOf(job); s {
			case jobActive:
				running = append(running, name)
			case jobComplete:
				state = bpav1.SoftwareUpdated
			case jobFailed:
				state = bpav1.SoftwareFailed
				failed = append(failed, fmt.Sprintf("Job %s (%ss) failed: %s", name, role.role, msg))
			}
		}
		for _, n := range names {
			hosts = append(hosts, bpav1.HostSoftware{HostName: n, Role: role.role, State: state, Packages: role.pkgs, Job: name})
		}
	}
	sw.Status.Hosts = hosts
	if len(running) > 0 {
		setSWCondition(sw, bpav1.ConditionUpdating, true, ReasonJobRunning, "Jobs running: "+strings.Join(running, ", "))
	} else {
		setSWCondition(sw, bpav1.ConditionUpdating, false, ReasonIdle, "no Job runs")
	}
	switch {
	case len(failed) > 0:
		msg := strings.Join(failed, "; ") + "; change the packages to try again"
		setSWCondition(sw, bpav1.ConditionFailed, true, ReasonJobFailed, msg)
		setSWCondition(sw, bpav1.ConditionReady, false, ReasonJobFailed, msg)
	case len(running) > 0:
		setSWCondition(sw, bpav1.ConditionFailed, false, ReasonNoFailure, "")
		setSWCondition(sw, bpav1.ConditionReady, false, ReasonJobRunning, "waiting for "+strings.Join(running, ", "))
	default:
		setSWCondition(sw, bpav1.ConditionFailed, false, ReasonNoFailure, "")
		setSWCondition(sw, bpav1.ConditionReady, true, "Updated", fmt.Sprintf("%d hosts have their packages", len(hosts)))
	}
	return nil
}

// provisioning finds the Provisioning of sw's namespace that makes its cluster.
func (r *SoftwareReconciler) provisioning(ctx context.Context, sw *bpav1.Software) (*bpav1.Provisioning, error) {
	var list bpav1.ProvisioningList
	if err := r.Client.List(ctx, &list, client.InNamespace(sw.Namespace)); err != nil {
		return nil, fmt.Errorf("list Provisionings: %w", err)
	}
	var found *bpav1.Provisioning
	for i := range list.Items {
		p := &list.Items[i]
		if p.Cluster() == sw.Spec.ClusterName && p.DeletionTimestamp.IsZero() &&
			(found == nil || p.CreationTimestamp.Before(&found.CreationTimestamp)) {
			found = p
		}
	}
	return found, nil
}

// mapProvisioning sends a Provisioning's change to the Softwares of its cluster.
func (r *SoftwareReconciler) mapProvisioning(ctx context.Context, obj client.Object) []reconcile.Request {
	p, ok := obj.(*bpav1.Provisioning)
	if !ok {
		return nil
	}
	var list bpav1.SoftwareList
	if err := r.Client.List(ctx, &list, client.InNamespace(p.Namespace)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list Softwares for a Provisioning change")
		return nil
	}
	var reqs []reconcile.Request
	for _, sw := range list.Items {
		if sw.Spec.ClusterName == p.Cluster() {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: sw.Namespace, Name: sw.Name}})
		}
	}
	return reqs
}

// SetupWithManager registers the controller: Softwares, their Jobs, and the
// Provisionings whose hosts they serve.
func (r *SoftwareReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.Reader == nil || r.Scheme == nil {
		return errors.New("bpa: SoftwareReconciler needs Client, Reader and Scheme")
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&bpav1.Software{}).
		Owns(&batchv1.Job{}).
		Watches(&bpav1.Provisioning{}, handler.EnqueueRequestsFromMapFunc(r.mapProvisioning)).
		Complete(r)
}
