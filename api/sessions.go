package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// errEmptyBody is decodeJSON's answer to a body with nothing in it;
// callers for which a body is optional tell it apart with errors.Is.
var errEmptyBody error = &Error{Status: http.StatusBadRequest, Code: "invalid_json", Message: "request body is empty"}

// decodeJSON reads exactly one JSON object with no unknown fields.
func decodeJSON(r *http.Request, v any) error {
	// The body must be JSON whatever Content-Type says: curl -d sends a
	// form type, and rejecting it would help nobody.
	dec := json.NewDecoder(r.Body)
	var raw json.RawMessage
	err := dec.Decode(&raw)
	if err == nil {
		err = json.Unmarshal(raw, v)
	}
	if err != nil {
		var mbe *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &mbe):
			return apiErr(http.StatusRequestEntityTooLarge, "body_too_large", "request body over %d bytes", mbe.Limit)
		case errors.Is(err, io.EOF):
			return errEmptyBody
		case errors.As(err, &se):
			return apiErr(http.StatusBadRequest, "invalid_json", "malformed JSON at byte %d", se.Offset)
		case errors.As(err, &te):
			return apiErr(http.StatusBadRequest, "invalid_json", "field %q must be %s", te.Field, te.Type)
		default:
			return apiErr(http.StatusBadRequest, "invalid_json", "malformed JSON")
		}
	}
	if name, ok := unknownField(raw, reflect.TypeOf(v)); ok {
		return apiErr(http.StatusBadRequest, "unknown_field", "unknown field %q", name)
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

// maxSeconds bounds what seconds converts: no limit of the API is near it,
// and anything over it would overflow a time.Duration.
const maxSeconds = 1 << 30

// seconds converts a JSON number of seconds, rejecting what is not a
// positive number. A value over maxSeconds comes back as maxSeconds
// seconds, so that callers, which compare with their own maximum, say it
// is over that maximum.
func seconds(field string, v *float64) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	if math.IsNaN(*v) || *v <= 0 {
		return 0, apiErr(http.StatusBadRequest, "invalid_request", "%s must be a positive number of seconds", field)
	}
	return time.Duration(min(*v, maxSeconds) * float64(time.Second)), nil
}

// NetworkRequest is the network block of a session request, decoded once
// here and carried typed to the executor and the network layer.
type NetworkRequest = sandbox.NetworkRequest

// forbidden is the 403 for a feature the caller's plan lacks.
func (s *Server) forbidden(p *Principal, feature string, has func(*Plan) bool) error {
	if up := s.plans.cheapestWith(has); up != "" {
		return apiErr(http.StatusForbidden, "plan_forbidden", "%s is not part of plan %s; plan %s has it", feature, p.Plan.Name, up)
	}
	return apiErr(http.StatusForbidden, "plan_forbidden", "%s is not part of plan %s", feature, p.Plan.Name)
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	var req wire.CreateSessionRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := normalizeNetwork(req.Network); err != nil {
		return err
	}
	if err := s.checkRuntime(req.Language, req.Version); err != nil {
		return err
	}
	if req.Kernel && !s.kernelLanguage(req.Language) {
		return sandbox.ErrKernelUnsupported
	}
	ttl, err := seconds("idle_ttl", req.IdleTTL)
	if err != nil {
		return err
	}
	if ttl > s.cfg.MaxIdleTTL {
		return apiErr(http.StatusBadRequest, "invalid_request", "idle_ttl must be at most %d seconds", int64(s.cfg.MaxIdleTTL/time.Second))
	}
	if !p.Plan.Sessions {
		return s.forbidden(p, "stateful sessions", func(pl *Plan) bool { return pl.Sessions })
	}
	network, err := s.checkNetwork(p, req.Network)
	if err != nil {
		return err
	}
	sl, err := s.takeSlot(r.Context(), p)
	if err != nil {
		return err
	}
	defer sl.done(r.Context())
	sess, err := s.sb.CreateSession(r.Context(), sandbox.SessionSpec{Language: req.Language, Version: req.Version, IdleTTL: ttl, Owner: p.KeyID, Network: network,
		DiskBytes: p.Plan.SessionDiskMB << 20, Kernel: req.Kernel})
	if err != nil {
		return err
	}
	sl.bind(r.Context(), sess)
	writeJSON(w, http.StatusCreated, wire.SessionOf(sess))
	return nil
}

