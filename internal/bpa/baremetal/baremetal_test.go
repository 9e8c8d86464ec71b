package baremetal

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
)

func TestToHost(t *testing.T) {
	tests := []struct {
		name     string
		consumer any
		want     string
	}{
		{"no consumer", nil, ""},
		{"consumer as the test CRD declares it (a string)", "capi-machine-1", "capi-machine-1"},
		{"consumer as upstream metal3 has it (a reference)", map[string]any{"kind": "Metal3Machine", "namespace": "capi", "name": "m1"}, "Metal3Machine capi/m1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"metadata": map[string]any{"name": "h1", "namespace": "metal",
					"labels": map[string]any{LabelClaimUID: "uid-1", LabelRole: "worker"}},
				"spec": map[string]any{"bootMACAddress": "52:54:00:AA:BB:CC"},
				"status": map[string]any{
					"operationalStatus": "OK",
					"provisioning":      map[string]any{"state": "available"},
					"hardware": map[string]any{"cpu": map[string]any{"count": int64(8)}, "ramMebibytes": int64(16384),
						"nics": []any{map[string]any{"mac": "52:54:00:AA:BB:CC", "ip": "192.0.2.1"}, map[string]any{"mac": "52:54:00:AA:BB:CD"}}},
				},
			}}
			if tt.consumer != nil {
				u.Object["spec"].(map[string]any)["consumerRef"] = tt.consumer
			}
			h := ToHost(u)
			if h.ID() != "metal/h1" || h.State != "available" || h.CPUs != 8 || h.MemoryMiB != 16384 || h.BootMAC != "52:54:00:aa:bb:cc" ||
				len(h.NICs) != 2 || h.NICs[0].IP != "192.0.2.1" || h.NICs[1].MAC != "52:54:00:aa:bb:cd" ||
				h.ClaimUID != "uid-1" || h.ClaimRole != bpav1.RoleWorker || h.Consumer != tt.want {
				t.Fatalf("ToHost = %+v (consumer want %q)", h, tt.want)
			}
		})
	}
}
