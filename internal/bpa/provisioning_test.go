package bpa_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
	"github.com/atoll-edge/atoll/internal/bpa"
	"github.com/atoll-edge/atoll/internal/bpa/baremetal"
	"github.com/atoll-edge/atoll/internal/bpa/bpatest"
	"github.com/atoll-edge/atoll/internal/bpa/installer"
	"github.com/atoll-edge/atoll/test/edge"
)

// site is the one API server these tests share; each test has its own namespace
// and its own operator serving only that namespace.
var site *edge.Cluster

const wait = 30 * time.Second

func TestMain(m *testing.M) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	var err error
	site, err = edge.StartOne(ctx, "bpa-site", edge.Options{})
	if err == nil {
		err = bpatest.InstallCRDs(site.RESTConfig())
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		if site != nil {
			site.Close()
		}
		os.Exit(1)
	}
	code := m.Run()
	site.Close()
	os.Exit(code)
}

// fixture is one test's namespace, client and operator.
type fixture struct {
	t  *testing.T
	ns string
	c  client.Client
}

func newFixture(t *testing.T, ns string) *fixture {
	t.Helper()
	c, err := bpatest.Client(site.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns = bpatest.Namespace(t, c, ns)
	bpatest.RunOperator(t, site.RESTConfig(), ns)
	return &fixture{t: t, ns: ns, c: c}
}

func count(n int32) *int32 { return &n }

func (f *fixture) provisioning(name string, spec bpav1.ProvisioningSpec) *bpav1.Provisioning {
	f.t.Helper()
	if spec.InstallerImage == "" {
		spec.InstallerImage = "quay.io/kubespray/kubespray:v2.27.0"
	}
	if spec.SSHKeySecretName == "" {
		spec.SSHKeySecretName = "ssh-key"
	}
	p := &bpav1.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: spec}
	if err := f.c.Create(context.Background(), p); err != nil {
		f.t.Fatalf("create Provisioning %s: %v", name, err)
	}
	return p
}

func (f *fixture) get(name string) *bpav1.Provisioning {
	f.t.Helper()
	p := &bpav1.Provisioning{}
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: name}, p); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// update changes a Provisioning's spec, retrying on conflicts with the operator.
func (f *fixture) update(name string, change func(*bpav1.ProvisioningSpec)) {
	f.t.Helper()
	for range 10 {
		p := f.get(name)
		change(&p.Spec)
		err := f.c.Update(context.Background(), p)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			f.t.Fatal(err)
		}
	}
	f.t.Fatalf("update %s: conflicts kept coming", name)
}

// waitCondition waits until the condition typ of Provisioning name has status and reason.
func (f *fixture) waitCondition(name, typ string, status metav1.ConditionStatus, reason string) *bpav1.Provisioning {
	f.t.Helper()
	var p *bpav1.Provisioning
	bpatest.Eventually(f.t, wait, fmt.Sprintf("%s: %s=%s (%s)", name, typ, status, reason), func(ctx context.Context) (bool, string) {
		p = &bpav1.Provisioning{}
		if err := f.c.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: name}, p); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(p.Status.Conditions, typ)
		ok := c != nil && c.Status == status && (reason == "" || c.Reason == reason) && c.ObservedGeneration == p.Generation
		return ok, fmt.Sprintf("conditions %+v", p.Status.Conditions)
	})
	return p
}

// waitJob waits for the one active Job of operation op and returns it.
func (f *fixture) waitJob(op installer.Operation) *batchv1.Job {
	f.t.Helper()
	var job *batchv1.Job
	bpatest.Eventually(f.t, wait, "a "+string(op)+" Job", func(ctx context.Context) (bool, string) {
		jobs, err := bpatest.Jobs(ctx, f.c, f.ns, op)
		if err != nil {
			return false, err.Error()
		}
		var active []batchv1.Job
		for _, j := range jobs {
			if len(j.Status.Conditions) == 0 {
				active = append(active, j)
			}
		}
		if len(active) != 1 {
			return false, fmt.Sprintf("%d unfinished %s Jobs", len(active), op)
		}
		job = &active[0]
		return true, ""
	})
	return job
}

func (f *fixture) finish(job *batchv1.Job, failMessage string) {
	f.t.Helper()
	if err := bpatest.FinishJob(context.Background(), f.c, job, failMessage); err != nil {
		f.t.Fatal(err)
	}
}

// claims returns host name → role for the hosts of the namespace that p holds.
func (f *fixture) claims(p *bpav1.Provisioning) map[string]string {
	f.t.Helper()
	l := baremetal.NewList()
	if err := f.c.List(context.Background(), l, client.InNamespace(f.ns)); err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for _, u := range l.Items {
		if u.GetLabels()[baremetal.LabelClaimUID] == string(p.UID) {
			out[u.GetName()] = u.GetLabels()[baremetal.LabelRole] + "/" + u.GetAnnotations()[baremetal.AnnotationState]
		}
	}
	return out
}

