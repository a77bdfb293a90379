package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// decodeJSON reads exactly one JSON object with no unknown fields.
func decodeJSON(r *http.Request, v any) error {
	// The body must be JSON whatever Content-Type says: curl -d sends a
	// form type, and rejecting it would help nobody.
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return apiErr(http.StatusRequestEntityTooLarge, "body_too_large", "request body over %d bytes", mbe.Limit)
		case errors.Is(err, io.EOF):
			return apiErr(http.StatusBadRequest, "invalid_json", "request body is empty")
		case errors.As(err, &se):
			return apiErr(http.StatusBadRequest, "invalid_json", "malformed JSON at byte %d", se.Offset)
		case errors.As(err, &te):
			return apiErr(http.StatusBadRequest, "invalid_json", "field %q must be %s", te.Field, te.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return apiErr(http.StatusBadRequest, "unknown_field", "%s", strings.TrimPrefix(err.Error(), "json: "))
		default:
			return apiErr(http.StatusBadRequest, "invalid_json", "malformed JSON")
		}
	}
	if dec.More() {
		return apiErr(http.StatusBadRequest, "invalid_json", "request body holds more than one JSON value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apiErr(http.StatusRequestEntityTooLarge, "body_too_large", "request body over %d bytes", mbe.Limit)
		}
		return apiErr(http.StatusBadRequest, "invalid_json", "trailing data after the JSON object")
	}
	return nil
}

// seconds converts a JSON number of seconds, rejecting nonsense.
func seconds(field string, v *float64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if math.IsNaN(*v) || *v <= 0 || *v > 7*24*3600 {
		return 0, apiErr(http.StatusBadRequest, "invalid_request", "%s must be a positive number of seconds", field)
	}
	return time.Duration(*v * float64(time.Second)), nil
}

// NetworkRequest is the network block of a session request.
type NetworkRequest struct {
	Enabled        bool     `json:"enabled"`
	AllowedDomains []string `json:"allowed_domains,omitempty"`
}

type createSessionRequest struct {
	Language string          `json:"language"`
	IdleTTL  *float64        `json:"idle_ttl"`
	Network  *NetworkRequest `json:"network"`
}

type sessionJSON struct {
	ID        string          `json:"id"`
	Language  string          `json:"language"`
	State     string          `json:"state"`
	IdleTTL   int64           `json:"idle_ttl"`
	Network   json.RawMessage `json:"network"`
	CreatedAt time.Time       `json:"created_at"`
	LastUsed  time.Time       `json:"last_used_at"`
	ExpiresAt time.Time       `json:"expires_at"`
	// HibernatedAt is when the session last hibernated (absent: never).
	HibernatedAt *time.Time `json:"hibernated_at,omitempty"`
	ForkedFrom   string     `json:"forked_from,omitempty"`
	DiskMB       int64      `json:"disk_mb,omitempty"`
}

func toSessionJSON(s sandbox.Session) sessionJSON {
	j := sessionJSON{ID: s.ID, Language: s.Language, State: string(s.State), IdleTTL: int64(s.IdleTTL / time.Second),
		Network: s.Network, CreatedAt: s.CreatedAt.UTC(), LastUsed: s.LastUsedAt.UTC(), ExpiresAt: s.ExpiresAt().UTC(),
		ForkedFrom: s.ForkedFrom, DiskMB: s.DiskBytes >> 20}
	if !s.HibernatedAt.IsZero() {
		t := s.HibernatedAt.UTC()
		j.HibernatedAt = &t
	}
	return j
}

