package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sandboxapi/sandboxapi/internal/httperr"
)

// The adapter is a client of our own API, in process: every call it makes
// is an http.Handler round trip through the same handler the listener
// serves /v1 with (the cluster's in front of it on a cluster node), with
// the caller's API key. So plans, quotas, rate limits, metering and
// forwarding to a session's owner node apply to an E2B call exactly as to
// the /v1 call it becomes, and the adapter needs no seam into the API's
// internals.

// maxReplyBytes bounds a JSON reply the adapter reads from the API.
const maxReplyBytes = 16 << 20

// apiError is a /v1 error reply.
type apiError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message) }

// caller makes /v1 calls for one incoming request.
type caller struct {
	api http.Handler
	in  *http.Request // the E2B request: context, request id, remote address
	key string
}

// newRequest is a /v1 request as the API's listener would hand it over.
func (c caller) newRequest(method, uri string, body io.Reader, size int64) (*http.Request, error) {
	r, err := http.NewRequestWithContext(c.in.Context(), method, uri, body)
	if err != nil {
		return nil, err
	}
	r.RequestURI = uri
	r.RemoteAddr = c.in.RemoteAddr
	r.Host = c.in.Host
	r.ContentLength = size
	if body == nil {
		r.ContentLength = 0
	}
	r.Header.Set("X-API-Key", c.key)
	if id := c.in.Header.Get("X-Request-Id"); id != "" {
		r.Header.Set("X-Request-Id", id)
	}
	if ua := c.in.Header.Get("User-Agent"); ua != "" {
		r.Header.Set("User-Agent", ua)
	}
	return r, nil
}

// call sends a JSON call and decodes a 2xx reply into out (when not nil).
func (c caller) call(method, uri string, in, out any) (int, error) {
	var body io.Reader
	size := int64(0)
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body, size = bytes.NewReader(b), int64(len(b))
	}
	r, err := c.newRequest(method, uri, body, size)
	if err != nil {
		return 0, err
	}
	if in != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	rec := newRecorder(maxReplyBytes)
	c.api.ServeHTTP(rec, r)
	if rec.status >= 300 {
		return rec.status, rec.apiError()
	}
	if rec.overflow {
		return rec.status, fmt.Errorf("reply of %s %s is over %d bytes", method, uri, maxReplyBytes)
	}
	if out != nil {
		if err := json.Unmarshal(rec.buf.Bytes(), out); err != nil {
			return rec.status, fmt.Errorf("decoding reply of %s %s: %w", method, uri, err)
		}
	}
	return rec.status, nil
}

// recorder is a ResponseWriter that keeps the status, headers and up to
// max bytes of a reply.
type recorder struct {
	hdr      http.Header
	status   int
	buf      bytes.Buffer
	max      int
	overflow bool
}

func newRecorder(max int) *recorder { return &recorder{hdr: http.Header{}, max: max} }

func (r *recorder) Header() http.Header { return r.hdr }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if room := r.max - r.buf.Len(); len(p) > room {
		r.overflow = true
		r.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return r.buf.Write(p)
}
func (r *recorder) Flush() {}

// apiError decodes the reply as the API's error envelope.
func (r *recorder) apiError() *apiError {
	e := &apiError{Status: r.status, RetryAfter: r.hdr.Get("Retry-After")}
	var b httperr.Body
	if err := json.Unmarshal(r.buf.Bytes(), &b); err == nil {
		e.Code, e.Message = b.Error.Code, b.Error.Message
	}
	if e.Code == "" {
		e.Code = "error"
		e.Message = strings.TrimSpace(http.StatusText(r.status))
	}
	return e
}

// passWriter hands a 200 reply through to w as it comes (a download) and
// keeps any other reply for translation.
type passWriter struct {
	w       http.ResponseWriter
	rec     *recorder
	passing bool
	copyHdr []string // headers of a 200 reply that go to w
}

func (p *passWriter) Header() http.Header { return p.rec.hdr }
func (p *passWriter) WriteHeader(code int) {
	if p.rec.status != 0 {
		return
	}
	p.rec.status = code
	if code == http.StatusOK {
		p.passing = true
		for _, k := range p.copyHdr {
			if v := p.rec.hdr.Get(k); v != "" {
				p.w.Header().Set(k, v)
			}
		}
		p.w.WriteHeader(code)
	}
}
func (p *passWriter) Write(b []byte) (int, error) {
	if p.rec.status == 0 {
		p.WriteHeader(http.StatusOK)
	}
	if p.passing {
		return p.w.Write(b)
	}
	return p.rec.Write(b)
}
func (p *passWriter) Flush() {
	if f, ok := p.w.(http.Flusher); ok && p.passing {
		f.Flush()
	}
}

// ctxKey is the context key type of this package.
type ctxKey int

const targetKey ctxKey = 0

// target is the sandbox a sandbox-traffic call is for, authenticated.
type target struct {
	id     string
	caller caller
	// template is the sandbox's E2B template (the code interpreter
	// serves only templates that make kernel sessions).
	template string
	// sealedEnv is the record's env vars, as read with it (sealed under
	// the caller's key): a command needs no second read of the record.
	sealedEnv string
}

func withTarget(ctx context.Context, t *target) context.Context {
	return context.WithValue(ctx, targetKey, t)
}

func targetOf(ctx context.Context) *target {
	t, _ := ctx.Value(targetKey).(*target)
	return t
}
