package api

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Observer receives the API's measurements (internal/metrics implements
// it). Methods are called on the request path: they must be safe for
// concurrent use and must not block.
type Observer interface {
	// ObserveRequest is called once per request, on every route, with the
	// mux pattern ("POST /v1/sessions", "/mirror/"), or UnmatchedRoute when
	// no pattern matched, the status sent and the latency. Routes are the
	// mounted patterns only, so the label set stays bounded.
	ObserveRequest(route string, status int, d time.Duration)
	// ObserveExecution is called once per execution with a language from
	// the runtime table ("other" for anything else) and the result status
	// ("failed" when the execution did not produce a result).
	ObserveExecution(language, status string, d time.Duration)
}

// PanicObserver is an optional part of an Observer: it counts panics the
// server recovered from (component "api").
type PanicObserver interface {
	ObservePanic(component string)
}

// observePanic counts one recovered panic when the observer takes it.
func (s *Server) observePanic() {
	if po, ok := s.observer().(PanicObserver); ok {
		po.ObservePanic("api")
	}
}

// opsState is the Server's operational bookkeeping: the observer, the keys
// seen (for sessions by plan) and the route registry (see handle). The
// zero value observes nothing; it is safe for concurrent use.
type opsState struct {
	mu       sync.Mutex
	obs      Observer
	owners   map[string]string // key id -> plan name, of keys seen since start
	patterns []string          // every pattern mounted through handle, in order
}

// setObserver sends request and execution measurements to o (New calls
// it). It wraps the Sandboxes seam to time executions: code in this
// package must not type-assert s.sb to optional interfaces (declare a
// separate seam in Deps instead).
func (s *Server) setObserver(o Observer) {
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	s.ops.obs = o
	if _, ok := s.sb.(observedSandboxes); !ok && o != nil {
		s.sb = observedSandboxes{Sandboxes: s.sb, s: s}
	}
}

func (s *Server) observer() Observer {
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	return s.ops.obs
}

// UnmatchedRoute is the route label of a request no pattern matched (a
// 404 or 405 from the mux itself).
const UnmatchedRoute = "unmatched"

// observeRequest is the one call ServeHTTP makes when a request ends;
// pattern is the mux pattern that matched, "" for none.
func (s *Server) observeRequest(pattern string, status int, d time.Duration) {
	obs := s.observer()
	if obs == nil {
		return
	}
	if pattern == "" {
		pattern = UnmatchedRoute
	}
	obs.ObserveRequest(pattern, status, d)
}

// notePrincipal remembers the plan of a key that made a request, for
// SessionsByPlan.
func (s *Server) notePrincipal(p *Principal) {
	if p == nil || p.Plan == nil {
		return
	}
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	if s.ops.owners == nil {
		s.ops.owners = map[string]string{}
	}
	s.ops.owners[p.KeyID] = p.Plan.Name
}

// SessionsByPlan counts the live sessions of every key seen since the
// server started, by plan (sessions end when the server stops, so every
// live session's key has been seen). Every configured plan is listed.
func (s *Server) SessionsByPlan() map[string]int {
	s.ops.mu.Lock()
	owners := make(map[string]string, len(s.ops.owners))
	for k, p := range s.ops.owners {
		owners[k] = p
	}
	s.ops.mu.Unlock()
	out := map[string]int{}
	if s.plans != nil {
		for _, name := range s.plans.order {
			out[name] = 0
		}
	}
	for key, plan := range owners {
		out[plan] += s.sb.CountSessions(key)
	}
	return out
}

// ReadinessByCheck reports the latest outcome of each readiness check
// (name -> passing) without running any; empty with no reporter.
func (s *Server) ReadinessByCheck() map[string]bool {
	out := map[string]bool{}
	if s.readiness == nil {
		return out
	}
	_, checks := s.readiness.Checks(context.Background(), false)
	for _, c := range checks {
		out[c.Name] = c.Status == "pass" || c.Status == "warn" // a warning passes
	}
	return out
}

// observedSandboxes measures executions on their way to the executor.
type observedSandboxes struct {
	Sandboxes
	s *Server
}

func (o observedSandboxes) Execute(ctx context.Context, owner, id string, req sandbox.ExecRequest) (sandbox.Result, error) {
	lang := req.Language
	if lang == "" {
		if sess, err := o.Sandboxes.GetSession(ctx, owner, id); err == nil {
			lang = sess.Language
		}
	}
	start := time.Now()
	res, err := o.Sandboxes.Execute(ctx, owner, id, req)
	o.observe(lang, res, err, time.Since(start))
	return res, err
}

func (o observedSandboxes) ExecuteStateless(ctx context.Context, owner string, req sandbox.ExecRequest) (sandbox.Result, error) {
	start := time.Now()
	res, err := o.Sandboxes.ExecuteStateless(ctx, owner, req)
	o.observe(req.Language, res, err, time.Since(start))
	return res, err
}

func (o observedSandboxes) observe(lang string, res sandbox.Result, err error, d time.Duration) {
	obs := o.s.observer()
	if obs == nil {
		return
	}
	if errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrUnknownLanguage) || errors.Is(err, sandbox.ErrUnsupportedVersion) || errors.Is(err, sandbox.ErrInvalid) {
		return // not an execution
	}
	status := res.Status
	if err != nil && status == "" {
		status = sandbox.StatusFailed
	}
	obs.ObserveExecution(o.language(lang), string(status), d)
}

// language maps a name or alias to its runtime's name, or "other", so
// client input never becomes a label of its own.
func (o observedSandboxes) language(name string) string {
	for _, rt := range o.Sandboxes.RuntimeList() {
		if rt.Language == name {
			return name
		}
		for _, a := range rt.Aliases {
			if a == name {
				return rt.Language
			}
		}
	}
	return "other"
}

// handle mounts h on pattern and records the pattern for the OpenAPI
// coverage test. Every route of the API goes through handle (or Handle):
// a route mounted on s.mux directly is invisible to that test.
func (s *Server) handle(pattern string, h http.Handler) {
	s.ops.mu.Lock()
	s.ops.patterns = append(s.ops.patterns, pattern)
	s.ops.mu.Unlock()
	s.mux.Handle(pattern, h)
}

// Routes returns every pattern mounted so far, sorted.
func (s *Server) Routes() []string {
	s.ops.mu.Lock()
	defer s.ops.mu.Unlock()
	out := append([]string(nil), s.ops.patterns...)
	sort.Strings(out)
	return out
}
