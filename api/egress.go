package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// EgressLog is what the API needs from the egress audit trail, which
// outlives the sessions it describes.
type EgressLog interface {
	// EgressDecisions returns the session's latest limit egress
	// decisions, oldest first (an empty list for a session without any).
	EgressDecisions(ctx context.Context, sessionID string, limit int) ([]wire.EgressDecision, error)
	// SessionOwner returns the key id that created the session, live or
	// ended, or sandbox.ErrNotFound when there was no such session.
	SessionOwner(ctx context.Context, sessionID string) (string, error)
}

// Bounds of ?limit= on GET /v1/sessions/{id}/egress.
const (
	defaultEgressLimit = 1000
	maxEgressLimit     = 10000
)

// sessionEgress serves GET /v1/sessions/{id}/egress: the allow and deny
// decisions of the caller's session, live or ended. Other callers'
// sessions are 404.
func (s *Server) sessionEgress(w http.ResponseWriter, r *http.Request) error {
	p := principal(r.Context())
	limit, err := egressLimit(r)
	if err != nil {
		return err
	}
	l := s.egressLog
	id, err := s.ownSession(r.Context(), l, p.KeyID, r.PathValue("id"))
	if err != nil {
		return err
	}
	decisions := []wire.EgressDecision{}
	if l != nil {
		if decisions, err = l.EgressDecisions(r.Context(), id, limit); err != nil {
			return err
		}
	}
	writeJSON(w, http.StatusOK, wire.EgressDecisions{SessionID: id, Decisions: decisions})
	return nil
}

// ownSession returns id if it names owner's session, live (asked of the
// executor) or ended (asked of the audit trail's store), and
// sandbox.ErrNotFound otherwise. A nil l knows no ended sessions.
func (s *Server) ownSession(ctx context.Context, l EgressLog, owner, id string) (string, error) {
	sess, err := s.sb.GetSession(ctx, owner, id)
	if err == nil {
		return sess.ID, nil
	}
	if !errors.Is(err, sandbox.ErrNotFound) || l == nil || !storableID(id) {
		return "", err
	}
	keyID, oerr := l.SessionOwner(ctx, id)
	switch {
	case errors.Is(oerr, sandbox.ErrNotFound):
		return "", err
	case oerr != nil:
		return "", oerr
	case keyID == "" || keyID != owner:
		return "", err // another key's: the same 404 as no session at all
	}
	return id, nil
}

// egressLimit reads ?limit=: absent means defaultEgressLimit; anything but
// one integer from 1 to maxEgressLimit is a 400.
func egressLimit(r *http.Request) (int, error) {
	vals, ok := r.URL.Query()["limit"]
	if !ok {
		return defaultEgressLimit, nil
	}
	if len(vals) == 1 {
		if n, err := strconv.Atoi(vals[0]); err == nil && n >= 1 && n <= maxEgressLimit {
			return n, nil
		}
	}
	return 0, apiErr(http.StatusBadRequest, "invalid_request", "limit must be one integer from 1 to %d", maxEgressLimit)
}

// storableID reports whether id can be a session id in the store: text
// PostgreSQL accepts (UTF-8 without NUL). Any other id is no session, and
// is not looked up (PostgreSQL would fail the query: a 500 for a 404).
func storableID(id string) bool {
	return utf8.ValidString(id) && strings.IndexByte(id, 0) < 0
}
