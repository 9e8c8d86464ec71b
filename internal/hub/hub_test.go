package hub_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atoll-edge/atoll/internal/hub"
	"github.com/atoll-edge/atoll/pkg/client"
)

// syncBuffer is a log sink that tests can read while the hub writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func startHub(t *testing.T, cfg hub.Config) *hub.Hub {
	t.Helper()
	h, err := hub.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	select {
	case <-h.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("hub not ready after 30s")
	}
	return h
}

func testConfig(t *testing.T, logs *syncBuffer) hub.Config {
	cfg := hub.NewConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.ProbeInterval = 200 * time.Millisecond
	cfg.BackoffCap = 500 * time.Millisecond
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return cfg
}

const marker = "ATOLL-SECRET-MARKER-7f3c9a"

func kubeconfigWith(server, userFields string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: edge
clusters:
- name: edge
  cluster:
    server: %s
contexts:
- name: edge
  context:
    cluster: edge
    user: admin
users:
- name: admin
  user:
%s
`, server, userFields))
}

// TestSecretsNeverLeak uploads kubeconfigs carrying a marker (in a token, in an exec
// plugin's arguments, in a malformed file) and checks that the marker appears in no
// file of the data dir, no log line and no answer of the API.
func TestSecretsNeverLeak(t *testing.T) {
	ctx := context.Background()
	logs := &syncBuffer{}
	cfg := testConfig(t, logs)
	h := startHub(t, cfg)
	c := client.New(h.URL())
	if err := c.CreateClusterProvider(ctx, "cp"); err != nil {
		t.Fatal(err)
	}
	var answers []string
	upload := func(name string, kc []byte) error {
		err := c.RegisterCluster(ctx, "cp", name, kc)
		if err != nil {
			answers = append(answers, err.Error())
		}
		return err
	}
	// Accepted: a bearer token. The server is a closed port, so probes fail and
	// their errors are logged and served as lastError.
	if err := upload("good", kubeconfigWith("https://127.0.0.1:1", "    token: "+marker)); err != nil {
		t.Fatal(err)
	}
	refused := []struct {
		name string
		kc   []byte
		code int
	}{
		{"exec-args", kubeconfigWith("https://127.0.0.1:1", "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: get-token\n      args: [\""+marker+"\"]\n      interactiveMode: Never"), 422},
		{"malformed", []byte("apiVersion: v1\nkind: Config\nusers:\n- name: a\n  user:\n    token: " + marker + "\n  : : :\n"), 400},
		{"duplicate-users", []byte("apiVersion: v1\nkind: Config\nusers:\n- name: a\n  user: {token: " + marker + "}\n- name: a\n  user: {token: " + marker + "}\n"), 0},
	}
	for _, tc := range refused {
		err := upload(tc.name, tc.kc)
		apiErr, ok := err.(*client.Error)
		if !ok || apiErr.Code/100 != 4 || (tc.code != 0 && apiErr.Code != tc.code) {
			t.Fatalf("%s: got %v, want a %d refusal", tc.name, err, tc.code)
		}
	}
	// Let the probes of the good cluster fail a few times.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c.ClusterStatus(ctx, "cp", "good")
		if err != nil {
			t.Fatal(err)
		}
		if st.State == "Unreachable" && st.Failures >= 2 {
			answers = append(answers, fmt.Sprintf("%+v", st))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never became unreachable: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.Close()

	for _, a := range answers {
		if strings.Contains(a, marker) {
			t.Errorf("an API answer contains the secret: %s", a)
		}
	}
	if strings.Contains(logs.String(), marker) {
		t.Errorf("the log contains the secret")
	}
	if !strings.Contains(logs.String(), "cluster unreachable") {
		t.Errorf("the log has no line about the unreachable cluster; did the probe run?")
	}
	files := 0
	err := filepath.WalkDir(cfg.DataDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		if bytes.Contains(data, []byte(marker)) {
			t.Errorf("%s contains the secret in clear", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 3 {
		t.Fatalf("only %d files in the data dir: is etcd writing there?", files)
	}
	info, err := os.Stat(filepath.Join(cfg.DataDir, "secret.key"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("secret.key mode %v, want 0600", info.Mode().Perm())
	}
}

func TestRestartKeepsObjects(t *testing.T) {
	ctx := context.Background()
	logs := &syncBuffer{}
	cfg := testConfig(t, logs)
	h := startHub(t, cfg)
	c := client.New(h.URL())
	must(t, c.CreateProject(ctx, "p1"))
	must(t, c.CreateClusterProvider(ctx, "cp"))
	must(t, c.RegisterCluster(ctx, "cp", "c1", kubeconfigWith("https://127.0.0.1:1", "    token: t"), "edge"))
	h.Close()

	h2 := startHub(t, cfg)
	c2 := client.New(h2.URL())
	var projects []client.Object
	must(t, c2.Do(ctx, "GET", "/v2/projects", nil, &projects))
	if len(projects) != 1 || projects[0].Metadata.Name != "p1" {
		t.Fatalf("projects after restart = %+v", projects)
	}
	names, err := c2.ClustersWithLabel(ctx, "cp", "edge")
	must(t, err)
	if len(names) != 1 || names[0] != "c1" {
		t.Fatalf("clusters labelled edge after restart = %v", names)
	}
	// The restarted hub decrypts the kubeconfig with the key it kept in the data dir.
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c2.ClusterStatus(ctx, "cp", "c1")
		must(t, err)
		if st.State == "Unreachable" && st.Server == "https://127.0.0.1:1" && strings.Contains(st.LastError, "127.0.0.1:1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status after restart = %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestExternalEtcd runs the hub on a separately started etcd process (the one the
// test control planes use) and checks that a second hub on it sees what the first wrote.
func TestExternalEtcd(t *testing.T) {
	ctx := context.Background()
	etcdBin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "etcd")
	if _, err := os.Stat(etcdBin); err != nil {
		t.Fatalf("no etcd binary at %s: run the tests with `make test` (it builds the test binaries with hack/testbin.sh)", etcdBin)
	}
	endpoint := startEtcd(t, etcdBin)

	logs := &syncBuffer{}
	cfg := testConfig(t, logs)
	cfg.EtcdEndpoints = []string{endpoint}
	cfg.EtcdPrefix = "/atoll-ext"
	h := startHub(t, cfg)
	must(t, client.New(h.URL()).CreateProject(ctx, "on-external"))
	h.Close()
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "etcd")); !os.IsNotExist(err) {
		t.Fatalf("the hub started an embedded etcd although --etcd-endpoints was given (stat: %v)", err)
	}

	cfg2 := testConfig(t, logs)
	cfg2.EtcdEndpoints = []string{endpoint}
	cfg2.EtcdPrefix = "/atoll-ext"
	cfg2.SecretKeyFile = filepath.Join(cfg.DataDir, "secret.key")
	h2 := startHub(t, cfg2)
	var p client.Object
	must(t, client.New(h2.URL()).Do(ctx, "GET", "/v2/projects/on-external", nil, &p))
	if p.Metadata.Name != "on-external" {
		t.Fatalf("project = %+v", p)
	}
}

func startEtcd(t *testing.T, bin string) string {
	t.Helper()
	client, peer := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "--data-dir", t.TempDir(), "--name", "ext",
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "ext=http://"+peer, "--log-level", "error")
	logFile, err := os.Create(filepath.Join(t.TempDir(), "etcd.log"))
	must(t, err)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	must(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", client, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return "http://" + client
		}
		if time.Now().After(deadline) {
			data, _ := os.ReadFile(logFile.Name())
			t.Fatalf("etcd did not start: %s", data)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer l.Close()
	return l.Addr().String()
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*hub.Config)
		want   string
	}{
		{"defaults", func(*hub.Config) {}, ""},
		{"no listen", func(c *hub.Config) { c.Listen = "" }, "--listen"},
		{"listen without port", func(c *hub.Config) { c.Listen = "localhost" }, "--listen"},
		{"no data dir", func(c *hub.Config) { c.DataDir = "" }, "--data-dir"},
		{"external etcd without data dir but with key", func(c *hub.Config) {
			c.DataDir, c.EtcdEndpoints, c.SecretKeyFile = "", []string{"http://127.0.0.1:2379"}, "/k"
		}, ""},
		{"bad prefix", func(c *hub.Config) { c.EtcdPrefix = "atoll/" }, "--etcd-prefix"},
		{"bad blob cap", func(c *hub.Config) { c.MaxBlobBytes = 0 }, "--max-blob-bytes"},
		{"bad log level", func(c *hub.Config) { c.LogLevel = "loud" }, "--log-level"},
		{"bad probe interval", func(c *hub.Config) { c.ProbeInterval = 0 }, "--cluster-probe-interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := hub.NewConfig()
			tc.change(&cfg)
			err := cfg.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want valid", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}