// forbidden is the 403 for a feature the caller's plan lacks.
func (s *Server) forbidden(p *Principal, feature string, has func(*Plan) bool) error {
	if up := s.plans.cheapestWith(has); up != "" {
		return apiErr(http.StatusForbidden, "plan_forbidden", "%s is not part of plan %s; plan %s has it", feature, p.Plan.Name, up)
	}
	return apiErr(http.StatusForbidden, "plan_forbidden", "%s is not part of plan %s", feature, p.Plan.Name)
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	var req createSessionRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.Language) == "" {
		return apiErr(http.StatusBadRequest, "invalid_request", "language is required")
	}
	if !p.Plan.Sessions {
		return s.forbidden(p, "stateful sessions", func(pl *Plan) bool { return pl.Sessions })
	}
	ttl, err := seconds("idle_ttl", req.IdleTTL)
	if err != nil {
		return err
	}
	if ttl != 0 && ttl > s.cfg.MaxIdleTTL {
		return apiErr(http.StatusBadRequest, "invalid_request", "idle_ttl must be at most %d seconds", int64(s.cfg.MaxIdleTTL/time.Second))
	}
	network, err := s.checkNetwork(p, req.Network)
	if err != nil {
		return err
	}
	if !s.quota.reserve(p.KeyID, func() int { return s.sb.CountSessions(p.KeyID) }, p.Plan.MaxSessions) {
		e := apiErr(http.StatusTooManyRequests, "quota_exceeded", "plan %s allows %d concurrent sessions; delete one first", p.Plan.Name, p.Plan.MaxSessions)
		e.RetryAfter = 10 * time.Second
		return e
	}
	defer s.quota.release(p.KeyID)
	sess, err := s.sb.CreateSession(r.Context(), sandbox.SessionSpec{Language: req.Language, IdleTTL: ttl, Owner: p.KeyID, Network: network,
		DiskBytes: p.Plan.SessionDiskMB << 20})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, toSessionJSON(sess))
	return nil
}

