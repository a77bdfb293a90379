package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// Lifecycle is what the durable-session routes need from the executor.
type Lifecycle interface {
	// HibernateSession releases the session's sandbox at once, keeping
	// its home; the next call resumes it.
	HibernateSession(ctx context.Context, owner, id string) (sandbox.Session, error)
	// ForkSession makes a new hibernated session of spec.Owner whose home
	// is a copy of session id's.
	ForkSession(ctx context.Context, id string, spec sandbox.ForkSpec) (sandbox.Session, error)
}

// mountLifecycle enables
//
//	POST /v1/sessions/{id}/hibernate  -> 200 session (state hibernated)
//	POST /v1/sessions/{id}/fork       -> 201 new session (state hibernated)
func (s *Server) mountLifecycle(l Lifecycle) {
	s.handle("POST /v1/sessions/{id}/hibernate", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		p := principal(r.Context())
		sess, err := l.HibernateSession(r.Context(), p.KeyID, r.PathValue("id"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, wire.SessionOf(sess))
		return nil
	}))
	s.handle("POST /v1/sessions/{id}/fork", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		return s.fork(w, r, l)
	}))
}

func (s *Server) fork(w http.ResponseWriter, r *http.Request, l Lifecycle) error {
	p := principal(r.Context())
	var req wire.ForkRequest
	// The body is optional: none (or an empty one) keeps the source's
	// language and network.
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil && !isEmptyBody(err) {
			return err
		}
	}
	if err := normalizeNetwork(req.Network); err != nil {
		return err
	}
	if strings.TrimSpace(req.Language) != "" {
		if err := s.checkRuntime(req.Language, req.Version); err != nil {
			return err
		}
	}
	if !p.Plan.Sessions {
		return s.forbidden(p, "stateful sessions", func(pl *Plan) bool { return pl.Sessions })
	}
	id := r.PathValue("id")
	if _, err := s.sb.GetSession(r.Context(), p.KeyID, id); err != nil {
		return err
	}
	spec := sandbox.ForkSpec{Owner: p.KeyID, Language: strings.TrimSpace(req.Language), Version: req.Version}
	if req.Network != nil {
		network, err := s.checkNetwork(p, req.Network)
		if err != nil {
			return err
		}
		spec.Network = &network
	} else if src, err := s.sb.GetSession(r.Context(), p.KeyID, id); err == nil && src.Network.Enabled {
		// The source's network comes along: the plan must still allow it.
		if _, err := s.checkNetwork(p, &src.Network); err != nil {
			return err
		}
	}
	sl, err := s.takeSlot(r.Context(), p)
	if err != nil {
		return err
	}
	defer sl.done(r.Context())
	sess, err := l.ForkSession(r.Context(), id, spec)
	if err != nil {
		return err
	}
	sl.bind(r.Context(), sess)
	writeJSON(w, http.StatusCreated, wire.SessionOf(sess))
	return nil
}

// isEmptyBody reports whether a decode error is the empty body's.
func isEmptyBody(err error) bool {
	return errors.Is(err, errEmptyBody) || errors.Is(err, io.EOF)
}
