package bpa

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
	"github.com/atoll-edge/atoll/internal/bpa/baremetal"
	"github.com/atoll-edge/atoll/internal/bpa/hostselect"
	"github.com/atoll-edge/atoll/internal/bpa/installer"
	"github.com/atoll-edge/atoll/internal/bpa/inventory"
)

// Finalizer is set on every Provisioning: deleting one releases its hosts and
// removes what it made before the object goes.
const Finalizer = "bpa.akraino.org/release-hosts"

// The reasons of the conditions.
const (
	ReasonSelected          = "Selected"
	ReasonInsufficientHosts = "InsufficientHosts"
	ReasonWritten           = "Written"
	ReasonNoInventory       = "NoInventory"
	ReasonSSHKeyMissing     = "SSHKeyMissing"
	ReasonJobRunning        = "JobRunning"
	ReasonWaitingKubeconfig = "WaitingForKubeconfig"
	ReasonJobFailed         = "JobFailed"
	ReasonNoKubeconfig      = "NoKubeconfig"
	ReasonInvalidKubeconfig = "InvalidKubeconfig"
	ReasonInvalidSpec       = "InvalidSpec"
	ReasonIdle              = "Idle"
	ReasonClusterReady      = "ClusterReady"
	ReasonNoFailure         = "NoFailure"
)

// ProvisioningReconciler turns a Provisioning into a cluster. Its fields must be set.
type ProvisioningReconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// Reader reads from the API server directly: BareMetalHosts, whose claims must
	// be current, and the kubeconfig Secrets.
	Reader  client.Reader
	Scheme  *runtime.Scheme
	Options Options
}

// member is one host the Provisioning holds, or will hold once claimed.
type member struct {
	bmh    *unstructured.Unstructured
	claim  baremetal.Claim
	state  bpav1.HostState
	wanted bool // chosen by this pass's selection
}

func (m *member) id() string { return m.bmh.GetNamespace() + "/" + m.bmh.GetName() }

// Reconcile is one pass: it derives everything from the objects that exist.
func (r *ProvisioningReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	// Read from the API server: a pass must not start from a copy older than the
	// status the previous pass wrote.
	p := &bpav1.Provisioning{}
	if err := r.Reader.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalize(ctx, p)
	}
	if controllerutil.AddFinalizer(p, Finalizer) {
		// The update is an event of its own: the work happens in the next pass.
		return ctrl.Result{}, r.Client.Update(ctx, p)
	}

	before := p.DeepCopy()
	res, err := r.reconcile(ctx, p)
	var st *stalledError
	if errors.As(err, &st) {
		setCondition(p, bpav1.ConditionFailed, true, st.reason, st.msg)
		setCondition(p, bpav1.ConditionInstalling, false, st.reason, "nothing runs until the spec or the objects it names change")
		setCondition(p, bpav1.ConditionReady, false, st.reason, st.msg)
		ctrl.LoggerFrom(ctx).Info("provisioning stalled", "reason", st.reason, "message", st.msg)
		res, err = ctrl.Result{}, nil
	}
	if err == nil {
		p.Status.ObservedGeneration = p.Generation
	}
	if !equality.Semantic.DeepEqual(before.Status, p.Status) {
		// Optimistic locking: a status computed from an older object is refused
		// (and the pass retried) instead of overwriting newer conditions.
		if perr := r.Client.Status().Patch(ctx, p, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); perr != nil {
			err = errors.Join(err, fmt.Errorf("update the status of %s: %w", p.Name, perr))
		}
	}
	return res, err
}

func setCondition(p *bpav1.Provisioning, typ string, status bool, reason, msg string) {
	s := metav1.ConditionFalse
	if status {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: p.Generation})
}