func (f *fixture) inventory(cluster string) string {
	f.t.Helper()
	var cm corev1.ConfigMap
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: installer.InventoryName(cluster)}, &cm); err != nil {
		f.t.Fatal(err)
	}
	return cm.Data[installer.InventoryKey]
}

func hosts(p *bpav1.Provisioning) []string {
	var out []string
	for _, h := range p.Status.Hosts {
		out = append(out, fmt.Sprintf("%s:%s:%s", h.HostName, h.Role, h.State))
	}
	return out
}

func equalMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func hw(cpus, mem int64, mac, ip string) bpatest.Hardware {
	return bpatest.Hardware{CPUs: cpus, MemoryMiB: mem, NICs: [][2]string{{mac, ip}, {strings.Replace(mac, "52:54", "52:55", 1), ""}}}
}

// TestProvisioningLifecycle follows one cluster from hosts to Ready, then day 2:
// a scale up, a scale down, a Software update, and deletion.
func TestProvisioningLifecycle(t *testing.T) {
	f := newFixture(t, "lifecycle")
	ctx := context.Background()
	bpatest.CreateHost(t, f.c, f.ns, "big-1", hw(16, 65536, "52:54:00:00:01:01", "192.0.2.11"))
	bpatest.CreateHost(t, f.c, f.ns, "small-1", hw(2, 4096, "52:54:00:00:01:02", "192.0.2.12"))
	bpatest.CreateHost(t, f.c, f.ns, "mid-1", hw(8, 16384, "52:54:00:00:01:03", "192.0.2.13"))
	bpatest.CreateHost(t, f.c, f.ns, "mid-2", hw(4, 8192, "52:54:00:00:01:04", "192.0.2.14"))
	f.provisioning("edge-a", bpav1.ProvisioningSpec{
		ClusterName:       "edge-a",
		Masters:           bpav1.RoleRequirement{Count: count(1), MinCPU: 12, MinMemoryMiB: 32768},
		Workers:           &bpav1.RoleRequirement{Count: count(2), MinCPU: 4, MinMemoryMiB: 8192},
		PodSubnet:         "10.233.64.0/18",
		KubernetesVersion: "v1.31.4",
		Addons:            []string{"multus", "ovn4nfv"},
	})

	// Hosts chosen by hardware, claimed, an inventory, an install Job.
	p := f.waitCondition("edge-a", bpav1.ConditionInstalling, metav1.ConditionTrue, bpa.ReasonJobRunning)
	if got, want := hosts(p), []string{"big-1:master:Pending", "mid-1:worker:Pending", "mid-2:worker:Pending"}; !slices.Equal(got, want) {
		t.Fatalf("status.hosts %v, want %v", got, want)
	}
	if got, want := f.claims(p), map[string]string{"big-1": "master/Pending", "mid-1": "worker/Pending", "mid-2": "worker/Pending"}; !equalMap(got, want) {
		t.Fatalf("claims on the hosts %v, want %v", got, want)
	}
	inv := bpatest.ParseInventory(t, f.inventory("edge-a"))
	for group, want := range map[string][]string{
		"kube_control_plane": {"big-1"}, "etcd": {"big-1"}, "kube_node": {"mid-1", "mid-2"},
		"k8s_cluster": {"big-1", "mid-1", "mid-2"}, "kube-master": {"big-1"}, "k8s-cluster": {"big-1", "mid-1", "mid-2"},
	} {
		if got := inv.Members(group); !slices.Equal(got, want) {
			t.Errorf("inventory group %s = %v, want %v", group, got, want)
		}
	}
	if ip := inv.HostVars["mid-2"]["ansible_host"]; ip != "192.0.2.14" {
		t.Errorf("mid-2 ansible_host = %v, want 192.0.2.14", ip)
	}
	install := f.waitJob(installer.Install)
	checkInstallJob(t, install, p)
	checkHandoffRBAC(t, f, "edge-a")

	// The installer hands back a kubeconfig (this API server's own, to be checkable)
	// and the Job completes.
	if err := bpatest.HandBack(ctx, f.c, f.ns, "edge-a", site.Kubeconfig()); err != nil {
		t.Fatal(err)
	}
	f.finish(install, "")
	p = f.waitCondition("edge-a", bpav1.ConditionReady, metav1.ConditionTrue, bpa.ReasonClusterReady)
	if p.Status.KubeconfigSecretRef == nil || p.Status.KubeconfigSecretRef.Name != "edge-a-kubeconfig" {
		t.Fatalf("kubeconfigSecretRef %+v, want edge-a-kubeconfig", p.Status.KubeconfigSecretRef)
	}
	checkKubeconfigSecret(t, f, p)
	if got, want := hosts(p), []string{"big-1:master:Joined", "mid-1:worker:Joined", "mid-2:worker:Joined"}; !slices.Equal(got, want) {
		t.Fatalf("status.hosts %v, want %v", got, want)
	}
	if p.Status.ObservedGeneration != p.Generation {
		t.Errorf("observedGeneration %d, generation %d", p.Status.ObservedGeneration, p.Generation)
	}

	t.Run("scale up runs scale.yml for the new node only", func(t *testing.T) {
		f.t = t
		f.update("edge-a", func(s *bpav1.ProvisioningSpec) { s.Workers.Count = count(3) })
		p := f.waitCondition("edge-a", bpav1.ConditionHostsSelected, metav1.ConditionFalse, bpa.ReasonInsufficientHosts)
		if msg := meta.FindStatusCondition(p.Status.Conditions, bpav1.ConditionHostsSelected).Message; !strings.Contains(msg, "workers: need 3 hosts with at least 4 CPUs, 8192 MiB of memory, found 2") {
			t.Errorf("HostsSelected message %q does not say what is missing", msg)
		}
		bpatest.CreateHost(t, f.c, f.ns, "mid-3", hw(6, 8192, "52:54:00:00:01:05", "192.0.2.15"))
		scale := f.waitJob(installer.Scale)
		if cmd := strings.Join(scale.Spec.Template.Spec.Containers[0].Command, " "); !strings.HasSuffix(cmd, "ansible-playbook scale.yml --limit=mid-3") {
			t.Errorf("scale Job command ends %q, want ansible-playbook scale.yml --limit=mid-3", cmd[max(0, len(cmd)-60):])
		}
		if got := bpatest.ParseInventory(t, f.inventory("edge-a")).Members("kube_node"); !slices.Equal(got, []string{"mid-1", "mid-2", "mid-3"}) {
			t.Errorf("kube_node %v, want mid-1..3", got)
		}
		f.finish(scale, "")
		p = f.waitCondition("edge-a", bpav1.ConditionReady, metav1.ConditionTrue, bpa.ReasonClusterReady)
		if got := hosts(p); !slices.Contains(got, "mid-3:worker:Joined") {
			t.Errorf("status.hosts %v, want mid-3 joined", got)
		}
	})

	t.Run("a Software update runs a package Job per role", func(t *testing.T) {
		f.t = t
		sw := &bpav1.Software{ObjectMeta: metav1.ObjectMeta{Name: "edge-a-sw", Namespace: f.ns}, Spec: bpav1.SoftwareSpec{
			ClusterName:    "edge-a",
			MasterSoftware: []bpav1.Package{{Name: "curl", Version: "7.88.1-10+deb12u5"}},
			WorkerSoftware: []bpav1.Package{{Name: "jq"}, {Name: "htop", Version: "3.2.2-2"}},
		}}
		if err := f.c.Create(ctx, sw); err != nil {
			t.Fatal(err)
		}
		masters, workers := f.waitJob(installer.UpdateMasters), f.waitJob(installer.UpdateWorkers)
		if cmd := strings.Join(masters.Spec.Template.Spec.Containers[0].Command, " "); !strings.Contains(cmd, `ansible big-1 -m ansible.builtin.apt -a {"allow_downgrade":true,"name":["curl=7.88.1-10+deb12u5"]`) {
			t.Errorf("master package Job command %q", cmd[strings.Index(cmd, "bpa-installer"):])
		}
		if cmd := strings.Join(workers.Spec.Template.Spec.Containers[0].Command, " "); !strings.Contains(cmd, `ansible mid-1:mid-2:mid-3 -m ansible.builtin.apt`) || !strings.Contains(cmd, `"name":["jq","htop=3.2.2-2"]`) {
			t.Errorf("worker package Job command %q", cmd[strings.Index(cmd, "bpa-installer"):])
		}
		f.finish(masters, "")
		f.finish(workers, "")
		sw = f.waitSoftware("edge-a-sw", bpav1.ConditionReady, metav1.ConditionTrue)
		if len(sw.Status.Hosts) != 4 || sw.Status.Hosts[0].HostName != "big-1" || sw.Status.Hosts[0].State != bpav1.SoftwareUpdated {
			t.Errorf("software status hosts %+v, want 4 hosts Updated, big-1 first", sw.Status.Hosts)
		}

		// A new version: a new worker Job; it fails, and the Software says so.
		for {
			if err := f.c.Get(ctx, client.ObjectKeyFromObject(sw), sw); err != nil {
				t.Fatal(err)
			}
			sw.Spec.WorkerSoftware[1].Version = "3.3.0-1"
			if err := f.c.Update(ctx, sw); !apierrors.IsConflict(err) {
				if err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		again := f.waitJob(installer.UpdateWorkers)
		if again.Name == workers.Name {
			t.Fatalf("the new version reused Job %s", again.Name)
		}
		f.finish(again, "apt: version 3.3.0-1 not found")
		sw = f.waitSoftware("edge-a-sw", bpav1.ConditionFailed, metav1.ConditionTrue)
		if c := meta.FindStatusCondition(sw.Status.Conditions, bpav1.ConditionFailed); !strings.Contains(c.Message, "apt: version 3.3.0-1 not found") {
			t.Errorf("Failed message %q lacks the Job's message", c.Message)
		}
	})

	t.Run("scale down runs remove-node.yml, then releases the hosts", func(t *testing.T) {
		f.t = t
		f.update("edge-a", func(s *bpav1.ProvisioningSpec) { s.Workers.Count = count(1) })
		remove := f.waitJob(installer.Remove)
		cmd := strings.Join(remove.Spec.Template.Spec.Containers[0].Command, " ")
		if !strings.HasSuffix(cmd, "ansible-playbook remove-node.yml -e node=mid-2,mid-3 -e skip_confirmation=yes") {
			t.Errorf("remove Job command ends %q", cmd[max(0, len(cmd)-80):])
		}
		// The leaving nodes stay in the inventory until they are removed.
		if got := bpatest.ParseInventory(t, f.inventory("edge-a")).Members("kube_node"); !slices.Equal(got, []string{"mid-1", "mid-2", "mid-3"}) {
			t.Errorf("kube_node during removal %v, want mid-1..3", got)
		}
		f.finish(remove, "")
		p := f.waitCondition("edge-a", bpav1.ConditionReady, metav1.ConditionTrue, bpa.ReasonClusterReady)
		if got, want := f.claims(p), map[string]string{"big-1": "master/Joined", "mid-1": "worker/Joined"}; !equalMap(got, want) {
			t.Errorf("claims after the removal %v, want %v", got, want)
		}
		if got := bpatest.ParseInventory(t, f.inventory("edge-a")).Members("k8s_cluster"); !slices.Equal(got, []string{"big-1", "mid-1"}) {
			t.Errorf("k8s_cluster after the removal %v, want big-1, mid-1", got)
		}
	})

	t.Run("deleting the Provisioning releases its hosts and removes what it made", func(t *testing.T) {
		f.t = t
		p := f.get("edge-a")
		if err := f.c.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
		bpatest.Eventually(t, wait, "the Provisioning gone", func(ctx context.Context) (bool, string) {
			err := f.c.Get(ctx, client.ObjectKeyFromObject(p), &bpav1.Provisioning{})
			return apierrors.IsNotFound(err), fmt.Sprint(err)
		})
		if got := f.claims(p); len(got) != 0 {
			t.Errorf("hosts still claimed: %v", got)
		}
		l := baremetal.NewList()
		if err := f.c.List(ctx, l, client.InNamespace(f.ns)); err != nil {
			t.Fatal(err)
		}
		for _, u := range l.Items {
			for k := range u.GetAnnotations() {
				if strings.HasPrefix(k, "bpa.akraino.org/") {
					t.Errorf("host %s keeps annotation %s", u.GetName(), k)
				}
			}
		}
		for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}, &rbacv1.Role{}, &rbacv1.RoleBinding{}, &corev1.ServiceAccount{}} {
			name := map[string]string{"*v1.ConfigMap": "edge-a-inventory", "*v1.Secret": "edge-a-kubeconfig"}[fmt.Sprintf("%T", obj)]
			if name == "" {
				name = "edge-a-installer"
			}
			err := f.c.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: name}, obj)
			if !apierrors.IsNotFound(err) {
				t.Errorf("%T %s after deletion: %v, want not found", obj, name, err)
			}
		}
		jobs, err := bpatest.Jobs(ctx, f.c, f.ns, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range jobs {
			if j.Labels[installer.LabelOwnerUID] == string(p.UID) && j.DeletionTimestamp.IsZero() {
				t.Errorf("Job %s of the deleted Provisioning remains", j.Name)
			}
		}
	})
}

