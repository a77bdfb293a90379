package e2b

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/reqid"
	"github.com/sandboxapi/sandboxapi/store"
)

// Records is what the adapter keeps of its sandboxes (the store's
// e2b_sandboxes): all of its state, so that a restart or another node
// loses nothing.
type Records interface {
	InsertE2BSandbox(ctx context.Context, r store.E2BSandbox) error
	E2BSandbox(ctx context.Context, id string) (store.E2BSandbox, error)
	E2BSandboxes(ctx context.Context, ids []string) (map[string]store.E2BSandbox, error)
	SetE2BEndAt(ctx context.Context, id string, end time.Time) error
	DeleteE2BSandbox(ctx context.Context, id string) error
	PruneE2BSandboxes(ctx context.Context) (int64, error)
}

var _ Records = (*store.Store)(nil)

// Deps is what New needs. API and Records are required.
type Deps struct {
	// API serves /v1: the server's own handler (the cluster's in front of
	// it on a cluster node), called in process.
	API     http.Handler
	Records Records
	Log     *slog.Logger
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Handler serves E2B's API under Prefix. Build it with New: the zero
// value is not usable. It is safe for concurrent use and holds nothing
// but its dependencies.
type Handler struct {
	api http.Handler
	rec Records
	log *slog.Logger
	clk func() time.Time
	mux *http.ServeMux
	ci  *http.ServeMux // port 49999: the code interpreter (interpreter.go)
}

// Prefix is where the adapter is mounted: E2B_API_URL=http://HOST:PORT/e2b
// and E2B_SANDBOX_URL=http://HOST:PORT/e2b/sandbox.
const (
	Prefix        = "/e2b"
	SandboxPrefix = Prefix + "/sandbox"
)

// New builds the handler of every path under Prefix.
func New(d Deps) *Handler {
	h := &Handler{api: d.API, rec: d.Records, log: d.Log, clk: d.Now, mux: http.NewServeMux(), ci: http.NewServeMux()}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	if h.clk == nil {
		h.clk = time.Now
	}
	h.routes()
	return h
}

func (h *Handler) now() time.Time { return h.clk().UTC() }

// control is a control-plane route: it needs the caller's API key.
type control func(w http.ResponseWriter, r *http.Request, c caller) error

func (h *Handler) routes() {
	p := Prefix
	h.mux.Handle("POST "+p+"/sandboxes", h.control(h.create))
	h.mux.Handle("POST "+p+"/v2/sandboxes", h.control(h.create))
	h.mux.Handle("GET "+p+"/sandboxes", h.control(h.list(false)))
	h.mux.Handle("GET "+p+"/v2/sandboxes", h.control(h.list(true)))
	h.mux.Handle("GET "+p+"/sandboxes/{id}", h.control(h.get))
	h.mux.Handle("DELETE "+p+"/sandboxes/{id}", h.control(h.kill))
	h.mux.Handle("POST "+p+"/sandboxes/{id}/timeout", h.control(h.setEnd("timeout")))
	h.mux.Handle("POST "+p+"/sandboxes/{id}/refreshes", h.control(h.setEnd("duration")))
	h.mux.Handle("POST "+p+"/sandboxes/{id}/pause", h.control(h.pause))
	h.mux.Handle("POST "+p+"/sandboxes/{id}/resume", h.control(h.connect))
	h.mux.Handle("POST "+p+"/v2/sandboxes/{id}/connect", h.control(h.connect))
	h.mux.Handle("POST "+p+"/sandboxes/{id}/fork", h.control(h.fork))
	h.mux.Handle("PUT "+p+"/sandboxes/{id}/network", h.control(h.updateNetwork))
	h.mux.Handle("GET "+p+"/sandboxes/{id}/metrics", h.control(h.metrics))
	// What sandboxapi does not serve yet answers 501 in E2B's shape.
	for _, route := range []struct{ pattern, what string }{
		{"GET " + p + "/sandboxes/metrics", "metrics of many sandboxes at once are not supported: ask each sandbox's"},
		{"POST " + p + "/sandboxes/{id}/snapshots", "snapshots are not supported"},
		{p + "/snapshots", "snapshots are not supported"},
		{p + "/templates", "templates are not supported: use base or code-interpreter-v1"},
		{p + "/templates/", "templates are not supported: use base or code-interpreter-v1"},
		{p + "/v2/templates", "templates are not supported: use base or code-interpreter-v1"},
		{p + "/v2/templates/", "templates are not supported: use base or code-interpreter-v1"},
		{p + "/v3/templates", "templates are not supported: use base or code-interpreter-v1"},
		{p + "/volumes", "volumes are not supported"},
		{p + "/volumes/", "volumes are not supported"},
	} {
		what := route.what
		h.mux.Handle(route.pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusNotImplemented, what+" by sandboxapi (docs/e2b.md)")
		}))
	}
	h.mountSandbox()
	h.mountInterpreter()
	h.mux.Handle(p+"/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
	}))
}

// ServeHTTP serves a request under Prefix. Every request gets a request
// id (the one it brought, if valid), which the /v1 calls it makes carry.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !reqid.Valid(r.Header.Get("X-Request-Id")) {
		r = r.Clone(r.Context())
		r.Header.Set("X-Request-Id", reqid.New())
	}
	w.Header().Set("X-Request-Id", r.Header.Get("X-Request-Id"))
	// The code interpreter's paths (/execute, /contexts, /health) are
	// told apart from envd's by the port the SDK names, not the path.
	if r.Header.Get("E2b-Sandbox-Port") == interpreterPort && strings.HasPrefix(r.URL.Path, SandboxPrefix+"/") {
		h.ci.ServeHTTP(w, r)
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) control(f control) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The SDK sends X-API-KEY; Authorization: Bearer is E2B's access
		// token form, and sandboxapi keys work there too.
		key := strings.TrimSpace(r.Header.Get("X-API-Key"))
		if key == "" {
			if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
				key = strings.TrimSpace(a[7:])
			}
		}
		if key == "" {
			writeError(w, http.StatusUnauthorized, "send a sandboxapi API key in X-API-Key (E2B_API_KEY)")
			return
		}
		if err := f(w, r, caller{api: h.api, in: r, key: key}); err != nil {
			h.fail(w, r, err)
		}
	})
}

// errNoSandbox is sandbox traffic for a sandbox that does not exist or
// whose token does not match: one answer for both.
var errNoSandbox = errors.New("no such sandbox")
