package inventory_test

import (
	"slices"
	"strings"
	"testing"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
	"github.com/atoll-edge/atoll/internal/bpa/bpatest"
	"github.com/atoll-edge/atoll/internal/bpa/inventory"
)

func TestHostsINIWithAnsible(t *testing.T) {
	tests := []struct {
		name      string
		hosts     []inventory.Host
		wantGroup map[string][]string // group → hosts (sorted)
		wantKids  map[string][]string // group → children (sorted)
	}{
		{
			name: "masters and workers",
			hosts: []inventory.Host{
				{Name: "worker-b", IP: "10.0.0.12", Role: bpav1.RoleWorker},
				{Name: "master-a", IP: "10.0.0.1", Role: bpav1.RoleMaster},
				{Name: "worker-a", IP: "10.0.0.11", Role: bpav1.RoleWorker},
			},
			wantGroup: map[string][]string{
				"kube_control_plane": {"master-a"},
				"etcd":               {"master-a"},
				"kube_node":          {"worker-a", "worker-b"},
			},
			wantKids: map[string][]string{
				"k8s_cluster": {"calico_rr", "kube_control_plane", "kube_node"},
				"kube-master": {"kube_control_plane"},
				"kube-node":   {"kube_node"},
				"k8s-cluster": {"k8s_cluster"},
			},
		},
		{
			name: "masters only run workloads too; IPv6",
			hosts: []inventory.Host{
				{Name: "m1", IP: "fd00::1", Role: bpav1.RoleMaster},
				{Name: "m2", IP: "fd00::2", Role: bpav1.RoleMaster},
				{Name: "m3", IP: "fd00::3", Role: bpav1.RoleMaster},
			},
			wantGroup: map[string][]string{
				"kube_control_plane": {"m1", "m2", "m3"},
				"etcd":               {"m1", "m2", "m3"},
				"kube_node":          {"m1", "m2", "m3"},
			},
			wantKids: map[string][]string{"k8s_cluster": {"calico_rr", "kube_control_plane", "kube_node"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ini, err := inventory.HostsINI("edge-1", tt.hosts)
			if err != nil {
				t.Fatal(err)
			}
			list := bpatest.ParseInventory(t, ini)
			for group, want := range tt.wantGroup {
				got := slices.Sorted(slices.Values(list.Groups[group].Hosts))
				if !slices.Equal(got, want) {
					t.Errorf("group %s hosts = %v, want %v\n%s", group, got, want, ini)
				}
			}
			for group, want := range tt.wantKids {
				got := slices.Sorted(slices.Values(list.Groups[group].Children))
				if !slices.Equal(got, want) {
					t.Errorf("group %s children = %v, want %v\n%s", group, got, want, ini)
				}
			}
			// Through the children, every host is in all, k8s_cluster and k8s-cluster,
			// and the legacy groups hold what the new ones hold.
			var everyone []string
			for _, h := range tt.hosts {
				everyone = append(everyone, h.Name)
			}
			slices.Sort(everyone)
			for group, want := range map[string][]string{
				"all": everyone, "k8s_cluster": everyone, "k8s-cluster": everyone,
				"kube-master": list.Members("kube_control_plane"), "kube-node": list.Members("kube_node"),
			} {
				if got := list.Members(group); !slices.Equal(got, want) {
					t.Errorf("group %s holds %v, want %v\n%s", group, got, want, ini)
				}
			}
			for _, h := range tt.hosts {
				vars := list.HostVars[h.Name]
				if vars["ansible_host"] != h.IP || vars["ip"] != h.IP {
					t.Errorf("host %s vars = %v, want ansible_host and ip %s", h.Name, vars, h.IP)
				}
			}
		})
	}
}

func TestHostsINIRefuses(t *testing.T) {
	tests := []struct {
		name  string
		hosts []inventory.Host
		want  string
	}{
		{"no master", []inventory.Host{{Name: "w", IP: "10.0.0.1", Role: bpav1.RoleWorker}}, "no master"},
		{"bad address", []inventory.Host{{Name: "m", IP: "10.0.0.1 ansible_user=root", Role: bpav1.RoleMaster}}, "address"},
		{"bad name", []inventory.Host{{Name: "m x", IP: "10.0.0.1", Role: bpav1.RoleMaster}}, "host name"},
		{"duplicate", []inventory.Host{{Name: "m", IP: "10.0.0.1", Role: bpav1.RoleMaster}, {Name: "m", IP: "10.0.0.2", Role: bpav1.RoleWorker}}, "twice"},
		{"unknown role", []inventory.Host{{Name: "m", IP: "10.0.0.1", Role: "etcd"}}, "unknown role"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := inventory.HostsINI("c", tt.hosts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("HostsINI error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

func TestHostsINIIsDeterministic(t *testing.T) {
	a := []inventory.Host{{Name: "m", IP: "10.0.0.1", Role: bpav1.RoleMaster}, {Name: "w", IP: "10.0.0.2", Role: bpav1.RoleWorker}}
	b := []inventory.Host{a[1], a[0]}
	x, err1 := inventory.HostsINI("c", a)
	y, err2 := inventory.HostsINI("c", b)
	if err1 != nil || err2 != nil || x != y {
		t.Fatalf("the order of hosts changed the inventory (%v, %v):\n%s\n---\n%s", err1, err2, x, y)
	}
}