func (f *fixture) waitSoftware(name, typ string, status metav1.ConditionStatus) *bpav1.Software {
	f.t.Helper()
	sw := &bpav1.Software{}
	bpatest.Eventually(f.t, wait, fmt.Sprintf("Software %s: %s=%s", name, typ, status), func(ctx context.Context) (bool, string) {
		if err := f.c.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: name}, sw); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(sw.Status.Conditions, typ)
		return c != nil && c.Status == status && c.ObservedGeneration == sw.Generation, fmt.Sprintf("%+v", sw.Status.Conditions)
	})
	return sw
}

func checkInstallJob(t *testing.T, job *batchv1.Job, p *bpav1.Provisioning) {
	t.Helper()
	if !metav1.IsControlledBy(job, p) {
		t.Errorf("install Job %s is not owned by the Provisioning: %+v", job.Name, job.OwnerReferences)
	}
	pod := job.Spec.Template.Spec
	c := pod.Containers[0]
	if c.Image != "quay.io/kubespray/kubespray:v2.27.0" {
		t.Errorf("image %q", c.Image)
	}
	if cmd := strings.Join(c.Command, " "); !strings.HasSuffix(cmd, "bpa-installer ansible-playbook cluster.yml") {
		t.Errorf("command ends %q, want ... bpa-installer ansible-playbook cluster.yml", cmd[max(0, len(cmd)-60):])
	}
	if pod.ServiceAccountName != "edge-a-installer" || pod.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("serviceAccount %q restartPolicy %q", pod.ServiceAccountName, pod.RestartPolicy)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["inventory"] != installer.InventoryDir || mounts["ssh-key"] != installer.SSHDir {
		t.Errorf("mounts %v", mounts)
	}
	for _, v := range pod.Volumes {
		switch v.Name {
		case "inventory":
			if v.ConfigMap == nil || v.ConfigMap.Name != "edge-a-inventory" {
				t.Errorf("inventory volume %+v", v.VolumeSource)
			}
		case "ssh-key":
			if v.Secret == nil || v.Secret.SecretName != "ssh-key" || *v.Secret.DefaultMode != 0o400 {
				t.Errorf("ssh-key volume %+v", v.VolumeSource)
			}
		}
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	if env[installer.EnvHandoffSecret] != "edge-a-kubeconfig-handoff" || env[installer.EnvAddons] != "multus,ovn4nfv" {
		t.Errorf("env %v", env)
	}
}

func checkHandoffRBAC(t *testing.T, f *fixture, cluster string) {
	t.Helper()
	ctx := context.Background()
	var role rbacv1.Role
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: installer.ServiceAccountName(cluster)}, &role); err != nil {
		t.Fatal(err)
	}
	want := rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{installer.HandoffName(cluster)}, Verbs: []string{"get", "update", "patch"}}
	if len(role.Rules) != 1 || fmt.Sprint(role.Rules[0]) != fmt.Sprint(want) {
		t.Errorf("installer Role rules %+v, want only %+v", role.Rules, want)
	}
	var s corev1.Secret
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: installer.HandoffName(cluster)}, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Data) != 0 {
		t.Errorf("the hand-off Secret is not empty before the install")
	}
}

