// Package installer builds the Jobs that run kubespray (and ansible) for the BPA
// operator, the objects they need, and the names everything is found by. It is the
// one place that defines the installer contract (see the README section
// "Bare-metal sites (BPA) and zero-touch provisioning"):
//
// Every Job runs the configured image with /bin/sh and the entrypoint script
// below, which copies the inventory to a writable folder and runs
//
//	ansible-playbook -i /work/inventory/hosts.ini -e @/work/inventory/vars.yml \
//	    --private-key /etc/bpa/ssh/ssh-privatekey --become PLAYBOOK [ARGS]
//
// (or `ansible PATTERN -m ...` for package updates) in the image's working
// directory. The inventory ConfigMap <cluster>-inventory (hosts.ini, vars.yml) is
// mounted at /etc/bpa/inventory and the SSH key Secret at /etc/bpa/ssh.
//
// The kubeconfig hand-off: the install Job runs as the ServiceAccount
// <cluster>-installer, which may only get, update and patch one Secret,
// <cluster>-kubeconfig-handoff, created empty by the operator. After cluster.yml
// succeeds, the installer writes the admin kubeconfig (kubespray's
// artifacts/admin.conf, produced by kubeconfig_localhost: true) into that Secret's
// key "kubeconfig" and exits 0. The operator then checks it, copies it into the
// Secret <cluster>-kubeconfig (owned by the Provisioning) and empties the hand-off
// Secret. The environment names the Secret (BPA_HANDOFF_SECRET, BPA_NAMESPACE), so
// a wrapper of one's own can honour the same contract.
package installer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
)

// Operation is what a Job does.
type Operation string

// The operations.
const (
	Install Operation = "install" // cluster.yml over every host
	Scale   Operation = "scale"   // scale.yml for new workers (cluster.yml when masters are added)
	Remove  Operation = "remove"  // remove-node.yml for the hosts leaving
	// UpdateMasters and UpdateWorkers install a Software's packages on one role.
	UpdateMasters Operation = "sw-master"
	UpdateWorkers Operation = "sw-worker"
)

// Keys, labels, annotations and paths of the contract.
const (
	// KubeconfigKey is the key of the kubeconfig in the hand-off and kubeconfig Secrets.
	KubeconfigKey = "kubeconfig"
	// InventoryKey and VarsKey are the keys of the inventory ConfigMap.
	InventoryKey = "hosts.ini"
	VarsKey      = "vars.yml"
	// SSHKeyKey is the key of the private key in the SSH key Secret.
	SSHKeyKey = corev1.SSHAuthPrivateKey

	// LabelOwnerUID marks every object made for a Provisioning or Software with its UID.
	LabelOwnerUID = "bpa.akraino.org/owner-uid"
	// LabelCluster names the cluster an object belongs to.
	LabelCluster = "bpa.akraino.org/cluster"
	// LabelOperation is a Job's Operation.
	LabelOperation = "bpa.akraino.org/operation"
	// AnnotationHosts lists, on a Job, the BareMetalHosts (namespace/name, comma
	// separated) it installs, removes or updates.
	AnnotationHosts = "bpa.akraino.org/hosts"

	InventoryDir = "/etc/bpa/inventory"
	SSHDir       = "/etc/bpa/ssh"
	WorkDir      = "/work"

	EnvHandoffSecret = "BPA_HANDOFF_SECRET"
	EnvNamespace     = "BPA_NAMESPACE"
	EnvCluster       = "BPA_CLUSTER"
	EnvOperation     = "BPA_OPERATION"
	EnvAddons        = "BPA_ADDONS"

	// HandoffSecretType is the type of the hand-off Secret.
	HandoffSecretType corev1.SecretType = "bpa.akraino.org/kubeconfig-handoff"
)

// InventoryName is the name of the inventory ConfigMap of cluster.
func InventoryName(cluster string) string { return cluster + "-inventory" }

// KubeconfigName is the name of the Secret that keeps the cluster's kubeconfig.
func KubeconfigName(cluster string) string { return cluster + "-kubeconfig" }

// HandoffName is the name of the Secret the install Job writes the kubeconfig to.
func HandoffName(cluster string) string { return cluster + "-kubeconfig-handoff" }

// ServiceAccountName is the name of the installer's ServiceAccount, Role and RoleBinding.
func ServiceAccountName(cluster string) string { return cluster + "-installer" }

