package mcp

import (
	"context"
	"crypto/sha256"
	"errors"
	"net/http"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// keyCheckTTL is how long an accepted key is trusted for MCP traffic that
// makes no API call (initialize, tools/list). Every tool call is checked by
// the API itself, so a revoked key stops working for tools at once.
const keyCheckTTL = 30 * time.Second

// HTTPHandler serves MCP over streamable HTTP (mount it at /mcp). Tool
// calls go to api in process with the caller's key headers, and a request
// whose key the API refuses gets the API's 401 before any MCP processing.
// Build it with NewHTTPHandler (the zero value is not usable); it is safe
// for concurrent use. The key check is itself an API request, metered and
// rate-limited like any other, made at most once per keyCheckTTL per key.
type HTTPHandler struct {
	c    *client
	mcp  http.Handler
	mu   sync.Mutex
	seen map[[32]byte]time.Time // accepted key headers -> when checked
}

// NewHTTPHandler returns the /mcp handler over api (the API server).
func NewHTTPHandler(api http.Handler, o Options) *HTTPHandler {
	o.Handler, o.Key = api, ""
	c, _ := newClient(o) // cannot fail with a Handler
	srv := newServer(c, o)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, &sdk.StreamableHTTPOptions{
		// The tools keep no state between calls, so neither does the
		// transport: every POST stands alone and carries its key.
		Stateless: true,
		Logger:    o.Logger,
		// Every request needs an API key, so DNS rebinding gains an
		// attacker nothing, and the server often sits behind a local
		// reverse proxy whose Host is not loopback.
		DisableLocalhostProtection: true,
	})
	return &HTTPHandler{c: c, mcp: h, seen: map[[32]byte]time.Time{}}
}

func (h *HTTPHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.checkKey(r.Context(), r.Header); err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			writeAPIError(w, ae)
			return
		}
		http.Error(w, "checking the API key failed", http.StatusInternalServerError)
		return
	}
	h.mcp.ServeHTTP(w, r)
}

// checkKey asks the API (GET /v1/runtimes) whether the presented key is
// good; only 401 and 403 refuse, anything else (a rate limit, say) is left
// for the tool calls to report.
func (h *HTTPHandler) checkKey(ctx context.Context, hdr http.Header) error {
	id := headerDigest(hdr)
	now := time.Now()
	h.mu.Lock()
	at, ok := h.seen[id]
	h.mu.Unlock()
	if ok && now.Sub(at) < keyCheckTTL {
		return nil
	}
	err := h.c.call(ctx, hdr, "GET", "/v1/runtimes", nil, nil)
	var ae *APIError
	if errors.As(err, &ae) && ae.Status != http.StatusUnauthorized && ae.Status != http.StatusForbidden {
		return nil
	}
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) > 10000 {
		for k, t := range h.seen {
			if now.Sub(t) >= keyCheckTTL {
				delete(h.seen, k)
			}
		}
	}
	h.seen[id] = now
	return nil
}

// headerDigest identifies the auth headers without keeping the secret.
func headerDigest(hdr http.Header) [32]byte {
	d := sha256.New()
	for _, k := range authHeaders {
		for _, v := range hdr.Values(k) {
			d.Write([]byte(k))
			d.Write([]byte{0})
			d.Write([]byte(v))
			d.Write([]byte{0})
		}
	}
	var out [32]byte
	d.Sum(out[:0])
	return out
}

func writeAPIError(w http.ResponseWriter, e *APIError) {
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="sandboxapi"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_, _ = w.Write(errorJSON(e))
}