func checkKubeconfigSecret(t *testing.T, f *fixture, p *bpav1.Provisioning) {
	t.Helper()
	ctx := context.Background()
	var kc corev1.Secret
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: p.Status.KubeconfigSecretRef.Name}, &kc); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(&kc, p) || string(kc.Data[installer.KubeconfigKey]) != string(site.Kubeconfig()) {
		t.Errorf("kubeconfig Secret: owned %v, same kubeconfig %v", metav1.IsControlledBy(&kc, p), string(kc.Data[installer.KubeconfigKey]) == string(site.Kubeconfig()))
	}
	var handoff corev1.Secret
	if err := f.c.Get(ctx, types.NamespacedName{Namespace: f.ns, Name: installer.HandoffName(p.Status.ClusterName)}, &handoff); err != nil {
		t.Fatal(err)
	}
	if len(handoff.Data) != 0 {
		t.Errorf("the hand-off Secret still holds the kubeconfig")
	}
	var cms corev1.ConfigMapList
	if err := f.c.List(ctx, &cms, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		for k, v := range cm.Data {
			if strings.Contains(v, "client-key-data") {
				t.Errorf("ConfigMap %s key %s holds a kubeconfig", cm.Name, k)
			}
		}
	}
}

// TestProvisioningsCompete has two Provisionings want the same hosts: one gets
// them, the other waits and names what is missing, and gets them once they are
// released.
func TestProvisioningsCompete(t *testing.T) {
	f := newFixture(t, "compete")
	for i := range 3 {
		bpatest.CreateHost(t, f.c, f.ns, fmt.Sprintf("host-%d", i), hw(8, 16384, fmt.Sprintf("52:54:00:00:02:%02d", i), fmt.Sprintf("192.0.2.%d", 20+i)))
	}
	spec := bpav1.ProvisioningSpec{Masters: bpav1.RoleRequirement{Count: count(2), MinCPU: 8}}
	f.provisioning("a", spec)
	spec.ClusterName = "cluster-b"
	f.provisioning("b", spec)
	// Cluster a is named by its label, as in the seed's examples.
	for {
		p := f.get("a")
		p.Labels = map[string]string{bpav1.ClusterLabel: "cluster-a"}
		if err := f.c.Update(context.Background(), p); err == nil {
			break
		} else if !apierrors.IsConflict(err) {
			t.Fatal(err)
		}
	}

	var winner, loser *bpav1.Provisioning
	bpatest.Eventually(t, wait, "one Provisioning selected, the other waiting", func(ctx context.Context) (bool, string) {
		pa, pb := f.get("a"), f.get("b")
		sa := meta.IsStatusConditionTrue(pa.Status.Conditions, bpav1.ConditionHostsSelected)
		sb := meta.IsStatusConditionTrue(pb.Status.Conditions, bpav1.ConditionHostsSelected)
		wa := meta.IsStatusConditionFalse(pa.Status.Conditions, bpav1.ConditionHostsSelected)
		wb := meta.IsStatusConditionFalse(pb.Status.Conditions, bpav1.ConditionHostsSelected)
		switch {
		case sa && wb:
			winner, loser = pa, pb
		case sb && wa:
			winner, loser = pb, pa
		default:
			return false, fmt.Sprintf("a %+v; b %+v", pa.Status.Conditions, pb.Status.Conditions)
		}
		return true, ""
	})
	if got := len(f.claims(winner)); got != 2 {
		t.Errorf("winner %s holds %d hosts, want 2", winner.Name, got)
	}
	if got := f.claims(loser); len(got) != 0 {
		t.Errorf("loser %s holds %v, want nothing (no partial sets)", loser.Name, got)
	}
	msg := meta.FindStatusCondition(loser.Status.Conditions, bpav1.ConditionHostsSelected).Message
	if !strings.Contains(msg, "masters: need 2 hosts with at least 8 CPUs, found 1") || !strings.Contains(msg, "2 is claimed by another Provisioning") {
		t.Errorf("loser's message %q does not say what is missing", msg)
	}
	if want := map[string]string{"a": "cluster-a", "b": "cluster-b"}; winner.Status.ClusterName != want[winner.Name] {
		t.Errorf("cluster name %q, want %q", winner.Status.ClusterName, want[winner.Name])
	}

	// The winner goes away: its hosts are released and the loser takes them.
	if err := f.c.Delete(context.Background(), winner); err != nil {
		t.Fatal(err)
	}
	f.waitCondition(loser.Name, bpav1.ConditionHostsSelected, metav1.ConditionTrue, bpa.ReasonSelected)
	if got := len(f.claims(loser)); got != 2 {
		t.Errorf("after the winner's deletion %s holds %d hosts, want 2", loser.Name, got)
	}
}

