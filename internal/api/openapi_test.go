package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/atoll-edge/atoll/internal/api"
	"github.com/atoll-edge/atoll/internal/blob"
	"github.com/atoll-edge/atoll/internal/cluster"
	"github.com/atoll-edge/atoll/internal/etcdembed"
	"github.com/atoll-edge/atoll/internal/lifecycle"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/plan"
	"github.com/atoll-edge/atoll/internal/registry"
	"github.com/atoll-edge/atoll/internal/secret"
	"github.com/atoll-edge/atoll/internal/status"
	"github.com/atoll-edge/atoll/internal/store"
)

var update = flag.Bool("update", false, "rewrite testdata/openapi.golden.json from the route table")

const goldenFile = "testdata/openapi.golden.json"

// noStatuses is a ClusterStatuses that has seen no cluster.
type noStatuses struct{}

func (noStatuses) Status(store.Key) (cluster.Status, bool) { return cluster.Status{}, false }

// newServer builds the API directly on an embedded etcd, without a hub, for tests
// that need the router or the route table.
func newServer(tb testing.TB) *api.Server {
	tb.Helper()
	etcd, err := etcdembed.Start(context.Background(), etcdembed.Options{Dir: tb.TempDir()})
	if err != nil {
		tb.Fatalf("start etcd: %v", err)
	}
	tb.Cleanup(etcd.Close)
	st := store.New(etcd.Client(), model.Schema, "/t")
	key := make([]byte, secret.KeySize)
	if _, err := rand.Read(key); err != nil {
		tb.Fatal(err)
	}
	keyring, err := secret.NewKeyring(key)
	if err != nil {
		tb.Fatal(err)
	}
	blobs := blob.New(etcd.Client(), blob.Options{Root: "/t"})
	lc := lifecycle.New(etcd.Client(), st, "/t", nil)
	srv, err := api.New(api.Options{
		Store:     st,
		Registry:  &registry.Registry{Store: st, Keyring: keyring},
		Clusters:  noStatuses{},
		Logger:    slog.New(slog.DiscardHandler),
		Blobs:     blobs,
		Lifecycle: lc,
		Status:    status.New(nil, "/t", lc, plan.NewStore(blobs), noStatuses{}, nil),
	})
	if err != nil {
		tb.Fatalf("api.New: %v", err)
	}
	return srv
}

// serve sends one request to srv in-process.
func serve(srv http.Handler, method, target string, b body) *httptest.ResponseRecorder {
	var req *http.Request
	if b.data != nil {
		req = httptest.NewRequest(method, target, bytes.NewReader(b.data))
	} else {
		req = httptest.NewRequest(method, target, nil)
	}
	if b.ctype != "" {
		req.Header.Set("Content-Type", b.ctype)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	return rec
}

// canonical re-encodes a JSON text with sorted keys and two-space indents.
func canonical(t testing.TB, data []byte) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	out, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// firstDifference describes the first line where got and want differ.
func firstDifference(got, want []byte) string {
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, gl, wl)
		}
	}
	return "no difference"
}

