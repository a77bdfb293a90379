package api

import (
	"context"
	"net/http"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// CheckResult is one readiness check as /readyz and the install gate show
// it; the shape is the API's, declared in package wire.
type CheckResult = wire.CheckResult

// ReadinessReporter reports the readiness checks; refresh asks for a new
// run (the reporter may rate-limit it).
type ReadinessReporter interface {
	Checks(ctx context.Context, refresh bool) (ready bool, checks []CheckResult)
}

// Gate is what the install endpoint asks first: ready, or the failing checks.
type Gate interface {
	Ready(ctx context.Context) (bool, []CheckResult)
}

// readinessChecks returns the reporter's view; with no reporter, ready
// with no checks.
func (s *Server) readinessChecks(r *http.Request) (bool, []CheckResult) {
	if s.readiness == nil {
		return true, []CheckResult{}
	}
	ok, checks := s.readiness.Checks(r.Context(), r.URL.Query().Get("refresh") == "1")
	if checks == nil {
		checks = []CheckResult{}
	}
	return ok, checks
}
