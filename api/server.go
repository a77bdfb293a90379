// Package api is the HTTP API of sandboxapi: routes, authentication, plans,
// quotas, metering, error mapping and Server-Sent Events. It talks to
// sandboxes only through the Sandboxes seam.
package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/buildinfo"
	"github.com/sandboxapi/sandboxapi/internal/reqid"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// Sandboxes is what the API needs from the executor.
type Sandboxes interface {
	CreateSession(ctx context.Context, spec sandbox.SessionSpec) (sandbox.Session, error)
	GetSession(ctx context.Context, owner, id string) (sandbox.Session, error)
	ListSessions(ctx context.Context, owner string) []sandbox.Session
	CountSessions(owner string) int
	DeleteSession(ctx context.Context, owner, id string) error
	Execute(ctx context.Context, owner, id string, req sandbox.ExecRequest) (sandbox.Result, error)
	ExecuteStateless(ctx context.Context, owner string, req sandbox.ExecRequest) (sandbox.Result, error)
	RuntimeList() []sandbox.Runtime
	// NetworkAvailable reports whether sessions with network can be made
	// (egress is configured); asked before anything is reserved.
	NetworkAvailable() bool
}

// Meter records one request's usage; it must not block.
type Meter interface {
	Record(u Usage)
}

// Usage is one metered request.
type Usage struct {
	KeyID      string
	Route      string
	Status     int
	Duration   time.Duration
	BytesIn    int64
	BytesOut   int64
	ExecMillis int64
	At         time.Time
}

// Config holds the API's settings.
type Config struct {
	MaxBodyBytes  int64
	MaxCodeBytes  int64
	MaxStdinBytes int64
	MaxIdleTTL    time.Duration
	// DefaultTimeout is the executor's execution timeout for a call that
	// names none. The API sends the smaller of it and the plan's cap, so a
	// call without a timeout never runs past the plan; zero sends the cap.
	DefaultTimeout time.Duration
	// StreamWriteTimeout bounds the write of each Server-Sent Event; a
	// client that stops reading for longer loses its stream and its run.
	// Zero means 30 s.
	StreamWriteTimeout time.Duration
	// StreamHeartbeat is how long a stream may be silent before a comment
	// line (": keepalive") is sent, so that clients and proxies with read
	// timeouts keep it. Zero means 15 s.
	StreamHeartbeat time.Duration
	Gateway         GatewayConfig
	// KeyCacheTTL is how long a key the store resolved keeps working
	// while the store cannot be reached (every lookup goes to the store
	// while it answers, so a revocation counts at once then). Zero means
	// DefaultKeyCacheTTL; negative caches nothing.
	KeyCacheTTL time.Duration
}

// Deps is everything the server talks to, given once to New. Sandboxes,
// Keys, Plans and Log are required; every other field is optional, and a
// nil one leaves its routes unmounted (404 no_route), as noted per field.
type Deps struct {
	Sandboxes Sandboxes
	Keys      Keys
	Plans     *Plans
	// Auth resolves each request's caller; nil is NewAuthenticator(cfg,
	// Plans, Keys). Serve passes the one its cluster node also asks.
	Auth *Authenticator
	Log  *slog.Logger
	// Meter records each authenticated request; nil records nothing.
	Meter Meter
	// SessionSlots counts plan session slots; serve passes the store,
	// exact across nodes. nil counts in this process (Sandboxes'
	// CountSessions plus creates in flight), exact on one node only.
	SessionSlots SessionSlots
	// RateTokens is the per-key request rate bucket; serve passes the
	// store's on PostgreSQL. nil is an in-memory bucket per key.
	RateTokens RateTokens
	// Observer gets request and execution measurements; nil measures
	// nothing.
	Observer Observer
	// Build is shown by /healthz (version, revision, runsc version); nil
	// shows the status alone.
	Build *buildinfo.Info
	// Readiness makes /readyz report its checks (503 when any fails); nil
	// is ready with no checks.
	Readiness ReadinessReporter
	// Credentials seals network.credentials values before a session is
	// made; nil refuses credentials (503 network_unavailable).
	Credentials CredentialSealer
	// EgressLog serves the decisions of GET /v1/sessions/{id}/egress; nil
	// answers from the live sessions alone, with no decisions.
	EgressLog EgressLog
	// Usage enables GET /v1/usage.
	Usage UsageSource
	// Files enables PUT and GET /v1/sessions/{id}/files.
	Files Files
	// Lifecycle enables POST /v1/sessions/{id}/hibernate and .../fork.
	Lifecycle Lifecycle
	// Processes enables /v1/sessions/{id}/processes and the routes under it.
	Processes Processes
	// Kernels enables POST /v1/sessions/{id}/kernel/restart.
	Kernels Kernels
	// Network enables PATCH /v1/sessions/{id}/network.
	Network SessionNetwork
	// SBOMs enables GET /v1/sessions/{id}/sbom.
	SBOMs SBOMs
	// Installer enables POST /v1/sessions/{id}/install, which asks Gate
	// first (both required together).
	Installer Installer
	Gate      Gate
	// Packages enables POST /v1/packages/check.
	Packages Packages
	// Mirror, Metrics and Console are mounted without authentication on
	// /mirror/, GET /metrics and /console (and /console/).
	Mirror  http.Handler
	Metrics http.Handler
	Console http.Handler
	// MCP, given the API itself, returns the handler of /mcp.
	MCP func(api http.Handler) http.Handler
	// E2B, given the API itself, returns the handler of /e2b/ (the E2B
	// adapter, a client of the API in process).
	E2B func(api http.Handler) http.Handler
}

