package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// SessionNetwork is what PATCH /v1/sessions/{id}/network needs from the
// executor.
type SessionNetwork interface {
	// UpdateSessionNetwork replaces owner's session's network request
	// with n (already checked against the plan) and returns the session
	// and the request it had before. A running session gets it for its
	// next connection; a hibernated one on its resume.
	UpdateSessionNetwork(ctx context.Context, owner, id string, n sandbox.NetworkRequest) (sandbox.Session, sandbox.NetworkRequest, error)
}

// mountNetwork enables
//
//	PATCH /v1/sessions/{id}/network  -> 200 session (with its new network)
func (s *Server) mountNetwork(n SessionNetwork) {
	s.handle("PATCH /v1/sessions/{id}/network", s.authed(func(w http.ResponseWriter, r *http.Request) error {
		return s.patchNetwork(w, r, n)
	}))
}

// patchNetwork replaces a session's whole network block: the body has the
// shape of session create's network, is checked by the same code (input
// caps, pattern syntax, then the plan), and replaces every field, so
// "enabled" must be said. The change is logged with the request id, the
// key and the entry counts before and after.
func (s *Server) patchNetwork(w http.ResponseWriter, r *http.Request, n SessionNetwork) error {
	p := principal(r.Context())
	req, err := decodeNetworkPatch(r)
	if err != nil {
		return err
	}
	if err := normalizeNetwork(&req); err != nil {
		return err
	}
	id := r.PathValue("id")
	if _, err := s.sb.GetSession(r.Context(), p.KeyID, id); err != nil {
		return err
	}
	network, err := s.checkNetwork(p, &req)
	if err != nil {
		return err
	}
	sess, before, err := n.UpdateSessionNetwork(r.Context(), p.KeyID, id, network)
	if err != nil {
		return err
	}
	s.log.Info("session network changed", "request_id", requestID(r.Context()), "key_id", p.KeyID, "session", id,
		"state", sess.State, "enabled_before", before.Enabled, "enabled", network.Enabled,
		"allowed_domains_before", len(before.AllowedDomains), "allowed_domains", len(network.AllowedDomains),
		"denied_before", len(before.Denied), "denied", len(network.Denied),
		"credentials_before", len(before.Credentials), "credentials", len(network.Credentials))
	writeJSON(w, http.StatusOK, wire.SessionOf(sess))
	return nil
}

// errNetworkEnabledMissing answers a PATCH body without "enabled": the
// body replaces the whole block, and a forgotten field must not turn the
// network off.
var errNetworkEnabledMissing = apiErr(http.StatusBadRequest, "invalid_request",
	`enabled is required: the body replaces the session's whole network block`)

// decodeNetworkPatch reads a PATCH body (bounded by the body limit) as one
// network block with no unknown fields, and requires its "enabled".
func decodeNetworkPatch(r *http.Request) (wire.Network, error) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return wire.Network{}, apiErr(http.StatusRequestEntityTooLarge, "body_too_large", "request body over %d bytes", mbe.Limit)
		}
		return wire.Network{}, err
	}
	var req wire.Network
	dr := r.Clone(r.Context())
	dr.Body = io.NopCloser(bytes.NewReader(raw))
	if err := decodeJSON(dr, &req); err != nil {
		return wire.Network{}, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return wire.Network{}, apiErr(http.StatusBadRequest, "invalid_json", "the body must be a JSON object")
	}
	if v, ok := fields["enabled"]; !ok || string(bytes.TrimSpace(v)) == "null" {
		return wire.Network{}, errNetworkEnabledMissing
	}
	return req, nil
}