// TestInstallFailureAndRetry: a failed install Job sets Failed with its message;
// a spec change makes a new attempt. Hosts are named by MAC in any case.
func TestInstallFailureAndRetry(t *testing.T) {
	f := newFixture(t, "failure")
	bpatest.CreateHost(t, f.c, f.ns, "m", hw(2, 2048, "52:54:00:00:03:01", "192.0.2.31"))
	bpatest.CreateHost(t, f.c, f.ns, "w", hw(2, 2048, "52:54:00:00:03:02", "192.0.2.32"))
	f.provisioning("fail", bpav1.ProvisioningSpec{ClusterName: "fail",
		Masters: bpav1.RoleRequirement{MACs: []string{"52:54:00:00:03:01"}},
		// The second NIC, in upper case.
		Workers: &bpav1.RoleRequirement{MACs: []string{"52:55:00:00:03:02"}},
	})
	first := f.waitJob(installer.Install)
	p := f.waitCondition("fail", bpav1.ConditionInstalling, metav1.ConditionTrue, bpa.ReasonJobRunning)
	if got, want := hosts(p), []string{"m:master:Pending", "w:worker:Pending"}; !slices.Equal(got, want) {
		t.Fatalf("hosts by MAC %v, want %v", got, want)
	}
	f.finish(first, "ssh: connect to host 192.0.2.31 port 22: No route to host")
	p = f.waitCondition("fail", bpav1.ConditionFailed, metav1.ConditionTrue, bpa.ReasonJobFailed)
	msg := meta.FindStatusCondition(p.Status.Conditions, bpav1.ConditionFailed).Message
	if !strings.Contains(msg, "No route to host") || !strings.Contains(msg, first.Name) {
		t.Errorf("Failed message %q lacks the Job's name or message", msg)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, bpav1.ConditionReady); c.Status != metav1.ConditionFalse {
		t.Errorf("Ready %+v after a failure", c)
	}

	f.update("fail", func(s *bpav1.ProvisioningSpec) { s.KubernetesVersion = "v1.31.5" })
	second := f.waitJob(installer.Install)
	if second.Name == first.Name {
		t.Fatalf("the spec change reused Job %s", first.Name)
	}
	f.waitCondition("fail", bpav1.ConditionInstalling, metav1.ConditionTrue, bpa.ReasonJobRunning)
	// A completed install without a kubeconfig is a failure once the hand-off
	// timeout (10 s in tests) passes.
	f.finish(second, "")
	f.waitCondition("fail", bpav1.ConditionInstalling, metav1.ConditionTrue, bpa.ReasonWaitingKubeconfig)
	p = f.waitCondition("fail", bpav1.ConditionFailed, metav1.ConditionTrue, bpa.ReasonNoKubeconfig)
	if msg := meta.FindStatusCondition(p.Status.Conditions, bpav1.ConditionFailed).Message; !strings.Contains(msg, "fail-kubeconfig-handoff") {
		t.Errorf("NoKubeconfig message %q does not name the hand-off Secret", msg)
	}
	// A late hand-off still counts.
	if err := bpatest.HandBack(context.Background(), f.c, f.ns, "fail", site.Kubeconfig()); err != nil {
		t.Fatal(err)
	}
	f.waitCondition("fail", bpav1.ConditionReady, metav1.ConditionTrue, bpa.ReasonClusterReady)
}

