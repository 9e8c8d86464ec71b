package bpatest

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// AnsibleGroup is one group of `ansible-inventory --list`.
type AnsibleGroup struct {
	Hosts    []string `json:"hosts"`
	Children []string `json:"children"`
}

// AnsibleInventory is what `ansible-inventory --list` says of an inventory.
type AnsibleInventory struct {
	Groups   map[string]AnsibleGroup
	HostVars map[string]map[string]any
}

// Members returns the hosts of group and of its children, recursively, sorted.
func (inv AnsibleInventory) Members(group string) []string {
	seen := map[string]bool{}
	var walk func(string)
	walk = func(g string) {
		for _, h := range inv.Groups[g].Hosts {
			seen[h] = true
		}
		for _, c := range inv.Groups[g].Children {
			walk(c)
		}
	}
	walk(group)
	return slices.Sorted(maps.Keys(seen))
}

// ParseInventory runs Debian's `ansible-inventory -i FILE --list` on ini, with
// unparsable inventories made fatal, and decodes its JSON. It fails the test when
// ansible-inventory is missing: hack/test-deps.sh installs it, and `make test`
// runs that first.
func ParseInventory(t testing.TB, ini string) AnsibleInventory {
	t.Helper()
	bin, err := exec.LookPath("ansible-inventory")
	if err != nil {
		t.Fatalf("ansible-inventory is not installed: run hack/test-deps.sh (apt-get install ansible) or `make test`: %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "hosts.ini")
	if err := os.WriteFile(path, []byte(ini), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-i", path, "--list")
	cmd.Env = append(os.Environ(), "ANSIBLE_HOME="+dir, "ANSIBLE_LOCAL_TEMP="+dir,
		"ANSIBLE_INVENTORY_UNPARSED_FAILED=true", "ANSIBLE_INVENTORY_ENABLED=ini")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("ansible-inventory --list: %v\nstderr: %s\ninventory:\n%s", err, stderr.String(), ini)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(out, &raw); err != nil {
		t.Fatalf("decode ansible-inventory output: %v\n%s", err, out)
	}
	inv := AnsibleInventory{Groups: map[string]AnsibleGroup{}}
	for name, data := range raw {
		if name == "_meta" {
			var meta struct {
				HostVars map[string]map[string]any `json:"hostvars"`
			}
			if err := json.Unmarshal(data, &meta); err != nil {
				t.Fatalf("decode _meta: %v", err)
			}
			inv.HostVars = meta.HostVars
			continue
		}
		var g AnsibleGroup
		if err := json.Unmarshal(data, &g); err != nil {
			t.Fatalf("decode group %s: %v", name, err)
		}
		inv.Groups[name] = g
	}
	return inv
}