// JobName is a deterministic Job name for an operation on cluster: the same inputs
// give the same Job (so a pass finds the Job an earlier pass created), other
// inputs another one (so a changed spec or host list is a new attempt). It fits the
// 63 characters a Job name may have (cluster names have at most 40).
func JobName(cluster string, op Operation, inputs ...string) string {
	h := sha256.New()
	for _, in := range inputs {
		fmt.Fprintf(h, "%d:%s;", len(in), in)
	}
	return fmt.Sprintf("%s-%s-%s", cluster, op, hex.EncodeToString(h.Sum(nil))[:10])
}

// Vars is vars.yml: kubespray variables from the spec, passed with -e @vars.yml.
func Vars(cluster string, spec *bpav1.ProvisioningSpec) (string, error) {
	v := map[string]any{
		"kubeconfig_localhost": true, // kubespray writes artifacts/admin.conf: the hand-off
		"bpa_cluster":          cluster,
		"bpa_addons":           append([]string{}, spec.Addons...),
	}
	if spec.KubernetesVersion != "" {
		v["kube_version"] = spec.KubernetesVersion
	}
	if spec.PodSubnet != "" {
		v["kube_pods_subnet"] = spec.PodSubnet
	}
	out, err := yaml.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("write vars.yml: %w", err)
	}
	return "# kubespray variables of cluster " + cluster + ", written by the BPA operator.\n" + string(out), nil
}

// InstallArgs runs cluster.yml over the whole inventory.
func InstallArgs() []string { return []string{"ansible-playbook", "cluster.yml"} }

// ScaleArgs adds hosts: scale.yml limited to them, or cluster.yml over the whole
// inventory when masters are among them (kubespray adds control-plane nodes so).
func ScaleArgs(hostNames []string, mastersAdded bool) []string {
	if mastersAdded {
		return []string{"ansible-playbook", "cluster.yml"}
	}
	return []string{"ansible-playbook", "scale.yml", "--limit=" + strings.Join(hostNames, ",")}
}

// RemoveArgs removes hosts with remove-node.yml (they are still in the inventory).
func RemoveArgs(hostNames []string) []string {
	return []string{"ansible-playbook", "remove-node.yml", "-e", "node=" + strings.Join(hostNames, ","), "-e", "skip_confirmation=yes"}
}

// PackageArgs installs packages on hosts with an ad-hoc ansible apt task (the
// seeds' hosts are Ubuntu); a version pins name=version, downgrades allowed.
func PackageArgs(hostNames []string, pkgs []bpav1.Package) ([]string, error) {
	names := make([]string, 0, len(pkgs))
	for _, p := range pkgs {
		if p.Version != "" {
			names = append(names, p.Name+"="+p.Version)
		} else {
			names = append(names, p.Name)
		}
	}
	args, err := json.Marshal(map[string]any{"name": names, "state": "present", "update_cache": true, "allow_downgrade": true})
	if err != nil {
		return nil, err
	}
	return []string{"ansible", strings.Join(hostNames, ":"), "-m", "ansible.builtin.apt", "-a", string(args)}, nil
}

// Entrypoint is the installer's script, run as `/bin/sh -c Entrypoint bpa-installer TOOL ARGS...`.
// With BPA_HANDOFF_SECRET set it hands the kubeconfig back (see the package doc).
const Entrypoint = `set -eu
mkdir -p /work/inventory
cp /etc/bpa/inventory/hosts.ini /etc/bpa/inventory/vars.yml /work/inventory/
tool=$1; shift
"$tool" -i /work/inventory/hosts.ini -e @/work/inventory/vars.yml \
  --private-key /etc/bpa/ssh/ssh-privatekey --become "$@"
if [ -n "${BPA_HANDOFF_SECRET:-}" ]; then
  python3 - <<'PY'
import base64, json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
host = os.environ["KUBERNETES_SERVICE_HOST"]
if ":" in host:
    host = "[" + host + "]"
url = "https://%s:%s/api/v1/namespaces/%s/secrets/%s" % (
    host, os.environ["KUBERNETES_SERVICE_PORT"], os.environ["BPA_NAMESPACE"], os.environ["BPA_HANDOFF_SECRET"])
with open("/work/inventory/artifacts/admin.conf", "rb") as f:
    kubeconfig = base64.b64encode(f.read()).decode()
with open(sa + "/token") as f:
    token = f.read().strip()
body = json.dumps({"data": {"kubeconfig": kubeconfig}}).encode()
req = urllib.request.Request(url, data=body, method="PATCH", headers={
    "Authorization": "Bearer " + token, "Content-Type": "application/merge-patch+json"})
urllib.request.urlopen(req, context=ssl.create_default_context(cafile=sa + "/ca.crt"), timeout=60).read()
print("kubeconfig handed back in Secret " + os.environ["BPA_HANDOFF_SECRET"])
PY
fi
`

