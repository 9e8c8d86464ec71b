package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ConditionUpdating is True while a package-update Job of a Software runs. A
// Software also has the conditions Ready (every host has the packages) and Failed
// (the last package-update Job failed).
const ConditionUpdating = "Updating"

// Package is a package at a version (the distribution's package manager's names;
// an empty version means the newest).
type Package struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9+._-]*$`
	Name string `json:"name"`
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9][A-Za-z0-9+.~:_-]*$`
	Version string `json:"version,omitempty"`
}

// SoftwareSpec lists the packages each role's hosts of a cluster keep.
type SoftwareSpec struct {
	// ClusterName is the cluster of a Provisioning in this namespace.
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	ClusterName string `json:"clusterName"`

	// MasterSoftware is installed on the masters.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	MasterSoftware []Package `json:"masterSoftware,omitempty"`

	// WorkerSoftware is installed on the workers.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=100
	WorkerSoftware []Package `json:"workerSoftware,omitempty"`
}

// SoftwareHostState is where one host is with the packages.
// +kubebuilder:validation:Enum=Pending;Updating;Updated;Failed
type SoftwareHostState string

// The software host states.
const (
	SoftwarePending  SoftwareHostState = "Pending"
	SoftwareUpdating SoftwareHostState = "Updating"
	SoftwareUpdated  SoftwareHostState = "Updated"
	SoftwareFailed   SoftwareHostState = "Failed"
)

// HostSoftware is the state of the packages on one host.
type HostSoftware struct {
	// HostName is the host's inventory name.
	HostName string            `json:"hostName"`
	Role     Role              `json:"role"`
	State    SoftwareHostState `json:"state"`
	// Packages are the packages the host has (Updated) or is getting.
	// +optional
	// +listType=atomic
	Packages []Package `json:"packages,omitempty"`
	// Job is the package-update Job that serves the host.
	// +optional
	Job string `json:"job,omitempty"`
}

// SoftwareStatus is what the operator observed and did.
type SoftwareStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Updating, Failed.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Hosts is the state per host, masters first.
	// +optional
	// +listType=atomic
	Hosts []HostSoftware `json:"hosts,omitempty"`
}

// Software keeps packages at versions on the hosts of a provisioned cluster: a
// package-update Job per role runs whenever the list or the hosts change.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sw,categories=bpa
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.clusterName`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Software struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SoftwareSpec   `json:"spec"`
	Status SoftwareStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// SoftwareList is a list of Software objects.
type SoftwareList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Software `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Software{}, &SoftwareList{})
}