// TestTooFewHosts: the condition says what is missing; a new host is picked up
// from the BareMetalHost watch.
func TestTooFewHosts(t *testing.T) {
	f := newFixture(t, "few")
	bpatest.CreateHost(t, f.c, f.ns, "h1", hw(8, 8192, "52:54:00:00:04:01", "192.0.2.41"))
	bpatest.CreateHost(t, f.c, f.ns, "h2", bpatest.Hardware{CPUs: 8, MemoryMiB: 8192, NICs: [][2]string{{"52:54:00:00:04:02", "192.0.2.42"}}, State: "inspecting"})
	f.provisioning("few", bpav1.ProvisioningSpec{ClusterName: "few", Masters: bpav1.RoleRequirement{Count: count(2), MinMemoryMiB: 8192}})
	p := f.waitCondition("few", bpav1.ConditionHostsSelected, metav1.ConditionFalse, bpa.ReasonInsufficientHosts)
	msg := meta.FindStatusCondition(p.Status.Conditions, bpav1.ConditionHostsSelected).Message
	if want := `masters: need 2 hosts with 8192 MiB of memory, found 1 (` + f.ns + `/h1); of the other hosts 1 is in provisioning state "inspecting"`; msg != want {
		t.Errorf("message\n%q\nwant\n%q", msg, want)
	}
	if c := meta.FindStatusCondition(p.Status.Conditions, bpav1.ConditionReady); c.Reason != bpa.ReasonInsufficientHosts {
		t.Errorf("Ready %+v", c)
	}
	if got := f.claims(p); len(got) != 0 {
		t.Errorf("hosts claimed while too few: %v", got)
	}
	bpatest.CreateHost(t, f.c, f.ns, "h3", hw(4, 16384, "52:54:00:00:04:03", "192.0.2.43"))
	f.waitJob(installer.Install)
	if got := hosts(f.waitCondition("few", bpav1.ConditionInstalling, metav1.ConditionTrue, bpa.ReasonJobRunning)); !slices.Equal(got, []string{"h1:master:Pending", "h3:master:Pending"}) {
		t.Errorf("hosts %v", got)
	}
}