func (r *ProvisioningReconciler) reconcile(ctx context.Context, p *bpav1.Provisioning) (ctrl.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	cluster := p.Cluster()
	p.Status.ClusterName = cluster
	if err := r.checkCluster(ctx, p, cluster); err != nil {
		return ctrl.Result{}, err
	}

	// The hosts: what this Provisioning holds, and what it should hold.
	bmhs, err := baremetal.List(ctx, r.Reader, r.Options.HostNamespaces)
	if err != nil {
		setCondition(p, bpav1.ConditionHostsSelected, false, "HostsUnreadable", err.Error())
		return ctrl.Result{}, err
	}
	members, sel := r.selectHosts(p, bmhs)
	defer func() { p.Status.Hosts = statusHosts(members) }()

	jobs, err := ownedJobs(ctx, r.Client, p)
	if err != nil {
		return ctrl.Result{}, err
	}
	installed, err := r.installed(ctx, p, cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	if installed {
		p.Status.KubeconfigSecretRef = &bpav1.SecretKeyRef{Name: installer.KubeconfigName(cluster), Key: installer.KubeconfigKey}
	} else {
		p.Status.KubeconfigSecretRef = nil
	}

	// While a Job runs, nothing changes under it: not the hosts, not the inventory.
	if j := activeJob(jobs); j != nil {
		p.Status.Job = j.Name
		setCondition(p, bpav1.ConditionInstalling, true, ReasonJobRunning,
			fmt.Sprintf("Job %s runs %s on %s", j.Name, j.Labels[installer.LabelOperation], hostList(j)))
		setCondition(p, bpav1.ConditionReady, false, ReasonJobRunning, "waiting for Job "+j.Name)
		return ctrl.Result{}, nil
	}

	if len(sel.Missing) > 0 {
		msg := strings.Join(sel.Missing, "; ")
		setCondition(p, bpav1.ConditionHostsSelected, false, ReasonInsufficientHosts, msg)
		setCondition(p, bpav1.ConditionInstalling, false, ReasonInsufficientHosts, "waiting for hosts")
		setCondition(p, bpav1.ConditionReady, false, ReasonInsufficientHosts, msg)
		// Hosts that never joined are not hoarded while the rest is missing.
		for id, m := range members {
			if m.state == bpav1.HostPending && m.claim.Role != "" {
				if err := baremetal.Release(ctx, r.Client, m.bmh); err != nil {
					return ctrl.Result{}, err
				}
				delete(members, id)
			}
		}
		return ctrl.Result{}, nil
	}
	if err := r.claim(ctx, p, members); err != nil {
		return ctrl.Result{}, err
	}
	setCondition(p, bpav1.ConditionHostsSelected, true, ReasonSelected, describeHosts(members))

	// The inventory: the wanted hosts and those on their way out.
	ini, vars, err := r.writeInventory(ctx, p, cluster, members)
	if err != nil {
		return ctrl.Result{}, err
	}
	if ok, msg, err := r.sshKeyReady(ctx, p); err != nil || !ok {
		if ok := err == nil; ok {
			setCondition(p, bpav1.ConditionInstalling, false, ReasonSSHKeyMissing, msg)
			setCondition(p, bpav1.ConditionReady, false, ReasonSSHKeyMissing, msg)
		}
		return ctrl.Result{}, err
	}

	op, args, targets := nextOperation(installed, members)
	if op == "" {
		setCondition(p, bpav1.ConditionInstalling, false, ReasonIdle, "no Job runs")
		setCondition(p, bpav1.ConditionFailed, false, ReasonNoFailure, "")
		setCondition(p, bpav1.ConditionReady, true, ReasonClusterReady,
			fmt.Sprintf("cluster %s: %s; its kubeconfig is in Secret %s", cluster, describeHosts(members), installer.KubeconfigName(cluster)))
		return ctrl.Result{}, nil
	}
	var ids []string
	for _, m := range targets {
		ids = append(ids, m.id())
	}
	name := installer.JobName(cluster, op, ini, vars, p.Spec.InstallerImage, p.Spec.SSHKeySecretName, strings.Join(args, " "), strings.Join(ids, ","))
	p.Status.Job = name
	job := findJob(jobs, name)
	if job == nil {
		if err := r.startJob(ctx, p, cluster, op, name, args, ids, jobs); err != nil {
			return ctrl.Result{}, err
		}
		log.Info("installer Job started", "job", name, "operation", op, "hosts", ids)
		setCondition(p, bpav1.ConditionFailed, false, ReasonNoFailure, "a new attempt runs")
		setCondition(p, bpav1.ConditionInstalling, true, ReasonJobRunning, fmt.Sprintf("Job %s runs %s on %s", name, op, strings.Join(ids, ", ")))
		setCondition(p, bpav1.ConditionReady, false, ReasonJobRunning, "waiting for Job "+name)
		return ctrl.Result{}, nil
	}
	if state, msg := stateOf(job); state == jobFailed {
		msg = fmt.Sprintf("Job %s (%s) failed: %s; change the spec or the hosts to try again", name, op, msg)
		setCondition(p, bpav1.ConditionFailed, true, ReasonJobFailed, msg)
		setCondition(p, bpav1.ConditionInstalling, false, ReasonJobFailed, "no Job runs")
		setCondition(p, bpav1.ConditionReady, false, ReasonJobFailed, msg)
		return ctrl.Result{}, nil
	}
	return r.finishJob(ctx, p, cluster, op, job, members)
}

// checkCluster refuses a missing or invalid cluster name, or one that an older
// Provisioning of the namespace already uses.
func (r *ProvisioningReconciler) checkCluster(ctx context.Context, p *bpav1.Provisioning, cluster string) error {
	if cluster == "" {
		return stalled(ReasonInvalidSpec, "the cluster has no name: set spec.clusterName or the label %q", bpav1.ClusterLabel)
	}
	if msgs := validation.IsDNS1123Label(cluster); len(msgs) > 0 || len(cluster) > 40 {
		return stalled(ReasonInvalidSpec, "cluster name %q must be a DNS-1123 label of at most 40 characters", cluster)
	}
	var list bpav1.ProvisioningList
	if err := r.Client.List(ctx, &list, client.InNamespace(p.Namespace)); err != nil {
		return fmt.Errorf("list Provisionings: %w", err)
	}
	for _, o := range list.Items {
		if o.UID == p.UID || o.Cluster() != cluster || !o.DeletionTimestamp.IsZero() {
			continue
		}
		older := o.CreationTimestamp.Before(&p.CreationTimestamp) ||
			(o.CreationTimestamp.Equal(&p.CreationTimestamp) && o.Name < p.Name)
		if older {
			return stalled("ClusterNameTaken", "Provisioning %s already makes cluster %q in this namespace", o.Name, cluster)
		}
	}
	return nil
}

// selectHosts reads the hosts and chooses: members are the hosts this
// Provisioning holds plus those it should take.
func (r *ProvisioningReconciler) selectHosts(p *bpav1.Provisioning, bmhs []unstructured.Unstructured) (map[string]*member, hostselect.Result) {
	members := map[string]*member{}
	hosts := make([]hostselect.Host, 0, len(bmhs))
	byID := map[string]*unstructured.Unstructured{}
	for i := range bmhs {
		u := &bmhs[i]
		h := baremetal.ToHost(u)
		hosts = append(hosts, h)
		byID[h.ID()] = u
		if c, ok := baremetal.ClaimedBy(u, string(p.UID)); ok {
			members[h.ID()] = &member{bmh: u, claim: c, state: baremetal.State(u)}
		}
	}
	reqs := []hostselect.Requirement{
		hostselect.FromSpec(bpav1.RoleMaster, &p.Spec.Masters),
		hostselect.FromSpec(bpav1.RoleWorker, p.Spec.Workers),
	}
	sel := hostselect.Select(hosts, reqs, hostselect.Options{Owner: string(p.UID), States: r.Options.HostStates})
	for _, c := range sel.Chosen {
		m := members[c.Host.ID()]
		if m == nil {
			// Not claimed yet; the IP and MAC are the selection's.
			m = &member{bmh: byID[c.Host.ID()], claim: baremetal.Claim{HostName: c.HostName, IP: c.IP, MAC: c.MAC, Role: c.Role}, state: bpav1.HostPending}
			members[c.Host.ID()] = m
		} else if c.IP != "" {
			m.claim.IP = c.IP
		}
		m.wanted = true
	}
	return members, sel
}

// claim claims the wanted hosts that are not held yet, all or none: when one
// claim fails (another Provisioning was faster), the claims of this pass are
// undone and the pass is retried, so that no Provisioning sits on part of a set.
// It releases the held hosts that are no longer wanted and never joined.
func (r *ProvisioningReconciler) claim(ctx context.Context, p *bpav1.Provisioning, members map[string]*member) error {
	var ids []string
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var done []*member
	for _, id := range ids {
		m := members[id]
		if !m.wanted || baremetal.State(m.bmh) == bpav1.HostJoined || m.bmh.GetLabels()[baremetal.LabelClaimUID] == string(p.UID) {
			continue
		}
		if err := baremetal.ClaimHost(ctx, r.Client, m.bmh, p, m.claim); err != nil {
			for _, d := range done {
				if rerr := baremetal.Release(ctx, r.Client, d.bmh); rerr != nil {
					err = errors.Join(err, rerr)
				}
			}
			return fmt.Errorf("claim the hosts (retrying): %w", err)
		}
		done = append(done, m)
	}
	for id, m := range members {
		if !m.wanted && m.state == bpav1.HostPending {
			if err := baremetal.Release(ctx, r.Client, m.bmh); err != nil {
				return err
			}
			delete(members, id)
		}
	}
	for _, m := range members {
		if !m.wanted && m.state == bpav1.HostJoined {
			m.state = bpav1.HostRemoving
		}
	}
	return nil
}

func (r *ProvisioningReconciler) writeInventory(ctx context.Context, p *bpav1.Provisioning, cluster string, members map[string]*member) (ini, vars string, err error) {
	var hosts []inventory.Host
	for _, m := range members {
		hosts = append(hosts, inventory.Host{Name: m.claim.HostName, IP: m.claim.IP, Role: m.claim.Role})
	}
	ini, err = inventory.HostsINI(cluster, hosts)
	if err != nil {
		setCondition(p, bpav1.ConditionInventoryReady, false, ReasonNoInventory, err.Error())
		return "", "", stalled(ReasonNoInventory, "%s", err.Error())
	}
	vars, err = installer.Vars(cluster, &p.Spec)
	if err != nil {
		return "", "", err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: installer.InventoryName(cluster), Namespace: p.Namespace}}
	if err := ensureOwned(ctx, r.Client, r.Scheme, p, cm, func() {
		cm.Labels = map[string]string{installer.LabelCluster: cluster}
		cm.Data = map[string]string{installer.InventoryKey: ini, installer.VarsKey: vars}
	}); err != nil {
		return "", "", err
	}
	setCondition(p, bpav1.ConditionInventoryReady, true, ReasonWritten,
		fmt.Sprintf("ConfigMap %s lists %d hosts", cm.Name, len(hosts)))
	return ini, vars, nil
}

