// Package mcp serves sandboxapi's tools over the Model Context Protocol,
// built on the official Go SDK. The tools hold no logic of their own beyond
// presentation: each one calls the REST API, either in process through the
// API's own http.Handler (the streamable-HTTP transport mounted at /mcp) or
// over HTTP to a remote server (the stdio transport of `sandboxapi mcp`), so
// plans, quotas, limits and metering are exactly the API's.
package mcp

import (
	"github.com/sandboxapi/sandboxapi/api/wire"

	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxapi/sandboxapi/internal/httperr"
)

// authHeaders are copied from an MCP HTTP request onto the API calls it
// makes: the key in any of its three forms, and a gateway's identity.
var authHeaders = []string{
	"X-RapidAPI-Key", "Authorization", "X-API-Key",
	"X-RapidAPI-Proxy-Secret", "X-RapidAPI-User", "X-RapidAPI-Subscription",
}

// maxReplyBytes bounds an API reply read by a tool.
const maxReplyBytes = 64 << 20

// Options configure a tool server. Exactly one of Handler and BaseURL is
// used: Handler when it is set. The zero value is not usable (it has
// neither); Options is plain data, copied by the constructors.
type Options struct {
	// Handler receives API calls in process (the API server itself).
	Handler http.Handler
	// BaseURL is the API's address for remote calls, e.g.
	// "http://127.0.0.1:8080".
	BaseURL string
	// Key is sent on every remote call (stdio); with Handler the caller's
	// own headers are used instead.
	Key string
	// Client sends remote calls; nil means a client without a timeout
	// (calls end with their context). A copy of it is used, which follows
	// no redirect.
	Client *http.Client
	// Version is reported to MCP clients.
	Version string
	// Logger receives the SDK's and the tools' logs; nil discards them.
	Logger *slog.Logger
	// DefaultTimeout is the server's limits.default_timeout, stated as the
	// default of the tools' timeout; zero means 30 s.
	DefaultTimeout time.Duration
	// Runtimes are the server's languages (the runtimes file): execute_code's
	// schema names them and their versions. Nil leaves both free text.
	Runtimes []wire.Runtime
}

// backend sends one API call and returns the reply, reading at most limit
// bytes of its body.
type backend interface {
	roundTrip(req *http.Request, limit int64) (apiReply, error)
}

type apiReply struct {
	status int
	header http.Header
	body   []byte
	// over says the reply's body was longer than the call's limit; body
	// then holds its first limit bytes.
	over bool
}

// handlerBackend calls an http.Handler in process.
type handlerBackend struct{ h http.Handler }

func (b handlerBackend) roundTrip(req *http.Request, limit int64) (apiReply, error) {
	rec := &recorder{header: http.Header{}, limit: limit}
	b.h.ServeHTTP(rec, req)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return apiReply{status: rec.status, header: rec.header, body: rec.body.Bytes(), over: rec.over}, nil
}

// recorder is the minimal http.ResponseWriter an in-process call needs.
// Past limit bytes it keeps nothing more and fails the handler's writes,
// so a handler copying a large file stops.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
	limit  int64
	over   bool
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if room := r.limit - int64(r.body.Len()); int64(len(p)) > room {
		r.body.Write(p[:max(room, 0)])
		r.over = true
		return 0, errors.New("reply too large")
	}
	return r.body.Write(p)
}

func (r *recorder) Flush() {}

// httpBackend calls a remote API.
type httpBackend struct {
	client *http.Client
}

func (b httpBackend) roundTrip(req *http.Request, limit int64) (apiReply, error) {
	resp, err := b.client.Do(req)
	if err != nil {
		return apiReply{}, fmt.Errorf("calling sandboxapi: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return apiReply{}, fmt.Errorf("reading sandboxapi reply: %w", err)
	}
	rep := apiReply{status: resp.StatusCode, header: resp.Header, body: body}
	if int64(len(body)) > limit {
		rep.body, rep.over = body[:limit], true
	}
	return rep, nil
}

// client is what the tools use to reach the API; it is safe for concurrent
// use once built by newClient.
type client struct {
	be   backend
	base string // "http://sandboxapi.internal" for in-process calls
	key  string
	log  *slog.Logger
}

func newClient(o Options) (*client, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if o.Handler != nil {
		return &client{be: handlerBackend{o.Handler}, base: "http://sandboxapi.internal", key: o.Key, log: log}, nil
	}
	base := strings.TrimRight(o.BaseURL, "/")
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return nil, fmt.Errorf("sandboxapi url %q must start with http:// or https://", o.BaseURL)
	}
	hc := &http.Client{}
	if o.Client != nil {
		c := *o.Client
		hc = &c
	}
	// A redirect is never followed: the tools build every path themselves,
	// and a 307 would send the call (method, body and key) elsewhere.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{be: httpBackend{hc}, base: base, key: o.Key, log: log}, nil
}

// APIError is an error reply of the REST API, kept for the tool's message.
type APIError struct {
	Status     int
	Code       string
	Message    string
	RequestID  string
	RetryAfter time.Duration
	// Details are the envelope's details as compact JSON, cut at
	// maxDetailsBytes (an install's rejected packages, a gate's failing
	// checks): what an agent needs to act on the refusal.
	Details string
}

// maxDetailsBytes bounds the details an error carries into a tool's text.
const maxDetailsBytes = 2000

func (e *APIError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (HTTP %d): %s", e.Code, e.Status, e.Message)
	if e.Details != "" {
		fmt.Fprintf(&b, "; details: %s", e.Details)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, "; retry after %s", e.RetryAfter)
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " [request %s]", e.RequestID)
	}
	return b.String()
}

