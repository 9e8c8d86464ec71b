// Package inventory writes the kubespray inventory (hosts.ini) of a cluster.
//
// The groups are those of current kubespray — all (with ansible_host and ip),
// kube_control_plane, etcd (the masters), kube_node (the workers, or the masters
// when there are none) and k8s_cluster:children — and, for older kubespray, the
// legacy names kube-master, kube-node and k8s-cluster as children of the new ones.
package inventory

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
)

// Host is one host of the inventory.
type Host struct {
	// Name is the inventory host name (and the Kubernetes node name): a DNS-1123 subdomain.
	Name string
	// IP is the address ansible reaches it on.
	IP   string
	Role bpav1.Role
}

// HostsINI renders the inventory. Hosts appear in name order in each group; the
// output depends only on the set of hosts. It refuses a name or an address that
// could not be written safely.
func HostsINI(cluster string, hosts []Host) (string, error) {
	hosts = slices.Clone(hosts)
	slices.SortFunc(hosts, func(a, b Host) int { return cmp.Compare(a.Name, b.Name) })
	var masters, workers []string
	seen := map[string]bool{}
	for _, h := range hosts {
		if msgs := validation.IsDNS1123Subdomain(h.Name); len(msgs) > 0 {
			return "", fmt.Errorf("inventory host name %q: %s", h.Name, strings.Join(msgs, "; "))
		}
		if seen[h.Name] {
			return "", fmt.Errorf("inventory host name %q appears twice", h.Name)
		}
		seen[h.Name] = true
		if _, err := netip.ParseAddr(h.IP); err != nil {
			return "", fmt.Errorf("inventory host %s: address %q: %w", h.Name, h.IP, err)
		}
		switch h.Role {
		case bpav1.RoleMaster:
			masters = append(masters, h.Name)
		case bpav1.RoleWorker:
			workers = append(workers, h.Name)
		default:
			return "", fmt.Errorf("inventory host %s: unknown role %q", h.Name, h.Role)
		}
	}
	if len(masters) == 0 {
		return "", fmt.Errorf("inventory of cluster %s has no master", cluster)
	}
	nodes := workers
	if len(nodes) == 0 {
		nodes = masters
	}

	var b strings.Builder
	fmt.Fprintf(&b, "# kubespray inventory of cluster %s, written by the BPA operator; edits are overwritten.\n", cluster)
	b.WriteString("[all]\n")
	for _, h := range hosts {
		fmt.Fprintf(&b, "%s ansible_host=%s ip=%s\n", h.Name, h.IP, h.IP)
	}
	group := func(name string, members []string) {
		fmt.Fprintf(&b, "\n[%s]\n", name)
		for _, m := range members {
			b.WriteString(m + "\n")
		}
	}
	group("kube_control_plane", masters)
	group("etcd", masters)
	group("kube_node", nodes)
	group("calico_rr", nil)
	group("k8s_cluster:children", []string{"kube_control_plane", "kube_node", "calico_rr"})
	// The names of kubespray before 2.16.
	group("kube-master:children", []string{"kube_control_plane"})
	group("kube-node:children", []string{"kube_node"})
	group("k8s-cluster:children", []string{"k8s_cluster"})
	return b.String(), nil
}