func (r *ProvisioningReconciler) sshKeyReady(ctx context.Context, p *bpav1.Provisioning) (bool, string, error) {
	var s corev1.Secret
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.SSHKeySecretName}, &s)
	if apierrors.IsNotFound(err) {
		return false, fmt.Sprintf("Secret %s (spec.sshKeySecretName) does not exist; create it with the hosts' private key under %q", p.Spec.SSHKeySecretName, installer.SSHKeyKey), nil
	}
	if err != nil {
		return false, "", fmt.Errorf("read Secret %s: %w", p.Spec.SSHKeySecretName, err)
	}
	if len(s.Data[installer.SSHKeyKey]) == 0 {
		return false, fmt.Sprintf("Secret %s (spec.sshKeySecretName) has no key %q", p.Spec.SSHKeySecretName, installer.SSHKeyKey), nil
	}
	return true, "", nil
}

// installed reports whether the cluster's kubeconfig Secret exists (read from the
// API server, not the cache: it decides whether to install).
func (r *ProvisioningReconciler) installed(ctx context.Context, p *bpav1.Provisioning, cluster string) (bool, error) {
	var s corev1.Secret
	err := r.Reader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: installer.KubeconfigName(cluster)}, &s)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read Secret %s: %w", installer.KubeconfigName(cluster), err)
	}
	if !metav1.IsControlledBy(&s, p) {
		return false, stalled("NameTaken", "Secret %s exists and does not belong to this Provisioning; rename the cluster or remove that Secret", s.Name)
	}
	return len(s.Data[installer.KubeconfigKey]) > 0, nil
}

