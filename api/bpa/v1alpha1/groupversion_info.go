// Package v1alpha1 holds the Go types of the BPA operator's custom resources,
// group bpa.akraino.org, version v1alpha1: Provisioning (a Kubernetes cluster
// made of bare-metal hosts) and Software (packages kept at a version on the hosts
// of such a cluster). The CRD YAML in config/crd is generated from these types
// with controller-gen (`make generate`).
//
// +kubebuilder:object:generate=true
// +groupName=bpa.akraino.org
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of these types.
	GroupVersion = schema.GroupVersion{Group: "bpa.akraino.org", Version: "v1alpha1"}

	// SchemeBuilder registers the types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group and version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
