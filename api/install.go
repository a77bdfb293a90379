package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// Installer puts curated packages into a session (package installer).
type Installer interface {
	// Install installs req into owner's session id within timeout, all or
	// nothing. A *sandbox.RejectedError lists each package it refused.
	Install(ctx context.Context, owner, id string, req sandbox.InstallRequest, timeout time.Duration) (sandbox.InstallReply, error)
}

// mountInstaller enables POST /v1/sessions/{id}/install, which asks gate
// first and fails closed with 503 and the failing checks.
func (s *Server) mountInstaller(inst Installer, gate Gate) {
	s.handle("POST /v1/sessions/{id}/install", s.authedCall(func(w http.ResponseWriter, r *http.Request, c *call) error {
		return s.install(w, r, c, inst, gate)
	}))
}

func (s *Server) install(w http.ResponseWriter, r *http.Request, c *call, inst Installer, gate Gate) error {
	p := principal(r.Context())
	var req wire.InstallRequest
	if err := decodeJSON(r, &req); err != nil {
		return err
	}
	if req.Manager != "pip" && req.Manager != "npm" {
		return apiErr(http.StatusBadRequest, "invalid_request", "manager must be pip or npm")
	}
	var lockfile []byte
	if len(req.Lockfile) > 0 && string(req.Lockfile) != "null" {
		switch {
		case req.Manager != "npm":
			return apiErr(http.StatusBadRequest, "invalid_request", "a lockfile goes with manager npm")
		case len(req.Packages) > 0:
			return apiErr(http.StatusBadRequest, "invalid_request", "send packages or a lockfile, not both")
		case req.Lockfile[0] != '{':
			return apiErr(http.StatusBadRequest, "invalid_lockfile", "lockfile must be a package-lock.json object")
		}
		lockfile = req.Lockfile
	} else if err := checkPackagesShape("install", req.Packages); err != nil {
		return err
	}
	if !p.Plan.Sessions {
		return s.forbidden(p, "sessions", func(pl *Plan) bool { return pl.Sessions })
	}
	id := r.PathValue("id")
	if _, err := s.sb.GetSession(r.Context(), p.KeyID, id); err != nil {
		return err
	}
	if gate == nil {
		return &Error{Status: http.StatusServiceUnavailable, Code: "not_ready", Message: "installs are not available: no readiness gate"}
	}
	if ok, failing := gate.Ready(r.Context()); !ok {
		if failing == nil {
			failing = []CheckResult{}
		}
		return &Error{Status: http.StatusServiceUnavailable, Code: "not_ready", RetryAfter: 10 * time.Second,
			Message: "installs are paused until every readiness check passes", Details: wire.NotReadyDetails{Checks: failing}}
	}
	started := time.Now()
	reply, err := inst.Install(r.Context(), p.KeyID, id, sandbox.InstallRequest{Manager: req.Manager, Packages: req.Packages, Lockfile: lockfile}, p.Plan.MaxTimeout)
	// A failed install has no reply to report its time; the sandbox was
	// busy all the same, so meter the time it took.
	c.execMillis = reply.DurationMS
	if err != nil {
		c.execMillis = time.Since(started).Milliseconds()
	}
	var rej *sandbox.RejectedError
	switch {
	case errors.As(err, &rej):
		return &Error{Status: http.StatusUnprocessableEntity, Code: "packages_rejected",
			Message: "nothing was installed: " + rej.Error(), Details: wire.RejectedDetails{Packages: rej.Packages}}
	case errors.Is(err, sandbox.ErrInstallFailed):
		s.log.Warn("install failed", "request_id", requestID(r.Context()), "session", id, "err", err)
		return &Error{Status: http.StatusInternalServerError, Code: "install_failed", Message: "the installer failed; nothing was installed"}
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, reply)
	return nil
}