// Job describes one installer Job.
type Job struct {
	Name, Namespace, Cluster string
	Operation                Operation
	Image                    string
	SSHKeySecret             string
	// Args are the tool and its arguments (InstallArgs, ScaleArgs, ...).
	Args []string
	// Hosts are the BareMetalHosts (namespace/name) the Job acts on.
	Hosts []string
	// Handoff makes the Job hand the kubeconfig back (the install Job).
	Handoff bool
	Addons  []string
	// ServiceAccount runs the pod ("" for the namespace's default).
	ServiceAccount string
	BackoffLimit   int32
	// Labels are added to the Job and its pod (the owner's LabelOwnerUID).
	Labels map[string]string
}

// Build returns the Job object (without its owner reference).
func (j Job) Build() *batchv1.Job {
	labels := map[string]string{LabelCluster: j.Cluster, LabelOperation: string(j.Operation)}
	for k, v := range j.Labels {
		labels[k] = v
	}
	env := []corev1.EnvVar{
		{Name: EnvNamespace, Value: j.Namespace},
		{Name: EnvCluster, Value: j.Cluster},
		{Name: EnvOperation, Value: string(j.Operation)},
		{Name: EnvAddons, Value: strings.Join(j.Addons, ",")},
		{Name: "ANSIBLE_HOST_KEY_CHECKING", Value: "False"},
		{Name: "ANSIBLE_FORCE_COLOR", Value: "False"},
	}
	if j.Handoff {
		env = append(env, corev1.EnvVar{Name: EnvHandoffSecret, Value: HandoffName(j.Cluster)})
	}
	hosts := slices.Clone(j.Hosts)
	slices.Sort(hosts)
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{
			Name: j.Name, Namespace: j.Namespace, Labels: labels,
			Annotations: map[string]string{AnnotationHosts: strings.Join(hosts, ",")},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit: ptr.To(j.BackoffLimit),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					ServiceAccountName:           j.ServiceAccount,
					AutomountServiceAccountToken: ptr.To(j.Handoff),
					Containers: []corev1.Container{{
						Name:    "installer",
						Image:   j.Image,
						Command: append([]string{"/bin/sh", "-c", Entrypoint, "bpa-installer"}, j.Args...),
						Env:     env,
						VolumeMounts: []corev1.VolumeMount{
							{Name: "inventory", MountPath: InventoryDir, ReadOnly: true},
							{Name: "ssh-key", MountPath: SSHDir, ReadOnly: true},
							{Name: "work", MountPath: WorkDir},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "inventory", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: InventoryName(j.Cluster)}}}},
						{Name: "ssh-key", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
							SecretName: j.SSHKeySecret, DefaultMode: ptr.To[int32](0o400),
							Items: []corev1.KeyToPath{{Key: SSHKeyKey, Path: SSHKeyKey}}}}},
						{Name: "work", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
					},
				},
			},
		},
	}
}

// HandoffObjects are the empty hand-off Secret and the ServiceAccount, Role and
// RoleBinding that let the install Job write it, and nothing else.
func HandoffObjects(namespace, cluster string, labels map[string]string) (*corev1.Secret, *corev1.ServiceAccount, *rbacv1.Role, *rbacv1.RoleBinding) {
	name := ServiceAccountName(cluster)
	meta := func(n string) metav1.ObjectMeta {
		l := map[string]string{LabelCluster: cluster}
		for k, v := range labels {
			l[k] = v
		}
		return metav1.ObjectMeta{Name: n, Namespace: namespace, Labels: l}
	}
	secret := &corev1.Secret{ObjectMeta: meta(HandoffName(cluster)), Type: HandoffSecretType}
	sa := &corev1.ServiceAccount{ObjectMeta: meta(name)}
	role := &rbacv1.Role{ObjectMeta: meta(name), Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{HandoffName(cluster)},
		Verbs: []string{"get", "update", "patch"},
	}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: meta(name),
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
	}
	return secret, sa, role, binding
}
