// Package api serves Atoll's REST API: EMCO's v2 paths and bodies
// ({"metadata": {...}, "spec": {...}}, camelCase, multipart where a file is
// uploaded), JSON errors with status codes mapped in one place (errors.go), body
// limits on every route, and an OpenAPI 3 document built from the same route table
// that the router serves.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/atoll-edge/atoll/internal/blob"
	"github.com/atoll-edge/atoll/internal/cluster"
	"github.com/atoll-edge/atoll/internal/errs"
	"github.com/atoll-edge/atoll/internal/registry"
	"github.com/atoll-edge/atoll/internal/store"
)

// ClusterStatuses reports the connectivity of registered clusters.
type ClusterStatuses interface {
	Status(key store.Key) (cluster.Status, bool)
}

// Options are what the API serves from. Store, Registry and Clusters must be set.
type Options struct {
	Store    *store.Store
	Registry *registry.Registry
	Clusters ClusterStatuses
	// Ready reports whether the hub can serve (its store answers); nil means always.
	Ready func(ctx context.Context) error
	// Logger receives one line per request; nil means slog.Default().
	Logger *slog.Logger
	// Metrics registers the request metrics; nil means none are kept.
	Metrics prometheus.Registerer
	// Extra are routes of other parts of the hub (zero-touch provisioning, the
	// data path) that the API serves and documents like its own.
	Extra []Route
	// Blobs keeps uploaded charts and profiles; Lifecycle drives DIGs; Status
	// answers their status. The data path's routes are served when Blobs and
	// Lifecycle are set.
	Blobs     *blob.Store
	Lifecycle Lifecycle
	Status    DIGStatus
}

// Route is one method and path of the API.
type Route struct {
	Method  string
	Pattern string // a net/http pattern path: /v2/projects/{project}
	Summary string
	// Request names the body's schema: "" (none), a component name, or
	// "multipart:<component>" for a metadata field and a file part.
	Request string
	// Response names the success body's schema ("" for none; "[]X" for a list).
	Response string
	// Status is the success code.
	Status  int
	MaxBody int64
	Tag     string
	// Schemas are OpenAPI component schemas this route introduces.
	Schemas map[string]any
	// Handler serves the route: it writes the answer, or returns an error that the
	// API answers as JSON with the status code of its kind.
	Handler func(w http.ResponseWriter, r *http.Request) error
}

// Server is the API's HTTP handler.
type Server struct {
	opts     Options
	log      *slog.Logger
	routes   []Route
	mux      *http.ServeMux
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

// New builds the server and its routes.
func New(opts Options) (*Server, error) {
	if opts.Store == nil || opts.Registry == nil || opts.Clusters == nil {
		return nil, errors.New("api: Store, Registry and Clusters must be set")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{opts: opts, log: opts.Logger.With("component", "api"), mux: http.NewServeMux()}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "atoll_api_requests_total", Help: "API requests by route and status code.",
	}, []string{"method", "route", "code"})
	s.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "atoll_api_request_duration_seconds", Help: "API request latency by route.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
	}, []string{"method", "route"})
	if opts.Metrics != nil {
		for _, c := range []prometheus.Collector{s.requests, s.latency} {
			if err := opts.Metrics.Register(c); err != nil {
				return nil, fmt.Errorf("api: register metrics: %w", err)
			}
		}
	}
	s.routes = append(s.routes, s.systemRoutes()...)
	s.routes = append(s.routes, s.projectRoutes()...)
	s.routes = append(s.routes, s.clusterRoutes()...)
	s.routes = append(s.routes, s.appRoutes()...)
	s.routes = append(s.routes, opts.Extra...)
	for i := range s.routes {
		if s.routes[i].Handler == nil {
			return nil, fmt.Errorf("api: route %s %s has no handler", s.routes[i].Method, s.routes[i].Pattern)
		}
		rt := s.routes[i]
		s.mux.Handle(rt.Method+" "+rt.Pattern, s.wrap(rt))
	}
	s.mux.HandleFunc("/", s.noRoute)
	return s, nil
}

// noRoute answers 405 with the allowed methods when the path exists with other
// methods, else 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range []string{"GET", "POST", "PUT", "DELETE"} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != "/" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeJSON(w, http.StatusMethodNotAllowed, Error{Code: http.StatusMethodNotAllowed, Reason: "method not allowed",
			Message: fmt.Sprintf("%s is not served on %s; use %s", r.Method, r.URL.Path, strings.Join(allowed, ", "))})
		return
	}
	writeError(w, r, s.log, errs.New(errs.NotFound, "no route %s %s; GET /v2/openapi.json lists them", r.Method, r.URL.Path))
}

