// Package hostselect chooses the bare-metal hosts of a cluster: for each role, the
// hosts named by MAC address or the hosts that have at least the hardware asked
// for, among those free to take. It is pure logic: the operator reads the
// BareMetalHosts, calls Select, and claims what it returns.
//
// The choice is deterministic and stable. Hosts a Provisioning already holds keep
// their role and are kept first (in name order); free hosts are taken in
// (namespace, name) order. So adding a host never displaces a member, and lowering
// a count releases the members last in name order.
package hostselect

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
)

// DefaultStates are the provisioning states (status.provisioning.state) in which
// a free host may be taken: inspected and ready for use, or carrying an operating
// system already.
var DefaultStates = []string{"ready", "available", "provisioned", "externally provisioned"}

// NIC is one network interface of a host.
type NIC struct {
	MAC string // lower case
	IP  string
}

// Host is what selection needs to know of one BareMetalHost.
type Host struct {
	Namespace, Name string
	// State is status.provisioning.state; OperationalStatus is status.operationalStatus.
	State, OperationalStatus string
	// Consumer is set when spec.consumerRef names another user of the host.
	Consumer  string
	CPUs      int64
	MemoryMiB int64
	NICs      []NIC
	BootMAC   string // lower case
	// ClaimUID is the UID of the Provisioning that holds the host ("" when free);
	// ClaimRole the role it holds it for.
	ClaimUID  string
	ClaimRole bpav1.Role
}

// ID is namespace/name.
func (h Host) ID() string { return h.Namespace + "/" + h.Name }

// Requirement is what one role needs.
type Requirement struct {
	Role bpav1.Role
	// MACs, when not empty, names the exact hosts (lower case); else Count hosts.
	MACs         []string
	Count        int
	MinCPU       int64
	MinMemoryMiB int64
	MinNICs      int
}

// FromSpec turns a role requirement of the API into a Requirement (nil r: none wanted).
func FromSpec(role bpav1.Role, r *bpav1.RoleRequirement) Requirement {
	req := Requirement{Role: role}
	if r == nil {
		return req
	}
	for _, m := range r.MACs {
		m = strings.ToLower(m)
		if !slices.Contains(req.MACs, m) {
			req.MACs = append(req.MACs, m)
		}
	}
	if r.Count != nil {
		req.Count = int(*r.Count)
	}
	req.MinCPU, req.MinMemoryMiB, req.MinNICs = int64(r.MinCPU), r.MinMemoryMiB, int(r.MinNICs)
	return req
}

// Choice is one chosen host.
type Choice struct {
	Host Host
	Role bpav1.Role
	// HostName is the host's inventory and node name: its BareMetalHost name, or
	// namespace-name when two chosen hosts share a name.
	HostName string
	MAC, IP  string
}

// Result is the outcome of Select.
type Result struct {
	// Chosen are the hosts of every role that could be satisfied, in role order,
	// each role in name order.
	Chosen []Choice
	// Missing says, per role that could not be satisfied, what is missing. Empty
	// when every role is satisfied.
	Missing []string
}

// Options are the rules of Select.
type Options struct {
	// Owner is the UID of the Provisioning that selects.
	Owner string
	// States are the provisioning states in which a free host may be taken
	// (DefaultStates when empty).
	States []string
}