// Server serves the API. Build it with New; it is safe for concurrent use.
type Server struct {
	cfg   Config
	sb    Sandboxes
	auth  *Authenticator
	plans *Plans
	meter Meter
	log   *slog.Logger
	mux   *http.ServeMux

	slots     SessionSlots // never nil (localSlots when Deps has none)
	rate      RateTokens   // never nil (rateLimiter when Deps has none)
	ready     atomic.Bool
	readiness ReadinessReporter // nil: ready with no checks
	egressLog EgressLog         // nil: no decisions
	sealer    CredentialSealer  // nil: credentials refused
	ops       opsState          // observer and route registry (metrics.go)

	// While the store cannot be reached: this node's own rate bucket in
	// place of the store's (the keys it resolved lately are auth's).
	outageRate rateLimiter

	build *buildinfo.Info // shown by /healthz; nil: status alone
}

// New builds the server and mounts every route (routes).
func New(cfg Config, d Deps) *Server {
	s := &Server{cfg: cfg, sb: d.Sandboxes, auth: d.Auth, plans: d.Plans, meter: d.Meter, log: d.Log, mux: http.NewServeMux(),
		readiness: d.Readiness, egressLog: d.EgressLog, sealer: d.Credentials, build: d.Build}
	s.slots, s.rate = d.SessionSlots, d.RateTokens
	if s.auth == nil {
		s.auth = NewAuthenticator(cfg, d.Plans, d.Keys)
	}
	if s.slots == nil {
		s.slots = newLocalSlots(d.Sandboxes)
	}
	if s.rate == nil {
		s.rate = &rateLimiter{}
	}
	s.ready.Store(true)
	s.setObserver(d.Observer)
	s.routes(d)
	return s
}

// SetReady flips what /readyz reports (drained on shutdown).
func (s *Server) SetReady(ok bool) { s.ready.Store(ok) }