// nextOperation decides what to run: install when there is no cluster, then
// removals, then additions. targets are the hosts the Job acts on.
func nextOperation(installed bool, members map[string]*member) (installer.Operation, []string, []*member) {
	sorted := sortedMembers(members)
	names := func(ms []*member) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.claim.HostName)
		}
		return out
	}
	if !installed {
		return installer.Install, installer.InstallArgs(), sorted
	}
	var leaving, joining []*member
	mastersJoining := false
	for _, m := range sorted {
		switch m.state {
		case bpav1.HostRemoving:
			leaving = append(leaving, m)
		case bpav1.HostPending:
			joining = append(joining, m)
			mastersJoining = mastersJoining || m.claim.Role == bpav1.RoleMaster
		}
	}
	if len(leaving) > 0 {
		return installer.Remove, installer.RemoveArgs(names(leaving)), leaving
	}
	if len(joining) > 0 {
		return installer.Scale, installer.ScaleArgs(names(joining), mastersJoining), joining
	}
	return "", nil, nil
}

func (r *ProvisioningReconciler) startJob(ctx context.Context, p *bpav1.Provisioning, cluster string, op installer.Operation, name string, args, ids []string, jobs []batchv1.Job) error {
	spec := installer.Job{Name: name, Namespace: p.Namespace, Cluster: cluster, Operation: op,
		Image: p.Spec.InstallerImage, SSHKeySecret: p.Spec.SSHKeySecretName, Args: args, Hosts: ids,
		Addons: p.Spec.Addons, BackoffLimit: r.Options.BackoffLimit}
	if op == installer.Install {
		if err := r.ensureHandoff(ctx, p, cluster); err != nil {
			return err
		}
		spec.Handoff, spec.ServiceAccount = true, installer.ServiceAccountName(cluster)
	}
	return createJob(ctx, r.Client, r.Scheme, p, jobs, spec.Build())
}

