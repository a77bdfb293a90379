package api

import (
	"bytes"
	"context"
	"net/http"
)

// SBOMs writes software bills of materials (CycloneDX JSON).
type SBOMs interface {
	// SessionSBOM returns the document listing every package installed
	// into the session id, owned by owner, and its Content-Type.
	SessionSBOM(ctx context.Context, owner, id string) (doc []byte, contentType string, err error)
}

// mountSBOM serves GET /v1/sessions/{id}/sbom from b; without it (no
// Deps.SBOMs) the route is 404 no_route.
func (s *Server) mountSBOM(b SBOMs) {
	s.handle("GET /v1/sessions/{id}/sbom", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		p := principal(r.Context())
		id, err := s.ownSession(r.Context(), s.egressLog, p.KeyID, r.PathValue("id"))
		if err != nil {
			return err
		}
		doc, ct, err := b.SessionSBOM(r.Context(), p.KeyID, id)
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Content-Disposition", `attachment; filename="`+id+`.cdx.json"`)
		w.WriteHeader(http.StatusOK)
		_, _ = bytes.NewReader(doc).WriteTo(w)
		return nil
	}))
}
