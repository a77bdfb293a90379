package e2b

import (
	"encoding/json"
	"errors"
	"net/http"

	"connectrpc.com/connect"

	"github.com/sandboxapi/sandboxapi/internal/reqid"
	"github.com/sandboxapi/sandboxapi/store"
)

// errorReply is E2B's error body: {"code": 404, "message": "..."}. The
// SDKs map the status to their typed errors: 401 AuthenticationError, 404
// NotFoundError (SandboxNotFoundError on sandbox calls), 429
// RateLimitError, 400 InvalidArgumentError (on envd's HTTP API), 503
// ServiceBusyError; any other status is a SandboxError naming it.
type errorReply struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// writeError answers status with E2B's error body.
func writeError(w http.ResponseWriter, status int, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorReply{Code: status, Message: msg})
}

// writeJSON answers status with v.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// fail answers err: an error of ours with its status, an API error with
// the API's status and message (so the SDK raises the same typed error a
// /v1 client would get a status for), anything else 500 without its text.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var ae *apiError
	var ce *e2bError
	switch {
	case errors.As(err, &ce):
		writeError(w, ce.status, ce.msg)
	case errors.As(err, &ae):
		if ae.RetryAfter != "" {
			w.Header().Set("Retry-After", ae.RetryAfter)
		}
		writeError(w, ae.Status, ae.Message)
	case errors.Is(err, errBadPath):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, store.ErrUnavailable):
		w.Header().Set("Retry-After", "5")
		writeError(w, http.StatusServiceUnavailable, "the store cannot be reached; try again")
	default:
		rid := r.Header.Get("X-Request-Id")
		if rid == "" {
			rid = reqid.From(r.Context())
		}
		h.log.Error("e2b: internal error", "method", r.Method, "path", r.URL.Path, "request_id", rid, "err", err)
		writeError(w, http.StatusInternalServerError, "internal error (request "+rid+")")
	}
}

// e2bError is an error the adapter itself answers, with its status.
type e2bError struct {
	status int
	msg    string
}

func (e *e2bError) Error() string { return e.msg }

func errf(status int, msg string) error { return &e2bError{status: status, msg: msg} }

// fileCode is the Connect code of a files API error, so the SDK raises
// its own: file_not_found is NotFound (FileNotFoundError), file_exists
// AlreadyExists (makeDir answers false), a path the files API refuses
// (symlink_refused, not_a_directory, not_regular_file, invalid_request)
// InvalidArgument (InvalidArgumentError), a tree too large to remove or a
// listing too long OutOfRange (not ResourceExhausted: the SDK raises that
// as a RateLimitError); any other by its status.
func fileCode(ae *apiError) connect.Code {
	switch ae.Code {
	case "file_not_found":
		return connect.CodeNotFound
	case "file_exists":
		return connect.CodeAlreadyExists
	case "symlink_refused", "not_a_directory", "not_regular_file", "invalid_request":
		return connect.CodeInvalidArgument
	case "permission_denied":
		return connect.CodePermissionDenied
	case "too_large":
		return connect.CodeOutOfRange
	}
	return codeOfStatus(ae.Status)
}
