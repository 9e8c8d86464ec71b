// Package baremetal reads metal3 BareMetalHosts (metal3.io/v1alpha1, handled as
// unstructured objects so that Atoll does not depend on metal3's Go module) and
// records on them which Provisioning holds them.
//
// A claim is kept on the BareMetalHost itself, so it is visible to every tool and
// survives operator restarts:
//
//	labels:
//	  bpa.akraino.org/claimed-by-uid: <UID of the Provisioning>
//	  bpa.akraino.org/role: master | worker
//	annotations:
//	  bpa.akraino.org/claimed-by: <namespace>/<name> of the Provisioning
//	  bpa.akraino.org/host-name: the host's inventory and node name
//	  bpa.akraino.org/ip, bpa.akraino.org/mac: the NIC ansible reaches it on
//	  bpa.akraino.org/node-state: Pending | Joined
//
// Claims are written with a merge patch that carries the resourceVersion the
// operator read (optimistic locking): of two Provisionings that try to claim the
// same free host, one wins and the other gets a conflict. No ownerReference is
// set: garbage collection would delete the host (not release it) if the owner went
// away, and owners cannot cross namespaces.
package baremetal

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
	"github.com/atoll-edge/atoll/internal/bpa/hostselect"
)

// GVK is the BareMetalHost's group, version and kind.
var GVK = schema.GroupVersionKind{Group: "metal3.io", Version: "v1alpha1", Kind: "BareMetalHost"}

// The labels and annotations of a claim.
const (
	LabelClaimUID      = "bpa.akraino.org/claimed-by-uid"
	LabelRole          = "bpa.akraino.org/role"
	AnnotationOwner    = "bpa.akraino.org/claimed-by"
	AnnotationHostName = "bpa.akraino.org/host-name"
	AnnotationIP       = "bpa.akraino.org/ip"
	AnnotationMAC      = "bpa.akraino.org/mac"
	AnnotationState    = "bpa.akraino.org/node-state"
)

// New returns an empty BareMetalHost.
func New() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(GVK)
	return u
}

// NewList returns an empty BareMetalHostList.
func NewList() *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(GVK.GroupVersion().WithKind("BareMetalHostList"))
	return l
}

// List returns the BareMetalHosts of namespaces (every namespace when empty).
func List(ctx context.Context, r client.Reader, namespaces []string, opts ...client.ListOption) ([]unstructured.Unstructured, error) {
	if len(namespaces) == 0 {
		namespaces = []string{""}
	}
	var out []unstructured.Unstructured
	for _, ns := range namespaces {
		l := NewList()
		if err := r.List(ctx, l, append([]client.ListOption{client.InNamespace(ns)}, opts...)...); err != nil {
			where := "every namespace"
			if ns != "" {
				where = "namespace " + ns
			}
			return nil, fmt.Errorf("list BareMetalHosts in %s: %w", where, err)
		}
		out = append(out, l.Items...)
	}
	return out, nil
}

// ToHost reads what host selection needs.
func ToHost(u *unstructured.Unstructured) hostselect.Host {
	h := hostselect.Host{Namespace: u.GetNamespace(), Name: u.GetName()}
	h.State, _, _ = unstructured.NestedString(u.Object, "status", "provisioning", "state")
	h.OperationalStatus, _, _ = unstructured.NestedString(u.Object, "status", "operationalStatus")
	if ref, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "consumerRef"); ok && ref != nil {
		h.Consumer = consumer(ref)
	}
	h.CPUs, _, _ = unstructured.NestedInt64(u.Object, "status", "hardware", "cpu", "count")
	h.MemoryMiB, _, _ = unstructured.NestedInt64(u.Object, "status", "hardware", "ramMebibytes")
	boot, _, _ := unstructured.NestedString(u.Object, "spec", "bootMACAddress")
	h.BootMAC = strings.ToLower(boot)
	nics, _, _ := unstructured.NestedSlice(u.Object, "status", "hardware", "nics")
	for _, n := range nics {
		m, ok := n.(map[string]any)
		if !ok {
			continue
		}
		mac, _ := m["mac"].(string)
		ip, _ := m["ip"].(string)
		h.NICs = append(h.NICs, hostselect.NIC{MAC: strings.ToLower(mac), IP: ip})
	}
	labels := u.GetLabels()
	h.ClaimUID = labels[LabelClaimUID]
	h.ClaimRole = bpav1.Role(labels[LabelRole])
	return h
}