// routes mounts the API: every route of the server is mounted here, those
// of optional dependencies only when d has them. Mount every route with
// s.handle, never s.mux directly: handle records the pattern, and the
// OpenAPI test checks that each recorded route and its statuses are in
// api/openapi.json.
func (s *Server) routes(d Deps) {
	s.handle("GET /healthz", http.HandlerFunc(s.healthz))
	s.handle("GET /readyz", http.HandlerFunc(s.readyz))
	s.handle("GET /openapi.json", http.HandlerFunc(serveOpenAPI))
	s.handle("GET /v1/runtimes", s.authed(s.listRuntimes))
	s.handle("POST /v1/execute", s.authedCall(s.executeStateless))
	s.handle("POST /v1/sessions", s.authed(s.createSession))
	s.handle("GET /v1/sessions", s.authed(s.listSessions))
	s.handle("GET /v1/sessions/{id}", s.authed(s.getSession))
	s.handle("DELETE /v1/sessions/{id}", s.authed(s.deleteSession))
	s.handle("POST /v1/sessions/{id}/execute", s.authedCall(s.executeInSession))
	s.handle("GET /v1/sessions/{id}/egress", s.authed(s.sessionEgress))
	s.handle("/v1/", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		return apiErr(http.StatusNotFound, "no_route", "no route %s %s", r.Method, r.URL.Path)
	}))
	if d.Usage != nil {
		s.mountUsage(d.Usage)
	}
	if d.Files != nil {
		s.mountFiles(d.Files)
	}
	if d.Lifecycle != nil {
		s.mountLifecycle(d.Lifecycle)
	}
	if d.Kernels != nil {
		s.mountKernels(d.Kernels)
	}
	if d.Network != nil {
		s.mountNetwork(d.Network)
	}
	if d.Processes != nil {
		s.mountProcesses(d.Processes)
	}
	if d.SBOMs != nil {
		s.mountSBOM(d.SBOMs)
	}
	if d.Installer != nil {
		s.mountInstaller(d.Installer, d.Gate)
	}
	if d.Packages != nil {
		s.mountPackages(d.Packages)
	}
	if d.Mirror != nil {
		s.handle("/mirror/", d.Mirror)
	}
	if d.Metrics != nil {
		s.handle("GET /metrics", d.Metrics)
	}
	if d.Console != nil {
		s.handle("/console", d.Console)
		s.handle("/console/", d.Console)
	}
	if d.MCP != nil {
		s.handle("/mcp", d.MCP(s))
	}
	if d.E2B != nil {
		s.handle("/e2b/", d.E2B(s))
	}
}

