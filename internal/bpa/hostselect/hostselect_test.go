package hostselect

import (
	"slices"
	"strings"
	"testing"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
)

const me = "uid-me"

func host(name string, cpus, mem int64, ip string, mut ...func(*Host)) Host {
	mac := "52:54:00:00:00:" + name[len(name)-2:]
	h := Host{Namespace: "metal", Name: name, State: "ready", OperationalStatus: "OK", CPUs: cpus, MemoryMiB: mem,
		BootMAC: mac, NICs: []NIC{{MAC: mac, IP: ip}}}
	for _, m := range mut {
		m(&h)
	}
	return h
}

func claimedBy(uid string, role bpav1.Role) func(*Host) {
	return func(h *Host) { h.ClaimUID, h.ClaimRole = uid, role }
}

func TestSelect(t *testing.T) {
	three := func(count int32) *bpav1.RoleRequirement {
		return &bpav1.RoleRequirement{Count: &count, MinCPU: 4, MinMemoryMiB: 8192}
	}
	tests := []struct {
		name        string
		hosts       []Host
		masters     *bpav1.RoleRequirement
		workers     *bpav1.RoleRequirement
		wantMasters []string // host names
		wantWorkers []string
		wantMissing []string // substrings of the Missing messages, in order
	}{
		{
			name: "hardware minimums pick hosts in name order, masters first",
			hosts: []Host{
				host("h-03", 8, 16384, "10.0.0.3"), host("h-01", 2, 4096, "10.0.0.1"),
				host("h-02", 16, 32768, "10.0.0.2"), host("h-04", 4, 8192, "10.0.0.4"),
			},
			masters:     &bpav1.RoleRequirement{Count: ptr(int32(1)), MinCPU: 8},
			workers:     three(2),
			wantMasters: []string{"h-02"},
			wantWorkers: []string{"h-03", "h-04"},
		},
		{
			name:        "MACs match without regard to case, on any NIC",
			hosts:       []Host{host("h-01", 1, 1, "10.0.0.1", func(h *Host) { h.NICs = append(h.NICs, NIC{MAC: "aa:bb:cc:dd:ee:ff"}) }), host("h-02", 1, 1, "10.0.0.2")},
			masters:     &bpav1.RoleRequirement{MACs: []string{"AA:BB:CC:DD:EE:FF"}},
			wantMasters: []string{"h-01"},
		},
		{
			name:        "a MAC nobody has, and a host of another Provisioning",
			hosts:       []Host{host("h-01", 8, 8192, "10.0.0.1", claimedBy("uid-other", bpav1.RoleWorker)), host("h-02", 8, 8192, "10.0.0.2")},
			masters:     &bpav1.RoleRequirement{MACs: []string{"52:54:00:00:00:01", "52:54:00:00:00:02", "52:54:00:00:00:09"}},
			wantMasters: []string{"h-02"},
			wantMissing: []string{"masters: 1 of 3 hosts named by MAC are usable: host metal/h-01 (MAC 52:54:00:00:00:01) is claimed by another Provisioning; no BareMetalHost has MAC 52:54:00:00:00:09"},
		},
		{
			name: "too few hosts: the message says what is missing and why",
			hosts: []Host{
				host("h-01", 8, 16384, "10.0.0.1"),
				host("h-02", 2, 16384, "10.0.0.2"),
				host("h-03", 8, 16384, "10.0.0.3", func(h *Host) { h.State = "inspecting" }),
				host("h-04", 8, 16384, "10.0.0.4", func(h *Host) { h.Consumer = "capi/machine-1" }),
				host("h-05", 8, 16384, ""),
			},
			masters:     three(3),
			wantMasters: []string{"h-01"},
			wantMissing: []string{"masters: need 3 hosts with at least 4 CPUs, 8192 MiB of memory, found 1 (metal/h-01); of the other hosts 1 has fewer than 4 CPUs, 1 has no IP address, 1 is in provisioning state \"inspecting\", 1 is used by capi/machine-1"},
		},
		{
			name: "members stay when a host with a lower name appears",
			hosts: []Host{
				host("h-01", 8, 16384, "10.0.0.1"),
				host("h-05", 8, 16384, "10.0.0.5", claimedBy(me, bpav1.RoleMaster), func(h *Host) { h.State = "provisioned" }),
				host("h-06", 8, 16384, "10.0.0.6", claimedBy(me, bpav1.RoleWorker)),
			},
			masters:     three(1),
			workers:     three(1),
			wantMasters: []string{"h-05"},
			wantWorkers: []string{"h-06"},
		},
		{
			name: "a lower count releases the members last in name order",
			hosts: []Host{
				host("h-01", 8, 16384, "10.0.0.1", claimedBy(me, bpav1.RoleMaster)),
				host("h-02", 8, 16384, "10.0.0.2", claimedBy(me, bpav1.RoleWorker)),
				host("h-03", 8, 16384, "10.0.0.3", claimedBy(me, bpav1.RoleWorker)),
				host("h-04", 8, 16384, "10.0.0.4", claimedBy(me, bpav1.RoleWorker)),
			},
			masters:     three(1),
			workers:     three(2),
			wantMasters: []string{"h-01"},
			wantWorkers: []string{"h-02", "h-03"},
		},
		{
			name: "a member keeps its role: a worker does not become a master",
			hosts: []Host{
				host("h-01", 8, 16384, "10.0.0.1", claimedBy(me, bpav1.RoleWorker)),
				host("h-02", 8, 16384, "10.0.0.2"),
			},
			masters:     three(1),
			wantMasters: []string{"h-02"},
		},
		{
			name:    "a host serves one role",
			hosts:   []Host{host("h-01", 8, 16384, "10.0.0.1")},
			masters: &bpav1.RoleRequirement{MACs: []string{"52:54:00:00:00:01"}}, workers: three(1),
			wantMasters: []string{"h-01"},
			wantMissing: []string{"workers: need 1 hosts with at least 4 CPUs, 8192 MiB of memory, found 0; of the other hosts 1 is already chosen as a master"},
		},
		{
			name:    "no workers wanted",
			hosts:   []Host{host("h-01", 8, 16384, "10.0.0.1")},
			masters: three(1), workers: three(0),
			wantMasters: []string{"h-01"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := Select(tt.hosts, []Requirement{FromSpec(bpav1.RoleMaster, tt.masters), FromSpec(bpav1.RoleWorker, tt.workers)}, Options{Owner: me})
			var masters, workers []string
			for _, c := range res.Chosen {
				if c.Role == bpav1.RoleMaster {
					masters = append(masters, c.Host.Name)
				} else {
					workers = append(workers, c.Host.Name)
				}
				if c.IP == "" || c.HostName == "" {
					t.Errorf("choice %+v lacks an IP or a host name", c)
				}
			}
			if !slices.Equal(masters, tt.wantMasters) || !slices.Equal(workers, tt.wantWorkers) {
				t.Errorf("chosen masters %v workers %v, want %v and %v", masters, workers, tt.wantMasters, tt.wantWorkers)
			}
			if len(res.Missing) != len(tt.wantMissing) {
				t.Fatalf("missing = %q, want %d messages like %q", res.Missing, len(tt.wantMissing), tt.wantMissing)
			}
			for i, want := range tt.wantMissing {
				if !strings.Contains(res.Missing[i], want) {
					t.Errorf("missing[%d] = %q\nwant it to contain %q", i, res.Missing[i], want)
				}
			}
		})
	}
}

