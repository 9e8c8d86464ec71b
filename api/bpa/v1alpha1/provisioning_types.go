package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterLabel is the label that names the cluster when spec.clusterName is empty,
// as the seed documents' examples do.
const ClusterLabel = "cluster"

// The condition types of a Provisioning.
const (
	// ConditionHostsSelected is True when enough hosts match every role and are claimed.
	ConditionHostsSelected = "HostsSelected"
	// ConditionInventoryReady is True when the hosts.ini ConfigMap lists the hosts.
	ConditionInventoryReady = "InventoryReady"
	// ConditionInstalling is True while an installer Job (install, scale, remove) runs.
	ConditionInstalling = "Installing"
	// ConditionReady is True when the cluster is installed, its kubeconfig Secret
	// exists and no change is pending.
	ConditionReady = "Ready"
	// ConditionFailed is True when the last attempt failed; a spec change retries.
	ConditionFailed = "Failed"
)

// Role is the part a host plays in the cluster.
// +kubebuilder:validation:Enum=master;worker
type Role string

// The roles.
const (
	RoleMaster Role = "master"
	RoleWorker Role = "worker"
)

// HostState says where a selected host is on its way into or out of the cluster.
// +kubebuilder:validation:Enum=Pending;Joined;Removing
type HostState string

// The host states.
const (
	// HostPending: claimed, not yet installed by a Job that completed.
	HostPending HostState = "Pending"
	// HostJoined: part of the cluster.
	HostJoined HostState = "Joined"
	// HostRemoving: no longer wanted; remove-node.yml takes it out before it is released.
	HostRemoving HostState = "Removing"
)

// RoleRequirement says which hosts take a role: the hosts that carry the listed MAC
// addresses, or count hosts that have at least the listed hardware. The hardware
// minimums also apply to hosts named by MAC.
//
// +kubebuilder:validation:XValidation:rule="has(self.macs) != has(self.count)",message="give either macs (the exact hosts) or count (how many hosts with the minimum hardware), not both"
type RoleRequirement struct {
	// MACs names the hosts by the MAC address of one of their NICs (or their boot
	// MAC), compared without regard to case.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=200
	// +kubebuilder:validation:items:Pattern=`^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$`
	MACs []string `json:"macs,omitempty"`

	// Count is how many hosts take the role.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Count *int32 `json:"count,omitempty"`

	// MinCPU is the least status.hardware.cpu.count a host must have.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinCPU int32 `json:"minCPU,omitempty"`

	// MinMemoryMiB is the least status.hardware.ramMebibytes a host must have.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MinMemoryMiB int64 `json:"minMemoryMiB,omitempty"`

	// MinNICs is the least number of NICs a host must have.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	MinNICs int32 `json:"minNICs,omitempty"`
}

// ProvisioningSpec is the cluster wanted: which hosts, and how kubespray installs it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.masters.count) || self.masters.count >= 1",message="masters.count must be at least 1"
type ProvisioningSpec struct {
	// ClusterName names the cluster (and the objects made for it: <cluster>-inventory,
	// <cluster>-kubeconfig, ...). Empty means the value of the object's label
	// "cluster".
	// +optional
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterName string `json:"clusterName,omitempty"`

	// Masters are the control-plane (and etcd) hosts.
	Masters RoleRequirement `json:"masters"`

	// Workers are the worker hosts. Without workers the masters also run workloads.
	// +optional
	Workers *RoleRequirement `json:"workers,omitempty"`

	// PodSubnet is the pods' CIDR (kubespray's kube_pods_subnet).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="podSubnet must be a CIDR such as 10.233.64.0/18"
	PodSubnet string `json:"podSubnet,omitempty"`

	// KubernetesVersion is the version kubespray installs (kube_version), vX.Y.Z.
	// +optional
	// +kubebuilder:validation:Pattern=`^v[0-9]+\.[0-9]+\.[0-9]+$`
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`

	// Addons are the KUD plugins installed after the cluster (multus, ovn4nfv,
	// virtlet, ...), handed to the installer as BPA_ADDONS and bpa_addons.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$`
	// +kubebuilder:validation:items:MaxLength=63
	Addons []string `json:"addons,omitempty"`

	// InstallerImage is the image of the installer Jobs: kubespray (ansible-playbook
	// and the playbooks in its working directory) plus python3.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	InstallerImage string `json:"installerImage"`

	// SSHKeySecretName names a Secret in this namespace whose key ssh-privatekey is
	// the private key that opens the hosts (kubernetes.io/ssh-auth).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	SSHKeySecretName string `json:"sshKeySecretName"`
}

// ProvisionedHost is one host selected for the cluster.
type ProvisionedHost struct {
	// Name and Namespace are the BareMetalHost's.
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// HostName is the host's name in the inventory and as a Kubernetes node.
	HostName string `json:"hostName"`
	Role     Role   `json:"role"`
	// MAC and IP are the NIC ansible reaches the host through.
	MAC   string    `json:"mac,omitempty"`
	IP    string    `json:"ip"`
	State HostState `json:"state"`
}

// SecretKeyRef names a key of a Secret in the object's namespace.
type SecretKeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// ProvisioningStatus is what the operator observed and did.
type ProvisioningStatus struct {
	// ObservedGeneration is the generation the status was last fully reconciled at.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// ClusterName is the cluster name in use (spec.clusterName or the label).
	// +optional
	ClusterName string `json:"clusterName,omitempty"`

	// Conditions: HostsSelected, InventoryReady, Installing, Ready, Failed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Hosts are the selected hosts, masters first, each in name order.
	// +optional
	// +listType=atomic
	Hosts []ProvisionedHost `json:"hosts,omitempty"`

	// KubeconfigSecretRef names the Secret with the new cluster's admin kubeconfig,
	// once it is installed.
	// +optional
	KubeconfigSecretRef *SecretKeyRef `json:"kubeconfigSecretRef,omitempty"`

	// Job is the installer Job of the current or last operation.
	// +optional
	Job string `json:"job,omitempty"`
}

// Provisioning is a Kubernetes cluster made of bare-metal hosts: the operator
// selects and claims BareMetalHosts, writes the kubespray inventory, runs the
// installer Jobs and keeps the cluster's kubeconfig in a Secret.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=bpa,categories=bpa
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.status.clusterName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Provisioning struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ProvisioningSpec   `json:"spec"`
	Status ProvisioningStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// ProvisioningList is a list of Provisionings.
type ProvisioningList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Provisioning `json:"items"`
}

// Cluster returns the cluster's name: spec.clusterName, else the label "cluster".
func (p *Provisioning) Cluster() string {
	if p.Spec.ClusterName != "" {
		return p.Spec.ClusterName
	}
	return p.Labels[ClusterLabel]
}

func init() {
	SchemeBuilder.Register(&Provisioning{}, &ProvisioningList{})
}