// ServeHTTP adds a request id, recovers panics and logs one line per request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rid := r.Header.Get("X-Request-Id")
	if !validRequestID(rid) {
		rid = newRequestID()
	}
	w.Header().Set("X-Request-Id", rid)
	r = r.WithContext(reqid.With(r.Context(), rid))
	start := time.Now()
	sw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
	w = sw
	// Every request is observed, routed or not; the mux has set r.Pattern
	// by the time this runs (runs after the recovery below).
	defer func() { s.observeRequest(r.Pattern, sw.status, time.Since(start)) }()
	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.log.Error("panic", "request_id", rid, "panic", v, "stack", string(debug.Stack()))
			s.observePanic()
			writeError(w, r, s.log, apiErr(http.StatusInternalServerError, "internal", "internal error"))
		}
	}()
	if allow := s.allowedMethods(r); allow != "" {
		w.Header().Set("Allow", allow)
		writeError(w, r, s.log, apiErr(http.StatusMethodNotAllowed, "method_not_allowed", "%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, allow))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// probeMethods are the methods allowedMethods tries on a path.
var probeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// allowedMethods returns the Allow header of a request whose method no
// route of its path takes while another method's route does (so the
// reply is 405, not the mux's text nor the /v1/ catch-all's 404), and ""
// for every other request. Routes with a method ("GET /x") count; the
// catch-alls and handlers that take any method ("/mirror/") do not.
func (s *Server) allowedMethods(r *http.Request) string {
	if _, p := s.mux.Handler(r); strings.Contains(p, " ") {
		return ""
	}
	var allow []string
	probe := r.WithContext(r.Context()) // a shallow copy whose method changes
	for _, m := range probeMethods {
		probe.Method = m
		if _, p := s.mux.Handler(probe); strings.Contains(p, " ") {
			allow = append(allow, m)
		}
	}
	return strings.Join(allow, ", ")
}

func requestID(ctx context.Context) string { return reqid.From(ctx) }

// validRequestID reports whether a client's X-Request-Id may be used as
// the request id (reqid.Valid).
func validRequestID(id string) bool { return reqid.Valid(id) }

func newRequestID() string { return reqid.New() }

// handlerFunc is a handler that returns its error for central mapping.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// call is what authed keeps of one request for the handlers that need
// more than the request: the sandbox time they report for metering, and
// the request's own body for an upload that lifts the JSON body limit.
type call struct {
	execMillis int64         // sandbox time of the call, metered
	body       *countingBody // the request's body as the handler reads it
	raw        io.ReadCloser // the request's body before the limit
}

// liftBodyLimit makes the rest of the request's body readable up to max
// bytes (instead of the JSON body limit), still counted for metering.
func (c *call) liftBodyLimit(w http.ResponseWriter, max int64) {
	c.body.rc = http.MaxBytesReader(w, c.raw, max)
}

// callFunc is a handler that is also given its call.
type callFunc func(w http.ResponseWriter, r *http.Request, c *call) error

// authed wraps h with the body limit, authentication, rate limit, metering
// and error mapping.
func (s *Server) authed(h handlerFunc) http.Handler {
	return s.authedCall(func(w http.ResponseWriter, r *http.Request, _ *call) error { return h(w, r) })
}

// authedCall is authed for a handler that meters sandbox time or lifts
// the body limit through its call.
func (s *Server) authedCall(h callFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
		body := &countingBody{rc: http.MaxBytesReader(cw, r.Body, s.cfg.MaxBodyBytes)}
		c := &call{body: body, raw: r.Body}
		r.Body = body
		var p *Principal
		var err error
		defer func() {
			// A panic is answered here, so that the access log and the
			// meter record the 500 the client gets (ServeHTTP's own
			// recovery would write it after they ran). A reply already
			// under way is aborted instead (the connection is cut, so the
			// client cannot take a partial body for a whole one).
			v := recover()
			if v != nil && v != http.ErrAbortHandler {
				s.log.Error("panic", "request_id", requestID(r.Context()), "panic", v, "stack", string(debug.Stack()))
				s.observePanic()
				if cw.wroteHeader {
					v = http.ErrAbortHandler
				} else {
					v = nil
					writeError(cw, r, s.log, apiErr(http.StatusInternalServerError, "internal", "internal error"))
				}
			}
			if p != nil && s.meter != nil {
				route := r.Pattern
				s.meter.Record(Usage{KeyID: p.KeyID, Route: route, Status: cw.status, Duration: time.Since(start),
					BytesIn: body.n, BytesOut: cw.n, ExecMillis: c.execMillis, At: start})
			}
			s.notePrincipal(p)
			s.log.Info("request", "request_id", requestID(r.Context()), "method", r.Method, "route", r.Pattern,
				"status", cw.status, "ms", time.Since(start).Milliseconds(), "key_id", keyIDOf(p))
			if v == http.ErrAbortHandler {
				panic(v)
			}
		}()
		p, err = s.auth.Authenticate(r)
		if err != nil {
			writeError(cw, r, s.log, err)
			return
		}
		if err := s.takeRateToken(r.Context(), p); err != nil {
			writeError(cw, r, s.log, err)
			return
		}
		// A call that waited for a hibernated session's resume (its own
		// or another call's) says so, and how long the resume took, in
		// X-Sandbox-Resumed (milliseconds).
		r = r.WithContext(sandbox.WithResumeReport(withPrincipal(r.Context(), p), &cw.resume))
		if err := h(cw, r, c); err != nil {
			err = interrupted(r, body.explain(err))
			if cw.wroteHeader {
				s.log.Warn("error after reply started", "request_id", requestID(r.Context()), "err", err)
				return
			}
			writeError(cw, r, s.log, err)
			if cw.status == http.StatusRequestEntityTooLarge && body.n > 0 && !body.eof {
				lingerAfterRefusal(cw, c.raw)
			}
		}
	})
}

// A refused body is read and dropped after the refusal for at most
// lingerTime and lingerBytes.
const (
	lingerTime  = 5 * time.Second
	lingerBytes = 1 << 30
)

// lingerAfterRefusal lets a client still sending a body the server
// refused read the 413: the reply is flushed, then the rest of the body
// read and dropped for a short while (a lingering close). Closed at once
// with the client's data unread, the connection is reset, and a client
// that sends its whole body before it reads (urllib3, a chunked upload
// from curl) reports a reset or a broken pipe, never the 413. A client
// that reads the reply early stops sending, which ends the wait at once.
func lingerAfterRefusal(w http.ResponseWriter, raw io.Reader) {
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	_ = rc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, raw, lingerBytes)
}

func keyIDOf(p *Principal) string {
	if p == nil {
		return ""
	}
	return p.KeyID
}