// ensureHandoff creates the empty hand-off Secret and the RBAC that lets the
// install Job write that Secret only.
func (r *ProvisioningReconciler) ensureHandoff(ctx context.Context, p *bpav1.Provisioning, cluster string) error {
	secret, sa, role, binding := installer.HandoffObjects(p.Namespace, cluster, nil)
	objs := []struct {
		obj    client.Object
		mutate func()
	}{
		{&corev1.Secret{ObjectMeta: *secret.ObjectMeta.DeepCopy()}, nil},
		{&corev1.ServiceAccount{ObjectMeta: *sa.ObjectMeta.DeepCopy()}, nil},
		{&rbacv1.Role{ObjectMeta: *role.ObjectMeta.DeepCopy()}, nil},
		{&rbacv1.RoleBinding{ObjectMeta: *binding.ObjectMeta.DeepCopy()}, nil},
	}
	objs[0].mutate = func() {
		s := objs[0].obj.(*corev1.Secret)
		s.Labels, s.Type = secret.Labels, secret.Type
	}
	objs[1].mutate = func() { objs[1].obj.SetLabels(sa.Labels) }
	objs[2].mutate = func() {
		o := objs[2].obj.(*rbacv1.Role)
		o.Labels, o.Rules = role.Labels, role.Rules
	}
	objs[3].mutate = func() {
		o := objs[3].obj.(*rbacv1.RoleBinding)
		o.Labels, o.RoleRef, o.Subjects = binding.Labels, binding.RoleRef, binding.Subjects
	}
	for _, o := range objs {
		if err := ensureOwned(ctx, r.Client, r.Scheme, p, o.obj, o.mutate); err != nil {
			return err
		}
	}
	return nil
}

