package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/atoll-edge/atoll/pkg/client"
	"github.com/atoll-edge/atoll/test/edge"
)

// TestReadmeWalkthrough runs the README's walk-through, as a person would paste it,
// against the hub and a real API server, and checks that it ends deployed.
func TestReadmeWalkthrough(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "<!-- walkthrough:start -->")
	end := strings.Index(text, "<!-- walkthrough:end -->")
	if start < 0 || end < start {
		t.Fatal("README.md has no walkthrough:start/end block")
	}
	block := text[start:end]
	open := strings.Index(block, "```sh\n")
	closeAt := strings.LastIndex(block, "```")
	if open < 0 || closeAt <= open {
		t.Fatal("the walk-through block has no ```sh fence")
	}
	script := block[open+len("```sh\n") : closeAt]

	clusters := edge.Start(t, 1, edge.Options{Workloads: true})
	kubeconfig := filepath.Join(t.TempDir(), "site-1.kubeconfig")
	if err := os.WriteFile(kubeconfig, clusters[0].Kubeconfig(), 0o600); err != nil {
		t.Fatal(err)
	}
	hub := startHubProcess(t, t.TempDir(), freeAddr(t))

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "HUB="+hub.url, "KUBECONFIG_FILE="+kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the walk-through failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"deployedStatus":"Applied"`) {
		t.Fatalf("the walk-through did not end Applied:\n%s", out)
	}
	c := client.New(hub.url)
	dig := "/v2/projects/shop/composite-apps/retail/v1/deployment-intent-groups/launch"
	st := waitDIG(t, c, dig, "status=ready", "ready", func(s digStatus) bool {
		return s.ReadyCounts["Ready"] == 3 && len(s.ReadyCounts) == 1
	})
	data, _ := json.Marshal(st)
	t.Logf("final status: %s", data)
}
