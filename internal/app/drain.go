package app

import (
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/sandboxapi/sandboxapi/internal/httperr"
)

// drainGate refuses new work once shutdown has begun: POST, PUT and PATCH
// requests to the API and MCP get 503 "draining" with Retry-After, so a
// client retries elsewhere, while reads, deletes, probes, metrics and the
// mirror keep working until the listener closes. Calls already running are
// not affected. The zero value passes everything to next; it is safe for
// concurrent use.
//
// On a cluster node (ownSessions) calls for a session pass too: the
// cluster handler in front has already sent other nodes' sessions away,
// so what reaches the gate is a session this node still holds until the
// executor hands it over, after the listener closes. Refusing it would
// fail a call that other nodes, which had not yet seen this node drain,
// forwarded here.
type drainGate struct {
	next        http.Handler
	ownSessions bool
	draining    atomic.Bool
}

func (d *drainGate) start() { d.draining.Store(true) }

func (d *drainGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if d.draining.Load() && isNewWork(r) && !(d.ownSessions && isSessionCall(r)) {
		w.Header().Set("Retry-After", "5")
		w.Header().Set("Connection", "close")
		httperr.Write(w, http.StatusServiceUnavailable, httperr.Payload{Code: "draining",
			Message: "the server is shutting down and takes no new work; retry shortly"})
		return
	}
	d.next.ServeHTTP(w, r)
}

// isNewWork tells requests that start or change something (sessions,
// executes, uploads, installs, network changes, MCP calls) from those that
// only read or free.
func isNewWork(r *http.Request) bool {
	if r.Method != http.MethodPost && r.Method != http.MethodPut && r.Method != http.MethodPatch {
		return false
	}
	p := r.URL.Path
	return strings.HasPrefix(p, "/v1/") || p == "/mcp" || strings.HasPrefix(p, "/mcp/")
}

// isSessionCall tells calls on one session (/v1/sessions/{id} and below)
// from creates and everything else.
func isSessionCall(r *http.Request) bool {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
	return ok && rest != ""
}