// Routes returns the route table.
func (s *Server) Routes() []Route { return append([]Route(nil), s.routes...) }

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Mux exposes the router, for tests that check which pattern serves a path.
func (s *Server) Mux() *http.ServeMux { return s.mux }

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// wrap adds to a route what every route has: the body limit, panic recovery, the
// error answer, metrics and the request log.
func (s *Server) wrap(rt Route) http.Handler {
	limit := rt.MaxBody
	if limit == 0 {
		limit = maxJSONBody
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		r.Body = http.MaxBytesReader(sw, r.Body, limit)
		if r.ContentLength > limit {
			writeError(sw, r, s.log, errs.New(errs.TooLarge, "the request body is %d bytes; the limit for this route is %s", r.ContentLength, sizeString(limit)))
		} else {
			func() {
				defer func() {
					if p := recover(); p != nil {
						s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
						writeError(sw, r, s.log, fmt.Errorf("panic: %v", p))
					}
				}()
				if err := rt.Handler(sw, r); err != nil {
					writeError(sw, r, s.log, err)
				}
			}()
		}
		if sw.code == 0 {
			sw.code = http.StatusOK
		}
		d := time.Since(start)
		s.requests.WithLabelValues(rt.Method, rt.Pattern, strconv.Itoa(sw.code)).Inc()
		s.latency.WithLabelValues(rt.Method, rt.Pattern).Observe(d.Seconds())
		s.log.Info("request", "method", r.Method, "route", rt.Pattern, "path", r.URL.Path, "code", sw.code, "ms", float64(d.Microseconds())/1000)
	})
}

func (s *Server) systemRoutes() []Route {
	return []Route{
		{Method: "GET", Pattern: "/healthz", Summary: "Liveness: the process serves HTTP.", Response: "Health", Status: 200, Tag: "system", Handler: func(w http.ResponseWriter, r *http.Request) error {
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
			return nil
		}},
		{Method: "GET", Pattern: "/readyz", Summary: "Readiness: the store (etcd) answers.", Response: "Health", Status: 200, Tag: "system", Handler: func(w http.ResponseWriter, r *http.Request) error {
			if s.opts.Ready != nil {
				ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
				defer cancel()
				if err := s.opts.Ready(ctx); err != nil {
					return errs.Wrap(errs.Unavailable, err, "not ready")
				}
			}
			writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
			return nil
		}},
		{Method: "GET", Pattern: "/v2/openapi.json", Summary: "This API's OpenAPI 3 document.", Response: "OpenAPI", Status: 200, Tag: "system", Handler: func(w http.ResponseWriter, r *http.Request) error {
			writeJSON(w, http.StatusOK, OpenAPI(s.routes))
			return nil
		}},
	}
}

// PathName reads the path wildcard and checks it can name an object (what says
// what it names, for the message), so that an escaped slash or other oddity never
// reaches a store key.
func PathName(r *http.Request, wildcard, what string) (string, error) {
	return pathName(r, wildcard, what)
}

// DecodeJSON reads a JSON request body into v: 415 for another content type, 400
// for bad JSON, 413 over the route's limit.
func DecodeJSON(r *http.Request, v any) error { return decodeJSON(r, v) }

// WriteJSON answers v as JSON with the status code.
func WriteJSON(w http.ResponseWriter, code int, v any) { writeJSON(w, code, v) }

// WriteError answers err as the API's JSON error.
func (s *Server) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	writeError(w, r, s.log, err)
}

func pathName(r *http.Request, param, what string) (string, error) {
	v := r.PathValue(param)
	if v == "" || len(v) > 253 || strings.ContainsAny(v, "/\x00") || !validName(v) {
		return "", errs.New(errs.Malformed, "%q in the path is not a valid %s name", v, what)
	}
	return v, nil
}

// ifMatch reads the expected revision from an If-Match header: `"12"`, `12` or
// `W/"12"`. 0 means none was given.
func ifMatch(r *http.Request) (int64, error) {
	h := strings.TrimSpace(r.Header.Get("If-Match"))
	if h == "" || h == "*" {
		return 0, nil
	}
	h = strings.Trim(strings.TrimPrefix(h, "W/"), `"`)
	rev, err := strconv.ParseInt(h, 10, 64)
	if err != nil || rev <= 0 {
		return 0, errs.New(errs.Malformed, "If-Match %q is not a revision; send the ETag of an earlier GET", r.Header.Get("If-Match"))
	}
	return rev, nil
}

func setETag(w http.ResponseWriter, rev int64) {
	if rev > 0 {
		w.Header().Set("ETag", strconv.Quote(strconv.FormatInt(rev, 10)))
	}
}