// TestMalformedSpecRefused: the CRD's schema refuses bad specs at the API server.
func TestMalformedSpecRefused(t *testing.T) {
	c, err := bpatest.Client(site.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	good := func() bpav1.ProvisioningSpec {
		return bpav1.ProvisioningSpec{ClusterName: "c1", Masters: bpav1.RoleRequirement{Count: count(1)}, InstallerImage: "kubespray", SSHKeySecretName: "k"}
	}
	tests := []struct {
		name   string
		mutate func(*bpav1.ProvisioningSpec)
		want   string // in the API server's message
	}{
		{"both macs and count", func(s *bpav1.ProvisioningSpec) { s.Masters.MACs = []string{"52:54:00:00:00:01"} }, "give either macs"},
		{"neither macs nor count", func(s *bpav1.ProvisioningSpec) { s.Masters.Count = nil }, "give either macs"},
		{"no masters", func(s *bpav1.ProvisioningSpec) { s.Masters.Count = count(0) }, "masters.count must be at least 1"},
		{"negative count", func(s *bpav1.ProvisioningSpec) { s.Workers = &bpav1.RoleRequirement{Count: count(-1)} }, "spec.workers.count"},
		{"bad MAC", func(s *bpav1.ProvisioningSpec) { s.Masters = bpav1.RoleRequirement{MACs: []string{"52:54:00:00:00"}} }, "spec.masters.macs[0]"},
		{"negative CPU", func(s *bpav1.ProvisioningSpec) { s.Masters.MinCPU = -2 }, "spec.masters.minCPU"},
		{"bad pod subnet", func(s *bpav1.ProvisioningSpec) { s.PodSubnet = "10.233.64.0/33" }, "podSubnet must be a CIDR"},
		{"bad version", func(s *bpav1.ProvisioningSpec) { s.KubernetesVersion = "1.31" }, "spec.kubernetesVersion"},
		{"bad cluster name", func(s *bpav1.ProvisioningSpec) { s.ClusterName = "Edge_1" }, "spec.clusterName"},
		{"no installer image", func(s *bpav1.ProvisioningSpec) { s.InstallerImage = "" }, "spec.installerImage"},
		{"no SSH key", func(s *bpav1.ProvisioningSpec) { s.SSHKeySecretName = "" }, "spec.sshKeySecretName"},
		{"bad addon", func(s *bpav1.ProvisioningSpec) { s.Addons = []string{"Multus CNI"} }, "spec.addons[0]"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := good()
			tt.mutate(&spec)
			p := &bpav1.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-%d", i), Namespace: "default"}, Spec: spec}
			err := c.Create(context.Background(), p, client.DryRunAll)
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("create: %v\nwant an Invalid error mentioning %q", err, tt.want)
			}
		})
	}
	// The good spec passes, so the cases above fail for their own reason.
	if err := c.Create(context.Background(), &bpav1.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "good", Namespace: "default"}, Spec: good()}, client.DryRunAll); err != nil {
		t.Fatalf("the good spec is refused: %v", err)
	}
	// Software too.
	sw := &bpav1.Software{ObjectMeta: metav1.ObjectMeta{Name: "bad-sw", Namespace: "default"}, Spec: bpav1.SoftwareSpec{
		ClusterName: "c1", WorkerSoftware: []bpav1.Package{{Name: "curl", Version: "1.0; rm -rf /"}}}}
	if err := c.Create(context.Background(), sw, client.DryRunAll); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.workerSoftware[0].version") {
		t.Fatalf("a package version with a shell command: %v, want Invalid", err)
	}
}

