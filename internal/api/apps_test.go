package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/hub"
	"github.com/atoll-edge/atoll/internal/lifecycle"
	"github.com/atoll-edge/atoll/internal/model"
	"github.com/atoll-edge/atoll/internal/store"
	"github.com/atoll-edge/atoll/pkg/client"
)

// testCharts holds the charts written for the render tests: web (a ConfigMap, a
// Service and a Deployment, all named <release>-web), crdapp (a CRD and a Widget
// named <release>-widget) and broken (fails unless .Values.x is set: "need x").
const testCharts = "../render/testdata"

// The composite app of the data-path fixture, and the paths under it.
const (
	dpCompositeApps = "/v2/projects/p1/composite-apps"
	dpCA            = dpCompositeApps + "/shop/v1"
	dpApps          = dpCA + "/apps"
	dpCProfiles     = dpCA + "/composite-profiles"
	dpProfiles      = dpCProfiles + "/standard/profiles"
	dpDIGs          = dpCA + "/deployment-intent-groups"
)

// Placements of the fixture's clusters: c1 is labelled edge, c2 core.
const (
	placeEdge = `{"allOf":[{"clusterProvider":"cp","clusterLabel":"edge"}]}`
	placeC1   = `{"allOf":[{"clusterProvider":"cp","cluster":"c1"}]}`
	placeC2   = `{"anyOf":[{"clusterProvider":"cp","cluster":"c2"}]}`
)

// tarEntry is one entry of a test archive; typ 0 is a regular file.
type tarEntry struct {
	name, body string
	typ        byte
	link       string
}