// TestOpenAPIGolden compares the OpenAPI document of the route table with the
// golden file (go test ./internal/api/ -run OpenAPIGolden -update rewrites it), and
// checks that a hub serves the same document.
func TestOpenAPIGolden(t *testing.T) {
	srv := newServer(t)
	got, err := json.MarshalIndent(api.OpenAPI(srv.Routes()), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.MkdirAll(filepath.Dir(goldenFile), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(goldenFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", goldenFile)
	}
	want, err := os.ReadFile(goldenFile)
	if err != nil {
		t.Fatalf("read the golden file (run with -update to create it): %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("api.OpenAPI(routes) differs from %s (run with -update if the change is meant): %s", goldenFile, firstDifference(got, want))
	}

	base := newHub(t)
	r := request(t, base, "GET", "/v2/openapi.json", body{}, nil)
	wantStatus(t, "GET /v2/openapi.json", r, http.StatusOK)
	// The hub also serves routes of other parts of it (Options.Extra, such as
	// zero-touch provisioning), which their own tests cover: drop those paths, and
	// the rest must be the golden document.
	var served, golden map[string]any
	if err := json.Unmarshal(r.body, &served); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &golden); err != nil {
		t.Fatal(err)
	}
	servedPaths, goldenPaths := served["paths"].(map[string]any), golden["paths"].(map[string]any)
	for p := range servedPaths {
		if _, ok := goldenPaths[p]; !ok {
			delete(servedPaths, p)
		}
	}
	servedSchemas := served["components"].(map[string]any)["schemas"].(map[string]any)
	goldenSchemas := golden["components"].(map[string]any)["schemas"].(map[string]any)
	for n := range servedSchemas {
		if _, ok := goldenSchemas[n]; !ok {
			delete(servedSchemas, n)
		}
	}
	if len(goldenPaths) == 0 {
		t.Fatal("the golden document has no paths")
	}
	a, _ := json.Marshal(served)
	b, _ := json.Marshal(golden)
	if sa, sb := canonical(t, a), canonical(t, b); !bytes.Equal(sa, sb) {
		t.Errorf("the hub's /v2/openapi.json differs from %s: %s", goldenFile, firstDifference(sa, sb))
	}
}

var wildcardRE = regexp.MustCompile(`\{[^}]+\}`)

type openAPIDoc struct {
	Paths map[string]map[string]struct {
		OperationID string `json:"operationId"`
		Parameters  []struct {
			Name string `json:"name"`
			In   string `json:"in"`
		} `json:"parameters"`
		Responses map[string]json.RawMessage `json:"responses"`
	} `json:"paths"`
}

type docOperation struct{ method, path string }

// operations lists the served document's operations, in a stable order.
func operations(t testing.TB, data []byte) (openAPIDoc, []docOperation) {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("the OpenAPI document does not decode: %v", err)
	}
	var ops []docOperation
	for path, methods := range doc.Paths {
		for m := range methods {
			ops = append(ops, docOperation{strings.ToUpper(m), path})
		}
	}
	sort.Slice(ops, func(i, j int) bool {
		if ops[i].path != ops[j].path {
			return ops[i].path < ops[j].path
		}
		return ops[i].method < ops[j].method
	})
	return doc, ops
}

// isNoRoute reports whether an answer is the catch-all's 404.
func isNoRoute(code int, data []byte) bool {
	var e api.Error
	return code == http.StatusNotFound && json.Unmarshal(data, &e) == nil && strings.HasPrefix(e.Message, "no route")
}

// TestOpenAPIMatchesRouter checks that the document and the router agree: every
// route is documented, every documented operation is routed to the pattern of the
// same method and path, and there are as many operations as routes.
func TestOpenAPIMatchesRouter(t *testing.T) {
	srv := newServer(t)
	routes := srv.Routes()
	rec := serve(srv, "GET", "/v2/openapi.json", body{})
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /v2/openapi.json: got %d %s, want 200", rec.Code, rec.Body)
	}
	doc, ops := operations(t, rec.Body.Bytes())

	if len(ops) != len(routes) {
		t.Errorf("got %d operations in the document, want %d, one per route", len(ops), len(routes))
	}
	seenRoute := map[string]bool{}
	for _, rt := range routes {
		id := rt.Method + " " + rt.Pattern
		if seenRoute[id] {
			t.Errorf("route %s is in the table twice", id)
		}
		seenRoute[id] = true
		op, ok := doc.Paths[rt.Pattern][strings.ToLower(rt.Method)]
		if !ok {
			t.Errorf("route %s: got no operation in the document, want one", id)
			continue
		}
		if _, ok := op.Responses[fmt.Sprint(rt.Status)]; !ok {
			t.Errorf("route %s: got responses %v, want its success code %d", id, op.Responses, rt.Status)
		}
	}
	ids := map[string]string{}
	for _, o := range ops {
		op := doc.Paths[o.path][strings.ToLower(o.method)]
		if prev, dup := ids[op.OperationID]; dup || op.OperationID == "" {
			t.Errorf("%s %s: got operationId %q, also used by %s; want a unique one", o.method, o.path, op.OperationID, prev)
		}
		ids[op.OperationID] = o.method + " " + o.path
		var pathParams []string
		for _, p := range op.Parameters {
			if p.In == "path" {
				pathParams = append(pathParams, "{"+p.Name+"}")
			}
		}
		if got, want := strings.Join(pathParams, ","), strings.Join(wildcardRE.FindAllString(o.path, -1), ","); got != want {
			t.Errorf("%s %s: got path parameters %s, want %s", o.method, o.path, got, want)
		}
	}

	base := newHub(t)
	for _, o := range ops {
		target := wildcardRE.ReplaceAllString(o.path, "x1")
		t.Run(o.method+" "+o.path, func(t *testing.T) {
			if !seenRoute[o.method+" "+o.path] {
				t.Errorf("got an operation that is not in srv.Routes()")
			}
			req := httptest.NewRequest(o.method, target, nil)
			if _, pattern := srv.Mux().Handler(req); pattern != o.method+" "+o.path {
				t.Errorf("Mux().Handler(%s %s): got pattern %q, want %q", o.method, target, pattern, o.method+" "+o.path)
			}
			if rec := serve(srv, o.method, target, body{}); isNoRoute(rec.Code, rec.Body.Bytes()) {
				t.Errorf("in-process %s %s: got the catch-all's %d %s", o.method, target, rec.Code, rec.Body)
			}
			if r := request(t, base, o.method, target, body{}, nil); isNoRoute(r.status, r.body) {
				t.Errorf("hub %s %s: got the catch-all's %s", o.method, target, r)
			}
		})
	}
	// And the catch-all is what answers an undocumented path.
	if rec := serve(srv, "GET", "/v2/undocumented", body{}); !isNoRoute(rec.Code, rec.Body.Bytes()) {
		t.Errorf("GET /v2/undocumented: got %d %s, want the catch-all's 404", rec.Code, rec.Body)
	}
}