// finishJob applies what a completed Job did: the kubeconfig hand-off after an
// install, the hosts joined after an install or a scale, released after a removal.
func (r *ProvisioningReconciler) finishJob(ctx context.Context, p *bpav1.Provisioning, cluster string, op installer.Operation, job *batchv1.Job, members map[string]*member) (ctrl.Result, error) {
	targets := map[string]bool{}
	for _, id := range strings.Split(job.Annotations[installer.AnnotationHosts], ",") {
		targets[id] = true
	}
	var kubeconfig []byte
	if op == installer.Install {
		data, wait, err := r.handedBack(ctx, p, cluster, job)
		if err != nil || wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, err
		}
		kubeconfig = data
	}
	// The hosts first: should a later write fail, the next pass finds the same
	// completed Job and finishes; it never takes joined hosts for new ones.
	for id, m := range members {
		if !targets[id] {
			continue
		}
		var err error
		switch op {
		case installer.Install, installer.Scale:
			if err = baremetal.SetState(ctx, r.Client, m.bmh, bpav1.HostJoined); err == nil {
				m.state = bpav1.HostJoined
			}
		case installer.Remove:
			if err = baremetal.Release(ctx, r.Client, m.bmh); err == nil {
				delete(members, id)
			}
		}
		if err != nil {
			return ctrl.Result{}, err
		}
	}
	if kubeconfig != nil {
		if err := r.keepKubeconfig(ctx, p, cluster, kubeconfig); err != nil {
			return ctrl.Result{}, err
		}
	}
	ctrl.LoggerFrom(ctx).Info("installer Job completed", "job", job.Name, "operation", op)
	setCondition(p, bpav1.ConditionInstalling, false, ReasonIdle, fmt.Sprintf("Job %s (%s) completed", job.Name, op))
	// The writes above are events of their own; the next pass goes on from there.
	return ctrl.Result{}, nil
}

// handedBack reads and checks the kubeconfig the install Job wrote into the
// hand-off Secret. wait > 0 asks to look again then (the installer may write the
// Secret just after the Job is seen complete; the Secret's change also wakes the
// controller up).
func (r *ProvisioningReconciler) handedBack(ctx context.Context, p *bpav1.Provisioning, cluster string, job *batchv1.Job) ([]byte, time.Duration, error) {
	data, err := r.handoffData(ctx, p, cluster)
	if err != nil {
		return nil, 0, err
	}
	name := installer.HandoffName(cluster)
	if len(data) == 0 {
		done := job.CreationTimestamp.Time
		if job.Status.CompletionTime != nil {
			done = job.Status.CompletionTime.Time
		}
		if left := time.Until(done.Add(r.Options.HandoffTimeout)); left > 0 {
			setCondition(p, bpav1.ConditionInstalling, true, ReasonWaitingKubeconfig,
				fmt.Sprintf("Job %s completed; waiting for the kubeconfig in Secret %s", job.Name, name))
			return nil, left, nil
		}
		return nil, 0, stalled(ReasonNoKubeconfig, "Job %s completed but did not write the kubeconfig into Secret %s (key %q) within %s",
			job.Name, name, installer.KubeconfigKey, r.Options.HandoffTimeout)
	}
	if err := checkKubeconfig(data); err != nil {
		return nil, 0, stalled(ReasonInvalidKubeconfig, "the kubeconfig in Secret %s is not usable: %s", name, err.Error())
	}
	return data, 0, nil
}

