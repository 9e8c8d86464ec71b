package render

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// clusterScoped lists the cluster-scoped kinds of Kubernetes itself (and of the
// API aggregation layer), by group and kind. Kinds of review APIs that are never
// stored (TokenReview, SubjectAccessReview, ...) are left out.
var clusterScoped = map[schema.GroupKind]bool{
	{Group: "", Kind: "Namespace"}:        true,
	{Group: "", Kind: "Node"}:             true,
	{Group: "", Kind: "PersistentVolume"}: true,
	{Group: "", Kind: "ComponentStatus"}:  true,

	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:        true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: true,

	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}: true,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:             true,

	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   true,

	{Group: "storage.k8s.io", Kind: "StorageClass"}:          true,
	{Group: "storage.k8s.io", Kind: "CSIDriver"}:             true,
	{Group: "storage.k8s.io", Kind: "CSINode"}:               true,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:      true,
	{Group: "storage.k8s.io", Kind: "VolumeAttributesClass"}: true,

	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}: true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:        true,

	{Group: "networking.k8s.io", Kind: "IngressClass"}: true,
	{Group: "networking.k8s.io", Kind: "IPAddress"}:    true,
	{Group: "networking.k8s.io", Kind: "ServiceCIDR"}:  true,

	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}: true,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:        true,

	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                 true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}: true,

	{Group: "resource.k8s.io", Kind: "DeviceClass"}:     true,
	{Group: "resource.k8s.io", Kind: "ResourceSlice"}:   true,
	{Group: "resource.k8s.io", Kind: "DeviceTaintRule"}: true,

	{Group: "storagemigration.k8s.io", Kind: "StorageVersionMigration"}: true,
	{Group: "internal.apiserver.k8s.io", Kind: "StorageVersion"}:        true,
	{Group: "policy", Kind: "PodSecurityPolicy"}:                        true,
}

// scopes says which kinds are cluster-scoped for one render: the static list,
// the kinds the caller names, and the kinds of the CRDs the chart renders.
type scopes struct {
	extra map[schema.GroupKind]bool // true: cluster-scoped, false: namespaced
}

func newScopes(clusterScopedKinds []schema.GroupKind) *scopes {
	s := &scopes{extra: map[schema.GroupKind]bool{}}
	for _, gk := range clusterScopedKinds {
		s.extra[gk] = true
	}
	return s
}

// learnCRD records the scope of the kind a CustomResourceDefinition object
// declares (obj is any object: others are ignored).
func (s *scopes) learnCRD(obj map[string]any) {
	if obj["kind"] != "CustomResourceDefinition" {
		return
	}
	gv, _ := obj["apiVersion"].(string)
	if g, err := schema.ParseGroupVersion(gv); err != nil || g.Group != "apiextensions.k8s.io" {
		return
	}
	spec, _ := obj["spec"].(map[string]any)
	names, _ := spec["names"].(map[string]any)
	group, _ := spec["group"].(string)
	kind, _ := names["kind"].(string)
	scope, _ := spec["scope"].(string)
	if kind == "" {
		return
	}
	gk := schema.GroupKind{Group: group, Kind: kind}
	if s.extra[gk] {
		return // the caller (the cluster's discovery) said cluster-scoped: it knows
	}
	s.extra[gk] = scope == "Cluster"
}

// namespaced reports whether objects of gk live in a namespace.
func (s *scopes) namespaced(gk schema.GroupKind) bool {
	if cluster, ok := s.extra[gk]; ok {
		return !cluster
	}
	return !clusterScoped[gk]
}
