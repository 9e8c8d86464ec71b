package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atoll-edge/atoll/internal/api"
	"github.com/atoll-edge/atoll/internal/hub"
	"github.com/atoll-edge/atoll/pkg/client"
)

// logBuffer collects the hub's log lines; the hub writes from several goroutines
// while a test may read.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testHub is a hub started in-process for one test.
type testHub struct {
	*hub.Hub
	url  string
	logs *logBuffer
	cfg  hub.Config
}

// newHub starts a hub with the default test configuration and returns its base URL.
func newHub(t *testing.T) string {
	t.Helper()
	return startHub(t, nil).url
}

// startHub starts a hub through hub.Start on a fresh data dir (unless configure sets
// one) and a free loopback port, waits until it is ready and closes it at the end
// of the test. configure, when not nil, adjusts the config first.
func startHub(t *testing.T, configure func(*hub.Config)) *testHub {
	t.Helper()
	logs := &logBuffer{}
	cfg := hub.NewConfig()
	cfg.DataDir = t.TempDir()
	cfg.Listen = "127.0.0.1:0"
	cfg.Logger = slog.New(slog.NewJSONHandler(logs, nil))
	if configure != nil {
		configure(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := hub.Start(ctx, cfg)
	if err != nil {
		t.Fatalf("hub.Start: %v\nlogs:\n%s", err, logs)
	}
	t.Cleanup(func() {
		h.Close()
		// A recovered panic or an internal error is a bug whatever the test checked.
		for _, line := range strings.Split(logs.String(), "\n") {
			if strings.Contains(line, `"msg":"panic serving request"`) || strings.Contains(line, `"msg":"request failed"`) {
				t.Errorf("the hub logged a failure: %s", line)
			}
		}
	})
	select {
	case <-h.Ready():
	case err := <-h.Err():
		t.Fatalf("hub failed while starting: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatalf("hub not ready after 30s; logs:\n%s", logs)
	}
	return &testHub{Hub: h, url: h.URL(), logs: logs, cfg: cfg}
}

// body is a request body with its content type ("" sends none).
type body struct {
	ctype string
	data  []byte
}

func jsonBody(s string) body { return body{ctype: "application/json", data: []byte(s)} }

// upload builds a multipart body the way emcoctl sends one: a plain "metadata"
// field (no content type on that part) and a "file" part whose filename is
// literally "filename" and whose content type is application/octet-stream. A nil
// metadata or file leaves that part out.
func upload(t testing.TB, metadata, file []byte) body {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	if metadata != nil {
		if err := mw.WriteField("metadata", string(metadata)); err != nil {
			t.Fatal(err)
		}
	}
	if file != nil {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="filename"`)
		h.Set("Content-Type", "application/octet-stream")
		fw, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write(file); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return body{ctype: mw.FormDataContentType(), data: buf.Bytes()}
}

// response is what the hub answered.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string {
	return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body))
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// request sends method base+path with an optional body (b.data nil for none), the
// body's content type and extra headers, and returns the answer. No Accept header is
// sent unless headers has one.
func request(t testing.TB, base, method, path string, b body, headers map[string]string) response {
	t.Helper()
	var rd io.Reader
	if b.data != nil {
		rd = bytes.NewReader(b.data)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, base+path, rd)
	if err != nil {
		t.Fatalf("build %s %s: %v", method, path, err)
	}
	if b.ctype != "" {
		req.Header.Set("Content-Type", b.ctype)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// wantStatus fails the test unless r has status code want.
func wantStatus(t testing.TB, what string, r response, want int) {
	t.Helper()
	if r.status != want {
		t.Fatalf("%s: got %s, want status %d", what, r, want)
	}
}

// wantJSONType checks that r says it is JSON and is.
func wantJSONType(t testing.TB, what string, r response) {
	t.Helper()
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s: got Content-Type %q, want application/json", what, ct)
	}
	if !json.Valid(r.body) {
		t.Errorf("%s: got body %q, want valid JSON", what, r.body)
	}
}

// wantError checks that r is an error answer {code, reason, message} with status
// code and a message containing every substring of msgs.
func wantError(t testing.TB, what string, r response, code int, msgs ...string) api.Error {
	t.Helper()
	if r.status != code {
		t.Errorf("%s: got %s, want status %d", what, r, code)
	}
	wantJSONType(t, what, r)
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &fields); err != nil {
		t.Errorf("%s: got body %q, want a JSON object: %v", what, r.body, err)
		return api.Error{}
	}
	for _, f := range []string{"code", "reason", "message"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("%s: got body %s, want a %q field", what, r.body, f)
		}
	}
	var e api.Error
	if err := json.Unmarshal(r.body, &e); err != nil {
		t.Errorf("%s: got body %s, which is not an {code, reason, message}: %v", what, r.body, err)
	}
	if e.Code != r.status {
		t.Errorf("%s: got code %d in the body, want the status %d", what, e.Code, r.status)
	}
	if e.Reason == "" || e.Message == "" {
		t.Errorf("%s: got reason %q and message %q, want both set", what, e.Reason, e.Message)
	}
	for _, m := range msgs {
		if !strings.Contains(e.Message, m) {
			t.Errorf("%s: got message %q, want it to contain %q", what, e.Message, m)
		}
	}
	return e
}

// jsonEqual reports whether two JSON texts hold the same value.
func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Errorf("not JSON: %q: %v", a, err)
		return false
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Errorf("not JSON: %q: %v", b, err)
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// wantJSON checks that r's body is the JSON value want.
func wantJSON(t testing.TB, what string, r response, want string) {
	t.Helper()
	wantJSONType(t, what, r)
	if !jsonEqual(t, r.body, []byte(want)) {
		t.Errorf("%s: got body %s, want %s", what, bytes.TrimSpace(r.body), want)
	}
}

// kubeconfigOpts describe a test kubeconfig; the zero value is a valid one with a
// token, for a server on an unused loopback port.
type kubeconfigOpts struct {
	server    string // default https://127.0.0.1:1
	cluster   string // extra lines of the cluster, 4 spaces deep
	user      string // lines of the user, 4 spaces deep (default a token)
	noCurrent bool   // leave out current-context
}

// testToken is the credential of the test kubeconfigs: it must never reach a log
// or an answer.
const testToken = "t0ken-d8f3a1-never-logged"

func kubeconfigFor(o kubeconfigOpts) []byte {
	if o.server == "" {
		o.server = "https://127.0.0.1:1"
	}
	if o.cluster == "" {
		o.cluster = "    insecure-skip-tls-verify: true\n"
	}
	if o.user == "" {
		o.user = "    token: " + testToken + "\n"
	}
	current := "current-context: edge\n"
	if o.noCurrent {
		current = ""
	}
	return []byte("apiVersion: v1\nkind: Config\n" + current +
		"clusters:\n- name: edge-cluster\n  cluster:\n    server: " + o.server + "\n" + o.cluster +
		"users:\n- name: edge-admin\n  user:\n" + o.user +
		"contexts:\n- name: edge\n  context:\n    cluster: edge-cluster\n    user: edge-admin\n")
}

// goodKubeconfig is a valid kubeconfig for https://127.0.0.1:1, where nothing listens.
var goodKubeconfig = kubeconfigFor(kubeconfigOpts{})

// execUser is a user whose credentials come from an exec plugin (a command that
// does not exist, so that nothing runs even where it is accepted).
const execUser = "    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n      command: atoll-test-no-such-credential-plugin\n"

// clusterMeta is the metadata field of a cluster upload.
func clusterMeta(name string) []byte {
	return []byte(`{"metadata":{"name":"` + name + `"}}`)
}

// fixture creates, through the Go client, provider cp with cluster c1 labelled edge,
// and returns the hub's URL.
func fixture(t *testing.T, base string) {
	t.Helper()
	c := client.New(base)
	ctx := t.Context()
	if err := c.CreateProject(ctx, "p1"); err != nil {
		t.Fatalf("create project p1: %v", err)
	}
	if err := c.CreateClusterProvider(ctx, "cp"); err != nil {
		t.Fatalf("create provider cp: %v", err)
	}
	if err := c.RegisterCluster(ctx, "cp", "c1", goodKubeconfig, "edge"); err != nil {
		t.Fatalf("register cluster c1: %v", err)
	}
	if err := c.Do(ctx, "POST", "/v2/cluster-providers/cp/clusters/c1/kv-pairs",
		json.RawMessage(`{"metadata":{"name":"kv1"},"spec":{"kv":[{"key1":"val1"}]}}`), nil); err != nil {
		t.Fatalf("create kv-pairs kv1: %v", err)
	}
}

// TestLifecycle creates, reads, lists, replaces and deletes one object of every kind
// the API stores, through each of its item and collection routes.
func TestLifecycle(t *testing.T) {
	th := startHub(t, nil)
	base := th.url
	fixture(t, base)
	const c1 = "/v2/cluster-providers/cp/clusters/c1"

	tests := []struct {
		resource   string
		collection string // POST and list
		item       string // GET, PUT, DELETE
		create     body
		wantCreate string // the answer to the create and to a GET after it
		update     body
		wantUpdate string // the answer to the PUT and to a GET after it
	}{
		{
			resource: "project", collection: "/v2/projects", item: "/v2/projects/p-life",
			create:     jsonBody(`{"metadata":{"name":"p-life","description":"first","userData1":"u1"}}`),
			wantCreate: `{"metadata":{"name":"p-life","description":"first","userData1":"u1"}}`,
			update:     jsonBody(`{"metadata":{"name":"p-life","description":"second","userData2":"u2"}}`),
			wantUpdate: `{"metadata":{"name":"p-life","description":"second","userData2":"u2"}}`,
		},
		{
			resource: "project, PUT without metadata.name", collection: "/v2/projects", item: "/v2/projects/p-noname",
			create:     jsonBody(`{"metadata":{"name":"p-noname"}}`),
			wantCreate: `{"metadata":{"name":"p-noname"}}`,
			update:     jsonBody(`{"metadata":{"description":"named by the path"}}`),
			wantUpdate: `{"metadata":{"name":"p-noname","description":"named by the path"}}`,
		},
		{
			resource: "cluster provider", collection: "/v2/cluster-providers", item: "/v2/cluster-providers/cp-life",
			create:     jsonBody(`{"metadata":{"name":"cp-life","description":"d"}}`),
			wantCreate: `{"metadata":{"name":"cp-life","description":"d"}}`,
			update:     jsonBody(`{"metadata":{"name":"cp-life","description":"d2"}}`),
			wantUpdate: `{"metadata":{"name":"cp-life","description":"d2"}}`,
		},
		{
			resource: "cluster, multipart PUT with a new kubeconfig", collection: "/v2/cluster-providers/cp/clusters", item: "/v2/cluster-providers/cp/clusters/c-life",
			create:     upload(t, []byte(`{"metadata":{"name":"c-life","description":"d"},"spec":{"zone":"z1"}}`), goodKubeconfig),
			wantCreate: `{"metadata":{"name":"c-life","description":"d"},"spec":{"zone":"z1"}}`,
			update:     upload(t, []byte(`{"metadata":{"name":"c-life","description":"d2"}}`), kubeconfigFor(kubeconfigOpts{server: "https://127.0.0.1:2"})),
			wantUpdate: `{"metadata":{"name":"c-life","description":"d2"}}`,
		},
		{
			resource: "cluster, JSON PUT keeping the kubeconfig", collection: "/v2/cluster-providers/cp/clusters", item: "/v2/cluster-providers/cp/clusters/c-json",
			create:     upload(t, clusterMeta("c-json"), goodKubeconfig),
			wantCreate: `{"metadata":{"name":"c-json"}}`,
			update:     jsonBody(`{"metadata":{"name":"c-json","userData1":"x"},"spec":{"a":[1,2]}}`),
			wantUpdate: `{"metadata":{"name":"c-json","userData1":"x"},"spec":{"a":[1,2]}}`,
		},
		{
			resource: "cluster, multipart PUT without a file", collection: "/v2/cluster-providers/cp/clusters", item: "/v2/cluster-providers/cp/clusters/c-nofile",
			create:     upload(t, clusterMeta("c-nofile"), goodKubeconfig),
			wantCreate: `{"metadata":{"name":"c-nofile"}}`,
			update:     upload(t, []byte(`{"metadata":{"name":"c-nofile","description":"kept"}}`), nil),
			wantUpdate: `{"metadata":{"name":"c-nofile","description":"kept"}}`,
		},
		{
			resource: "cluster label, emcoctl body", collection: c1 + "/labels", item: c1 + "/labels/emco",
			create:     jsonBody(`{"metadata":{"name":""},"clusterLabel":"emco"}`),
			wantCreate: `{"clusterLabel":"emco"}`,
			update:     jsonBody(`{"metadata":{"name":""},"clusterLabel":"emco"}`),
			wantUpdate: `{"clusterLabel":"emco"}`,
		},
		{
			resource: "cluster label, bare body", collection: c1 + "/labels", item: c1 + "/labels/bare",
			create:     jsonBody(`{"clusterLabel":"bare"}`),
			wantCreate: `{"clusterLabel":"bare"}`,
			update:     jsonBody(`{"clusterLabel":"bare"}`),
			wantUpdate: `{"clusterLabel":"bare"}`,
		},
		{
			resource: "cluster label, named by metadata only", collection: c1 + "/labels", item: c1 + "/labels/Meta_1.x",
			create:     jsonBody(`{"metadata":{"name":"Meta_1.x"}}`),
			wantCreate: `{"clusterLabel":"Meta_1.x"}`,
			update:     jsonBody(`{"clusterLabel":"Meta_1.x"}`),
			wantUpdate: `{"clusterLabel":"Meta_1.x"}`,
		},
		{
			resource: "kv-pairs", collection: c1 + "/kv-pairs", item: c1 + "/kv-pairs/kv-life",
			create:     jsonBody(`{"metadata":{"name":"kv-life"},"spec":{"kv":[{"key1":"val1"},{"key2":"val2"}]}}`),
			wantCreate: `{"metadata":{"name":"kv-life"},"spec":{"kv":[{"key1":"val1"},{"key2":"val2"}]}}`,
			update:     jsonBody(`{"metadata":{"name":"kv-life"},"spec":{"kv":[{"key3":{"nested":true}},{"key4":7}]}}`),
			wantUpdate: `{"metadata":{"name":"kv-life"},"spec":{"kv":[{"key3":{"nested":true}},{"key4":7}]}}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.resource, func(t *testing.T) {
			r := request(t, base, "POST", tc.collection, tc.create, nil)
			wantStatus(t, "create", r, http.StatusCreated)
			wantJSON(t, "create", r, tc.wantCreate)
			createTag := r.header.Get("ETag")
			if createTag == "" {
				t.Errorf("create: got no ETag header, want the revision")
			}

			r = request(t, base, "GET", tc.item, body{}, nil)
			wantStatus(t, "get", r, http.StatusOK)
			wantJSON(t, "get", r, tc.wantCreate)
			if got := r.header.Get("ETag"); got == "" || got != createTag {
				t.Errorf("get: got ETag %q, want %q (the create's)", got, createTag)
			}

			r = request(t, base, "GET", tc.collection, body{}, nil)
			wantStatus(t, "list", r, http.StatusOK)
			if !listHas(t, r.body, tc.wantCreate) {
				t.Errorf("list: got %s, want it to hold %s", r.body, tc.wantCreate)
			}

			r = request(t, base, "PUT", tc.item, tc.update, nil)
			wantStatus(t, "put", r, http.StatusOK)
			wantJSON(t, "put", r, tc.wantUpdate)
			putTag := r.header.Get("ETag")
			if putTag == "" || putTag == createTag {
				t.Errorf("put: got ETag %q, want a new revision (the create's was %q)", putTag, createTag)
			}

			r = request(t, base, "GET", tc.item, body{}, nil)
			wantStatus(t, "get after put", r, http.StatusOK)
			wantJSON(t, "get after put", r, tc.wantUpdate)
			if got := r.header.Get("ETag"); got != putTag {
				t.Errorf("get after put: got ETag %q, want %q (the put's)", got, putTag)
			}

			r = request(t, base, "DELETE", tc.item, body{}, nil)
			wantStatus(t, "delete", r, http.StatusNoContent)
			if len(r.body) != 0 {
				t.Errorf("delete: got body %q, want none", r.body)
			}

			r = request(t, base, "GET", tc.item, body{}, nil)
			wantError(t, "get after delete", r, http.StatusNotFound, "does not exist")

			r = request(t, base, "GET", tc.collection, body{}, nil)
			wantStatus(t, "list after delete", r, http.StatusOK)
			if listHas(t, r.body, tc.wantUpdate) {
				t.Errorf("list after delete: got %s, want it without %s", r.body, tc.wantUpdate)
			}
		})
	}
	// The rest of the routes, so that every route has answered a success here.
	for _, p := range []string{"/healthz", "/readyz", "/v2/openapi.json", c1 + "/status", "/v2/cluster-providers/cp/clusters?label=edge"} {
		wantStatus(t, "GET "+p, request(t, base, "GET", p, body{}, nil), http.StatusOK)
	}
	checkEveryRouteSucceeded(t, base, th.logs.String())
}

// checkEveryRouteSucceeded fails unless every route of the foundation has had a
// 2xx answer in the request log. Routes of other parts of the hub (the data
// path, zero-touch provisioning) have their happy paths in their own tests.
func checkEveryRouteSucceeded(t *testing.T, base, logs string) {
	t.Helper()
	checkRoutesSucceeded(t, base, logs, func(p string) bool {
		return !strings.Contains(p, "/composite-apps") && !strings.Contains(p, "/provisionings")
	})
}

// listHas reports whether the JSON array list holds the JSON value want.
func listHas(t testing.TB, list []byte, want string) bool {
	t.Helper()
	var items []json.RawMessage
	if err := json.Unmarshal(list, &items); err != nil {
		t.Errorf("got %q, want a JSON array: %v", list, err)
		return false
	}
	for _, it := range items {
		if jsonEqual(t, it, []byte(want)) {
			return true
		}
	}
	return false
}

// TestListsAreArrays checks that empty collections are [] and that names are
// listed in order.
func TestListsAreArrays(t *testing.T) {
	base := newHub(t)
	wantJSON(t, "no projects", request(t, base, "GET", "/v2/projects", body{}, nil), `[]`)
	wantJSON(t, "no providers", request(t, base, "GET", "/v2/cluster-providers", body{}, nil), `[]`)
	for _, n := range []string{"b", "c", "a"} {
		wantStatus(t, "create "+n, request(t, base, "POST", "/v2/projects", jsonBody(`{"metadata":{"name":"`+n+`"}}`), nil), http.StatusCreated)
	}
	wantJSON(t, "three projects", request(t, base, "GET", "/v2/projects", body{}, nil),
		`[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}},{"metadata":{"name":"c"}}]`)
	wantStatus(t, "create provider", request(t, base, "POST", "/v2/cluster-providers", jsonBody(`{"metadata":{"name":"cp"}}`), nil), http.StatusCreated)
	wantStatus(t, "create cluster", request(t, base, "POST", "/v2/cluster-providers/cp/clusters", upload(t, clusterMeta("c1"), goodKubeconfig), nil), http.StatusCreated)
	for _, p := range []string{
		"/v2/cluster-providers/cp/clusters/c1/labels",
		"/v2/cluster-providers/cp/clusters/c1/kv-pairs",
		"/v2/cluster-providers/cp/clusters?label=edge",
	} {
		wantJSON(t, p, request(t, base, "GET", p, body{}, nil), `[]`)
	}
}

// TestClusterStatus registers a cluster whose API server does not listen and
// follows its status from Pending (or already Unreachable) to Unreachable.
func TestClusterStatus(t *testing.T) {
	th := startHub(t, nil)
	base := th.url
	wantStatus(t, "create provider", request(t, base, "POST", "/v2/cluster-providers", jsonBody(`{"metadata":{"name":"cp"}}`), nil), http.StatusCreated)
	wantStatus(t, "register", request(t, base, "POST", "/v2/cluster-providers/cp/clusters", upload(t, clusterMeta("dead"), goodKubeconfig), nil), http.StatusCreated)

	const path = "/v2/cluster-providers/cp/clusters/dead/status"
	type status struct {
		Metadata  struct{ Name string } `json:"metadata"`
		State     string                `json:"state"`
		Reachable bool                  `json:"reachable"`
		Server    string                `json:"server"`
		LastError string                `json:"lastError"`
		Since     time.Time             `json:"since"`
	}
	get := func() status {
		t.Helper()
		r := request(t, base, "GET", path, body{}, nil)
		wantStatus(t, "status", r, http.StatusOK)
		wantJSONType(t, "status", r)
		var st status
		if err := json.Unmarshal(r.body, &st); err != nil {
			t.Fatalf("status: got %s, want a ClusterStatus: %v", r.body, err)
		}
		return st
	}
	st := get()
	if st.State != "Pending" && st.State != "Unreachable" {
		t.Errorf("first status: got state %q, want Pending or Unreachable", st.State)
	}
	if st.Metadata.Name != "dead" || st.Server != "https://127.0.0.1:1" || st.Reachable || st.Since.IsZero() {
		t.Errorf("first status: got %+v, want metadata.name dead, server https://127.0.0.1:1, not reachable, since set", st)
	}
	deadline := time.Now().Add(15 * time.Second)
	for st.State != "Unreachable" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		st = get()
	}
	if st.State != "Unreachable" || st.LastError == "" || st.Reachable {
		t.Fatalf("status after polling: got %+v, want state Unreachable with a lastError", st)
	}
	if strings.Contains(th.logs.String(), testToken) {
		t.Errorf("the hub logged the kubeconfig's token")
	}
	wantError(t, "status of an unknown cluster", request(t, base, "GET", "/v2/cluster-providers/cp/clusters/nope/status", body{}, nil),
		http.StatusNotFound, `cluster "nope"`, "does not exist")
	wantError(t, "status under an unknown provider", request(t, base, "GET", "/v2/cluster-providers/nope/clusters/dead/status", body{}, nil),
		http.StatusNotFound, `cluster provider "nope" does not exist`)
}

// TestClustersByLabel checks GET .../clusters?label=L: exactly the names of the
// provider's clusters labelled L, as a JSON array of strings.
func TestClustersByLabel(t *testing.T) {
	base := newHub(t)
	c := client.New(base)
	ctx := t.Context()
	for _, p := range []string{"cp", "other"} {
		if err := c.CreateClusterProvider(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, cl := range []struct {
		provider, name string
		labels         []string
	}{
		{"cp", "c3", []string{"edge", "gpu"}},
		{"cp", "c1", []string{"edge"}},
		{"cp", "c2", []string{"core"}},
		{"cp", "c4", nil},
		{"other", "c9", []string{"edge"}}, // another provider's
	} {
		if err := c.RegisterCluster(ctx, cl.provider, cl.name, goodKubeconfig, cl.labels...); err != nil {
			t.Fatalf("register %s/%s: %v", cl.provider, cl.name, err)
		}
	}
	tests := []struct {
		name  string
		query string
		want  string
	}{
		{"two clusters labelled edge, in name order", "?label=edge", `["c1","c3"]`},
		{"one cluster", "?label=gpu", `["c3"]`},
		{"no cluster", "?label=none", `[]`},
		{"label names are case sensitive", "?label=EDGE", `[]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := request(t, base, "GET", "/v2/cluster-providers/cp/clusters"+tc.query, body{}, nil)
			wantStatus(t, "GET", r, http.StatusOK)
			wantJSON(t, "GET", r, tc.want)
		})
	}
	// The Go client sees the same.
	names, err := c.ClustersWithLabel(ctx, "cp", "edge")
	if err != nil || strings.Join(names, ",") != "c1,c3" {
		t.Errorf("client.ClustersWithLabel: got %q, %v; want [c1 c3]", names, err)
	}
	// Without the query, the clusters themselves.
	r := request(t, base, "GET", "/v2/cluster-providers/cp/clusters", body{}, nil)
	wantJSON(t, "list", r, `[{"metadata":{"name":"c1"}},{"metadata":{"name":"c2"}},{"metadata":{"name":"c3"}},{"metadata":{"name":"c4"}}]`)
	if bytes.Contains(r.body, []byte(testToken)) || bytes.Contains(r.body, []byte("kubeconfig")) {
		t.Errorf("list: got %s, which shows the kubeconfig", r.body)
	}
	wantError(t, "invalid label", request(t, base, "GET", "/v2/cluster-providers/cp/clusters?label=bad%20label%21", body{}, nil),
		http.StatusBadRequest, "label")
	wantError(t, "empty label", request(t, base, "GET", "/v2/cluster-providers/cp/clusters?label=", body{}, nil),
		http.StatusBadRequest, "label")
	wantError(t, "unknown provider", request(t, base, "GET", "/v2/cluster-providers/nope/clusters?label=edge", body{}, nil),
		http.StatusNotFound, `cluster provider "nope" does not exist`)
}

// TestSystemRoutes checks /healthz, /readyz, the OpenAPI document and /metrics.
func TestSystemRoutes(t *testing.T) {
	base := newHub(t)
	tests := []struct {
		path string
		want string // a JSON value, or "" to only check the type
	}{
		{"/healthz", `{"status":"ok"}`},
		{"/readyz", `{"status":"ok"}`},
		{"/v2/openapi.json", ""},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			r := request(t, base, "GET", tc.path, body{}, nil)
			wantStatus(t, tc.path, r, http.StatusOK)
			wantJSONType(t, tc.path, r)
			if tc.want != "" {
				wantJSON(t, tc.path, r, tc.want)
			}
		})
	}
	r := request(t, base, "GET", "/v2/openapi.json", body{}, nil)
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(r.body, &doc); err != nil || doc.OpenAPI != "3.0.3" || len(doc.Paths) == 0 {
		t.Errorf("openapi.json: got openapi %q and %d paths (%v), want 3.0.3 with paths", doc.OpenAPI, len(doc.Paths), err)
	}
	r = request(t, base, "GET", "/metrics", body{}, nil)
	if r.status != http.StatusOK || !bytes.Contains(r.body, []byte("atoll_api_requests_total")) {
		t.Errorf("metrics: got %d with %d bytes, want 200 with atoll_api_requests_total", r.status, len(r.body))
	}
}

// TestJSONWhateverAccept checks that answers are JSON without an Accept header (as
// some EMCO clients send GETs) and with one that does not ask for JSON.
func TestJSONWhateverAccept(t *testing.T) {
	base := newHub(t)
	fixture(t, base)
	paths := []struct {
		path string
		code int
	}{
		{"/v2/projects/p1", 200},
		{"/v2/projects", 200},
		{"/v2/cluster-providers/cp/clusters/c1", 200},
		{"/v2/cluster-providers/cp/clusters/c1/labels/edge", 200},
		{"/v2/cluster-providers/cp/clusters/c1/status", 200},
		{"/healthz", 200},
		{"/v2/projects/nope", 404},
		{"/v2/no-such-route", 404},
	}
	accepts := []string{"", "*/*", "text/html", "application/xml"}
	for _, p := range paths {
		for _, accept := range accepts {
			t.Run(p.path+" Accept="+accept, func(t *testing.T) {
				var h map[string]string
				if accept != "" {
					h = map[string]string{"Accept": accept}
				}
				r := request(t, base, "GET", p.path, body{}, h)
				wantStatus(t, "GET", r, p.code)
				wantJSONType(t, "GET", r)
			})
		}
	}
}

// TestBadInputs sends what the API must refuse and checks the status, the JSON
// error body and its message, and that nothing was stored or changed.
func TestBadInputs(t *testing.T) {
	th := startHub(t, nil)
	base := th.url
	fixture(t, base)
	const (
		clusters = "/v2/cluster-providers/cp/clusters"
		c1       = clusters + "/c1"
		labels   = c1 + "/labels"
		kvPairs  = c1 + "/kv-pairs"
	)
	form := func(s string) body { return body{ctype: "application/x-www-form-urlencoded", data: []byte(s)} }
	kc := func(o kubeconfigOpts) body { return upload(t, clusterMeta("c-bad"), kubeconfigFor(o)) }
	long := strings.Repeat("a", 64)
	big := jsonBody(`{"metadata":{"name":"big","description":"` + strings.Repeat("x", 300<<10) + `"}}`)
	hugeKubeconfig := append(append([]byte(nil), goodKubeconfig...), '#')
	hugeKubeconfig = append(hugeKubeconfig, bytes.Repeat([]byte("x"), 1<<20+1-len(hugeKubeconfig))...)
	if len(hugeKubeconfig) != 1<<20+1 {
		t.Fatalf("the oversize kubeconfig is %d bytes", len(hugeKubeconfig))
	}

	tests := []struct {
		name    string
		method  string
		path    string
		body    body
		header  map[string]string
		status  int
		message []string // substrings of the error message
		absent  string   // a path that must answer 404 afterwards: nothing was stored
		same    string   // a path whose GET answer (body and ETag) must not change
	}{
		// Bodies that are not the JSON object of the route.
		{name: "malformed JSON", method: "POST", path: "/v2/projects", body: jsonBody(`{"metadata":{"name":"x"},}`),
			status: 400, message: []string{"not valid JSON"}, absent: "/v2/projects/x", same: "/v2/projects"},
		{name: "truncated JSON", method: "POST", path: "/v2/projects", body: jsonBody(`{"metadata":{"name":"x"`),
			status: 400, message: []string{"ends in the middle"}, absent: "/v2/projects/x", same: "/v2/projects"},
		{name: "empty body on create", method: "POST", path: "/v2/projects", body: jsonBody(``),
			status: 400, message: []string{"empty"}, same: "/v2/projects"},
		{name: "no body at all on create", method: "POST", path: "/v2/cluster-providers", body: body{},
			status: 400, message: []string{"empty"}, same: "/v2/cluster-providers"},
		{name: "whitespace body", method: "POST", path: "/v2/projects", body: jsonBody(" \n\t"),
			status: 400, message: []string{"empty"}, same: "/v2/projects"},
		{name: "metadata is a string", method: "POST", path: "/v2/projects", body: jsonBody(`{"metadata":"x"}`),
			status: 400, message: []string{"string", "metadata"}, same: "/v2/projects"},
		{name: "name is a number", method: "POST", path: "/v2/cluster-providers", body: jsonBody(`{"metadata":{"name":5}}`),
			status: 400, message: []string{"number", "metadata.name"}, same: "/v2/cluster-providers"},
		{name: "array at the top", method: "POST", path: "/v2/projects", body: jsonBody(`[{"metadata":{"name":"x"}}]`),
			status: 400, message: []string{"array", "top level"}, absent: "/v2/projects/x", same: "/v2/projects"},
		{name: "data after the object", method: "POST", path: "/v2/projects", body: jsonBody(`{"metadata":{"name":"x"}} {"metadata":{"name":"y"}}`),
			status: 400, message: []string{"data after"}, absent: "/v2/projects/x", same: "/v2/projects"},
		{name: "malformed JSON on PUT", method: "PUT", path: "/v2/projects/p1", body: jsonBody(`{"metadata":`),
			status: 400, message: []string{"JSON"}, same: "/v2/projects/p1"},
		{name: "empty body on PUT", method: "PUT", path: "/v2/projects/p1", body: jsonBody(""),
			status: 400, message: []string{"empty"}, same: "/v2/projects/p1"},
		{name: "malformed label body", method: "POST", path: labels, body: jsonBody(`{"clusterLabel":`),
			status: 400, message: []string{"JSON"}, same: labels},
		{name: "kv list is an object", method: "POST", path: kvPairs, body: jsonBody(`{"metadata":{"name":"kv2"},"spec":{"kv":{"a":"b"}}}`),
			status: 400, message: []string{"spec.kv"}, absent: kvPairs + "/kv2", same: kvPairs},

		// Names.
		{name: "duplicate project", method: "POST", path: "/v2/projects", body: jsonBody(`{"metadata":{"name":"p1"}}`),
			status: 409, message: []string{`project "p1" already exists`}, same: "/v2/projects/p1"},
		{name: "duplicate provider", method: "POST", path: "/v2/cluster-providers", body: jsonBody(`{"metadata":{"name":"cp"}}`),
			status: 409, message: []string{`cluster provider "cp" already exists`}, same: "/v2/cluster-providers/cp"},
		{name: "duplicate cluster", method: "POST", path: clusters, body: upload(t, clusterMeta("c1"), goodKubeconfig),
			status: 409, message: []string{`cluster "c1" of cluster provider "cp" already exists`}, same: c1},
		{name: "duplicate label", method: "POST", path: labels, body: jsonBody(`{"clusterLabel":"edge"}`),
			status: 409, message: []string{`"edge"`, "already exists"}, same: labels + "/edge"},
		{name: "duplicate kv-pairs", method: "POST", path: kvPairs, body: jsonBody(`{"metadata":{"name":"kv1"},"spec":{"kv":[]}}`),
			status: 409, message: []string{`"kv1"`, "already exists"}, same: kvPairs + "/kv1"},
		{name: "uppercase name", method: "POST", path: "/v2/projects", body: jsonBody(`{"metadata":{"name":"Bad"}}`),
			status: 422, message: []string{`"Bad"`, "not valid"}, absent: "/v2/projects/Bad", same: "/v2/projects"},
		{name: "underscore in a name", method: "POST", path: "/v2/cluster-providers", body: jsonBody(`{"metadata":{"name":"bad_name"}}`),
			status: 422, message: []string{`"bad_name"`, "not valid"}, absent: "/v2/cluster-providers/bad_name", same: "/v2/cluster-providers"},
		{name: "64-character name", method: "POST", path: "/v2/projects", body: jsonBody(`{"metadata":{"name":"` + long + `"}}`),
			status: 422, message: []string{"63"}, same: "/v2/projects"},
		{name: "empty name", method: "POST", path: "/v2/projects", body: jsonBody(`{"metadata":{"name":""}}`),
			status: 422, message: []string{"empty", "metadata.name"}, same: "/v2/projects"},
		{name: "no metadata", method: "POST", path: "/v2/projects", body: jsonBody(`{}`),
			status: 422, message: []string{"empty"}, same: "/v2/projects"},
		{name: "description over 4096 bytes", method: "POST", path: "/v2/projects", body: jsonBody(`{"metadata":{"name":"x","description":"` + strings.Repeat("d", 4097) + `"}}`),
			status: 422, message: []string{"description", "4096"}, absent: "/v2/projects/x", same: "/v2/projects"},
		{name: "uppercase cluster name", method: "POST", path: clusters, body: upload(t, clusterMeta("C9"), goodKubeconfig),
			status: 422, message: []string{`"C9"`, "not valid"}, absent: clusters + "/C9", same: clusters},
		{name: "uppercase kv-pairs name", method: "POST", path: kvPairs, body: jsonBody(`{"metadata":{"name":"KV"},"spec":{"kv":[]}}`),
			status: 422, message: []string{`"KV"`}, absent: kvPairs + "/KV", same: kvPairs},
		{name: "escaped slash in a project name", method: "GET", path: "/v2/projects/a%2Fb",
			status: 400, message: []string{`"a/b"`, "not a valid project name"}},
		{name: "escaped slash in a PUT", method: "PUT", path: "/v2/projects/p1%2Fx", body: jsonBody(`{"metadata":{"name":"p1"}}`),
			status: 400, message: []string{"not a valid project name"}, same: "/v2/projects/p1"},
		{name: "escaped slash in a provider name", method: "POST", path: "/v2/cluster-providers/cp%2Fc1/clusters", body: upload(t, clusterMeta("c9"), goodKubeconfig),
			status: 400, message: []string{"not a valid cluster provider name"}, absent: clusters + "/c9", same: clusters},
		{name: "escaped slash in a cluster name", method: "DELETE", path: clusters + "/c1%2Flabels",
			status: 400, message: []string{"not a valid cluster name"}, same: c1},
		{name: "escaped slash in a label", method: "DELETE", path: labels + "/edge%2Fx",
			status: 400, message: []string{"not a valid cluster label name"}, same: labels},
		{name: "PUT renaming a project", method: "PUT", path: "/v2/projects/p1", body: jsonBody(`{"metadata":{"name":"p2"}}`),
			status: 422, message: []string{`"p2"`, `"p1"`, "cannot rename"}, absent: "/v2/projects/p2", same: "/v2/projects/p1"},
		{name: "PUT renaming a cluster", method: "PUT", path: c1, body: jsonBody(`{"metadata":{"name":"c2"}}`),
			status: 422, message: []string{"cannot rename"}, absent: clusters + "/c2", same: c1},
		{name: "PUT renaming kv-pairs", method: "PUT", path: kvPairs + "/kv1", body: jsonBody(`{"metadata":{"name":"kv2"},"spec":{"kv":[]}}`),
			status: 422, message: []string{"cannot rename"}, absent: kvPairs + "/kv2", same: kvPairs + "/kv1"},
		{name: "PUT of a label with another clusterLabel", method: "PUT", path: labels + "/edge", body: jsonBody(`{"clusterLabel":"core"}`),
			status: 422, message: []string{`"core"`, `"edge"`, "does not match"}, absent: labels + "/core", same: labels + "/edge"},

		// Parents and children.
		{name: "cluster under an unknown provider", method: "POST", path: "/v2/cluster-providers/nope/clusters", body: upload(t, clusterMeta("c9"), goodKubeconfig),
			status: 404, message: []string{`cluster provider "nope" does not exist`}, absent: clusters + "/c9"},
		{name: "label on an unknown cluster", method: "POST", path: clusters + "/nope/labels", body: jsonBody(`{"clusterLabel":"edge"}`),
			status: 404, message: []string{`cluster "nope"`, "does not exist"}, absent: clusters + "/nope/labels/edge"},
		{name: "label under an unknown provider", method: "POST", path: "/v2/cluster-providers/nope/clusters/c1/labels", body: jsonBody(`{"clusterLabel":"edge"}`),
			status: 404, message: []string{"does not exist"}},
		{name: "kv-pairs on an unknown cluster", method: "POST", path: clusters + "/nope/kv-pairs", body: jsonBody(`{"metadata":{"name":"kv1"},"spec":{"kv":[]}}`),
			status: 404, message: []string{`cluster "nope"`, "does not exist"}},
		{name: "list clusters of an unknown provider", method: "GET", path: "/v2/cluster-providers/nope/clusters",
			status: 404, message: []string{`cluster provider "nope" does not exist`}},
		{name: "list labels of an unknown cluster", method: "GET", path: clusters + "/nope/labels",
			status: 404, message: []string{`cluster "nope"`}},
		{name: "PUT of an unknown project", method: "PUT", path: "/v2/projects/ghost", body: jsonBody(`{"metadata":{"name":"ghost"}}`),
			status: 404, message: []string{`project "ghost" does not exist`}, absent: "/v2/projects/ghost"},
		{name: "PUT of an unknown cluster", method: "PUT", path: clusters + "/ghost", body: upload(t, clusterMeta("ghost"), goodKubeconfig),
			status: 404, message: []string{`cluster "ghost"`, "does not exist"}, absent: clusters + "/ghost"},
		{name: "PUT of an unknown label", method: "PUT", path: labels + "/ghost", body: jsonBody(`{"clusterLabel":"ghost"}`),
			status: 404, message: []string{`"ghost"`, "does not exist"}, absent: labels + "/ghost"},
		{name: "DELETE of an unknown project", method: "DELETE", path: "/v2/projects/ghost",
			status: 404, message: []string{`project "ghost" does not exist`}},
		{name: "DELETE of an unknown kv-pairs", method: "DELETE", path: kvPairs + "/ghost",
			status: 404, message: []string{`"ghost"`, "does not exist"}},
		{name: "DELETE of a provider with clusters", method: "DELETE", path: "/v2/cluster-providers/cp",
			status: 409, message: []string{`cluster provider "cp"`, `"c1"`, "delete them first"}, same: "/v2/cluster-providers/cp"},
		{name: "DELETE of a cluster with labels", method: "DELETE", path: c1,
			status: 409, message: []string{`cluster "c1"`, `"edge"`, "delete them first"}, same: c1},

		// Revisions.
		{name: "PUT with a non-numeric If-Match", method: "PUT", path: "/v2/projects/p1", body: jsonBody(`{"metadata":{"name":"p1","description":"x"}}`), header: map[string]string{"If-Match": `"abc"`},
			status: 400, message: []string{"If-Match", "abc"}, same: "/v2/projects/p1"},
		{name: "DELETE with If-Match 0", method: "DELETE", path: "/v2/projects/p1", header: map[string]string{"If-Match": `"0"`},
			status: 400, message: []string{"If-Match"}, same: "/v2/projects/p1"},
		{name: "DELETE of a label with a negative If-Match", method: "DELETE", path: labels + "/edge", header: map[string]string{"If-Match": "-3"},
			status: 400, message: []string{"If-Match"}, same: labels + "/edge"},
		{name: "PUT of a cluster with a garbage If-Match", method: "PUT", path: c1, body: jsonBody(`{"metadata":{"name":"c1"}}`), header: map[string]string{"If-Match": `W/"x1"`},
			status: 400, message: []string{"If-Match"}, same: c1},
		{name: "PUT with an If-Match from the future", method: "PUT", path: "/v2/projects/p1", body: jsonBody(`{"metadata":{"name":"p1","description":"x"}}`), header: map[string]string{"If-Match": `"999999"`},
			status: 409, message: []string{"changed since revision 999999"}, same: "/v2/projects/p1"},

		// Content types.
		{name: "form-urlencoded project", method: "POST", path: "/v2/projects", body: form("metadata=x"),
			status: 415, message: []string{"application/x-www-form-urlencoded", "application/json"}, same: "/v2/projects"},
		{name: "text/plain provider", method: "POST", path: "/v2/cluster-providers", body: body{ctype: "text/plain", data: []byte(`{"metadata":{"name":"x"}}`)},
			status: 415, message: []string{"text/plain"}, absent: "/v2/cluster-providers/x", same: "/v2/cluster-providers"},
		{name: "form-urlencoded PUT", method: "PUT", path: "/v2/projects/p1", body: form("metadata=x"),
			status: 415, message: []string{"application/json"}, same: "/v2/projects/p1"},
		{name: "form-urlencoded label", method: "POST", path: labels, body: form("clusterLabel=x"),
			status: 415, message: []string{"application/json"}, absent: labels + "/x", same: labels},
		{name: "form-urlencoded kv-pairs", method: "POST", path: kvPairs, body: form("a=b"),
			status: 415, message: []string{"application/json"}, same: kvPairs},
		{name: "multipart project", method: "POST", path: "/v2/projects", body: upload(t, []byte(`{"metadata":{"name":"x"}}`), nil),
			status: 415, message: []string{"multipart/form-data"}, absent: "/v2/projects/x", same: "/v2/projects"},
		{name: "JSON on cluster POST", method: "POST", path: clusters, body: jsonBody(`{"metadata":{"name":"c9"}}`),
			status: 415, message: []string{"multipart/form-data", "metadata", "file"}, absent: clusters + "/c9", same: clusters},
		{name: "no content type on cluster POST", method: "POST", path: clusters, body: body{data: []byte(`{"metadata":{"name":"c9"}}`)},
			status: 415, message: []string{"multipart/form-data"}, absent: clusters + "/c9", same: clusters},
		{name: "form-urlencoded cluster POST", method: "POST", path: clusters, body: form("metadata=x"),
			status: 415, message: []string{"multipart/form-data"}, same: clusters},
		{name: "form-urlencoded cluster PUT", method: "PUT", path: c1, body: form("metadata=x"),
			status: 415, message: []string{"application/json"}, same: c1},

		// Sizes.
		{name: "300 KiB JSON body", method: "POST", path: "/v2/projects", body: big,
			status: 413, message: []string{"limit"}, absent: "/v2/projects/big", same: "/v2/projects"},
		{name: "300 KiB label body", method: "POST", path: labels, body: jsonBody(`{"clusterLabel":"x","pad":"` + strings.Repeat("x", 300<<10) + `"}`),
			status: 413, message: []string{"limit"}, absent: labels + "/x", same: labels},
		{name: "kubeconfig of 1 MiB + 1 byte", method: "POST", path: clusters, body: upload(t, clusterMeta("c-huge"), hugeKubeconfig),
			status: 413, message: []string{"1 MiB"}, absent: clusters + "/c-huge", same: clusters},
		{name: "kubeconfig of 1 MiB + 1 byte on PUT", method: "PUT", path: c1, body: upload(t, clusterMeta("c1"), hugeKubeconfig),
			status: 413, message: []string{"1 MiB"}, same: c1},

		// Cluster uploads.
		{name: "garbage kubeconfig", method: "POST", path: clusters, body: upload(t, clusterMeta("c-bad"), []byte("\x00\x01\x02garbage\xff{{{")),
			status: 400, message: []string{"kubeconfig"}, absent: clusters + "/c-bad", same: clusters},
		{name: "empty kubeconfig", method: "POST", path: clusters, body: upload(t, clusterMeta("c-bad"), []byte{}),
			status: 400, message: []string{"kubeconfig", "empty"}, absent: clusters + "/c-bad", same: clusters},
		{name: "kubeconfig without current-context", method: "POST", path: clusters, body: kc(kubeconfigOpts{noCurrent: true}),
			status: 422, message: []string{"current-context"}, absent: clusters + "/c-bad", same: clusters},
		{name: "kubeconfig with an exec plugin", method: "POST", path: clusters, body: kc(kubeconfigOpts{user: execUser}),
			status: 422, message: []string{"exec", "--allow-kubeconfig-exec"}, absent: clusters + "/c-bad", same: clusters},
		{name: "kubeconfig with an auth-provider", method: "POST", path: clusters, body: kc(kubeconfigOpts{user: "    auth-provider:\n      name: oidc\n      config:\n        id-token: " + testToken + "\n"}),
			status: 422, message: []string{"auth-provider", "--allow-kubeconfig-exec"}, absent: clusters + "/c-bad", same: clusters},
		{name: "kubeconfig with a certificate-authority file", method: "POST", path: clusters, body: kc(kubeconfigOpts{cluster: "    certificate-authority: /etc/x\n"}),
			status: 422, message: []string{"certificate-authority", "file"}, absent: clusters + "/c-bad", same: clusters},
		{name: "kubeconfig with client certificate files", method: "POST", path: clusters, body: kc(kubeconfigOpts{user: "    client-certificate: /etc/x.crt\n    client-key: /etc/x.key\n"}),
			status: 422, message: []string{"client-certificate", "client-key"}, absent: clusters + "/c-bad", same: clusters},
		{name: "kubeconfig with a token file", method: "POST", path: clusters, body: kc(kubeconfigOpts{user: "    tokenFile: /var/run/token\n"}),
			status: 422, message: []string{"tokenFile"}, absent: clusters + "/c-bad", same: clusters},
		{name: "kubeconfig with a non-http server", method: "POST", path: clusters, body: kc(kubeconfigOpts{server: "ftp://127.0.0.1:1"}),
			status: 422, message: []string{"http or https"}, absent: clusters + "/c-bad", same: clusters},
		{name: "exec kubeconfig on PUT", method: "PUT", path: c1, body: upload(t, clusterMeta("c1"), kubeconfigFor(kubeconfigOpts{user: execUser})),
			status: 422, message: []string{"exec", "--allow-kubeconfig-exec"}, same: c1},
		{name: "cluster POST without a file part", method: "POST", path: clusters, body: upload(t, clusterMeta("c9"), nil),
			status: 422, message: []string{`"c9"`, "no kubeconfig", `"file"`}, absent: clusters + "/c9", same: clusters},
		{name: "cluster POST without a metadata field", method: "POST", path: clusters, body: upload(t, nil, goodKubeconfig),
			status: 400, message: []string{`no "metadata" field`}, same: clusters},
		{name: "cluster metadata field that is not JSON", method: "POST", path: clusters, body: upload(t, []byte("name=c9"), goodKubeconfig),
			status: 400, message: []string{"metadata field", "not valid JSON"}, absent: clusters + "/c9", same: clusters},
		{name: "cluster metadata field that is empty", method: "POST", path: clusters, body: upload(t, []byte{}, goodKubeconfig),
			status: 400, message: []string{"metadata field", "empty"}, same: clusters},
		{name: "cluster without a name", method: "POST", path: clusters, body: upload(t, []byte(`{"metadata":{"name":""}}`), goodKubeconfig),
			status: 422, message: []string{"empty"}, same: clusters},
		{name: "multipart without a boundary", method: "POST", path: clusters, body: body{ctype: "multipart/form-data", data: []byte("x")},
			status: 400, message: []string{"boundary"}, same: clusters},
		{name: "multipart that ends early", method: "POST", path: clusters, body: body{ctype: "multipart/form-data; boundary=XYZ", data: []byte("--XYZ\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"metadata\"")},
			status: 400, message: []string{"cannot read the request body"}, same: clusters},
		{name: "two metadata fields", method: "POST", path: clusters, body: func() body {
			b := upload(t, clusterMeta("c9"), goodKubeconfig)
			boundary := strings.TrimPrefix(b.ctype, "multipart/form-data; boundary=")
			extra := "--" + boundary + "\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"metadata\":{\"name\":\"c8\"}}\r\n"
			b.data = append([]byte(extra), b.data...)
			return b
		}(), status: 400, message: []string{`more than one "metadata"`}, absent: clusters + "/c9", same: clusters},

		// Labels and kv-pairs.
		{name: "invalid label", method: "POST", path: labels, body: jsonBody(`{"clusterLabel":"bad label!"}`),
			status: 422, message: []string{`"bad label!"`, "not valid"}, same: labels},
		{name: "empty label", method: "POST", path: labels, body: jsonBody(`{"metadata":{"name":""},"clusterLabel":""}`),
			status: 422, message: []string{"clusterLabel is empty"}, same: labels},
		{name: "64-character label", method: "POST", path: labels, body: jsonBody(`{"clusterLabel":"` + long + `"}`),
			status: 422, message: []string{"63"}, same: labels},
		{name: "kv-pairs entry with two keys", method: "POST", path: kvPairs, body: jsonBody(`{"metadata":{"name":"kv2"},"spec":{"kv":[{"key1":"val1","key2":"val2"}]}}`),
			status: 422, message: []string{"spec.kv[0] has 2 keys"}, absent: kvPairs + "/kv2", same: kvPairs},
		{name: "kv-pairs entry with no key", method: "POST", path: kvPairs, body: jsonBody(`{"metadata":{"name":"kv2"},"spec":{"kv":[{"a":1},{}]}}`),
			status: 422, message: []string{"spec.kv[1] has 0 keys"}, absent: kvPairs + "/kv2", same: kvPairs},
		{name: "kv-pairs entry with an empty key", method: "POST", path: kvPairs, body: jsonBody(`{"metadata":{"name":"kv2"},"spec":{"kv":[{"":"x"}]}}`),
			status: 422, message: []string{"spec.kv[0] has an empty key"}, absent: kvPairs + "/kv2", same: kvPairs},
		{name: "PUT of kv-pairs with two keys in an entry", method: "PUT", path: kvPairs + "/kv1", body: jsonBody(`{"metadata":{"name":"kv1"},"spec":{"kv":[{"a":1,"b":2}]}}`),
			status: 422, message: []string{"has 2 keys"}, same: kvPairs + "/kv1"},

		// Routes.
		{name: "unknown route", method: "GET", path: "/v2/no-such-thing",
			status: 404, message: []string{"no route GET /v2/no-such-thing", "openapi.json"}},
		{name: "unknown top-level route", method: "GET", path: "/nothing",
			status: 404, message: []string{"no route"}},
		{name: "unknown sub-resource", method: "POST", path: c1 + "/nothing", body: jsonBody(`{}`),
			status: 404, message: []string{"no route"}},
		{name: "unsupported method", method: "PATCH", path: "/v2/projects/p1", body: jsonBody(`{"metadata":{"name":"p1"}}`),
			status: 405, message: []string{"PATCH is not served", "use GET, PUT, DELETE"}, same: "/v2/projects/p1"},
		{name: "POST on an item", method: "POST", path: "/v2/projects/p1", body: jsonBody(`{"metadata":{"name":"p1"}}`),
			status: 405, message: []string{"POST is not served", "use GET, PUT, DELETE"}, same: "/v2/projects/p1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before response
			if tc.same != "" {
				before = request(t, base, "GET", tc.same, body{}, nil)
				wantStatus(t, "GET "+tc.same+" before", before, http.StatusOK)
			}
			r := request(t, base, tc.method, tc.path, tc.body, tc.header)
			wantError(t, tc.method+" "+tc.path, r, tc.status, tc.message...)
			if bytes.Contains(r.body, []byte(testToken)) {
				t.Errorf("the answer %s shows the kubeconfig's token", r.body)
			}
			if tc.absent != "" {
				wantError(t, "GET "+tc.absent+" after", request(t, base, "GET", tc.absent, body{}, nil), http.StatusNotFound, "does not exist")
			}
			if tc.same != "" {
				after := request(t, base, "GET", tc.same, body{}, nil)
				if after.status != before.status || !bytes.Equal(after.body, before.body) || after.header.Get("ETag") != before.header.Get("ETag") {
					t.Errorf("GET %s: got %s (ETag %q) after, want it unchanged: %s (ETag %q)",
						tc.same, after, after.header.Get("ETag"), before, before.header.Get("ETag"))
				}
			}
		})
	}
	logs := th.logs.String()
	if strings.Contains(logs, testToken) {
		t.Errorf("the hub logged the kubeconfig's token")
	}
	if !strings.Contains(logs, `"code":422`) || !strings.Contains(logs, `"route":"/v2/cluster-providers/{clusterProvider}/clusters"`) {
		t.Errorf("the request log has no line for the refused cluster uploads")
	}
}

// TestStaleRevision checks compare-and-swap: a PUT or DELETE with the ETag of an
// older revision is refused with 409 and changes nothing, and the current ETag, in
// any of its accepted spellings, is accepted.
func TestStaleRevision(t *testing.T) {
	base := newHub(t)
	fixture(t, base)
	const c1 = "/v2/cluster-providers/cp/clusters/c1"
	wantStatus(t, "register c2", request(t, base, "POST", "/v2/cluster-providers/cp/clusters", upload(t, clusterMeta("c2"), goodKubeconfig), nil), http.StatusCreated)

	// In this order, so that every object has no children when it is deleted.
	tests := []struct {
		resource string
		item     string
		update   body
	}{
		{"project", "/v2/projects/p1", jsonBody(`{"metadata":{"name":"p1","description":"v2"}}`)},
		{"cluster label", c1 + "/labels/edge", jsonBody(`{"clusterLabel":"edge"}`)},
		{"kv-pairs", c1 + "/kv-pairs/kv1", jsonBody(`{"metadata":{"name":"kv1"},"spec":{"kv":[{"k":"v2"}]}}`)},
		{"cluster, JSON PUT", "/v2/cluster-providers/cp/clusters/c2", jsonBody(`{"metadata":{"name":"c2","description":"v2"}}`)},
		{"cluster, multipart PUT", c1, upload(t, []byte(`{"metadata":{"name":"c1","description":"v2"}}`), goodKubeconfig)},
		{"cluster provider", "/v2/cluster-providers/cp", jsonBody(`{"metadata":{"name":"cp","description":"v2"}}`)},
	}
	for _, tc := range tests {
		t.Run(tc.resource, func(t *testing.T) {
			r := request(t, base, "GET", tc.item, body{}, nil)
			wantStatus(t, "get", r, http.StatusOK)
			old := r.header.Get("ETag")

			r = request(t, base, "PUT", tc.item, tc.update, map[string]string{"If-Match": old})
			wantStatus(t, "put with the current ETag", r, http.StatusOK)
			current := r.header.Get("ETag")
			want := r.body

			r = request(t, base, "PUT", tc.item, tc.update, map[string]string{"If-Match": old})
			wantError(t, "put with the old ETag", r, http.StatusConflict, "changed since revision "+strings.Trim(old, `"`))
			r = request(t, base, "DELETE", tc.item, body{}, map[string]string{"If-Match": old})
			wantError(t, "delete with the old ETag", r, http.StatusConflict, "changed since revision")

			r = request(t, base, "GET", tc.item, body{}, nil)
			wantStatus(t, "get after the refusals", r, http.StatusOK)
			if got := r.header.Get("ETag"); got != current || !jsonEqual(t, r.body, want) {
				t.Errorf("get after the refusals: got %s with ETag %q, want %s with ETag %q", r.body, got, want, current)
			}

			// A weak ETag and a bare number are accepted as well.
			r = request(t, base, "PUT", tc.item, tc.update, map[string]string{"If-Match": "W/" + current})
			wantStatus(t, "put with a weak ETag", r, http.StatusOK)
			r = request(t, base, "DELETE", tc.item, body{}, map[string]string{"If-Match": strings.Trim(r.header.Get("ETag"), `"`)})
			wantStatus(t, "delete with the current revision", r, http.StatusNoContent)
			wantError(t, "get after delete", request(t, base, "GET", tc.item, body{}, nil), http.StatusNotFound, "does not exist")
		})
	}
}

// TestAllowKubeconfigExec checks that a hub started with AllowKubeconfigExec accepts
// kubeconfigs with plugins, and still refuses file references.
func TestAllowKubeconfigExec(t *testing.T) {
	th := startHub(t, func(cfg *hub.Config) { cfg.AllowKubeconfigExec = true })
	base := th.url
	wantStatus(t, "create provider", request(t, base, "POST", "/v2/cluster-providers", jsonBody(`{"metadata":{"name":"cp"}}`), nil), http.StatusCreated)
	const clusters = "/v2/cluster-providers/cp/clusters"
	tests := []struct {
		name    string
		cluster string
		kc      kubeconfigOpts
		status  int
		message string
	}{
		{"exec plugin", "c-exec", kubeconfigOpts{user: execUser}, http.StatusCreated, ""},
		{"auth-provider plugin", "c-auth", kubeconfigOpts{user: "    auth-provider:\n      name: oidc\n      config:\n        id-token: " + testToken + "\n"}, http.StatusCreated, ""},
		{"file reference", "c-file", kubeconfigOpts{cluster: "    certificate-authority: /etc/x\n"}, http.StatusUnprocessableEntity, "certificate-authority"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := request(t, base, "POST", clusters, upload(t, clusterMeta(tc.cluster), kubeconfigFor(tc.kc)), nil)
			if tc.status == http.StatusCreated {
				wantStatus(t, "register", r, http.StatusCreated)
				wantJSON(t, "register", r, `{"metadata":{"name":"`+tc.cluster+`"}}`)
				wantStatus(t, "status", request(t, base, "GET", clusters+"/"+tc.cluster+"/status", body{}, nil), http.StatusOK)
				return
			}
			wantError(t, "register", r, tc.status, tc.message)
			wantError(t, "get", request(t, base, "GET", clusters+"/"+tc.cluster, body{}, nil), http.StatusNotFound, "does not exist")
		})
	}
}

// TestRestart stores objects of every kind, stops the hub and starts a new one on
// the same data dir: everything is still there, and the cluster's status is served.
func TestRestart(t *testing.T) {
	first := startHub(t, nil)
	c := client.New(first.url)
	ctx := t.Context()
	if err := c.CreateProject(ctx, "p1"); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateClusterProvider(ctx, "cp"); err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterCluster(ctx, "cp", "c1", goodKubeconfig, "edge", "gpu"); err != nil {
		t.Fatal(err)
	}
	if err := c.RegisterCluster(ctx, "cp", "c2", goodKubeconfig, "edge"); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, "POST", "/v2/cluster-providers/cp/clusters/c1/kv-pairs",
		json.RawMessage(`{"metadata":{"name":"kv1"},"spec":{"kv":[{"key1":"val1"},{"key2":"val2"}]}}`), nil); err != nil {
		t.Fatal(err)
	}
	paths := []string{
		"/v2/projects",
		"/v2/projects/p1",
		"/v2/cluster-providers",
		"/v2/cluster-providers/cp",
		"/v2/cluster-providers/cp/clusters",
		"/v2/cluster-providers/cp/clusters/c1",
		"/v2/cluster-providers/cp/clusters?label=edge",
		"/v2/cluster-providers/cp/clusters/c1/labels",
		"/v2/cluster-providers/cp/clusters/c1/labels/gpu",
		"/v2/cluster-providers/cp/clusters/c1/kv-pairs",
		"/v2/cluster-providers/cp/clusters/c1/kv-pairs/kv1",
	}
	before := map[string]response{}
	for _, p := range paths {
		before[p] = request(t, first.url, "GET", p, body{}, nil)
		wantStatus(t, "before the restart: GET "+p, before[p], http.StatusOK)
	}
	first.Close()

	second := startHub(t, func(cfg *hub.Config) { cfg.DataDir = first.cfg.DataDir })
	for _, p := range paths {
		t.Run(p, func(t *testing.T) {
			r := request(t, second.url, "GET", p, body{}, nil)
			wantStatus(t, "after the restart", r, http.StatusOK)
			if !jsonEqual(t, r.body, before[p].body) || r.header.Get("ETag") != before[p].header.Get("ETag") {
				t.Errorf("after the restart: got %s (ETag %q), want %s (ETag %q)", r.body, r.header.Get("ETag"), before[p].body, before[p].header.Get("ETag"))
			}
		})
	}
	st, err := client.New(second.url).ClusterStatus(ctx, "cp", "c1")
	if err != nil {
		t.Fatalf("status after the restart: %v", err)
	}
	if st.State != "Pending" && st.State != "Unreachable" || st.Metadata.Name != "c1" || st.Server != "https://127.0.0.1:1" {
		t.Errorf("status after the restart: got %+v, want c1 Pending or Unreachable at https://127.0.0.1:1", st)
	}
	// The kubeconfig was sealed with the key kept in the data dir: the new hub opens
	// it, so the manager probes the cluster instead of calling it unusable.
	deadline := time.Now().Add(15 * time.Second)
	for st.State != "Unreachable" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if st, err = client.New(second.url).ClusterStatus(ctx, "cp", "c1"); err != nil {
			t.Fatal(err)
		}
	}
	if st.State != "Unreachable" || st.LastError == "" || strings.Contains(st.LastError, "kubeconfig") {
		t.Errorf("status after the restart: got %+v, want Unreachable because the server does not answer", st)
	}
}

// TestClusterSizeLimits checks uploads at the limits: a kubeconfig of exactly
// 1 MiB with a large spec is stored, and a JSON PUT of a cluster that carries one
// is refused as too large rather than failing in the store.
func TestClusterSizeLimits(t *testing.T) {
	base := newHub(t)
	wantStatus(t, "create provider", request(t, base, "POST", "/v2/cluster-providers", jsonBody(`{"metadata":{"name":"cp"}}`), nil), http.StatusCreated)
	maxKubeconfig := append(append([]byte(nil), goodKubeconfig...), '#')
	maxKubeconfig = append(maxKubeconfig, bytes.Repeat([]byte("x"), 1<<20-len(maxKubeconfig))...)
	meta := []byte(`{"metadata":{"name":"cmax"},"spec":{"pad":"` + strings.Repeat("s", 60<<10) + `"}}`)
	r := request(t, base, "POST", "/v2/cluster-providers/cp/clusters", upload(t, meta, maxKubeconfig), nil)
	wantStatus(t, "register with a 1 MiB kubeconfig and a 60 KiB spec", r, http.StatusCreated)

	r = request(t, base, "PUT", "/v2/cluster-providers/cp/clusters/cmax",
		jsonBody(`{"metadata":{"name":"cmax"},"spec":{"pad":"`+strings.Repeat("s", 900<<10)+`"}}`), nil)
	wantError(t, "JSON PUT with a 900 KiB spec", r, http.StatusRequestEntityTooLarge)
}

// TestRequestVariants checks spellings that EMCO clients and scripts use.
func TestRequestVariants(t *testing.T) {
	base := newHub(t)
	wantStatus(t, "create provider", request(t, base, "POST", "/v2/cluster-providers", jsonBody(`{"metadata":{"name":"cp"}}`), nil), http.StatusCreated)
	// upload with a custom file part: content type and extra parts.
	custom := func(name, fileType string, extra bool) body {
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		if extra {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", `form-data; name="files"; filename="other"`)
			h.Set("Content-Type", "application/octet-stream")
			w, _ := mw.CreatePart(h)
			w.Write([]byte("ignored"))
		}
		mw.WriteField("metadata", string(clusterMeta(name)))
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", `form-data; name="file"; filename="filename"`)
		h.Set("Content-Type", fileType)
		w, _ := mw.CreatePart(h)
		w.Write(goodKubeconfig)
		mw.Close()
		return body{ctype: strings.Replace(mw.FormDataContentType(), "multipart/form-data", "Multipart/Form-Data", 1), data: buf.Bytes()}
	}
	tests := []struct {
		name   string
		method string
		path   string
		body   body
		header map[string]string
		want   int
	}{
		{"no content type (scripts)", "POST", "/v2/projects", body{data: []byte(`{"metadata":{"name":"p1"}}`)}, nil, http.StatusCreated},
		{"JSON with a charset", "POST", "/v2/projects", body{ctype: "application/json; charset=utf-8", data: []byte(`{"metadata":{"name":"p2"}}`)}, nil, http.StatusCreated},
		{"JSON in capitals", "POST", "/v2/projects", body{ctype: "Application/JSON", data: []byte(`{"metadata":{"name":"p3"}}`)}, nil, http.StatusCreated},
		{"emcoctl metadata with an empty spec left out", "POST", "/v2/projects", jsonBody(`{"metadata":{"name":"p4","description":"","userData1":"","userData2":""}}`), nil, http.StatusCreated},
		{"kubeconfig sent as application/x-gzip", "POST", "/v2/cluster-providers/cp/clusters", custom("c1", "application/x-gzip", false), nil, http.StatusCreated},
		{"extra files part before the metadata", "POST", "/v2/cluster-providers/cp/clusters", custom("c2", "application/octet-stream", true), nil, http.StatusCreated},
		{"If-Match *", "PUT", "/v2/projects/p1", jsonBody(`{"metadata":{"name":"p1"}}`), map[string]string{"If-Match": "*"}, http.StatusOK},
		{"HEAD of an object", "HEAD", "/v2/projects/p1", body{}, nil, http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := request(t, base, tc.method, tc.path, tc.body, tc.header)
			wantStatus(t, tc.method+" "+tc.path, r, tc.want)
		})
	}
}

// TestConcurrentCreates sends the same create many times at once: exactly one wins.
func TestConcurrentCreates(t *testing.T) {
	base := newHub(t)
	const n = 8
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Not request: a goroutine other than the test's must not call t.Fatal.
			resp, err := httpClient.Post(base+"/v2/projects", "application/json", strings.NewReader(`{"metadata":{"name":"race"}}`))
			if err != nil {
				t.Error(err)
				codes <- 0
				return
			}
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[http.StatusCreated] != 1 || got[http.StatusConflict] != n-1 {
		t.Errorf("got status codes %v, want one 201 and %d 409", got, n-1)
	}
}