// call sends method path with body (JSON-encoded unless nil) and decodes a
// 2xx reply into out. hdr holds the caller's auth headers (may be nil).
// path is escaped and may carry a query.
func (c *client) call(ctx context.Context, hdr http.Header, method, path string, body, out any) error {
	r := request{method: method, path: path}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		r.body, r.contentType = bytes.NewReader(b), "application/json"
	}
	rep, err := c.send(ctx, hdr, r)
	if err != nil {
		return err
	}
	if rep.over {
		return fmt.Errorf("the %s %s reply is over %d bytes", method, path, maxReplyBytes)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(rep.body, out); err != nil {
		return fmt.Errorf("decoding %s %s reply: %w", method, path, err)
	}
	return nil
}

// request is one API call as send takes it.
type request struct {
	method string
	// path is escaped and may carry a query ("/v1/sessions/ID/files?path=%2Fx").
	path        string
	contentType string
	// body is nil for none; a *bytes.Reader or *strings.Reader gives the
	// request its Content-Length, which the files API checks first.
	body io.Reader
	// limit bounds the reply's body (0: maxReplyBytes).
	limit int64
}

// send makes one API call and returns a 2xx reply, or the API's error as
// an *APIError. hdr holds the caller's auth headers (may be nil).
func (c *client) send(ctx context.Context, hdr http.Header, r request) (apiReply, error) {
	body := r.body
	if body == nil {
		body = http.NoBody
	}
	req, err := http.NewRequestWithContext(ctx, r.method, c.base+r.path, body)
	if err != nil {
		return apiReply{}, fmt.Errorf("building request: %w", err)
	}
	for _, h := range authHeaders {
		for _, v := range hdr.Values(h) {
			req.Header.Add(h, v)
		}
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "sandboxapi-mcp")
	req.RemoteAddr = "127.0.0.1:0"
	limit := r.limit
	if limit <= 0 {
		limit = maxReplyBytes
	}
	rep, err := c.be.roundTrip(req, limit)
	if err != nil {
		return apiReply{}, err
	}
	if rep.status < 200 || rep.status > 299 {
		return apiReply{}, decodeError(rep)
	}
	return rep, nil
}

// maxRetryAfter bounds the Retry-After a reply can make a tool report
// (a larger number of seconds would overflow a time.Duration).
const maxRetryAfter = 24 * time.Hour

// decodeError reads an error reply: the API's envelope (internal/httperr),
// or, from something else on the way (a proxy's HTML page), a code made
// from the status and the start of the body as the message.
func decodeError(rep apiReply) *APIError {
	var eb httperr.Body
	e := &APIError{Status: rep.status}
	if json.Unmarshal(rep.body, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message, e.RequestID = eb.Error.Code, eb.Error.Message, eb.Error.RequestID
		if eb.Error.Details != nil {
			if d, err := json.Marshal(eb.Error.Details); err == nil {
				e.Details = strings.ToValidUTF8(string(truncate(d, maxDetailsBytes)), "")
			}
		}
	} else {
		e.Code = strings.ReplaceAll(strings.ToLower(http.StatusText(rep.status)), " ", "_")
		if e.Code == "" {
			e.Code = "http_" + strconv.Itoa(rep.status)
		}
		e.Message = strings.TrimSpace(strings.ToValidUTF8(string(truncate(rep.body, 300)), ""))
	}
	if s, err := strconv.Atoi(strings.TrimSpace(rep.header.Get("Retry-After"))); err == nil && s > 0 {
		e.RetryAfter = min(time.Duration(min(s, int(maxRetryAfter/time.Second)))*time.Second, maxRetryAfter)
	}
	return e
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}

// NewServer returns an MCP server with the tools registered (the four
// stateless ones and the session tools). It fails only on a bad BaseURL.
func NewServer(o Options) (*sdk.Server, error) {
	c, err := newClient(o)
	if err != nil {
		return nil, err
	}
	return newServer(c, o), nil
}

func newServer(c *client, o Options) *sdk.Server {
	v := o.Version
	if v == "" {
		v = "dev"
	}
	s := sdk.NewServer(&sdk.Implementation{Name: "sandboxapi", Title: "sandboxapi code execution", Version: v}, &sdk.ServerOptions{
		Logger: o.Logger,
		Instructions: "Run untrusted code in gVisor sandboxes. Call list_runtimes first for languages and your plan's limits; " +
			"execute_code runs one program statelessly; run_tests grades code against Python or JavaScript tests; " +
			"check_packages tells whether the curated mirror holds a pip or npm package. " +
			"For state across calls, create_session makes a session (kernel: true keeps Python variables and returns plots as images); " +
			"execute_in_session, install_packages, write_file, read_file and list_files work in it, and end_session deletes it.",
	})
	def := o.DefaultTimeout.Seconds()
	if def <= 0 {
		def = defaultTimeoutSeconds
	}
	registerTools(s, c, def, o.Runtimes)
	return s
}

// headersOf returns the HTTP headers of the MCP request behind req, if any.
func headersOf(req *sdk.CallToolRequest) http.Header {
	if req == nil || req.Extra == nil {
		return nil
	}
	return req.Extra.Header
}

// errorJSON renders e as the API's error body.
func errorJSON(e *APIError) []byte {
	b, _ := json.Marshal(httperr.Body{Error: httperr.Payload{Code: e.Code, Message: e.Message, RequestID: e.RequestID}})
	return append(b, '\n')
}