func (r *ProvisioningReconciler) handoffData(ctx context.Context, p *bpav1.Provisioning, cluster string) ([]byte, error) {
	var handoff corev1.Secret
	name := installer.HandoffName(cluster)
	if err := r.Reader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name}, &handoff); client.IgnoreNotFound(err) != nil {
		return nil, fmt.Errorf("read Secret %s: %w", name, err)
	}
	return handoff.Data[installer.KubeconfigKey], nil
}

// keepKubeconfig keeps the kubeconfig in the cluster's Secret, owned by the
// Provisioning, and empties the hand-off Secret.
func (r *ProvisioningReconciler) keepKubeconfig(ctx context.Context, p *bpav1.Provisioning, cluster string, data []byte) error {
	name := installer.HandoffName(cluster)
	kc := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: installer.KubeconfigName(cluster), Namespace: p.Namespace}}
	if err := ensureOwned(ctx, r.Client, r.Scheme, p, kc, func() {
		kc.Labels = map[string]string{installer.LabelCluster: cluster}
		kc.Type = corev1.SecretTypeOpaque
		kc.Data = map[string][]byte{installer.KubeconfigKey: data}
	}); err != nil {
		return err
	}
	// One copy only: the hand-off Secret is emptied once the kubeconfig is kept.
	handoff := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.Namespace}}
	if err := r.Client.Patch(ctx, handoff, client.RawPatch(types.MergePatchType, []byte(`{"data":null}`))); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("empty Secret %s: %w", name, err)
	}
	p.Status.KubeconfigSecretRef = &bpav1.SecretKeyRef{Name: kc.Name, Key: installer.KubeconfigKey}
	ctrl.LoggerFrom(ctx).Info("kubeconfig handed back", "secret", kc.Name)
	return nil
}

// checkKubeconfig checks that data is a kubeconfig with a current context that
// names a server. Its errors never quote the content.
func checkKubeconfig(data []byte) error {
	cfg, err := clientcmd.Load(data)
	if err != nil {
		return errors.New("it does not parse as a kubeconfig")
	}
	ctx, ok := cfg.Contexts[cfg.CurrentContext]
	if !ok {
		return errors.New("it has no current context")
	}
	c, ok := cfg.Clusters[ctx.Cluster]
	if !ok || c.Server == "" {
		return errors.New("its current context names no server")
	}
	return nil
}

// finalize releases the hosts and deletes what the Provisioning made.
func (r *ProvisioningReconciler) finalize(ctx context.Context, p *bpav1.Provisioning) error {
	if !controllerutil.ContainsFinalizer(p, Finalizer) {
		return nil
	}
	if err := deleteOwned(ctx, r.Client, p, &batchv1.Job{}); err != nil {
		return err
	}
	bmhs, err := baremetal.List(ctx, r.Reader, r.Options.HostNamespaces, client.MatchingLabels{baremetal.LabelClaimUID: string(p.UID)})
	if err != nil {
		return err
	}
	for i := range bmhs {
		if err := baremetal.Release(ctx, r.Client, &bmhs[i]); err != nil {
			return err
		}
	}
	if err := deleteOwned(ctx, r.Client, p, &corev1.ConfigMap{}, &corev1.Secret{}, &rbacv1.RoleBinding{}, &rbacv1.Role{}, &corev1.ServiceAccount{}); err != nil {
		return err
	}
	ctrl.LoggerFrom(ctx).Info("provisioning deleted: hosts released", "hosts", len(bmhs))
	controllerutil.RemoveFinalizer(p, Finalizer)
	return r.Client.Update(ctx, p)
}