// TestClaimIsAtomic: two Provisionings that read the same free host and both try
// to claim it: one wins, the other gets a conflict, and the host names the winner.
func TestClaimIsAtomic(t *testing.T) {
	ctx := context.Background()
	c, err := bpatest.Client(site.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns := bpatest.Namespace(t, c, "atomic")
	bpatest.CreateHost(t, c, ns, "h", hw(8, 8192, "52:54:00:00:05:01", "192.0.2.51"))
	read := func() *unstructured.Unstructured {
		u := baremetal.New()
		if err := c.Get(ctx, types.NamespacedName{Namespace: ns, Name: "h"}, u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	first, second := read(), read()
	p1 := &bpav1.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: ns, UID: "uid-1"}}
	p2 := &bpav1.Provisioning{ObjectMeta: metav1.ObjectMeta{Name: "p2", Namespace: ns, UID: "uid-2"}}
	claim := baremetal.Claim{HostName: "h", IP: "192.0.2.51", Role: bpav1.RoleMaster}
	if err := baremetal.ClaimHost(ctx, c, first, p1, claim); err != nil {
		t.Fatal(err)
	}
	if err := baremetal.ClaimHost(ctx, c, second, p2, claim); !apierrors.IsConflict(err) {
		t.Fatalf("the second claim from a stale read: %v, want a conflict", err)
	}
	now := read()
	if got, ok := baremetal.ClaimedBy(now, "uid-1"); !ok || got.Role != bpav1.RoleMaster || now.GetAnnotations()[baremetal.AnnotationOwner] != ns+"/p1" {
		t.Fatalf("host claim %v %v, want p1's", now.GetLabels(), now.GetAnnotations())
	}
	// Read afresh, the host shows it is taken.
	if err := baremetal.ClaimHost(ctx, c, now, p2, claim); err == nil || !strings.Contains(err.Error(), "claimed by "+ns+"/p1") {
		t.Fatalf("claiming a held host: %v", err)
	}
	if err := baremetal.Release(ctx, c, now); err != nil {
		t.Fatal(err)
	}
	if _, ok := baremetal.ClaimedBy(read(), "uid-1"); ok {
		t.Fatal("the host is still claimed after Release")
	}
}