// checkLanguage answers 400 for a missing language or one the runtime
// table lacks (names and aliases, ignoring case, as the executor matches
// them), so that bad input is reported before plan quotas are counted.
func (s *Server) checkLanguage(lang string) error {
	name := strings.ToLower(strings.TrimSpace(lang))
	if name == "" {
		return apiErr(http.StatusBadRequest, "invalid_request", "language is required")
	}
	if len(lang) > sandbox.MaxLanguageBytes {
		return apiErr(http.StatusBadRequest, "unknown_language", "unknown language %s; GET /v1/runtimes lists them", sandbox.Quote(lang))
	}
	for _, rt := range s.sb.RuntimeList() {
		if strings.EqualFold(rt.Language, name) {
			return nil
		}
		for _, a := range rt.Aliases {
			if strings.EqualFold(a, name) {
				return nil
			}
		}
	}
	return apiErr(http.StatusBadRequest, "unknown_language", "unknown language %s; GET /v1/runtimes lists them", sandbox.Quote(lang))
}

// kernelLanguage reports whether lang (a name or alias, as checkLanguage
// matches it) is python3, the one language with a kernel; the executor
// checks it again.
func (s *Server) kernelLanguage(lang string) bool {
	name := strings.ToLower(strings.TrimSpace(lang))
	for _, rt := range s.sb.RuntimeList() {
		if strings.EqualFold(rt.Language, name) || slices.ContainsFunc(rt.Aliases, func(a string) bool { return strings.EqualFold(a, name) }) {
			return rt.Language == "python3"
		}
	}
	return false
}

// checkRuntime is checkLanguage, then a 400 unsupported_version (listing
// the versions present) for a version the language lacks.
func (s *Server) checkRuntime(lang, version string) error {
	if err := s.checkLanguage(lang); err != nil {
		return err
	}
	if version == "" {
		return nil
	}
	name := strings.ToLower(strings.TrimSpace(lang))
	for _, rt := range s.sb.RuntimeList() {
		if strings.EqualFold(rt.Language, name) || slices.ContainsFunc(rt.Aliases, func(a string) bool { return strings.EqualFold(a, name) }) {
			_, err := sandbox.PickVersion(rt.Language, rt.Versions, version)
			return err
		}
	}
	return nil
}

// checkNetwork applies the plan to a network request and returns the
// request the session gets (the zero value: no network). Deny entries
// only narrow what a session reaches, so every plan with network may send
// them; allowed_domains (names or addresses) needs the plan's
// allowed_domains.
func (s *Server) checkNetwork(p *Principal, n *NetworkRequest) (NetworkRequest, error) {
	if n == nil || !n.Enabled {
		if n != nil && len(n.AllowedDomains) > 0 {
			return NetworkRequest{}, apiErr(http.StatusBadRequest, "invalid_request", "allowed_domains needs network.enabled")
		}
		if n != nil && len(n.Denied) > 0 {
			return NetworkRequest{}, apiErr(http.StatusBadRequest, "invalid_request", "denied needs network.enabled")
		}
		return NetworkRequest{}, nil
	}
	if !p.Plan.Network {
		return NetworkRequest{}, s.forbidden(p, "network access", func(pl *Plan) bool { return pl.Network })
	}
	if len(n.AllowedDomains) > 0 && !p.Plan.AllowedDomains {
		return NetworkRequest{}, s.forbidden(p, "allowed_domains", func(pl *Plan) bool { return pl.AllowedDomains })
	}
	if len(n.Credentials) > 0 && !p.Plan.Credentials {
		return NetworkRequest{}, s.forbidden(p, "credentials", func(pl *Plan) bool { return pl.Credentials })
	}
	if _, err := policy.New(policy.Rules{Enabled: true, Allowed: n.AllowedDomains, Denied: n.Denied}); err != nil {
		var pe *policy.PatternError
		if errors.As(err, &pe) && pe.List == policy.ListDenied {
			return NetworkRequest{}, apiErr(http.StatusBadRequest, "invalid_denied", "%v", err)
		}
		return NetworkRequest{}, apiErr(http.StatusBadRequest, "invalid_allowed_domains", "%v", err)
	}
	// Before the plan's session slot is taken: 503 network_unavailable.
	if !s.sb.NetworkAvailable() || (len(n.Credentials) > 0 && s.sealer == nil) {
		return NetworkRequest{}, sandbox.ErrNoNetwork
	}
	out := *n
	if len(n.Credentials) > 0 {
		out.Credentials = make([]sandbox.Credential, len(n.Credentials))
		for i, c := range n.Credentials {
			if c.Value != "" {
				sealed, err := s.sealer.Seal(c.Value, c.SealContext())
				if err != nil {
					return NetworkRequest{}, fmt.Errorf("sealing credential %d: %w", i, err)
				}
				c = sandbox.Credential{Host: c.Host, Header: c.Header, Sealed: sealed}
			}
			out.Credentials[i] = c
		}
	}
	return out, nil
}