// mapHost sends a BareMetalHost's change to the Provisioning that holds it and to
// every Provisioning that is not Ready (they may be waiting for hosts).
func (r *ProvisioningReconciler) mapHost(ctx context.Context, obj client.Object) []reconcile.Request {
	var reqs []reconcile.Request
	if owner := obj.GetAnnotations()[baremetal.AnnotationOwner]; owner != "" {
		if ns, name, ok := strings.Cut(owner, "/"); ok {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
		}
	}
	var list bpav1.ProvisioningList
	if err := r.Client.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list Provisionings for a BareMetalHost change")
		return reqs
	}
	for _, p := range list.Items {
		if !meta.IsStatusConditionTrue(p.Status.Conditions, bpav1.ConditionReady) {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
	}
	return reqs
}

// mapSSHKey sends a Secret's change to the Provisionings that name it as their SSH key.
func (r *ProvisioningReconciler) mapSSHKey(ctx context.Context, obj client.Object) []reconcile.Request {
	var list bpav1.ProvisioningList
	if err := r.Client.List(ctx, &list, client.InNamespace(obj.GetNamespace())); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list Provisionings for a Secret change")
		return nil
	}
	var reqs []reconcile.Request
	for _, p := range list.Items {
		if p.Spec.SSHKeySecretName == obj.GetName() {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}})
		}
	}
	return reqs
}

// SetupWithManager registers the controller: Provisionings, the Jobs, ConfigMaps
// and Secrets they own, BareMetalHosts and SSH key Secrets.
func (r *ProvisioningReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil || r.Reader == nil || r.Scheme == nil {
		return errors.New("bpa: ProvisioningReconciler needs Client, Reader and Scheme")
	}
	r.Options = r.Options.withDefaults()
	return ctrl.NewControllerManagedBy(mgr).
		For(&bpav1.Provisioning{}).
		Owns(&batchv1.Job{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Secret{}).
		Watches(baremetal.New(), handler.EnqueueRequestsFromMapFunc(r.mapHost)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.mapSSHKey)).
		Complete(r)
}

func sortedMembers(members map[string]*member) []*member {
	out := make([]*member, 0, len(members))
	for _, m := range members {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *member) int {
		return cmp.Or(cmp.Compare(roleOrder(a.claim.Role), roleOrder(b.claim.Role)), cmp.Compare(a.claim.HostName, b.claim.HostName))
	})
	return out
}

func roleOrder(r bpav1.Role) int {
	if r == bpav1.RoleMaster {
		return 0
	}
	return 1
}

func statusHosts(members map[string]*member) []bpav1.ProvisionedHost {
	var out []bpav1.ProvisionedHost
	for _, m := range sortedMembers(members) {
		out = append(out, bpav1.ProvisionedHost{Name: m.bmh.GetName(), Namespace: m.bmh.GetNamespace(), HostName: m.claim.HostName,
			Role: m.claim.Role, MAC: m.claim.MAC, IP: m.claim.IP, State: m.state})
	}
	return out
}

func describeHosts(members map[string]*member) string {
	var masters, workers []string
	for _, m := range sortedMembers(members) {
		if m.state == bpav1.HostRemoving {
			continue
		}
		if m.claim.Role == bpav1.RoleMaster {
			masters = append(masters, m.claim.HostName)
		} else {
			workers = append(workers, m.claim.HostName)
		}
	}
	s := fmt.Sprintf("masters %s", strings.Join(masters, ", "))
	if len(workers) > 0 {
		s += fmt.Sprintf("; workers %s", strings.Join(workers, ", "))
	}
	return s
}

func hostList(j *batchv1.Job) string {
	if h := j.Annotations[installer.AnnotationHosts]; h != "" {
		return strings.ReplaceAll(h, ",", ", ")
	}
	return "its hosts"
}
