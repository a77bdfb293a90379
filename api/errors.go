package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/httperr"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// storeRetryAfter is the Retry-After of a 503 store_unavailable: about
// what a PostgreSQL restart takes.
const storeRetryAfter = 2 * time.Second

// Error is an error with a public code and HTTP status. Handlers return it
// for anything the client did; anything else is a 500 with a request id.
type Error struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
	Details    any
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

func apiErr(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// errorTable maps sentinel errors of the layers below to public errors; the
// message is the sentinel's own text, never an internal error's.
var errorTable = []struct {
	err    error
	status int
	code   string
}{
	{sandbox.ErrNotFound, http.StatusNotFound, "not_found"},
	{sandbox.ErrUnknownLanguage, http.StatusBadRequest, "unknown_language"},
	{sandbox.ErrUnsupportedVersion, http.StatusBadRequest, "unsupported_version"},
	{sandbox.ErrInvalid, http.StatusBadRequest, "invalid_request"},
	{sandbox.ErrBadLockfile, http.StatusBadRequest, "invalid_lockfile"},
	{sandbox.ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
	{sandbox.ErrBadState, http.StatusConflict, "session_not_running"},
	{sandbox.ErrNetworkNotAttached, http.StatusConflict, "network_not_attached"},
	{sandbox.ErrKernelUnsupported, http.StatusBadRequest, "kernel_unsupported"},
	{sandbox.ErrNoKernel, http.StatusConflict, "no_kernel"},
	{sandbox.ErrLost, http.StatusGone, "sandbox_lost"},
	{sandbox.ErrSessionLost, http.StatusGone, "sandbox_lost"},
	{sandbox.ErrSessionMoved, http.StatusServiceUnavailable, "session_moved"},
	{sandbox.ErrCapacity, http.StatusServiceUnavailable, "no_capacity"},
	{sandbox.ErrNotStarted, http.StatusServiceUnavailable, "not_ready"},
	{sandbox.ErrNoNetwork, http.StatusServiceUnavailable, "network_unavailable"},
	{sandbox.ErrNoStorage, http.StatusInsufficientStorage, "insufficient_storage"},
	{sandbox.ErrFileNotFound, http.StatusNotFound, "file_not_found"},
	{sandbox.ErrNotRegular, http.StatusConflict, "not_regular_file"},
	{sandbox.ErrNotDir, http.StatusConflict, "not_a_directory"},
	{sandbox.ErrSymlink, http.StatusConflict, "symlink_refused"},
	{sandbox.ErrPermission, http.StatusForbidden, "permission_denied"},
	{sandbox.ErrProcessNotFound, http.StatusNotFound, "process_not_found"},
	{sandbox.ErrProcessLimit, http.StatusConflict, "process_limit"},
	{sandbox.ErrProcessNotRunning, http.StatusConflict, "process_not_running"},
	{sandbox.ErrProcessNoStdin, http.StatusConflict, "process_stdin_closed"},
	{sandbox.ErrProcessStdinFull, http.StatusConflict, "process_stdin_full"},
	{sandbox.ErrProcessNotPTY, http.StatusConflict, "process_not_pty"},
	{sandbox.ErrProcessStart, http.StatusBadRequest, "process_start_failed"},
	{sandbox.ErrNoProcessChannel, http.StatusConflict, "process_channel_unavailable"},
	{sandbox.ErrFileExists, http.StatusConflict, "file_exists"},
}

// interrupted is the answer to a call whose context shutdown cancelled
// (the grace period ended before it did): the server stopped its work,
// and the client may retry on another node or after the restart.
func interrupted(r *http.Request, err error) error {
	if errors.Is(context.Cause(r.Context()), httperr.ErrShutdown) {
		return &Error{Status: http.StatusServiceUnavailable, Code: "draining", RetryAfter: 5 * time.Second,
			Message: "the server shut down before the call finished and stopped it; retry"}
	}
	return err
}

// toAPIError classifies err for the client.
func toAPIError(err error) *Error {
	var ae *Error
	if errors.As(err, &ae) {
		return ae
	}
	// The store cannot be reached (PostgreSQL down, restarting, out of
	// connections, not answering in time): any route that needed it. The
	// cause is logged by writeError, never sent.
	if errors.Is(err, store.ErrUnavailable) {
		return &Error{Status: http.StatusServiceUnavailable, Code: "store_unavailable",
			Message: "the store is unavailable; retry after the Retry-After seconds", RetryAfter: storeRetryAfter}
	}
	for _, row := range errorTable {
		if errors.Is(err, row.err) {
			msg := err.Error()
			switch row.err {
			case sandbox.ErrCapacity:
				return &Error{Status: row.status, Code: row.code, Message: msg, RetryAfter: 5 * time.Second}
			case sandbox.ErrSessionMoved:
				return &Error{Status: row.status, Code: row.code, Message: msg, RetryAfter: time.Second}
			}
			return &Error{Status: row.status, Code: row.code, Message: msg}
		}
	}
	return nil
}

// The JSON error envelope is written in one place, internal/httperr.
type (
	errorBody    = httperr.Body
	errorPayload = httperr.Payload
)

// writeError writes err as the JSON error body with the right status.
func writeError(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	rid := requestID(r.Context())
	ae := toAPIError(err)
	if errors.Is(err, store.ErrUnavailable) {
		log.Warn("store unavailable", "request_id", rid, "route", r.Pattern, "err", err)
	}
	if ae == nil {
		log.Error("internal error", "request_id", rid, "route", r.Pattern, "err", err)
		ae = &Error{Status: http.StatusInternalServerError, Code: "internal", Message: "internal error; quote the request id to the operator"}
	}
	if ae.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((ae.RetryAfter+time.Second-1)/time.Second)))
	}
	writeJSON(w, ae.Status, errorBody{Error: errorPayload{Code: ae.Code, Message: ae.Message, RequestID: rid, Details: ae.Details}})
}

func writeJSON(w http.ResponseWriter, status int, v any) { httperr.WriteJSON(w, status, v) }