// checkNetwork applies the plan to a network request and returns its JSON.
func (s *Server) checkNetwork(p *Principal, n *NetworkRequest) (json.RawMessage, error) {
	if n == nil || !n.Enabled {
		if n != nil && len(n.AllowedDomains) > 0 {
			return nil, apiErr(http.StatusBadRequest, "invalid_request", "allowed_domains needs network.enabled")
		}
		return json.RawMessage(`{"enabled":false}`), nil
	}
	if !p.Plan.Network {
		return nil, s.forbidden(p, "network access", func(pl *Plan) bool { return pl.Network })
	}
	if len(n.AllowedDomains) > 0 && !p.Plan.AllowedDomains {
		return nil, s.forbidden(p, "allowed_domains", func(pl *Plan) bool { return pl.AllowedDomains })
	}
	if _, err := policy.New(true, n.AllowedDomains); err != nil {
		return nil, apiErr(http.StatusBadRequest, "invalid_allowed_domains", "%v", err)
	}
	// Before the plan's session slot is taken: 503 network_unavailable.
	if !s.sb.NetworkAvailable() {
		return nil, sandbox.ErrNoNetwork
	}
	b, err := json.Marshal(n)
	if err != nil {
		return nil, err
	}
	return b, nil
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	list := s.sb.ListSessions(r.Context(), p.KeyID)
	out := make([]sessionJSON, len(list))
	for i, se := range list {
		out[i] = toSessionJSON(se)
	}
	writeJSON(w, http.StatusOK, map[string]any{"sessions": out})
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	sess, err := s.sb.GetSession(r.Context(), p.KeyID, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, toSessionJSON(sess))
	return nil
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	if err := s.sb.DeleteSession(r.Context(), p.KeyID, r.PathValue("id")); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

type executeRequest struct {
	Language string            `json:"language,omitempty"`
	Code     *string           `json:"code"`
	Stdin    string            `json:"stdin"`
	Timeout  *float64          `json:"timeout"`
	Env      map[string]string `json:"env"`
	Stream   bool              `json:"stream"`
	Files    []fileJSON        `json:"files,omitempty"`
}

type fileJSON struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// execRequest validates the common execute fields against the plan.
func (s *Server) execRequest(p *Principal, req *executeRequest) (sandbox.ExecRequest, error) {
	if req.Code == nil {
		return sandbox.ExecRequest{}, apiErr(http.StatusBadRequest, "invalid_request", "code is required")
	}
	if int64(len(*req.Code)) > s.cfg.MaxCodeBytes {
		return sandbox.ExecRequest{}, apiErr(http.StatusRequestEntityTooLarge, "code_too_large", "code over %d bytes", s.cfg.MaxCodeBytes)
	}
	if int64(len(req.Stdin)) > s.cfg.MaxStdinBytes {
		return sandbox.ExecRequest{}, apiErr(http.StatusRequestEntityTooLarge, "stdin_too_large", "stdin over %d bytes", s.cfg.MaxStdinBytes)
	}
	timeout, err := seconds("timeout", req.Timeout)
	if err != nil {
		return sandbox.ExecRequest{}, err
	}
	if timeout > p.Plan.MaxTimeout {
		// A longer timeout that a bigger plan allows is a plan matter
		// (403 naming that plan); one that no plan allows is bad input.
		max := int64(p.Plan.MaxTimeout / time.Second)
		if up := s.plans.cheapestWith(func(pl *Plan) bool { return pl.MaxTimeout >= timeout }); up != "" {
			return sandbox.ExecRequest{}, apiErr(http.StatusForbidden, "plan_forbidden", "timeout must be at most %d seconds on plan %s; plan %s allows it", max, p.Plan.Name, up)
		}
		return sandbox.ExecRequest{}, apiErr(http.StatusBadRequest, "invalid_request", "timeout must be at most %d seconds on plan %s", max, p.Plan.Name)
	}
	if timeout == 0 {
		timeout = s.defaultTimeout(p.Plan)
	}
	return sandbox.ExecRequest{Language: req.Language, Code: *req.Code, Stdin: []byte(req.Stdin), Timeout: timeout,
		MemoryBytes: p.Plan.MemoryMB << 20, Env: req.Env}, nil
}

// defaultTimeout is the timeout of a call that names none: the executor's
// default, but never more than the plan allows.
func (s *Server) defaultTimeout(pl *Plan) time.Duration {
	if d := s.cfg.DefaultTimeout; d > 0 && d < pl.MaxTimeout {
		return d
	}
	return pl.MaxTimeout
}

func wantsStream(r *http.Request, req *executeRequest) bool {
	return req.Stream || strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

func (s *Server) executeInSession(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	var req executeRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.Language != "" || len(req.Files) > 0 {
		return apiErr(http.StatusBadRequest, "invalid_request", "language and files belong to POST /v1/execute; a session has its language")
	}
	ereq, err := s.execRequest(p, &req)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	run := func(ctx context.Context, ereq sandbox.ExecRequest) (sandbox.Result, error) {
		return s.sb.Execute(ctx, p.KeyID, id, ereq)
	}
	return s.replyExecution(w, r, ereq, wantsStream(r, &req), run)
}

// replyExecution runs an execution and writes the JSON result, or streams
// it as Server-Sent Events. Each event must reach the client's socket
// within the stream write timeout: a client that stops reading fails the
// write, which cancels the run so its sandbox is released.
func (s *Server) replyExecution(w http.ResponseWriter, r *http.Request, ereq sandbox.ExecRequest, stream bool, run func(context.Context, sandbox.ExecRequest) (sandbox.Result, error)) error {
	cw, _ := w.(*countingWriter)
	if !stream {
		res, err := run(r.Context(), ereq)
		if err != nil && res.Status != sandbox.StatusOOM {
			return err
		}
		if cw != nil {
			cw.execMillis = res.DurationMS
		}
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	if _, ok := w.(http.Flusher); !ok {
		return fmt.Errorf("streaming unsupported by the response writer")
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.streamWriteTimeout(), cancel: cancel}
	ereq.OnOutput = func(streamName string, p []byte) {
		sw.mu.Lock()
		defer sw.mu.Unlock()
		sw.event(streamName, map[string]string{"data": string(p)})
	}
	res, err := run(ctx, ereq)
	sw.mu.Lock()
	defer sw.mu.Unlock()
	defer sw.clearDeadline()
	if sw.err != nil {
		s.log.Warn("stream client stopped reading; execution cancelled", "request_id", requestID(r.Context()), "err", sw.err)
		return nil
	}
	if err != nil && res.Status != sandbox.StatusOOM {
		if !sw.started {
			return err
		}
		ae := toAPIError(err)
		if ae == nil {
			ae = &Error{Code: "internal", Message: "internal error"}
			s.log.Error("streamed execution failed", "request_id", requestID(r.Context()), "err", err)
		}
		sw.event("error", errorPayload{Code: ae.Code, Message: ae.Message, RequestID: requestID(r.Context())})
		return nil
	}
	if cw != nil {
		cw.execMillis = res.DurationMS
	}
	sw.event("result", res)
	return nil
}

// defaultStreamWriteTimeout bounds each SSE event's write when
// Config.StreamWriteTimeout is zero.
const defaultStreamWriteTimeout = 30 * time.Second

func (s *Server) streamWriteTimeout() time.Duration {
	if s.cfg.StreamWriteTimeout > 0 {
		return s.cfg.StreamWriteTimeout
	}
	return defaultStreamWriteTimeout
}

// sseWriter writes the events of one streamed execution. Callers hold mu.
// After a failed write it drops every later event and has cancelled the
// run.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	cancel  context.CancelFunc
	started bool
	err     error
}

func (sw *sseWriter) event(name string, v any) {
	if sw.err != nil {
		return
	}
	// A writer without deadlines (a recorder, the in-process MCP client)
	// cannot stall on a socket; anything else can, and is bounded.
	if err := sw.rc.SetWriteDeadline(time.Now().Add(sw.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		sw.fail(err)
		return
	}
	if !sw.started {
		sw.started = true
		h := sw.w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Accel-Buffering", "no")
		sw.w.WriteHeader(http.StatusOK)
	}
	if err := writeEvent(sw.w, name, v); err != nil {
		sw.fail(err)
		return
	}
	if err := sw.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		sw.fail(err)
	}
}

func (sw *sseWriter) fail(err error) {
	sw.err = fmt.Errorf("writing an event: %w", err)
	sw.cancel()
}

// clearDeadline lifts the last event's deadline so it cannot cut a later
// response on the same connection.
func (sw *sseWriter) clearDeadline() {
	if sw.started && sw.err == nil {
		_ = sw.rc.SetWriteDeadline(time.Time{})
	}
}

func writeEvent(w io.Writer, event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	return err
}

func (s *Server) executeStateless(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	var req executeRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if strings.TrimSpace(req.Language) == "" {
		return apiErr(http.StatusBadRequest, "invalid_request", "language is required")
	}
	ereq, err := s.execRequest(p, &req)
	if err != nil {
		return err
	}
	for _, f := range req.Files {
		ereq.Files = append(ereq.Files, sandbox.File{Path: f.Path, Content: []byte(f.Content)})
	}
	run := func(ctx context.Context, ereq sandbox.ExecRequest) (sandbox.Result, error) {
		return s.sb.ExecuteStateless(ctx, p.KeyID, ereq)
	}
	return s.replyExecution(w, r, ereq, wantsStream(r, &req), run)
}

func (s *Server) listRuntimes(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	writeJSON(w, http.StatusOK, map[string]any{
		"runtimes": s.sb.RuntimeList(),
		"limits": map[string]any{
			"plan": p.Plan.Name, "max_timeout": int64(p.Plan.MaxTimeout / time.Second), "memory_mb": p.Plan.MemoryMB,
			"sessions": p.Plan.Sessions, "max_sessions": p.Plan.MaxSessions,
		},
	})
	return nil
}
