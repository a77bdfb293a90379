// Package httperr is the JSON error envelope every HTTP endpoint of
// sandboxapi answers with, written in one place:
//
//	{"error":{"code":"...","message":"...","request_id":"...","details":...}}
//
// It does no I/O beyond writing the response.
package httperr

import (
	"encoding/json"
	"errors"
	"net/http"
)

// ErrShutdown is the cause of a request context that shutdown cancelled:
// the grace period ended before the call did. A handler that sees it
// answers 503 "draining" (with Retry-After), not the client's fault and
// not an internal error.
var ErrShutdown = errors.New("the server is shutting down")

// Body is the envelope.
type Body struct {
	Error Payload `json:"error"`
}

// Payload is what the envelope holds: a stable public code, a message for
// people, and optionally the request id and code-specific details.
type Payload struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
	Details   any    `json:"details,omitempty"`
}

// Write sends p in the envelope with status, as one JSON line. Headers
// (Retry-After and the like) must be set before.
func Write(w http.ResponseWriter, status int, p Payload) {
	WriteJSON(w, status, Body{Error: p})
}

// WriteJSON sends v as one JSON line with status, HTML characters left
// unescaped.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