// countingWriter records status and bytes written; it passes Flush through
// for SSE and unwraps for http.ResponseController. ServeHTTP uses one for
// the request metrics, authed another for metering.
type countingWriter struct {
	http.ResponseWriter
	status      int
	n           int64
	wroteHeader bool
	// resume is filled by the executor (from any goroutine): the time of
	// a resume the call waited for becomes the X-Sandbox-Resumed header
	// of the reply if its header is still to be written, and while the
	// call waits for one a stream holds its headers (resumeHeld).
	resume sandbox.ResumeReport
}

// resumeHeld tells whether the reply waits for a resume whose time is not
// known yet.
func (c *countingWriter) resumeHeld() bool {
	return c.resume.Pending() && c.resume.Took() == 0
}

func (c *countingWriter) WriteHeader(code int) {
	if !c.wroteHeader && code >= 200 { // 1xx are interim, not the status
		c.status, c.wroteHeader = code, true
		if d := c.resume.Took(); d > 0 {
			c.ResponseWriter.Header().Set("X-Sandbox-Resumed", strconv.FormatInt(max(d.Milliseconds(), 1), 10))
		}
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if !c.wroteHeader {
		c.WriteHeader(http.StatusOK)
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

type countingBody struct {
	rc interface {
		Read([]byte) (int, error)
		Close() error
	}
	n   int64
	eof bool  // the whole body was read
	err error // the first failed read of the client's body (not its end, not the size limit)
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.n += int64(n)
	if err == io.EOF {
		b.eof = true
	}
	var mbe *http.MaxBytesError
	if err != nil && err != io.EOF && !errors.As(err, &mbe) && b.err == nil {
		b.err = err
	}
	return n, err
}

// explain turns the error of a call whose body could not be read (cut
// short by the client or by a forwarding node, or slower than
// server.read_timeout) into the client's 400, whatever the handler made
// of the failed read (an upload's "context canceled" was a 500
// internal). A size limit's 413 stays.
func (b *countingBody) explain(err error) error {
	if b.err == nil {
		return err
	}
	if ae := toAPIError(err); ae != nil && ae.Status == http.StatusRequestEntityTooLarge {
		return err
	}
	return errBodyUnread
}

// errBodyUnread answers a call whose body could not be read; the cluster
// forwarder answers the same (cluster/handler.go).
var errBodyUnread = apiErr(http.StatusBadRequest, "invalid_request",
	"the request body could not be read: it was cut short or took longer than the server's read timeout")

func (b *countingBody) Close() error { return b.rc.Close() }

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	h := wire.Health{Status: "ok"}
	if s.build != nil {
		b := wire.Build(*s.build)
		h.Build = &b
	}
	writeJSON(w, http.StatusOK, h)
}

// readyz reports readiness: 503 while draining or when a check fails.
// With ?scope=serving (a load balancer's probe) only draining turns it
// red: the checks gate installs, and a mirror outage or an old OSV
// snapshot must not take the node's other calls out of rotation. The
// checks are in the body either way.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ok, checks := s.readinessChecks(r)
	switch scope := r.URL.Query().Get("scope"); scope {
	case "", "all":
	case "serving":
		ok = true
	default:
		writeError(w, r, s.log, apiErr(http.StatusBadRequest, "invalid_request", "scope must be all or serving, got %q", scope))
		return
	}
	if !s.ready.Load() || !ok {
		draining := !s.ready.Load()
		writeJSON(w, http.StatusServiceUnavailable, wire.Ready{Status: "not_ready", Draining: &draining, Checks: checks})
		return
	}
	writeJSON(w, http.StatusOK, wire.Ready{Status: "ready", Checks: checks})
}

// UsageSource reads metered totals for GET /v1/usage.
type UsageSource interface {
	// UsageTotals returns rows of per-day, per-route totals for keyID.
	UsageTotals(ctx context.Context, keyID string, since time.Time) ([]wire.UsageTotal, error)
}

// mountUsage serves GET /v1/usage from u.
func (s *Server) mountUsage(u UsageSource) {
	s.handle("GET /v1/usage", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		p := principal(r.Context())
		rows, err := u.UsageTotals(r.Context(), p.KeyID, time.Now().AddDate(0, 0, -30))
		if err != nil {
			return err
		}
		if rows == nil {
			rows = []wire.UsageTotal{}
		}
		writeJSON(w, http.StatusOK, wire.Usage{KeyID: p.KeyID, Plan: p.Plan.Name, Usage: rows})
		return nil
	}))
}