func TestSelectNamesDuplicateHostsByNamespace(t *testing.T) {
	a := host("h-01", 8, 8192, "10.0.0.1")
	b := host("h-01", 8, 8192, "10.0.0.2")
	b.Namespace = "rack-2"
	res := Select([]Host{a, b}, []Requirement{{Role: bpav1.RoleMaster, Count: 2}}, Options{Owner: me})
	var names []string
	for _, c := range res.Chosen {
		names = append(names, c.HostName)
	}
	if want := []string{"metal-h-01", "rack-2-h-01"}; !slices.Equal(names, want) {
		t.Fatalf("host names %v, want %v", names, want)
	}
}

func TestSelectUsesTheNamedNICsAddress(t *testing.T) {
	h := host("h-01", 8, 8192, "10.0.0.1", func(h *Host) { h.NICs = append(h.NICs, NIC{MAC: "aa:aa:aa:aa:aa:aa", IP: "192.0.2.7"}) })
	res := Select([]Host{h}, []Requirement{{Role: bpav1.RoleMaster, MACs: []string{"aa:aa:aa:aa:aa:aa"}}}, Options{Owner: me})
	if len(res.Chosen) != 1 || res.Chosen[0].IP != "192.0.2.7" || res.Chosen[0].MAC != "aa:aa:aa:aa:aa:aa" {
		t.Fatalf("chosen %+v, want h-01 reached on 192.0.2.7", res.Chosen)
	}
}

func ptr[T any](v T) *T { return &v }
