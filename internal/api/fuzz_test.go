package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
)

// checkAnswer fails unless an answer is one the API may give to a client's input:
// a success, or a JSON error {code, reason, message} of a 4xx status.
func checkAnswer(t *testing.T, what string, code int, data []byte, ok ...int) {
	t.Helper()
	for _, c := range ok {
		if code == c {
			return
		}
	}
	if code >= 500 {
		t.Fatalf("%s: got %d %s, want no server error", what, code, data)
	}
	var e struct {
		Code    *int    `json:"code"`
		Reason  *string `json:"reason"`
		Message *string `json:"message"`
	}
	if err := json.Unmarshal(data, &e); err != nil || e.Code == nil || e.Reason == nil || e.Message == nil || *e.Code != code || *e.Message == "" {
		t.Fatalf("%s: got %d %q, want a JSON {code, reason, message} with code %d", what, code, data, code)
	}
	switch code {
	case 400, 404, 409, 413, 415, 422:
	default:
		t.Fatalf("%s: got %d %s, want 400, 404, 409, 413, 415 or 422", what, code, data)
	}
}

// FuzzCreateCluster uploads arbitrary bytes as the metadata field and as the
// kubeconfig of a cluster registration, and as the body of a cluster PUT: the server
// never panics and never answers 500.
func FuzzCreateCluster(f *testing.F) {
	srv := newServer(f)
	setup := []struct {
		path string
		b    body
	}{
		{"/v2/cluster-providers", jsonBody(`{"metadata":{"name":"cp"}}`)},
		{"/v2/cluster-providers/cp/clusters", upload(f, clusterMeta("c0"), goodKubeconfig)},
	}
	for _, s := range setup {
		if rec := serve(srv, "POST", s.path, s.b); rec.Code != http.StatusCreated {
			f.Fatalf("POST %s: got %d %s, want 201", s.path, rec.Code, rec.Body)
		}
	}

	f.Add([]byte(`{"metadata":{"name":"c1"}}`), goodKubeconfig)
	f.Add([]byte(`{"metadata":{"name":"c2","description":"d"},"spec":{"a":[1,{"b":null}]}}`), kubeconfigFor(kubeconfigOpts{user: execUser}))
	f.Add([]byte(`{"metadata":{"name":"c3"}}`), kubeconfigFor(kubeconfigOpts{noCurrent: true}))
	f.Add([]byte(`{"metadata":{"name":"c4"}}`), kubeconfigFor(kubeconfigOpts{cluster: "    certificate-authority: /etc/x\n"}))
	f.Add([]byte(`{"metadata":{"name":"c5"}}`), []byte(`{"apiVersion":"v1","kind":"Config","current-context":"c","clusters":[{"name":"k","cluster":{"server":"http://[::1]:1"}}],"users":[{"name":"u","user":{}}],"contexts":[{"name":"c","context":{"cluster":"k","user":"u"}}]}`))
	f.Add([]byte(`{"metadata":{"name":"c6"}}`), []byte("apiVersion: v1\nkind: Config\nclusters: [\n"))
	f.Add([]byte(`{"metadata":{"name":"c7"}}`), []byte("- a\n- b\n"))
	f.Add([]byte(`{"metadata":{"name":"c8"}}`), []byte("\x00\xff\xfe"))
	f.Add([]byte(`{"metadata":"x"}`), goodKubeconfig)
	f.Add([]byte(`null`), goodKubeconfig)
	f.Add([]byte(`[]`), []byte{})
	f.Add([]byte(``), []byte(nil))
	f.Add([]byte(`{"metadata":{"name":"C_9"}}`), goodKubeconfig)
	f.Add([]byte(`{"metadata":{"name":"c0"}}`), goodKubeconfig)
	f.Fuzz(func(t *testing.T, metadata, file []byte) {
		rec := serve(srv, "POST", "/v2/cluster-providers/cp/clusters", upload(t, metadata, file))
		checkAnswer(t, "POST cluster", rec.Code, rec.Body.Bytes(), http.StatusCreated)
		rec = serve(srv, "PUT", "/v2/cluster-providers/cp/clusters/c0", upload(t, metadata, file))
		checkAnswer(t, "PUT cluster, multipart", rec.Code, rec.Body.Bytes(), http.StatusOK)
		rec = serve(srv, "PUT", "/v2/cluster-providers/cp/clusters/c0", body{ctype: "application/json", data: metadata})
		checkAnswer(t, "PUT cluster, JSON", rec.Code, rec.Body.Bytes(), http.StatusOK)
	})
}

// FuzzCreateProject sends arbitrary bytes as the JSON body of creates and updates
// through the real handlers: the server never panics and never answers 500.
func FuzzCreateProject(f *testing.F) {
	srv := newServer(f)
	setup := []struct {
		path string
		b    body
	}{
		{"/v2/projects", jsonBody(`{"metadata":{"name":"p0"}}`)},
		{"/v2/cluster-providers", jsonBody(`{"metadata":{"name":"cp"}}`)},
		{"/v2/cluster-providers/cp/clusters", upload(f, clusterMeta("c1"), goodKubeconfig)},
		{"/v2/cluster-providers/cp/clusters/c1/labels", jsonBody(`{"clusterLabel":"edge"}`)},
		{"/v2/cluster-providers/cp/clusters/c1/kv-pairs", jsonBody(`{"metadata":{"name":"kv0"},"spec":{"kv":[]}}`)},
	}
	for _, s := range setup {
		if rec := serve(srv, "POST", s.path, s.b); rec.Code != http.StatusCreated {
			f.Fatalf("POST %s: got %d %s, want 201", s.path, rec.Code, rec.Body)
		}
	}
	for _, seed := range []string{
		`{"metadata":{"name":"p1"}}`,
		`{"metadata":{"name":"p2","description":"d","userData1":"u","userData2":"v"},"spec":{"x":1}}`,
		`{"metadata":{"name":""},"clusterLabel":"edge"}`,
		`{"clusterLabel":"bad label!"}`,
		`{"metadata":{"name":"kv1"},"spec":{"kv":[{"key1":"val1"},{"key2":"val2"}]}}`,
		`{"metadata":{"name":"kv1"},"spec":{"kv":[{"a":1,"b":2}]}}`,
		`{"metadata":{"name":5}}`,
		`{"metadata":"x"}`,
		`{"metadata":{"name":"p0"}}`,
		`{"metadata":{"name":"p1"}} trailing`,
		`{"metadata":{"name":"\u00e9\ud800"}}`,
		`[1,2,3]`,
		`null`,
		`"str"`,
		`{`,
		``,
		"\xff\xfe\x00",
	} {
		f.Add([]byte(seed))
	}
	const c1 = "/v2/cluster-providers/cp/clusters/c1"
	targets := []struct {
		method, path string
		ok           int
	}{
		{"POST", "/v2/projects", http.StatusCreated},
		{"PUT", "/v2/projects/p0", http.StatusOK},
		{"POST", "/v2/cluster-providers", http.StatusCreated},
		{"POST", c1 + "/labels", http.StatusCreated},
		{"PUT", c1 + "/labels/edge", http.StatusOK},
		{"POST", c1 + "/kv-pairs", http.StatusCreated},
		{"PUT", c1 + "/kv-pairs/kv0", http.StatusOK},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, tg := range targets {
			rec := serve(srv, tg.method, tg.path, body{ctype: "application/json", data: data})
			checkAnswer(t, tg.method+" "+tg.path, rec.Code, rec.Body.Bytes(), tg.ok)
		}
	})
}