// CredentialSealer seals credential values for storage (see
// internal/seal); serve passes the server's credentials key.
type CredentialSealer interface {
	Seal(plain, context string) (string, error)
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	list := s.sb.ListSessions(r.Context(), p.KeyID)
	out := wire.SessionList{Sessions: make([]wire.Session, len(list))}
	for i, se := range list {
		out.Sessions[i] = wire.SessionOf(se)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	sess, err := s.sb.GetSession(r.Context(), p.KeyID, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, wire.SessionOf(sess))
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

// execRequest validates the common execute fields against the plan.
func (s *Server) execRequest(p *Principal, req *wire.ExecuteRequest) (sandbox.ExecRequest, error) {
	if req.Code == nil {
		return sandbox.ExecRequest{}, apiErr(http.StatusBadRequest, "invalid_request", "code is required")
	}
	if err := checkExecuteShape(req); err != nil {
		return sandbox.ExecRequest{}, err
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
	return sandbox.ExecRequest{Language: req.Language, Version: req.Version, Code: *req.Code, Stdin: []byte(req.Stdin), Timeout: timeout,
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

func wantsStream(r *http.Request, req *wire.ExecuteRequest) bool {
	return req.Stream || strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

func (s *Server) executeInSession(w http.ResponseWriter, r *http.Request, c *call) error {
	p := principal(r.Context())
	var req wire.ExecuteRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.Language != "" || req.Version != "" || len(req.Files) > 0 {
		return apiErr(http.StatusBadRequest, "invalid_request", "language, version and files belong to POST /v1/execute; a session has its language and version")
	}
	ereq, err := s.execRequest(p, &req)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	run := func(ctx context.Context, ereq sandbox.ExecRequest) (sandbox.Result, error) {
		return s.sb.Execute(ctx, p.KeyID, id, ereq)
	}
	return s.replyExecution(w, r, c, ereq, wantsStream(r, &req), run)
}

// replyExecution runs an execution and writes the JSON result, or streams
// it as Server-Sent Events. A stream's headers go out with the first
// output or after streamHeaderHold, whichever is first, so that a run
// the executor refuses at once (no capacity, no such session) still gets
// its status; after that a comment line is sent whenever the stream has
// been silent for the heartbeat, so clients and proxies with read
// timeouts keep a quiet program, and a failure is an `error` event. Each
// write must reach the client's socket within the stream write timeout: a
// client that stops reading fails the write, which cancels the run so its
// sandbox is released.
func (s *Server) replyExecution(w http.ResponseWriter, r *http.Request, c *call, ereq sandbox.ExecRequest, stream bool, run func(context.Context, sandbox.ExecRequest) (sandbox.Result, error)) error {
	if !stream {
		res, err := run(r.Context(), ereq)
		if err != nil && res.Status != sandbox.StatusOOM {
			return err
		}
		c.execMillis = res.DurationMS
		writeJSON(w, http.StatusOK, wire.ExecuteResultOf(res))
		return nil
	}
	if _, ok := w.(http.Flusher); !ok {
		return fmt.Errorf("streaming unsupported by the response writer")
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	sw := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: s.streamWriteTimeout(), cancel: cancel, begin: time.Now()}
	if cw, ok := w.(*countingWriter); ok {
		sw.held = cw.resumeHeld
	}
	sw.startHeartbeat(min(streamHeaderHold, s.streamHeartbeat()), s.streamHeartbeat())
	ereq.OnOutput = func(streamName string, p []byte) {
		sw.mu.Lock()
		defer sw.mu.Unlock()
		sw.event(streamName, wire.StreamChunk{Data: string(p)})
	}
	ereq.OnDisplay = func(d sandbox.CellResult) {
		sw.mu.Lock()
		defer sw.mu.Unlock()
		sw.event("display", d)
	}
	res, err := run(ctx, ereq)
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.stopHeartbeat()
	defer sw.clearDeadline()
	if sw.err != nil {
		s.log.Warn("stream client stopped reading; execution cancelled", "request_id", requestID(r.Context()), "err", sw.err)
		return nil
	}
	if err != nil && res.Status != sandbox.StatusOOM {
		if !sw.started {
			return err
		}
		ae := toAPIError(interrupted(r, err))
		if ae == nil {
			ae = &Error{Code: "internal", Message: "internal error"}
			s.log.Error("streamed execution failed", "request_id", requestID(r.Context()), "err", err)
		}
		sw.event("error", errorPayload{Code: ae.Code, Message: ae.Message, RequestID: requestID(r.Context())})
		return nil
	}
	c.execMillis = res.DurationMS
	sw.event("result", wire.ExecuteResultOf(res))
	return nil
}

// defaultStreamWriteTimeout bounds each SSE write when
// Config.StreamWriteTimeout is zero; defaultStreamHeartbeat is the
// heartbeat when Config.StreamHeartbeat is zero. streamHeaderHold is the
// longest a stream's headers wait for the run to print or fail (never
// longer than the heartbeat).
const (
	defaultStreamWriteTimeout = 30 * time.Second
	defaultStreamHeartbeat    = 5 * time.Second
	streamHeaderHold          = time.Second
	// resumeHeldPoll is how often held headers look again whether the
	// resume they wait for is done.
	resumeHeldPoll = 20 * time.Millisecond
)

func (s *Server) streamWriteTimeout() time.Duration {
	if s.cfg.StreamWriteTimeout > 0 {
		return s.cfg.StreamWriteTimeout
	}
	return defaultStreamWriteTimeout
}

func (s *Server) streamHeartbeat() time.Duration {
	if s.cfg.StreamHeartbeat > 0 {
		return s.cfg.StreamHeartbeat
	}
	return defaultStreamHeartbeat
}

// heartbeatComment is the SSE comment line sent while a stream is silent;
// SSE clients ignore lines that start with a colon.
const heartbeatComment = ": keepalive\n\n"

// sseWriter writes the events of one streamed execution. Callers of event
// hold mu. After a failed write it drops every later write and has
// cancelled the run.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	cancel  context.CancelFunc
	started bool // headers sent
	err     error
	// held, if set, tells the headers to wait (for a resume whose time
	// goes in X-Sandbox-Resumed), at most one heartbeat from begin.
	held  func() bool
	begin time.Time

	every   time.Duration // heartbeat
	last    time.Time     // of the latest write
	beat    *time.Timer   // runs heartbeat
	stopped bool          // no heartbeat after stopHeartbeat
}

// startHeartbeat arms the timer: the headers go out after hold unless a
// write came first, then a comment line after every silence of every.
func (sw *sseWriter) startHeartbeat(hold, every time.Duration) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.every = every
	sw.beat = time.AfterFunc(hold, sw.heartbeat)
}

// heartbeat runs on the timer: it sends the headers if nothing has yet,
// or a comment when the stream has been silent for the heartbeat, and
// re-arms the timer.
func (sw *sseWriter) heartbeat() {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.stopped || sw.err != nil {
		return
	}
	if !sw.started {
		if sw.held != nil && sw.held() && time.Since(sw.begin) < sw.every {
			sw.beat.Reset(resumeHeldPoll)
			return
		}
		sw.write(nil)
		sw.beat.Reset(sw.every)
		return
	}
	if wait := sw.every - time.Since(sw.last); wait > 0 {
		sw.beat.Reset(wait)
		return
	}
	sw.write(func(w http.ResponseWriter) error {
		_, err := io.WriteString(w, heartbeatComment)
		return err
	})
	sw.beat.Reset(sw.every)
}

// stopHeartbeat ends the heartbeat; the caller holds mu, so no heartbeat
// is being written and none follows.
func (sw *sseWriter) stopHeartbeat() {
	sw.stopped = true
	if sw.beat != nil {
		sw.beat.Stop()
	}
}

func (sw *sseWriter) event(name string, v any) {
	sw.write(func(w http.ResponseWriter) error { return writeEvent(w, name, v) })
}

// write sends the headers if they are not out yet, then runs f (if any)
// on the response under the write deadline, and flushes. Callers hold mu.
func (sw *sseWriter) write(f func(http.ResponseWriter) error) {
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
	if f != nil {
		if err := f(sw.w); err != nil {
			sw.fail(err)
			return
		}
	}
	if err := sw.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		sw.fail(err)
		return
	}
	sw.last = time.Now()
}

func (sw *sseWriter) fail(err error) {
	sw.err = fmt.Errorf("writing to the stream: %w", err)
	sw.cancel()
}

// clearDeadline lifts the last write's deadline so it cannot cut a later
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

func (s *Server) executeStateless(w http.ResponseWriter, r *http.Request, c *call) error {
	p := principal(r.Context())
	var req wire.ExecuteRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if err := s.checkRuntime(req.Language, req.Version); err != nil {
		return err
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
	return s.replyExecution(w, r, c, ereq, wantsStream(r, &req), run)
}

func (s *Server) listRuntimes(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	rts := slices.Clone(s.sb.RuntimeList())
	for i := range rts {
		if rts[i].Versions == nil {
			rts[i].Versions = []wire.RuntimeVersion{} // the document says array, never null
		}
	}
	out := wire.RuntimeList{Runtimes: rts, Limits: wire.Limits{
		Plan: p.Plan.Name, MaxTimeout: int64(p.Plan.MaxTimeout / time.Second), MemoryMB: p.Plan.MemoryMB,
		Sessions: p.Plan.Sessions, MaxSessions: p.Plan.MaxSessions,
	}}
	writeJSON(w, http.StatusOK, out)
	return nil
}
