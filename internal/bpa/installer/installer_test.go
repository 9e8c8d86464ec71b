package installer

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	bpav1 "github.com/atoll-edge/atoll/api/bpa/v1alpha1"
)

// TestEntrypointParses checks the installer script with sh -n and its hand-off
// step with Python's parser (the installer image runs both).
func TestEntrypointParses(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "entrypoint.sh")
	if err := os.WriteFile(script, []byte(Entrypoint), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
	_, py, ok := strings.Cut(Entrypoint, "<<'PY'\n")
	py, _, ok2 := strings.Cut(py, "\nPY\n")
	if !ok || !ok2 {
		t.Fatal("the entrypoint has no python3 here-document")
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is not installed (hack/test-deps.sh installs ansible, which brings it): %v", err)
	}
	cmd := exec.Command(python, "-c", "import ast, sys; ast.parse(sys.stdin.read())")
	cmd.Stdin = strings.NewReader(py)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the hand-off step does not parse: %v\n%s", err, out)
	}
	for _, want := range []string{"BPA_HANDOFF_SECRET", "BPA_NAMESPACE", "artifacts/admin.conf", `"kubeconfig"`, "merge-patch+json"} {
		if !strings.Contains(py, want) {
			t.Errorf("the hand-off step does not mention %s", want)
		}
	}
}

func TestJobName(t *testing.T) {
	long := strings.Repeat("c", 40)
	a := JobName(long, UpdateWorkers, "hosts.ini", "vars")
	if len(a) > 63 || len(validation.IsDNS1123Label(a)) > 0 {
		t.Fatalf("JobName %q (%d characters) is not a valid Job name", a, len(a))
	}
	if b := JobName(long, UpdateWorkers, "hosts.ini", "vars"); b != a {
		t.Errorf("JobName is not deterministic: %s, %s", a, b)
	}
	for _, other := range []string{
		JobName(long, UpdateWorkers, "hosts.ini", "vars2"),
		JobName(long, UpdateMasters, "hosts.ini", "vars"),
		JobName(long, UpdateWorkers, "hosts.inivars"),
	} {
		if other == a {
			t.Errorf("different inputs gave the same name %s", a)
		}
	}
}

func TestBuild(t *testing.T) {
	j := Job{Name: "c-install-x", Namespace: "ns", Cluster: "c", Operation: Install, Image: "kubespray", SSHKeySecret: "key",
		Args: InstallArgs(), Hosts: []string{"ns/b", "ns/a"}, Handoff: true, ServiceAccount: ServiceAccountName("c")}
	job := j.Build()
	if got := job.Annotations[AnnotationHosts]; got != "ns/a,ns/b" {
		t.Errorf("hosts annotation %q", got)
	}
	pod := job.Spec.Template.Spec
	if !*pod.AutomountServiceAccountToken || pod.ServiceAccountName != "c-installer" {
		t.Errorf("an install Job needs its ServiceAccount token for the hand-off")
	}
	j.Handoff, j.Operation = false, Scale
	if pod := j.Build().Spec.Template.Spec; *pod.AutomountServiceAccountToken {
		t.Errorf("a Job without hand-off mounts a ServiceAccount token")
	}
}

func TestArgs(t *testing.T) {
	tests := []struct {
		name string
		got  []string
		want string
	}{
		{"scale workers", ScaleArgs([]string{"w3", "w4"}, false), "ansible-playbook scale.yml --limit=w3,w4"},
		{"scale masters", ScaleArgs([]string{"m2"}, true), "ansible-playbook cluster.yml"},
		{"remove", RemoveArgs([]string{"w3"}), "ansible-playbook remove-node.yml -e node=w3 -e skip_confirmation=yes"},
	}
	for _, tt := range tests {
		if g := strings.Join(tt.got, " "); g != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, g, tt.want)
		}
	}
	pkgs, err := PackageArgs([]string{"a", "b"}, []bpav1.Package{{Name: "curl", Version: "7.88"}, {Name: "jq"}})
	if err != nil {
		t.Fatal(err)
	}
	if g := strings.Join(pkgs, " "); g != `ansible a:b -m ansible.builtin.apt -a {"allow_downgrade":true,"name":["curl=7.88","jq"],"state":"present","update_cache":true}` {
		t.Errorf("package args %q", g)
	}
}

func TestVars(t *testing.T) {
	out, err := Vars("c", &bpav1.ProvisioningSpec{KubernetesVersion: "v1.31.4", PodSubnet: "10.233.64.0/18", Addons: []string{"multus"}})
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := yaml.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("vars.yml does not parse: %v\n%s", err, out)
	}
	if v["kube_version"] != "v1.31.4" || v["kube_pods_subnet"] != "10.233.64.0/18" || v["kubeconfig_localhost"] != true {
		t.Errorf("vars %v", v)
	}
	if a, _ := v["bpa_addons"].([]any); len(a) != 1 || a[0] != "multus" {
		t.Errorf("bpa_addons %v", v["bpa_addons"])
	}
}