// consumer describes spec.consumerRef: upstream metal3 has an object reference
// there; the CRD in the test data declares a string.
func consumer(ref any) string {
	switch r := ref.(type) {
	case string:
		return r
	case map[string]any:
		kind, _ := r["kind"].(string)
		ns, _ := r["namespace"].(string)
		name, _ := r["name"].(string)
		if kind == "" && name == "" {
			return ""
		}
		return strings.TrimPrefix(kind+" "+strings.TrimPrefix(ns+"/"+name, "/"), " ")
	}
	return fmt.Sprint(ref)
}

// Claim is what a claim records.
type Claim struct {
	HostName, IP, MAC string
	Role              bpav1.Role
}

// ClaimedBy returns the claim of u if the Provisioning with uid holds it.
func ClaimedBy(u *unstructured.Unstructured, uid string) (Claim, bool) {
	if uid == "" || u.GetLabels()[LabelClaimUID] != uid {
		return Claim{}, false
	}
	a := u.GetAnnotations()
	return Claim{HostName: a[AnnotationHostName], IP: a[AnnotationIP], MAC: a[AnnotationMAC], Role: bpav1.Role(u.GetLabels()[LabelRole])}, true
}

// State is the node state recorded on a claimed host (Pending unless Joined).
func State(u *unstructured.Unstructured) bpav1.HostState {
	if bpav1.HostState(u.GetAnnotations()[AnnotationState]) == bpav1.HostJoined {
		return bpav1.HostJoined
	}
	return bpav1.HostPending
}

// ClaimHost claims the free host u (as read, at its resourceVersion) for p. It
// fails with a Conflict error if the host changed since it was read.
func ClaimHost(ctx context.Context, c client.Client, u *unstructured.Unstructured, p *bpav1.Provisioning, claim Claim) error {
	if other := u.GetLabels()[LabelClaimUID]; other != "" && other != string(p.UID) {
		return fmt.Errorf("host %s/%s is claimed by %s", u.GetNamespace(), u.GetName(), u.GetAnnotations()[AnnotationOwner])
	}
	return patch(ctx, c, u, func(labels, annotations map[string]string) {
		labels[LabelClaimUID] = string(p.UID)
		labels[LabelRole] = string(claim.Role)
		annotations[AnnotationOwner] = p.Namespace + "/" + p.Name
		annotations[AnnotationHostName] = claim.HostName
		annotations[AnnotationIP] = claim.IP
		annotations[AnnotationMAC] = claim.MAC
		annotations[AnnotationState] = string(bpav1.HostPending)
	})
}

// SetState records the node state of a host p holds.
func SetState(ctx context.Context, c client.Client, u *unstructured.Unstructured, state bpav1.HostState) error {
	if u.GetAnnotations()[AnnotationState] == string(state) {
		return nil
	}
	return patch(ctx, c, u, func(_, annotations map[string]string) {
		annotations[AnnotationState] = string(state)
	})
}

// Release removes every mark of a claim from u (as read, at its resourceVersion).
func Release(ctx context.Context, c client.Client, u *unstructured.Unstructured) error {
	return patch(ctx, c, u, func(labels, annotations map[string]string) {
		delete(labels, LabelClaimUID)
		delete(labels, LabelRole)
		for _, k := range []string{AnnotationOwner, AnnotationHostName, AnnotationIP, AnnotationMAC, AnnotationState} {
			delete(annotations, k)
		}
	})
}

func patch(ctx context.Context, c client.Client, u *unstructured.Unstructured, edit func(labels, annotations map[string]string)) error {
	before := u.DeepCopy()
	labels, annotations := u.GetLabels(), u.GetAnnotations()
	if labels == nil {
		labels = map[string]string{}
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	edit(labels, annotations)
	u.SetLabels(labels)
	u.SetAnnotations(annotations)
	// The patch carries the resourceVersion read: a host changed since fails with a conflict.
	if err := c.Patch(ctx, u, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("update BareMetalHost %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return nil
}
