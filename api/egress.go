package api

import (
	"context"
	"net/http"
)

// EgressLog is what the API needs from the egress audit trail.
type EgressLog interface {
	// EgressDecisions returns the session's recent egress decisions,
	// oldest first, as a JSON-encodable list.
	EgressDecisions(ctx context.Context, sessionID string) (any, error)
}

// SetEgressLog enables GET /v1/sessions/{id}/egress: the caller's session's
// allow and deny decisions. Other callers' sessions are 404.
func (s *Server) SetEgressLog(l EgressLog) {
	s.handle("GET /v1/sessions/{id}/egress", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		p := principal(r.Context())
		sess, err := s.sb.GetSession(r.Context(), p.KeyID, r.PathValue("id"))
		if err != nil {
			return err
		}
		decisions, err := l.EgressDecisions(r.Context(), sess.ID)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"session_id": sess.ID, "decisions": decisions})
		return nil
	}))
}