// Select chooses hosts for reqs, in order (masters first): a host serves one role.
func Select(hosts []Host, reqs []Requirement, opts Options) Result {
	states := opts.States
	if len(states) == 0 {
		states = DefaultStates
	}
	hosts = slices.Clone(hosts)
	slices.SortFunc(hosts, func(a, b Host) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	s := selector{hosts: hosts, owner: opts.Owner, states: states, used: map[string]bpav1.Role{}}
	var res Result
	for _, req := range reqs {
		var chosen []Choice
		var missing string
		if len(req.MACs) > 0 {
			chosen, missing = s.byMAC(req)
		} else {
			chosen, missing = s.byHardware(req)
		}
		if missing != "" {
			res.Missing = append(res.Missing, missing)
		}
		for _, c := range chosen {
			s.used[c.Host.ID()] = req.Role
		}
		res.Chosen = append(res.Chosen, chosen...)
	}
	nameHosts(res.Chosen)
	return res
}

type selector struct {
	hosts  []Host
	owner  string
	states []string
	used   map[string]bpav1.Role // host ID → role it was chosen for
}

// why says why a host cannot serve req ("" when it can), in a few words.
func (s *selector) why(h Host, req Requirement) string {
	if role, ok := s.used[h.ID()]; ok {
		return "is already chosen as a " + string(role)
	}
	if h.ClaimUID == s.owner && s.owner != "" {
		// Ours: a member keeps its role, whatever its state or hardware data say now.
		if h.ClaimRole != req.Role {
			return "is held as a " + string(h.ClaimRole)
		}
		if primaryIP(h, "") == "" {
			return "has no IP address"
		}
		return ""
	}
	switch {
	case h.ClaimUID != "":
		return "is claimed by another Provisioning"
	case h.Consumer != "":
		return "is used by " + h.Consumer
	case !slices.Contains(s.states, h.State):
		return fmt.Sprintf("is in provisioning state %q", h.State)
	case h.OperationalStatus == "error" || h.OperationalStatus == "detached":
		return fmt.Sprintf("has operational status %q", h.OperationalStatus)
	case h.CPUs < req.MinCPU:
		return fmt.Sprintf("has fewer than %d CPUs", req.MinCPU)
	case h.MemoryMiB < req.MinMemoryMiB:
		return fmt.Sprintf("has less than %d MiB of memory", req.MinMemoryMiB)
	case len(h.NICs) < req.MinNICs:
		return fmt.Sprintf("has fewer than %d NICs", req.MinNICs)
	case primaryIP(h, "") == "":
		return "has no IP address"
	}
	return ""
}

func (s *selector) byMAC(req Requirement) ([]Choice, string) {
	var chosen []Choice
	var problems []string
	for _, mac := range req.MACs {
		i := slices.IndexFunc(s.hosts, func(h Host) bool { return hasMAC(h, mac) })
		if i < 0 {
			problems = append(problems, fmt.Sprintf("no BareMetalHost has MAC %s", mac))
			continue
		}
		h := s.hosts[i]
		if why := s.why(h, req); why != "" {
			problems = append(problems, fmt.Sprintf("host %s (MAC %s) %s", h.ID(), mac, why))
			continue
		}
		chosen = append(chosen, Choice{Host: h, Role: req.Role, MAC: mac, IP: primaryIP(h, mac)})
	}
	slices.SortFunc(chosen, func(a, b Choice) int { return cmp.Compare(a.Host.ID(), b.Host.ID()) })
	if len(problems) > 0 {
		return chosen, fmt.Sprintf("%ss: %d of %d hosts named by MAC are usable: %s", req.Role, len(chosen), len(req.MACs), strings.Join(problems, "; "))
	}
	return chosen, ""
}

func (s *selector) byHardware(req Requirement) ([]Choice, string) {
	if req.Count == 0 {
		return nil, ""
	}
	// Members first, so that they stay; then free hosts in name order.
	order := slices.Clone(s.hosts)
	slices.SortStableFunc(order, func(a, b Host) int {
		return cmp.Compare(rank(a, s.owner, req.Role), rank(b, s.owner, req.Role))
	})
	var chosen []Choice
	reasons := map[string]int{}
	for _, h := range order {
		if len(chosen) == req.Count {
			break
		}
		if why := s.why(h, req); why != "" {
			reasons[why]++
			continue
		}
		mac := h.BootMAC
		if ip := nicIP(h, mac); ip == "" {
			mac = firstMACWithIP(h)
		}
		chosen = append(chosen, Choice{Host: h, Role: req.Role, MAC: mac, IP: primaryIP(h, mac)})
	}
	slices.SortFunc(chosen, func(a, b Choice) int { return cmp.Compare(a.Host.ID(), b.Host.ID()) })
	if len(chosen) == req.Count {
		return chosen, ""
	}
	var names []string
	for _, c := range chosen {
		names = append(names, c.Host.ID())
	}
	msg := fmt.Sprintf("%ss: need %d hosts with %s, found %d", req.Role, req.Count, describe(req), len(chosen))
	if len(names) > 0 {
		msg += " (" + strings.Join(names, ", ") + ")"
	}
	if len(reasons) > 0 {
		var parts []string
		for why, n := range reasons {
			parts = append(parts, fmt.Sprintf("%d %s", n, why))
		}
		slices.Sort(parts)
		msg += "; of the other hosts " + strings.Join(parts, ", ")
	}
	return chosen, msg
}

// rank orders hosts for a role: members of the role, then everything else.
func rank(h Host, owner string, role bpav1.Role) int {
	if owner != "" && h.ClaimUID == owner && h.ClaimRole == role {
		return 0
	}
	return 1
}

func describe(req Requirement) string {
	var parts []string
	if req.MinCPU > 0 {
		parts = append(parts, fmt.Sprintf("at least %d CPUs", req.MinCPU))
	}
	if req.MinMemoryMiB > 0 {
		parts = append(parts, fmt.Sprintf("%d MiB of memory", req.MinMemoryMiB))
	}
	if req.MinNICs > 0 {
		parts = append(parts, fmt.Sprintf("%d NICs", req.MinNICs))
	}
	if len(parts) == 0 {
		return "any hardware"
	}
	return strings.Join(parts, ", ")
}

func hasMAC(h Host, mac string) bool {
	return h.BootMAC == mac || slices.ContainsFunc(h.NICs, func(n NIC) bool { return n.MAC == mac })
}

func nicIP(h Host, mac string) string {
	if mac == "" {
		return ""
	}
	for _, n := range h.NICs {
		if n.MAC == mac && n.IP != "" {
			return n.IP
		}
	}
	return ""
}

func firstMACWithIP(h Host) string {
	for _, n := range h.NICs {
		if n.IP != "" {
			return n.MAC
		}
	}
	return ""
}

// primaryIP is the IP of the NIC with mac, else of the boot NIC, else the first IP.
func primaryIP(h Host, mac string) string {
	return cmp.Or(nicIP(h, mac), nicIP(h, h.BootMAC), nicIP(h, firstMACWithIP(h)))
}

// nameHosts gives each choice its inventory name.
func nameHosts(cs []Choice) {
	count := map[string]int{}
	for _, c := range cs {
		count[c.Host.Name]++
	}
	for i := range cs {
		cs[i].HostName = cs[i].Host.Name
		if count[cs[i].Host.Name] > 1 {
			cs[i].HostName = cs[i].Host.Namespace + "-" + cs[i].Host.Name
		}
	}
}