// tgzOf packs entries, in order, as a gzip-compressed tar archive.
func tgzOf(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		hd := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: e.typ, Linkname: e.link}
		if hd.Typeflag == 0 {
			hd.Typeflag = tar.TypeReg
			hd.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hd); err != nil {
			t.Fatalf("archive entry %q: %v", e.name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatalf("archive entry %q: %v", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// chartTgz packs the test chart name as `helm package` does: its files under one
// top folder named after it.
func chartTgz(t testing.TB, name string) []byte {
	t.Helper()
	dir := filepath.Join(testCharts, name)
	var entries []tarEntry
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		entries = append(entries, tarEntry{name: name + "/" + filepath.ToSlash(rel), body: string(data)})
		return nil
	})
	if err != nil {
		t.Fatalf("pack chart %s: %v", name, err)
	}
	return tgzOf(t, entries...)
}

// profileTgz packs an EMCO profile archive whose override values are values.
func profileTgz(t testing.TB, values string) []byte {
	t.Helper()
	return tgzOf(t,
		tarEntry{name: "manifest.yaml", body: "version: v1\ntype:\n  values: override_values.yaml\n"},
		tarEntry{name: "override_values.yaml", body: values})
}

// objBody is a JSON body {"metadata":{"name":name}} with spec, when not "".
func objBody(name, spec string) body {
	return jsonBody(objJSON(name, spec))
}

func objJSON(name, spec string) string {
	if spec == "" {
		return `{"metadata":{"name":"` + name + `"}}`
	}
	return `{"metadata":{"name":"` + name + `"},"spec":` + spec + `}`
}

// send sends a request and fails the test unless it is answered with want.
func send(t testing.TB, base, method, path string, b body, want int) response {
	t.Helper()
	r := request(t, base, method, path, b, nil)
	wantStatus(t, method+" "+path, r, want)
	return r
}

// dataPathFixture adds to fixture's project p1 and cluster c1 (labelled edge) a
// cluster c2 labelled core, the composite app shop v1 with the apps web (the web
// chart) and widgets (the crdapp chart), and the composite profile standard with
// the profile web-profile of web.
func dataPathFixture(t *testing.T, base string) {
	t.Helper()
	fixture(t, base)
	if err := client.New(base).RegisterCluster(t.Context(), "cp", "c2", goodKubeconfig, "core"); err != nil {
		t.Fatalf("register cluster c2: %v", err)
	}
	send(t, base, "POST", dpCompositeApps, objBody("shop", `{"compositeAppVersion":"v1"}`), http.StatusCreated)
	send(t, base, "POST", dpApps, upload(t, []byte(objJSON("web", "")), chartTgz(t, "web")), http.StatusCreated)
	send(t, base, "POST", dpApps, upload(t, []byte(objJSON("widgets", "")), chartTgz(t, "crdapp")), http.StatusCreated)
	send(t, base, "POST", dpCProfiles, objBody("standard", ""), http.StatusCreated)
	send(t, base, "POST", dpProfiles, upload(t, []byte(objJSON("web-profile", `{"app":"web"}`)), profileTgz(t, "greeting: from-profile\n")), http.StatusCreated)
}

// addDIG creates the DIG name of the composite app at ca with spec, its generic
// placement intent "placement", one app intent per {app, placement} pair (named
// after the app) and the intent "intents" naming the placement. It returns the
// DIG's path.
func addDIG(t *testing.T, base, ca, name, spec string, placements ...[2]string) string {
	t.Helper()
	dig := ca + "/deployment-intent-groups/" + name
	send(t, base, "POST", ca+"/deployment-intent-groups", objBody(name, spec), http.StatusCreated)
	send(t, base, "POST", dig+"/generic-placement-intents", objBody("placement", ""), http.StatusCreated)
	for _, p := range placements {
		send(t, base, "POST", dig+"/generic-placement-intents/placement/app-intents",
			objBody(p[0], `{"app":"`+p[0]+`","intent":`+p[1]+`}`), http.StatusCreated)
	}
	send(t, base, "POST", dig+"/intents", objBody("intents", `{"intent":{"genericPlacementIntent":"placement"}}`), http.StatusCreated)
	return dig
}

// lifecycleAnswer is the body of approve, instantiate, terminate and friends.
type lifecycleAnswer struct {
	State     string `json:"state"`
	Revision  int64  `json:"revision"`
	StateInfo *struct {
		Actions []struct {
			State string    `json:"state"`
			Time  time.Time `json:"time"`
		} `json:"actions"`
	} `json:"stateInfo"`
}

func (a lifecycleAnswer) states() string {
	if a.StateInfo == nil {
		return "<no stateInfo>"
	}
	var out []string
	for _, x := range a.StateInfo.Actions {
		out = append(out, x.State)
	}
	return strings.Join(out, ",")
}

// digStatus is the body of GET .../status, in EMCO's shape.
type digStatus struct {
	Name           string         `json:"name"`
	Status         string         `json:"status"`
	Revision       int64          `json:"revision"`
	DeployedCounts map[string]int `json:"deployedCounts"`
	ReadyCounts    map[string]int `json:"readyCounts"`
	States         *struct {
		Actions []struct {
			State string `json:"state"`
		} `json:"actions"`
	} `json:"states"`
	Clusters []struct {
		ClusterProvider string `json:"clusterProvider"`
		Cluster         string `json:"cluster"`
		Connectivity    string `json:"connectivity"`
	} `json:"clusters"`
	Apps []struct {
		Name     string `json:"name"`
		Clusters []struct {
			ClusterProvider string `json:"clusterProvider"`
			Cluster         string `json:"cluster"`
			Connectivity    string `json:"connectivity"`
			Resources       []struct {
				GVK struct {
					Kind string `json:"Kind"`
				} `json:"GVK"`
				Name           string `json:"name"`
				DeployedStatus string `json:"deployedStatus"`
				ReadyStatus    string `json:"readyStatus"`
			} `json:"resources"`
		} `json:"clusters"`
	} `json:"apps"`
}

func (s digStatus) actions() string {
	if s.States == nil {
		return "<no states>"
	}
	var out []string
	for _, a := range s.States.Actions {
		out = append(out, a.State)
	}
	return strings.Join(out, ",")
}

// getStatus asks for the DIG's status with query and decodes the answer; fields
// are the answer's top-level keys.
func getStatus(t testing.TB, base, dig, query string) (st digStatus, fields map[string]json.RawMessage) {
	t.Helper()
	r := send(t, base, "GET", dig+"/status"+query, body{}, http.StatusOK)
	wantJSONType(t, "status", r)
	if err := json.Unmarshal(r.body, &st); err != nil {
		t.Fatalf("status%s: got %s, want a DIG status: %v", query, r.body, err)
	}
	if err := json.Unmarshal(r.body, &fields); err != nil {
		t.Fatalf("status%s: got %s, want a JSON object: %v", query, r.body, err)
	}
	return st, fields
}

// waitState polls the DIG's status until it says state (the status follows the
// lifecycle through a watch, so it may lag the call by a moment).
func waitState(t testing.TB, base, dig, state string) digStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ := getStatus(t, base, dig, "")
		if st.Status == state {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of %s: got state %q after 10s, want %q", dig, st.Status, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// blobDigest is the blob store's name of data.
func blobDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// checkRoutesSucceeded fails unless the request log has a 2xx answer for every
// operation of the hub's OpenAPI document whose path include accepts (as
// checkEveryRouteSucceeded does for the rest of the routes).
func checkRoutesSucceeded(t *testing.T, base, logs string, include func(path string) bool) {
	t.Helper()
	_, ops := operations(t, request(t, base, "GET", "/v2/openapi.json", body{}, nil).body)
	succeeded := map[string]bool{}
	for _, line := range strings.Split(logs, "\n") {
		var entry struct {
			Msg    string `json:"msg"`
			Method string `json:"method"`
			Route  string `json:"route"`
			Code   int    `json:"code"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "request" && entry.Code/100 == 2 {
			succeeded[entry.Method+" "+entry.Route] = true
		}
	}
	n := 0
	for _, o := range ops {
		if !include(o.path) {
			continue
		}
		n++
		if !succeeded[o.method+" "+o.path] {
			t.Errorf("route %s %s: got no successful request in this test, want a happy path for every route", o.method, o.path)
		}
	}
	if n == 0 {
		t.Errorf("the OpenAPI document has no operation this check covers")
	}
}

// TestCompositeAppRoutes walks the happy path of every data-path route: it
// creates, lists, reads, replaces and deletes an object of every kind, deploys a
// composite app of two charts to two clusters (whose API servers do not answer:
// the plan is made with default capabilities; only the resource sync fails),
// reads its status every way EMCO clients ask, and terminates it.
func TestCompositeAppRoutes(t *testing.T) {
	th := startHub(t, nil)
	base := th.url
	dataPathFixture(t, base)
	dig := addDIG(t, base, dpCA, "launch",
		`{"compositeProfile":"standard","version":"r1","namespace":"retail","overrideValues":[{"app":"web","values":{"replicas":3}}]}`,
		[2]string{"web", placeEdge}, [2]string{"widgets", placeC2})

	appKey := func(name string) store.Key { return store.K(model.Apps, "p1", "shop", "v1", name) }
	chartOf := func(t *testing.T, name string) model.ChartRef {
		t.Helper()
		var rec model.AppRecord
		if _, err := th.Store.Get(t.Context(), appKey(name), &rec); err != nil {
			t.Fatalf("read app %s from the store: %v", name, err)
		}
		return rec.Chart
	}
	archiveOf := func(t *testing.T, name string) model.ChartRef {
		t.Helper()
		var rec model.ProfileRecord
		if _, err := th.Store.Get(t.Context(), store.K(model.Profiles, "p1", "shop", "v1", "standard", name), &rec); err != nil {
			t.Fatalf("read profile %s from the store: %v", name, err)
		}
		return rec.Archive
	}
	webChart := chartTgz(t, "web")
	crdChart := chartTgz(t, "crdapp")
	var extraChart model.ChartRef
	var spareArchive model.ChartRef

	type update struct {
		name  string
		body  body
		want  string           // the answer to the PUT and to a GET after it
		check func(*testing.T) // what the store holds afterwards
	}
	tests := []struct {
		kind       string
		collection string // POST and list
		item       string // GET, PUT, DELETE
		create     body
		wantCreate string // the answer to the create and to a GET after it
		alsoListed string // another object the list must show
		created    func(*testing.T)
		updates    []update
	}{
		{
			kind: "composite app version", collection: dpCompositeApps, item: dpCompositeApps + "/shop/v2",
			create:     objBody("shop", `{"compositeAppVersion":"v2"}`),
			wantCreate: `{"metadata":{"name":"shop"},"spec":{"compositeAppVersion":"v2"}}`,
			alsoListed: `{"metadata":{"name":"shop"},"spec":{"compositeAppVersion":"v1"}}`,
			updates: []update{
				{name: "description", body: jsonBody(`{"metadata":{"name":"shop","description":"second"},"spec":{"compositeAppVersion":"v2"}}`),
					want: `{"metadata":{"name":"shop","description":"second"},"spec":{"compositeAppVersion":"v2"}}`},
				{name: "named by the path", body: jsonBody(`{"metadata":{"description":"third"}}`),
					want: `{"metadata":{"name":"shop","description":"third"},"spec":{"compositeAppVersion":"v2"}}`},
			},
		},
		{
			kind: "app", collection: dpApps, item: dpApps + "/extra",
			create:     upload(t, []byte(`{"metadata":{"name":"extra","description":"web chart"}}`), webChart),
			wantCreate: `{"metadata":{"name":"extra","description":"web chart"}}`,
			alsoListed: `{"metadata":{"name":"web"}}`,
			created: func(t *testing.T) {
				extraChart = chartOf(t, "extra")
				if extraChart.Name != "web" || extraChart.Version != "0.1.0" || extraChart.Digest != blobDigest(webChart) || extraChart.Size != int64(len(webChart)) {
					t.Errorf("stored chart: got %+v, want web 0.1.0 %s", extraChart, blobDigest(webChart))
				}
			},
			updates: []update{
				{name: "multipart with a new chart", body: upload(t, []byte(`{"metadata":{"name":"extra","description":"crd chart"}}`), crdChart),
					want: `{"metadata":{"name":"extra","description":"crd chart"}}`,
					check: func(t *testing.T) {
						got := chartOf(t, "extra")
						if got.Name != "crdapp" || got.Digest != blobDigest(crdChart) {
							t.Errorf("stored chart after the multipart PUT: got %+v, want crdapp %s", got, blobDigest(crdChart))
						}
						extraChart = got
					}},
				{name: "JSON metadata only keeps the chart", body: jsonBody(`{"metadata":{"name":"extra","userData1":"u1"}}`),
					want: `{"metadata":{"name":"extra","userData1":"u1"}}`,
					check: func(t *testing.T) {
						if got := chartOf(t, "extra"); got != extraChart {
							t.Errorf("stored chart after the JSON PUT: got %+v, want it kept: %+v", got, extraChart)
						}
					}},
				{name: "multipart without a file keeps the chart", body: upload(t, []byte(`{"metadata":{"name":"extra"}}`), nil),
					want: `{"metadata":{"name":"extra"}}`,
					check: func(t *testing.T) {
						if got := chartOf(t, "extra"); got != extraChart {
							t.Errorf("stored chart after the multipart PUT without a file: got %+v, want it kept: %+v", got, extraChart)
						}
					}},
			},
		},
		{
			kind: "app dependency", collection: dpApps + "/widgets/dependency", item: dpApps + "/widgets/dependency/after-web",
			create:     objBody("after-web", `{"app":"web"}`),
			wantCreate: `{"metadata":{"name":"after-web"},"spec":{"app":"web","opStatus":"Ready"}}`,
			updates: []update{{name: "deployed and wait", body: objBody("after-web", `{"app":"web","opStatus":"Deployed","wait":5}`),
				want: `{"metadata":{"name":"after-web"},"spec":{"app":"web","opStatus":"Deployed","wait":5}}`}},
		},
		{
			kind: "composite profile", collection: dpCProfiles, item: dpCProfiles + "/spare",
			create:     objBody("spare", ""),
			wantCreate: `{"metadata":{"name":"spare"}}`,
			alsoListed: `{"metadata":{"name":"standard"}}`,
			updates:    []update{{name: "description", body: jsonBody(`{"metadata":{"name":"spare","description":"d"}}`), want: `{"metadata":{"name":"spare","description":"d"}}`}},
		},
		{
			kind: "profile", collection: dpProfiles, item: dpProfiles + "/spare",
			create:     upload(t, []byte(objJSON("spare", `{"app":"widgets"}`)), profileTgz(t, "color: red\n")),
			wantCreate: `{"metadata":{"name":"spare"},"spec":{"app":"widgets"}}`,
			alsoListed: `{"metadata":{"name":"web-profile"},"spec":{"app":"web"}}`,
			created: func(t *testing.T) {
				spareArchive = archiveOf(t, "spare")
				if want := blobDigest(profileTgz(t, "color: red\n")); spareArchive.Digest != want {
					t.Errorf("stored archive: got %+v, want %s", spareArchive, want)
				}
			},
			updates: []update{
				{name: "multipart with a new archive", body: upload(t, []byte(`{"metadata":{"name":"spare","description":"green"},"spec":{"app":"widgets"}}`), profileTgz(t, "color: green\n")),
					want: `{"metadata":{"name":"spare","description":"green"},"spec":{"app":"widgets"}}`,
					check: func(t *testing.T) {
						got := archiveOf(t, "spare")
						if want := blobDigest(profileTgz(t, "color: green\n")); got.Digest != want {
							t.Errorf("stored archive after the multipart PUT: got %+v, want %s", got, want)
						}
						spareArchive = got
					}},
				{name: "JSON keeps the archive", body: jsonBody(`{"metadata":{"name":"spare"},"spec":{"app":"web"}}`),
					want: `{"metadata":{"name":"spare"},"spec":{"app":"web"}}`,
					check: func(t *testing.T) {
						if got := archiveOf(t, "spare"); got != spareArchive {
							t.Errorf("stored archive after the JSON PUT: got %+v, want it kept: %+v", got, spareArchive)
						}
					}},
			},
		},
		{
			kind: "deployment intent group", collection: dpDIGs, item: dpDIGs + "/spare",
			create:     objBody("spare", `{"compositeProfile":"standard","version":"r1"}`),
			wantCreate: `{"metadata":{"name":"spare"},"spec":{"compositeProfile":"standard","version":"r1","namespace":"default"}}`,
			alsoListed: `{"metadata":{"name":"launch"},"spec":{"compositeProfile":"standard","version":"r1","namespace":"retail","overrideValues":[{"app":"web","values":{"replicas":3}}]}}`,
			updates: []update{{name: "version and override values", body: objBody("spare", `{"compositeProfile":"standard","version":"r2","namespace":"apps","overrideValues":[{"app":"widgets","values":{"color":"red"}}]}`),
				want: `{"metadata":{"name":"spare"},"spec":{"compositeProfile":"standard","version":"r2","namespace":"apps","overrideValues":[{"app":"widgets","values":{"color":"red"}}]}}`}},
		},
		{
			kind: "generic placement intent", collection: dig + "/generic-placement-intents", item: dig + "/generic-placement-intents/spare",
			create:     objBody("spare", ""),
			wantCreate: `{"metadata":{"name":"spare"}}`,
			alsoListed: `{"metadata":{"name":"placement"}}`,
			updates:    []update{{name: "description", body: jsonBody(`{"metadata":{"name":"spare","description":"d"}}`), want: `{"metadata":{"name":"spare","description":"d"}}`}},
		},
		{
			kind: "app intent", collection: dig + "/generic-placement-intents/placement/app-intents", item: dig + "/generic-placement-intents/placement/app-intents/spare",
			create:     objBody("spare", `{"app":"web","intent":`+placeC1+`}`),
			wantCreate: `{"metadata":{"name":"spare"},"spec":{"app":"web","intent":` + placeC1 + `}}`,
			alsoListed: `{"metadata":{"name":"widgets"},"spec":{"app":"widgets","intent":` + placeC2 + `}}`,
			updates: []update{{name: "allOf with a nested anyOf",
				body: objBody("spare", `{"app":"widgets","intent":{"allOf":[{"clusterProvider":"cp","clusterLabel":"core"},{"anyOf":[{"clusterProvider":"cp","cluster":"c1"},{"clusterProvider":"cp","clusterLabel":"edge"}]}]}}`),
				want: `{"metadata":{"name":"spare"},"spec":{"app":"widgets","intent":{"allOf":[{"clusterProvider":"cp","clusterLabel":"core"},{"anyOf":[{"clusterProvider":"cp","cluster":"c1"},{"clusterProvider":"cp","clusterLabel":"edge"}]}]}}}`}},
		},
		{
			kind: "intent", collection: dig + "/intents", item: dig + "/intents/spare",
			create:     objBody("spare", `{"intent":{"genericPlacementIntent":"placement"}}`),
			wantCreate: `{"metadata":{"name":"spare"},"spec":{"intent":{"genericPlacementIntent":"placement"}}}`,
			alsoListed: `{"metadata":{"name":"intents"},"spec":{"intent":{"genericPlacementIntent":"placement"}}}`,
			updates: []update{{name: "description", body: jsonBody(`{"metadata":{"name":"spare","description":"d"},"spec":{"intent":{"genericPlacementIntent":"placement"}}}`),
				want: `{"metadata":{"name":"spare","description":"d"},"spec":{"intent":{"genericPlacementIntent":"placement"}}}`}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.kind, func(t *testing.T) {
			r := send(t, base, "POST", tc.collection, tc.create, http.StatusCreated)
			wantJSON(t, "create", r, tc.wantCreate)
			tag := r.header.Get("ETag")
			if tag == "" {
				t.Errorf("create: got no ETag header, want the revision")
			}
			if tc.created != nil {
				tc.created(t)
			}
			r = send(t, base, "GET", tc.item, body{}, http.StatusOK)
			wantJSON(t, "get", r, tc.wantCreate)
			if got := r.header.Get("ETag"); got != tag {
				t.Errorf("get: got ETag %q, want %q (the create's)", got, tag)
			}
			r = send(t, base, "GET", tc.collection, body{}, http.StatusOK)
			for _, want := range []string{tc.wantCreate, tc.alsoListed} {
				if want != "" && !listHas(t, r.body, want) {
					t.Errorf("list: got %s, want it to hold %s", r.body, want)
				}
			}
			for _, u := range tc.updates {
				r = send(t, base, "PUT", tc.item, u.body, http.StatusOK)
				wantJSON(t, "PUT ("+u.name+")", r, u.want)
				if got := r.header.Get("ETag"); got == "" || got == tag {
					t.Errorf("PUT (%s): got ETag %q, want a new revision (was %q)", u.name, got, tag)
				}
				tag = r.header.Get("ETag")
				r = send(t, base, "GET", tc.item, body{}, http.StatusOK)
				wantJSON(t, "get after the PUT ("+u.name+")", r, u.want)
				if got := r.header.Get("ETag"); got != tag {
					t.Errorf("get after the PUT (%s): got ETag %q, want %q", u.name, got, tag)
				}
				if u.check != nil {
					u.check(t)
				}
			}
			r = send(t, base, "DELETE", tc.item, body{}, http.StatusNoContent)
			if len(r.body) != 0 {
				t.Errorf("delete: got body %q, want none", r.body)
			}
			wantError(t, "get after delete", request(t, base, "GET", tc.item, body{}, nil), http.StatusNotFound, "does not exist")
			r = send(t, base, "GET", tc.collection, body{}, http.StatusOK)
			if listHas(t, r.body, tc.updates[len(tc.updates)-1].want) {
				t.Errorf("list after delete: got %s, want the deleted object gone", r.body)
			}
		})
	}

	// The composite app list shows every version of every composite app, in order.
	send(t, base, "POST", dpCompositeApps, objBody("catalog", `{"compositeAppVersion":"v3"}`), http.StatusCreated)
	send(t, base, "POST", dpCompositeApps, objBody("shop", `{"compositeAppVersion":"v9"}`), http.StatusCreated)
	wantJSON(t, "list of composite apps", send(t, base, "GET", dpCompositeApps, body{}, http.StatusOK),
		`[{"metadata":{"name":"catalog"},"spec":{"compositeAppVersion":"v3"}},
		  {"metadata":{"name":"shop"},"spec":{"compositeAppVersion":"v1"}},
		  {"metadata":{"name":"shop"},"spec":{"compositeAppVersion":"v9"}}]`)
	wantJSON(t, "list of apps", send(t, base, "GET", dpApps, body{}, http.StatusOK),
		`[{"metadata":{"name":"web"}},{"metadata":{"name":"widgets"}}]`)

	// A DIG that was never approved says Created.
	st, _ := getStatus(t, base, dig, "")
	if st.Status != "Created" || st.Name != "launch" || st.Revision != 0 {
		t.Errorf("status before approve: got %+v, want launch Created at revision 0", st)
	}

	lifecycleCall := func(t *testing.T, call, b string, state string, revision int64, actions string) {
		t.Helper()
		var bd body
		if b != "" {
			bd = jsonBody(b)
		}
		r := send(t, base, "POST", dig+"/"+call, bd, http.StatusAccepted)
		wantJSONType(t, call, r)
		var ans lifecycleAnswer
		if err := json.Unmarshal(r.body, &ans); err != nil {
			t.Fatalf("%s: got %s: %v", call, r.body, err)
		}
		if ans.State != state || ans.Revision != revision || ans.states() != actions {
			t.Errorf("%s: got state %q revision %d actions %s, want %s, %d, %s", call, ans.State, ans.Revision, ans.states(), state, revision, actions)
		}
		if state != "Terminating" { // with nothing applied anywhere, Terminated follows at once
			waitState(t, base, dig, state)
		}
	}
	lifecycleCall(t, "approve", `{"metadata":{"name":""}}`, "Approved", 0, "Created,Approved")
	lifecycleCall(t, "instantiate", "", "Instantiated", 1, "Created,Approved,Instantiated")

	// web goes to c1 (labelled edge): a ConfigMap, a Service and a Deployment,
	// all web-web; widgets to c2: the CRD widgets.example.atoll.dev and the Widget
	// widgets-widget.
	// Resources are named app/cluster/Kind/name.
	all := []string{
		"web/c1/ConfigMap/web-web", "web/c1/Deployment/web-web", "web/c1/Service/web-web",
		"widgets/c2/CustomResourceDefinition/widgets.example.atoll.dev", "widgets/c2/Widget/widgets-widget",
	}
	statusTests := []struct {
		name     string
		query    string
		counts   string // "deployedCounts" or "readyCounts"
		summary  bool   // no apps in the answer
		detail   bool   // both statuses on every resource
		clusters string // the clusters of the answer
		want     []string
	}{
		{name: "deployed summary", query: "?status=deployed&output=summary", counts: "deployedCounts", summary: true, clusters: "c1,c2", want: all},
		{name: "deployed all", query: "?status=deployed&output=all", counts: "deployedCounts", clusters: "c1,c2", want: all},
		{name: "deployed detail", query: "?status=deployed&output=detail", counts: "deployedCounts", detail: true, clusters: "c1,c2", want: all},
		{name: "ready", query: "?status=ready", counts: "readyCounts", clusters: "c1,c2", want: all},
		{name: "default is ready and all", query: "", counts: "readyCounts", clusters: "c1,c2", want: all},
		{name: "ready summary", query: "?status=ready&output=summary", counts: "readyCounts", summary: true, clusters: "c1,c2", want: all},
		{name: "ready detail", query: "?status=ready&output=detail", counts: "readyCounts", detail: true, clusters: "c1,c2", want: all},
		{name: "app filter", query: "?status=deployed&app=widgets", counts: "deployedCounts", clusters: "c2", want: all[3:]},
		{name: "two apps", query: "?status=ready&app=widgets&app=web", counts: "readyCounts", clusters: "c1,c2", want: all},
		{name: "cluster filter", query: "?status=deployed&cluster=c1", counts: "deployedCounts", clusters: "c1", want: all[:3]},
		{name: "cluster filter provider+name", query: "?status=ready&cluster=cp%2Bc2", counts: "readyCounts", clusters: "c2", want: all[3:]},
		// The resource filter picks resources; the clusters are still those of the apps.
		{name: "resource filter", query: "?status=deployed&resource=widgets-widget", counts: "deployedCounts", clusters: "c1,c2", want: all[4:]},
		{name: "resource filter with several kinds", query: "?status=ready&output=detail&resource=web-web", counts: "readyCounts", detail: true, clusters: "c1,c2", want: all[:3]},
		{name: "filters together", query: "?status=deployed&app=web&cluster=c1&resource=web-web&output=summary", counts: "deployedCounts", summary: true, clusters: "c1", want: all[:3]},
	}
	for _, tc := range statusTests {
		t.Run("status "+tc.name, func(t *testing.T) {
			st, fields := getStatus(t, base, dig, tc.query)
			if st.Status != "Instantiated" || st.Name != "launch" || st.Revision != 1 {
				t.Errorf("got status %q of %q at revision %d, want launch Instantiated at revision 1", st.Status, st.Name, st.Revision)
			}
			if got := st.actions(); got != "Created,Approved,Instantiated" {
				t.Errorf("got states.actions %s, want Created,Approved,Instantiated", got)
			}
			counts, other := st.DeployedCounts, "readyCounts"
			if tc.counts == "readyCounts" {
				counts, other = st.ReadyCounts, "deployedCounts"
			}
			if _, ok := fields[other]; ok {
				t.Errorf("got %s, want only %s", other, tc.counts)
			}
			total := 0
			for state, n := range counts {
				total += n
				if tc.counts == "readyCounts" && state != "NotPresent" {
					t.Errorf("got %d resources %s, want every one NotPresent: no cluster answers", n, state)
				}
				if tc.counts == "deployedCounts" && state != "Pending" && state != "Failed" {
					t.Errorf("got %d resources %s, want Pending or Failed: no cluster answers", n, state)
				}
			}
			if total != len(tc.want) {
				t.Errorf("got %s %v, want %d resources", tc.counts, counts, len(tc.want))
			}
			var clusters []string
			for _, c := range st.Clusters {
				clusters = append(clusters, c.Cluster)
				if c.ClusterProvider != "cp" || (c.Connectivity != "Unreachable" && c.Connectivity != "Pending") {
					t.Errorf("got cluster %+v, want provider cp and connectivity Unreachable or Pending", c)
				}
			}
			if got := strings.Join(clusters, ","); got != tc.clusters {
				t.Errorf("got clusters %s, want %s", got, tc.clusters)
			}
			if _, ok := fields["apps"]; ok == tc.summary {
				t.Errorf("output %q: got apps %v in the answer, want them unless summary", tc.query, ok)
			}
			if tc.summary {
				return
			}
			var got []string
			for _, a := range st.Apps {
				for _, c := range a.Clusters {
					if c.Connectivity == "" {
						t.Errorf("app %s cluster %s: got no connectivity", a.Name, c.Cluster)
					}
					for _, r := range c.Resources {
						got = append(got, a.Name+"/"+c.Cluster+"/"+r.GVK.Kind+"/"+r.Name)
						hasDeployed, hasReady := r.DeployedStatus != "", r.ReadyStatus != ""
						if tc.detail && (!hasDeployed || !hasReady) || !tc.detail && hasDeployed == hasReady {
							t.Errorf("resource %s/%s: got deployedStatus %q readyStatus %q, want %s", a.Name, r.Name, r.DeployedStatus, r.ReadyStatus,
								map[bool]string{true: "both", false: "only the one asked for"}[tc.detail])
						}
					}
				}
			}
			sort.Strings(got)
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("got resources %v, want %v", got, tc.want)
			}
		})
	}

	lifecycleCall(t, "update", "", "Instantiated", 2, "Created,Approved,Instantiated,Instantiated")
	lifecycleCall(t, "rollback", `{"spec":{"revision":1}}`, "Instantiated", 3, "Created,Approved,Instantiated,Instantiated,Instantiated")
	lifecycleCall(t, "stop", "", "Stopped", 3, "Created,Approved,Instantiated,Instantiated,Instantiated,Stopped")
	lifecycleCall(t, "terminate", "", "Terminating", 3, "Created,Approved,Instantiated,Instantiated,Instantiated,Stopped,Terminating")
	if st, _ := getStatus(t, base, dig, ""); st.Status != "Terminating" && st.Status != "Terminated" {
		t.Errorf("status after terminate: got %q, want Terminating or Terminated", st.Status)
	}

	checkRoutesSucceeded(t, base, th.logs.String(), func(p string) bool { return strings.Contains(p, "/composite-apps") })
}

// TestCompositeAppBadInputs sends what the data path's routes must refuse and
// checks the status, the JSON error and its message, and that nothing was stored:
// the object is absent, its collection (or the object) unchanged, and an
// uploaded file not kept in the blob store. The hub keeps files of at most 64 KiB.
func TestCompositeAppBadInputs(t *testing.T) {
	th := startHub(t, func(cfg *hub.Config) { cfg.MaxBlobBytes = 64 << 10 })
	base := th.url
	dataPathFixture(t, base)
	send(t, base, "POST", dpProfiles, upload(t, []byte(objJSON("widgets-profile", `{"app":"widgets"}`)), profileTgz(t, "color: red\n")), http.StatusCreated)
	send(t, base, "POST", dpCProfiles, objBody("empty", ""), http.StatusCreated)
	dig := addDIG(t, base, dpCA, "d1", `{"compositeProfile":"empty","version":"1"}`, [2]string{"web", placeC1})
	const (
		gpis       = "/generic-placement-intents"
		appIntents = gpis + "/placement/app-intents"
	)
	// A second generic placement intent, without app intents, named by a second intent.
	send(t, base, "POST", dig+gpis, objBody("g2", ""), http.StatusCreated)
	send(t, base, "POST", dig+"/intents", objBody("i2", `{"intent":{"genericPlacementIntent":"g2"}}`), http.StatusCreated)

	appMeta := func(name string) []byte { return []byte(objJSON(name, "")) }
	chartYAML := func(name string) tarEntry {
		return tarEntry{name: name + "/Chart.yaml", body: "apiVersion: v2\nname: " + name + "\nversion: 0.1.0\n"}
	}
	cm := func(name string) tarEntry {
		return tarEntry{name: name + "/templates/cm.yaml", body: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\n"}
	}
	notGzip := []byte("this is not a gzip archive")
	dotDot := tgzOf(t, chartYAML("a-dots"), tarEntry{name: "a-dots/../../etc/cron.d/x", body: "x"})
	absolute := tgzOf(t, chartYAML("a-abs"), tarEntry{name: "/etc/a-abs.yaml", body: "x"})
	symlink := tgzOf(t, chartYAML("a-link"), tarEntry{name: "a-link/templates/secret.yaml", typ: tar.TypeSymlink, link: "/etc/shadow"})
	noChartYAML := tgzOf(t, tarEntry{name: "a-nochart/values.yaml", body: "x: 1\n"}, cm("a-nochart"))
	big := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	orphanChart := tgzOf(t, chartYAML("orphan"), cm("orphan"))
	ghostProfile := profileTgz(t, "for: ghost\n")
	noManifest := tgzOf(t, tarEntry{name: "override_values.yaml", body: "no: manifest\n"})
	noAppProfile := profileTgz(t, "for: nobody\n")
	staleChart := tgzOf(t, chartYAML("stale"), cm("stale"))
	staleProfile := profileTgz(t, "stale: true\n")
	noManifestPut := tgzOf(t, tarEntry{name: "values.yaml", body: "no: manifest on PUT\n"})
	stale := map[string]string{"If-Match": `"1"`} // the first revision of the hub's store, long gone
	intent := func(name, spec string) body { return objBody(name, spec) }

	tests := []struct {
		name    string
		method  string
		path    string
		body    body
		header  map[string]string
		status  int
		message []string // substrings of the error message
		absent  string   // a path that must answer 404 afterwards
		same    string   // a path whose GET answer (body and ETag) must not change
		file    []byte   // an uploaded file that must not be in the blob store
	}{
		// Composite apps.
		{name: "composite app without compositeAppVersion", method: "POST", path: dpCompositeApps, body: objBody("nover", ""),
			status: 422, message: []string{"spec.compositeAppVersion is empty", "name the version"}, same: dpCompositeApps},
		{name: "composite app with an empty spec", method: "POST", path: dpCompositeApps, body: objBody("nover", `{}`),
			status: 422, message: []string{"spec.compositeAppVersion is empty"}, same: dpCompositeApps},
		{name: "composite app with a bad version name", method: "POST", path: dpCompositeApps, body: objBody("badver", `{"compositeAppVersion":"V_1!"}`),
			status: 422, message: []string{"spec.compositeAppVersion", `"V_1!"`, "not valid"}, same: dpCompositeApps},
		{name: "composite app with a bad name", method: "POST", path: dpCompositeApps, body: objBody("Shop_1", `{"compositeAppVersion":"v1"}`),
			status: 422, message: []string{`"Shop_1"`, "not valid"}, absent: dpCompositeApps + "/Shop_1/v1", same: dpCompositeApps},
		{name: "duplicate composite app version", method: "POST", path: dpCompositeApps, body: objBody("shop", `{"compositeAppVersion":"v1","x":1}`),
			status: 409, message: []string{`composite app "shop" version "v1"`, "already exists"}, same: dpCA},
		{name: "PUT of a composite app with a stale If-Match", method: "PUT", path: dpCA, body: objBody("shop", `{"compositeAppVersion":"v1"}`), header: stale,
			status: 409, message: []string{"changed since revision 1"}, same: dpCA},
		{name: "PUT renaming a composite app", method: "PUT", path: dpCA, body: objBody("mall", `{"compositeAppVersion":"v1"}`),
			status: 422, message: []string{`"mall"`, "cannot rename"}, absent: dpCompositeApps + "/mall/v1", same: dpCA},

		// App uploads.
		{name: "app as JSON", method: "POST", path: dpApps, body: objBody("a-json", ""),
			status: 415, message: []string{"multipart/form-data", `"file"`}, absent: dpApps + "/a-json", same: dpApps},
		{name: "app without a file", method: "POST", path: dpApps, body: upload(t, appMeta("a-nofile"), nil),
			status: 422, message: []string{`"a-nofile"`, "no chart", `"file"`}, absent: dpApps + "/a-nofile", same: dpApps},
		{name: "app whose file is not gzip", method: "POST", path: dpApps, body: upload(t, appMeta("a-gzip"), notGzip),
			status: 400, message: []string{"not a gzip-compressed tar archive"}, absent: dpApps + "/a-gzip", same: dpApps, file: notGzip},
		{name: "chart with ../", method: "POST", path: dpApps, body: upload(t, appMeta("a-dots"), dotDot),
			status: 400, message: []string{`"a-dots/../../etc/cron.d/x"`, "escapes the chart directory"}, absent: dpApps + "/a-dots", same: dpApps, file: dotDot},
		{name: "chart with an absolute path", method: "POST", path: dpApps, body: upload(t, appMeta("a-abs"), absolute),
			status: 400, message: []string{`"/etc/a-abs.yaml"`, "absolute path"}, absent: dpApps + "/a-abs", same: dpApps, file: absolute},
		{name: "chart with a symlink", method: "POST", path: dpApps, body: upload(t, appMeta("a-link"), symlink),
			status: 400, message: []string{`"a-link/templates/secret.yaml"`, "symbolic link"}, absent: dpApps + "/a-link", same: dpApps, file: symlink},
		{name: "chart without Chart.yaml", method: "POST", path: dpApps, body: upload(t, appMeta("a-nochart"), noChartYAML),
			status: 400, message: []string{"Chart.yaml", "missing"}, absent: dpApps + "/a-nochart", same: dpApps, file: noChartYAML},
		{name: "chart over the blob cap", method: "POST", path: dpApps, body: upload(t, appMeta("a-big"), big),
			status: 413, message: []string{"64 KiB"}, absent: dpApps + "/a-big", same: dpApps, file: big},
		{name: "PUT of an app with a chart over the blob cap", method: "PUT", path: dpApps + "/web", body: upload(t, appMeta("web"), big),
			status: 413, message: []string{"64 KiB"}, same: dpApps + "/web", file: big},
		{name: "PUT of an app with a symlink", method: "PUT", path: dpApps + "/web", body: upload(t, appMeta("web"), symlink),
			status: 400, message: []string{"symbolic link"}, same: dpApps + "/web", file: symlink},
		{name: "PUT of an app with a stale If-Match", method: "PUT", path: dpApps + "/web", body: upload(t, appMeta("web"), staleChart), header: stale,
			status: 409, message: []string{`app "web"`, "changed since revision 1"}, same: dpApps + "/web", file: staleChart},
		{name: "JSON PUT of an app with a stale If-Match", method: "PUT", path: dpApps + "/web", body: jsonBody(objJSON("web", "")), header: stale,
			status: 409, message: []string{"changed since revision 1"}, same: dpApps + "/web"},
		{name: "DELETE of an app with a stale If-Match", method: "DELETE", path: dpApps + "/web", header: stale,
			status: 409, message: []string{"changed since revision 1"}, same: dpApps + "/web"},
		{name: "PUT renaming an app", method: "PUT", path: dpApps + "/web", body: upload(t, appMeta("web2"), nil),
			status: 422, message: []string{`"web2"`, "cannot rename"}, absent: dpApps + "/web2", same: dpApps + "/web"},
		{name: "PUT of an unknown app", method: "PUT", path: dpApps + "/ghost", body: jsonBody(objJSON("ghost", "")),
			status: 404, message: []string{`app "ghost"`, "does not exist"}, absent: dpApps + "/ghost", same: dpApps},
		{name: "PUT of an app as form data", method: "PUT", path: dpApps + "/web", body: body{ctype: "application/x-www-form-urlencoded", data: []byte("a=b")},
			status: 415, message: []string{"application/json"}, same: dpApps + "/web"},
		{name: "duplicate app", method: "POST", path: dpApps, body: upload(t, appMeta("web"), orphanChart),
			status: 409, message: []string{`app "web"`, "already exists"}, same: dpApps + "/web", file: orphanChart},
		{name: "app of an unknown composite app", method: "POST", path: dpCompositeApps + "/ghost/v1/apps", body: upload(t, appMeta("orphan"), orphanChart),
			status: 404, message: []string{`composite app "ghost" version "v1"`, "does not exist"}, same: dpCompositeApps, file: orphanChart},

		// Profiles.
		{name: "profile of an unknown app", method: "POST", path: dpProfiles, body: upload(t, []byte(objJSON("p-ghost", `{"app":"ghost"}`)), ghostProfile),
			status: 422, message: []string{`app "ghost"`, "does not exist"}, absent: dpProfiles + "/p-ghost", same: dpProfiles, file: ghostProfile},
		{name: "profile archive without manifest.yaml", method: "POST", path: dpProfiles, body: upload(t, []byte(objJSON("p-nomanifest", `{"app":"web"}`)), noManifest),
			status: 400, message: []string{"manifest.yaml"}, absent: dpProfiles + "/p-nomanifest", same: dpProfiles, file: noManifest},
		{name: "profile without spec.app", method: "POST", path: dpProfiles, body: upload(t, []byte(objJSON("p-noapp", "")), noAppProfile),
			status: 422, message: []string{"spec.app is empty"}, absent: dpProfiles + "/p-noapp", same: dpProfiles, file: noAppProfile},
		{name: "PUT of a profile with a stale If-Match", method: "PUT", path: dpProfiles + "/web-profile",
			body: upload(t, []byte(objJSON("web-profile", `{"app":"web"}`)), staleProfile), header: stale,
			status: 409, message: []string{`profile "web-profile"`, "changed since revision 1"}, same: dpProfiles + "/web-profile", file: staleProfile},
		{name: "PUT of a profile with an archive without manifest.yaml", method: "PUT", path: dpProfiles + "/web-profile",
			body:   upload(t, []byte(objJSON("web-profile", `{"app":"web"}`)), noManifestPut),
			status: 400, message: []string{"manifest.yaml"}, same: dpProfiles + "/web-profile", file: noManifestPut},
		{name: "PUT of a profile without spec.app", method: "PUT", path: dpProfiles + "/web-profile", body: jsonBody(objJSON("web-profile", "")),
			status: 422, message: []string{"spec.app is empty"}, same: dpProfiles + "/web-profile"},
		{name: "duplicate profile", method: "POST", path: dpProfiles, body: upload(t, []byte(objJSON("web-profile", `{"app":"web"}`)), staleProfile),
			status: 409, message: []string{`profile "web-profile"`, "already exists"}, same: dpProfiles + "/web-profile", file: staleProfile},
		{name: "PUT of a profile naming an unknown app", method: "PUT", path: dpProfiles + "/web-profile", body: jsonBody(objJSON("web-profile", `{"app":"ghost"}`)),
			status: 422, message: []string{`app "ghost"`, "does not exist"}, same: dpProfiles + "/web-profile"},

		// Deployment intent groups.
		{name: "DIG with an unknown composite profile", method: "POST", path: dpDIGs, body: objBody("d-bad", `{"compositeProfile":"ghost","version":"1"}`),
			status: 422, message: []string{`composite profile "ghost"`, "does not exist"}, absent: dpDIGs + "/d-bad", same: dpDIGs},
		{name: "DIG without spec.version", method: "POST", path: dpDIGs, body: objBody("d-bad", `{"compositeProfile":"standard"}`),
			status: 422, message: []string{"spec.version is empty"}, absent: dpDIGs + "/d-bad", same: dpDIGs},
		{name: "DIG without spec.compositeProfile", method: "POST", path: dpDIGs, body: objBody("d-bad", `{"version":"1"}`),
			status: 422, message: []string{"spec.compositeProfile is empty"}, absent: dpDIGs + "/d-bad", same: dpDIGs},
		{name: "DIG overriding an unknown app", method: "POST", path: dpDIGs,
			body:   objBody("d-bad", `{"compositeProfile":"standard","version":"1","overrideValues":[{"app":"ghost","values":{"a":1}}]}`),
			status: 422, message: []string{`app "ghost"`, "does not exist"}, absent: dpDIGs + "/d-bad", same: dpDIGs},
		{name: "DIG with a bad namespace", method: "POST", path: dpDIGs, body: objBody("d-bad", `{"compositeProfile":"standard","version":"1","namespace":"Bad_NS"}`),
			status: 422, message: []string{"namespace", `"Bad_NS"`, "not valid"}, absent: dpDIGs + "/d-bad", same: dpDIGs},
		{name: "PUT of a DIG naming an unknown composite profile", method: "PUT", path: dig, body: objBody("d1", `{"compositeProfile":"ghost","version":"1"}`),
			status: 422, message: []string{`composite profile "ghost"`}, same: dig},

		// App intents.
		{name: "app intent for an unknown app", method: "POST", path: dig + appIntents, body: intent("ai-bad", `{"app":"ghost","intent":`+placeC1+`}`),
			status: 422, message: []string{`app "ghost"`, "does not exist"}, absent: dig + appIntents + "/ai-bad", same: dig + appIntents},
		{name: "app intent without spec.app", method: "POST", path: dig + appIntents, body: intent("ai-bad", `{"intent":`+placeC1+`}`),
			status: 422, message: []string{"spec.app is empty"}, absent: dig + appIntents + "/ai-bad", same: dig + appIntents},
		{name: "app intent on an unknown provider", method: "POST", path: dig + appIntents, body: intent("ai-bad", `{"app":"web","intent":{"allOf":[{"clusterProvider":"nocp","cluster":"c1"}]}}`),
			status: 422, message: []string{`cluster provider "nocp"`, "does not exist"}, absent: dig + appIntents + "/ai-bad", same: dig + appIntents},
		{name: "app intent by label on an unknown provider", method: "POST", path: dig + appIntents, body: intent("ai-bad", `{"app":"web","intent":{"anyOf":[{"clusterProvider":"nocp","clusterLabel":"edge"}]}}`),
			status: 422, message: []string{`cluster provider "nocp"`, "does not exist"}, absent: dig + appIntents + "/ai-bad", same: dig + appIntents},
		{name: "app intent on an unknown cluster", method: "POST", path: dig + appIntents, body: intent("ai-bad", `{"app":"web","intent":{"allOf":[{"clusterProvider":"cp","cluster":"ghost"}]}}`),
			status: 422, message: []string{`cluster "ghost"`, "does not exist"}, absent: dig + appIntents + "/ai-bad", same: dig + appIntents},
		{name: "app intent by a label no cluster has", method: "POST", path: dig + appIntents, body: intent("ai-bad", `{"app":"web","intent":{"allOf":[{"clusterProvider":"cp","clusterLabel":"moon"}]}}`),
			status: 422, message: []string{`"moon"`, "no cluster"}, absent: dig + appIntents + "/ai-bad", same: dig + appIntents},
		{name: "app intent with neither allOf nor anyOf", method: "POST", path: dig + appIntents, body: intent("ai-bad", `{"app":"web","intent":{}}`),
			status: 422, message: []string{"neither allOf nor anyOf"}, absent: dig + appIntents + "/ai-bad", same: dig + appIntents},
		{name: "app intent term with both cluster and clusterLabel", method: "POST", path: dig + appIntents,
			body:   intent("ai-bad", `{"app":"web","intent":{"allOf":[{"clusterProvider":"cp","cluster":"c1","clusterLabel":"edge"}]}}`),
			status: 422, message: []string{"spec.intent.allOf[0]", "exactly one of cluster or clusterLabel"}, absent: dig + appIntents + "/ai-bad", same: dig + appIntents},
		{name: "app intent term without a provider", method: "POST", path: dig + appIntents, body: intent("ai-bad", `{"app":"web","intent":{"anyOf":[{"cluster":"c1"}]}}`),
			status: 422, message: []string{"spec.intent.anyOf[0]", "no clusterProvider"}, absent: dig + appIntents + "/ai-bad", same: dig + appIntents},
		{name: "app intent with anyOf nested in anyOf", method: "POST", path: dig + appIntents,
			body:   intent("ai-bad", `{"app":"web","intent":{"anyOf":[{"anyOf":[{"clusterProvider":"cp","cluster":"c1"}]}]}}`),
			status: 422, message: []string{"spec.intent.anyOf[0]", "anyOf"}, absent: dig + appIntents + "/ai-bad", same: dig + appIntents},
		{name: "PUT of an app intent by a label no cluster has", method: "PUT", path: dig + appIntents + "/web",
			body:   intent("web", `{"app":"web","intent":{"allOf":[{"clusterProvider":"cp","clusterLabel":"moon"}]}}`),
			status: 422, message: []string{`"moon"`}, same: dig + appIntents + "/web"},

		// Intents.
		{name: "intent naming a missing generic placement intent", method: "POST", path: dig + "/intents", body: objBody("i-bad", `{"intent":{"genericPlacementIntent":"ghost"}}`),
			status: 422, message: []string{`generic placement intent "ghost"`, "does not exist"}, absent: dig + "/intents/i-bad", same: dig + "/intents"},
		{name: "intent naming no generic placement intent", method: "POST", path: dig + "/intents", body: objBody("i-bad", `{"intent":{}}`),
			status: 422, message: []string{"spec.intent.genericPlacementIntent is empty"}, absent: dig + "/intents/i-bad", same: dig + "/intents"},

		// Deletes of what is used.
		{name: "delete of an app a profile uses", method: "DELETE", path: dpApps + "/widgets",
			status: 409, message: []string{`app "widgets"`, `profile "widgets-profile"`}, same: dpApps + "/widgets"},
		{name: "delete of a composite profile a DIG uses", method: "DELETE", path: dpCProfiles + "/empty",
			status: 409, message: []string{`composite profile "empty"`, `deployment intent group "d1"`}, same: dpCProfiles + "/empty"},
		{name: "delete of a generic placement intent an intent uses", method: "DELETE", path: dig + gpis + "/g2",
			status: 409, message: []string{`generic placement intent "g2"`, `intent "i2"`}, same: dig + gpis + "/g2"},
		{name: "delete of a composite app version with apps", method: "DELETE", path: dpCA,
			status: 409, message: []string{`composite app "shop" version "v1"`, "apps", `"web"`, "delete them first"}, same: dpCA},
		{name: "delete of a generic placement intent with app intents", method: "DELETE", path: dig + gpis + "/placement",
			status: 409, message: []string{`generic placement intent "placement"`, `"web"`, "delete them first"}, same: dig + gpis + "/placement"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var before response
			if tc.same != "" {
				before = send(t, base, "GET", tc.same, body{}, http.StatusOK)
			}
			r := request(t, base, tc.method, tc.path, tc.body, tc.header)
			wantError(t, tc.method+" "+tc.path, r, tc.status, tc.message...)
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
			if tc.file != nil {
				if _, err := th.Blobs.Stat(t.Context(), blobDigest(tc.file)); errs.KindOf(err) != errs.NotFound {
					t.Errorf("blob store: got %v for the refused file, want it not stored", err)
				}
			}
		})
	}
}

// TestDIGLifecycleErrors drives DIGs through calls their state refuses, plans
// that cannot be made, and a race of instantiates.
func TestDIGLifecycleErrors(t *testing.T) {
	th := startHub(t, nil)
	base := th.url
	dataPathFixture(t, base)
	flow := addDIG(t, base, dpCA, "flow", `{"compositeProfile":"standard","version":"1"}`, [2]string{"web", placeEdge}, [2]string{"widgets", placeC2})
	partial := addDIG(t, base, dpCA, "partial", `{"compositeProfile":"standard","version":"1"}`, [2]string{"web", placeC1})
	race := addDIG(t, base, dpCA, "race", `{"compositeProfile":"standard","version":"1"}`, [2]string{"web", placeC1}, [2]string{"widgets", placeC1})

	// The composite app bad has the web chart and the broken one.
	const bad = dpCompositeApps + "/bad/v1"
	send(t, base, "POST", dpCompositeApps, objBody("bad", `{"compositeAppVersion":"v1"}`), http.StatusCreated)
	send(t, base, "POST", bad+"/apps", upload(t, []byte(objJSON("web", "")), chartTgz(t, "web")), http.StatusCreated)
	send(t, base, "POST", bad+"/apps", upload(t, []byte(objJSON("broken", "")), chartTgz(t, "broken")), http.StatusCreated)
	send(t, base, "POST", bad+"/composite-profiles", objBody("none", ""), http.StatusCreated)
	broken := addDIG(t, base, bad, "d", `{"compositeProfile":"none","version":"1"}`, [2]string{"web", placeC1}, [2]string{"broken", placeC1})

	digKey := func(path string) store.Key {
		parts := strings.Split(strings.TrimPrefix(path, "/v2/projects/"), "/")
		// p1 composite-apps shop v1 deployment-intent-groups name
		return store.K(model.DIGs, parts[0], parts[2], parts[3], parts[5])
	}
	// noPlan checks that a DIG whose instantiate failed is still Approved with no plan.
	noPlan := func(dig string) func(*testing.T) {
		return func(t *testing.T) {
			rec, _, err := th.Lifecycle.Get(t.Context(), digKey(dig))
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != lifecycle.Approved || rec.Plan != "" || rec.Revision != 0 {
				t.Errorf("lifecycle record: got %s with plan %q at revision %d, want Approved without a plan", rec.State, rec.Plan, rec.Revision)
			}
			st, fields := getStatus(t, base, dig, "?status=deployed")
			if st.Status != "Approved" || st.Revision != 0 || len(st.Clusters) != 0 || fields["apps"] != nil || fields["deployedCounts"] != nil {
				t.Errorf("status: got %+v, want Approved at revision 0 without clusters, apps or counts", st)
			}
		}
	}
	steps := []struct {
		name    string
		method  string
		path    string
		body    body
		status  int
		state   string   // the state of a 202
		message []string // substrings of an error's message
		after   func(*testing.T)
	}{
		{name: "instantiate before approve", method: "POST", path: flow + "/instantiate", status: 409, message: []string{`deployment intent group "flow"`, "not approved", "approve it first"}},
		{name: "terminate a created DIG", method: "POST", path: flow + "/terminate", status: 409, message: []string{"Created", "only an instantiated one"}},
		{name: "approve", method: "POST", path: flow + "/approve", status: 202, state: "Approved"},
		{name: "approve twice", method: "POST", path: flow + "/approve", status: 409, message: []string{"already approved"}},
		{name: "terminate an approved DIG", method: "POST", path: flow + "/terminate", status: 409, message: []string{"Approved", "only an instantiated one"}},
		{name: "instantiate", method: "POST", path: flow + "/instantiate", status: 202, state: "Instantiated"},
		{name: "instantiate twice", method: "POST", path: flow + "/instantiate", status: 409, message: []string{"already instantiated"}},
		{name: "approve an instantiated DIG", method: "POST", path: flow + "/approve", status: 409, message: []string{"Instantiated"}},
		{name: "delete an instantiated DIG", method: "DELETE", path: flow, status: 409, message: []string{"Instantiated", "terminate it before deleting it"},
			after: func(t *testing.T) { send(t, base, "GET", flow, body{}, http.StatusOK) }},
		{name: "terminate", method: "POST", path: flow + "/terminate", status: 202, state: "Terminating"},
		// Terminating, or already Terminated: nothing was applied anywhere.
		{name: "terminate twice", method: "POST", path: flow + "/terminate", status: 409, message: []string{`deployment intent group "flow"`, "terminat"}},

		{name: "approve a DIG with an app without intent", method: "POST", path: partial + "/approve", status: 202, state: "Approved"},
		{name: "instantiate with an app without intent", method: "POST", path: partial + "/instantiate", status: 422,
			message: []string{`app "widgets"`, "no placement intent"}, after: noPlan(partial)},

		{name: "approve a DIG with a broken chart", method: "POST", path: broken + "/approve", status: 202, state: "Approved"},
		{name: "instantiate with a broken chart", method: "POST", path: broken + "/instantiate", status: 422,
			message: []string{`"broken"`, "need x"}, after: noPlan(broken)},

		{name: "status of an unknown DIG", method: "GET", path: dpDIGs + "/ghost/status", status: 404, message: []string{`deployment intent group "ghost"`, "does not exist"}},
		{name: "status of a DIG of an unknown composite app", method: "GET", path: dpCompositeApps + "/ghost/v1/deployment-intent-groups/flow/status", status: 404,
			message: []string{`composite app "ghost"`, "does not exist"}},
		{name: "status=bogus", method: "GET", path: flow + "/status?status=bogus", status: 400, message: []string{`status="bogus"`, "deployed", "ready"}},
		{name: "output=bogus", method: "GET", path: flow + "/status?output=bogus", status: 400, message: []string{`output="bogus"`, "summary", "detail"}},
		{name: "approve an unknown DIG", method: "POST", path: dpDIGs + "/ghost/approve", status: 404, message: []string{`deployment intent group "ghost"`, "does not exist"}},
		{name: "instantiate with a body that is not JSON", method: "POST", path: race + "/instantiate", body: jsonBody("{nope"), status: 400, message: []string{"not valid JSON"}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			r := request(t, base, s.method, s.path, s.body, nil)
			if s.status != http.StatusAccepted {
				wantError(t, s.method+" "+s.path, r, s.status, s.message...)
			} else {
				wantStatus(t, s.method+" "+s.path, r, s.status)
				var ans lifecycleAnswer
				if err := json.Unmarshal(r.body, &ans); err != nil || ans.State != s.state {
					t.Errorf("%s %s: got %s, want state %s", s.method, s.path, r.body, s.state)
				}
			}
			if s.after != nil {
				s.after(t)
			}
		})
	}

	// Of 20 instantiates at once, exactly one wins.
	send(t, base, "POST", race+"/approve", body{}, http.StatusAccepted)
	const n = 20
	type answer struct {
		code   int
		header http.Header
		body   []byte
	}
	answers := make(chan answer, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Not request: a goroutine other than the test's must not call t.Fatal.
			resp, err := httpClient.Post(base+race+"/instantiate", "application/json", nil)
			if err != nil {
				t.Error(err)
				answers <- answer{}
				return
			}
			defer resp.Body.Close()
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			answers <- answer{resp.StatusCode, resp.Header, buf.Bytes()}
		}()
	}
	close(start)
	wg.Wait()
	close(answers)
	got := map[int]int{}
	for a := range answers {
		got[a.code]++
		if a.code == http.StatusConflict {
			wantError(t, "losing instantiate", response{status: a.code, header: a.header, body: a.body}, http.StatusConflict, `deployment intent group "race"`)
		}
	}
	if got[http.StatusAccepted] != 1 || got[http.StatusConflict] != n-1 {
		t.Errorf("%d concurrent instantiates: got status codes %v, want one 202 and %d 409", n, got, n-1)
	}
	rec, _, err := th.Lifecycle.Get(t.Context(), digKey(race))
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != lifecycle.Instantiated || rec.Revision != 1 || len(rec.History) != 1 {
		t.Errorf("after the race: got %s at revision %d with %d plans, want Instantiated at revision 1 with one plan", rec.State, rec.Revision, len(rec.History))
	}
}
