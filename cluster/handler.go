package cluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sandboxapi/sandboxapi/internal/httperr"
	"github.com/sandboxapi/sandboxapi/internal/reqid"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// handOverWait bounds how long a call that starts work waits for a
// draining owner to hand its session over before it is forwarded anyway
// (the owner then answers 503 draining, which a client retries).
const handOverWait = 90 * time.Second

// replyError is an error the handler answers itself, in the API's
// envelope.
type replyError struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration
}

var (
	errBadSignature = replyError{Status: http.StatusUnauthorized, Code: "bad_node_signature",
		Message: "the request carries node-forwarding headers that do not verify"}
	errSessionLost = replyError{Status: http.StatusGone, Code: "sandbox_lost",
		Message: "the session was lost with its node: its home is not on storage this node reaches"}
	errSessionMoved = replyError{Status: http.StatusServiceUnavailable, Code: "session_moved",
		Message: "the session is moving to another node; retry", RetryAfter: time.Second}
	errNodeUnavailable = replyError{Status: http.StatusServiceUnavailable, Code: "node_unavailable",
		Message: "the node that owns the session cannot be reached yet, or this node is renewing its lease; retry", RetryAfter: time.Second}
	errInternal = replyError{Status: http.StatusInternalServerError, Code: "internal",
		Message: "internal error; quote the request id to the operator"}
	// errBodyUnread is the API's answer to a call whose body could not be
	// read (api/server.go errBodyUnread): a forward cut short by a client
	// that stopped sending or was slower than server.read_timeout.
	errBodyUnread = replyError{Status: http.StatusBadRequest, Code: "invalid_request",
		Message: "the request body could not be read: it was cut short or took longer than the server's read timeout"}
	errHeadersTooLarge = replyError{Status: http.StatusRequestHeaderFieldsTooLarge, Code: "headers_too_large",
		Message: "the request's headers are over 1 MiB"}
	errStoreUnavailable = replyError{Status: http.StatusServiceUnavailable, Code: "store_unavailable",
		Message: "the store is unavailable; retry after the Retry-After seconds", RetryAfter: 2 * time.Second}
)

// failStore answers an error of the store behind an owner look-up, a
// claim or an adoption (what): 503 store_unavailable, as the API answers
// it, when the store cannot be reached, else fallback; either is logged
// once with its cause.
func (h *handler) failStore(w http.ResponseWriter, r *http.Request, what, id string, err error, fallback replyError) {
	rid := r.Header.Get("X-Request-Id")
	if errors.Is(err, store.ErrUnavailable) {
		h.n.log.Warn("store unavailable", "request_id", rid, "route", "cluster: "+what, "session", id, "err", err)
		h.fail(w, r, errStoreUnavailable)
		return
	}
	h.n.log.Error("cluster: "+what, "request_id", rid, "session", id, "err", err)
	h.fail(w, r, fallback)
}

// Handler returns next behind the node: every call for a session goes to
// the node that owns it, new sessions to the node with the most free
// capacity, and every response names the node that served it
// (X-Sandbox-Node). Put it in front of the API (before authentication
// and metering, so a forwarded call is metered once, where it is served).
func (n *Node) Handler(next http.Handler) http.Handler { return &handler{n: n, next: next} }

type handler struct {
	n    *Node
	next http.Handler
}

// routeKind is what the handler does with a request.
type routeKind int

const (
	routeLocal   routeKind = iota // anything else: served here
	routeCreate                   // POST /v1/sessions: placed
	routeSession                  // /v1/sessions/{id} and below: sent to the owner
)

// maxIDLen bounds the session ids looked up in the store.
const maxIDLen = 128

// route classifies a request by method and escaped path, and returns the
// session id of a session route (one path segment, unescaped as the API's
// router does). An id the store cannot hold (a NUL byte, bytes that are
// not UTF-8: PostgreSQL refuses them in a query) names no session: the
// call is the local API's (its 404), not a failed owner look-up.
func route(method, escapedPath string) (routeKind, string) {
	rest, ok := strings.CutPrefix(escapedPath, "/v1/sessions")
	switch {
	case !ok:
		return routeLocal, ""
	case rest == "":
		if method == http.MethodPost {
			return routeCreate, ""
		}
		return routeLocal, ""
	case rest[0] != '/':
		return routeLocal, ""
	}
	seg, _, _ := strings.Cut(rest[1:], "/")
	id, err := url.PathUnescape(seg)
	if err != nil || id == "" || len(id) > maxIDLen || !utf8.ValidString(id) || strings.IndexByte(id, 0) >= 0 {
		return routeLocal, ""
	}
	return routeSession, id
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A copy with its own headers, which the handler changes: the request
	// id is chosen here, so that every node logs the one the client sees.
	r = r.WithContext(r.Context())
	r.Header = r.Header.Clone()
	if !reqid.Valid(r.Header.Get("X-Request-Id")) {
		r.Header.Set("X-Request-Id", reqid.New())
	}
	forwarded := false
	if isForwarded(r.Header) {
		uri := r.RequestURI
		if uri == "" {
			uri = r.URL.RequestURI()
		}
		from, err := h.n.sig.verify(r.Header, r.Method, uri, h.n.now())
		if err != nil {
			h.n.log.Warn("cluster: refused a forwarded call", "request_id", r.Header.Get("X-Request-Id"), "remote", r.RemoteAddr,
				"method", r.Method, "path", r.URL.Path, "err", err)
			h.fail(w, r, errBadSignature)
			return
		}
		stripForward(r.Header)
		h.n.log.Debug("cluster: forwarded call", "request_id", r.Header.Get("X-Request-Id"), "from", from, "method", r.Method, "path", r.URL.Path)
		forwarded = true
	}
	if !forwarded && headerBytes(r) > maxClientHeaderBytes {
		// What the server reads past it is the room a forward's own
		// headers need: without this, a call with headers that fit when
		// sent to the session's node got a bare 431 through another.
		h.fail(w, r, errHeadersTooLarge)
		return
	}
	kind, id := route(r.Method, r.URL.EscapedPath())
	if kind != routeLocal && !forwarded && !hasCredentials(r.Header) {
		// The API will refuse it (401): a call without a key neither
		// moves a session nor costs a look-up of its owner.
		kind = routeLocal
	}
	switch {
	case kind == routeSession:
		h.serveSession(w, r, id, forwarded)
	case kind == routeCreate && !forwarded:
		h.place(w, r)
	default:
		h.local(w, r)
	}
}

// maxClientHeaderBytes bounds a client's request line and headers on
// every node: the server's limit (http.DefaultMaxHeaderBytes, which it
// reads 4 KiB past) less room for what a forward adds (the signature,
// X-Forwarded-*), so that a call that fits on one node fits through any.
const maxClientHeaderBytes = http.DefaultMaxHeaderBytes

// headerBytes is about the size of r's request line and headers as sent.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Host) + 16
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// credentialHeaders are where the API looks for a key (api/auth.go).
var credentialHeaders = []string{"Authorization", "X-Api-Key", "X-Rapidapi-Key", "X-Rapidapi-Proxy-Secret"}

// hasCredentials reports whether h carries anything the API could take
// for a key.
func hasCredentials(h http.Header) bool {
	for _, k := range credentialHeaders {
		if strings.TrimSpace(h.Get(k)) != "" {
			return true
		}
	}
	return false
}

// local serves r here.
func (h *handler) local(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderNode, h.n.s.Node)
	h.next.ServeHTTP(w, r)
}

// fail answers e itself.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, e replyError) {
	rid := r.Header.Get("X-Request-Id")
	w.Header().Set(HeaderNode, h.n.s.Node)
	w.Header().Set("X-Request-Id", rid)
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((e.RetryAfter+time.Second-1)/time.Second)))
	}
	httperr.Write(w, e.Status, httperr.Payload{Code: e.Code, Message: e.Message, RequestID: rid})
}

// watchedBody remembers whether any byte of a request body was read, so
// that a call whose forward found no connection can be tried again. Close
// does nothing: a transport closes the body even when it could not send
// it, and the server closes the real one.
//
// Once the body has ended (its EOF, or its Content-Length read), Read
// answers io.EOF itself and never reads the server's body again. The
// transport reads once more past a body's Content-Length (to check that
// it is not longer) after it has written the last byte to the owner; the
// owner may answer at once, and the server closes the body of a call
// whose reply has started (it consumes the rest when the reply's headers
// are written). That late read then failed ("invalid Read on closed
// Body"), the transport took it for a failed request write and closed
// the connection while the owner's reply was streaming on it: a stream
// no one cut ended with an unexpected EOF under load.
type watchedBody struct {
	rc   io.ReadCloser
	read bool
	left int64 // bytes the Content-Length still announces; -1: unknown
	eof  bool
	err  error // the first failed read (not the body's end)
}

func (b *watchedBody) Read(p []byte) (int, error) {
	if b.eof || b.left == 0 {
		b.eof = true
		return 0, io.EOF
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	if n > 0 {
		b.read = true
		if b.left > 0 {
			b.left -= int64(n)
		}
	}
	if err == io.EOF {
		b.eof = true
	}
	if err != nil && err != io.EOF && b.err == nil {
		b.err = err
	}
	return n, err
}

func (b *watchedBody) Close() error { return nil }

func watch(r *http.Request) *watchedBody {
	b := &watchedBody{rc: r.Body, left: -1}
	if r.ContentLength > 0 {
		b.left = r.ContentLength
	}
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = b
	}
	return b
}

// maxAttempts bounds the owner look-ups of one call (claims lost to other
// nodes, owners that stopped answering).
const maxAttempts = 20

// serveSession serves a call for session id where it lives: here (taken
// in from the store first when it is not in memory), on its owner, or
// here after claiming it from an owner whose lease ran out or that handed
// it over. A forwarded call is never forwarded again.
func (h *handler) serveSession(w http.ResponseWriter, r *http.Request, id string, forwarded bool) {
	ctx := r.Context()
	body := watch(r)
	self := h.n.s.Node
	var unreachableUntil time.Time // how long an unreachable owner is waited for
	waitedHandOver := false
	for range maxAttempts {
		o, err := h.n.st.OwnerOf(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			h.local(w, r) // the API's 404
			return
		}
		if err != nil {
			if ctx.Err() == nil {
				h.failStore(w, r, "reading the owner of a session", id, err, errNodeUnavailable)
			}
			return
		}
		if sandbox.DoneStates.Has(o.Session.State) {
			h.local(w, r)
			return
		}
		if !forwarded && !h.n.ownedByCaller(r, o.Session.KeyID) {
			h.local(w, r) // the API's 401 or 404: nothing moves, no node is named
			return
		}
		owner, now := o.Owner, h.n.now()
		switch {
		case owner.Name == self:
			h.serveOwned(w, r, id)
			return
		case (owner.Name == "" || !owner.Alive(now)) && !forwarded && h.n.isDraining():
			// A draining node takes nothing over: a node that stays does.
			if target, ok := h.n.pick(ctx); ok {
				if answered(h.forward(w, r, target)) {
					return
				}
			}
			h.fail(w, r, errNodeUnavailable)
			return
		case owner.Name == "" || !owner.Alive(now):
			ok, err := h.n.claim(ctx, id)
			if err != nil {
				if ctx.Err() == nil {
					h.failStore(w, r, "claiming a session", id, err, errNodeUnavailable)
				}
				return
			}
			if ok {
				h.serveOwned(w, r, id)
				return
			}
			continue // another node won it: read again and forward there
		case forwarded:
			// The sender thought this node owns the session; it does not.
			// Forwarding again could loop between two nodes that disagree.
			h.fail(w, r, errSessionMoved)
			return
		case owner.Draining && !waitedHandOver && startsWork(r):
			waitedHandOver = true
			if h.n.waitHandOver(ctx, id, owner.Name) {
				continue
			}
			if ctx.Err() != nil {
				return
			}
		}
		switch h.forward(w, r, owner) {
		case OutcomeRefused:
			h.fail(w, r, errNodeUnavailable)
			return
		case OutcomeUnreachable:
			if body.read {
				h.fail(w, r, errNodeUnavailable)
				return
			}
			// Its process may be gone: once its lease runs out, the
			// session is claimed here.
			if unreachableUntil.IsZero() {
				unreachableUntil = now.Add(h.n.lease + 2*time.Second)
			}
			if !now.Before(unreachableUntil) {
				h.fail(w, r, errNodeUnavailable)
				return
			}
			wait := min(owner.LeaseUntil.Add(50*time.Millisecond).Sub(now), unreachableUntil.Sub(now))
			if !sleep(ctx, max(wait, 50*time.Millisecond)) {
				return
			}
		default:
			return
		}
	}
	h.fail(w, r, errNodeUnavailable)
}

// ownedByCaller reports whether r's key owns a session of key keyID (true
// when the node has no key resolution).
func (n *Node) ownedByCaller(r *http.Request, keyID string) bool {
	if n.caller == nil {
		return true
	}
	id, ok := n.caller(r)
	return ok && id != "" && id == keyID
}

// startsWork tells calls that start or change something (execute,
// upload, install, fork, hibernate, a network change) from reads and
// deletes, which a draining node still serves.
func startsWork(r *http.Request) bool {
	return r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch
}

// serveOwned serves a call for a session this node owns, taking it in
// from the store first when the executor does not have it.
func (h *handler) serveOwned(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	if !h.n.waitServing(ctx) {
		if ctx.Err() == nil {
			h.fail(w, r, errNodeUnavailable)
		}
		return
	}
	if !h.n.ex.Has(id) {
		if _, err := h.n.ex.Adopt(ctx, id); err != nil {
			switch {
			case errors.Is(err, sandbox.ErrSessionLost):
				h.fail(w, r, errSessionLost)
			case errors.Is(err, sandbox.ErrSessionMoved):
				h.fail(w, r, errSessionMoved)
			case errors.Is(err, sandbox.ErrNotFound):
				h.local(w, r)
			case ctx.Err() != nil:
			default:
				h.failStore(w, r, "adopting a session", id, err, errInternal)
			}
			return
		}
	}
	h.local(w, r)
}

// maxReplayBody bounds the create body kept to be served here when the
// chosen node cannot take it (a create's body is a few hundred bytes).
const maxReplayBody = 64 << 10

// place sends a new session to the node with the most free capacity,
// or creates it here when that node cannot be reached or refuses this
// node's signature.
func (h *handler) place(w http.ResponseWriter, r *http.Request) {
	target, ok := h.n.pick(r.Context())
	if !ok {
		h.local(w, r)
		return
	}
	var kept []byte
	if r.ContentLength > 0 && r.ContentLength <= maxReplayBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, r.ContentLength))
		if err != nil {
			// The local API meets the same failure and answers it.
			r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), errReader{err}))
			h.local(w, r)
			return
		}
		kept = b
		r.Body = io.NopCloser(bytes.NewReader(kept))
	}
	body := watch(r)
	if answered(h.forward(w, r, target)) {
		return
	}
	switch {
	case kept != nil:
		r.Body = io.NopCloser(bytes.NewReader(kept))
	case body.read:
		h.fail(w, r, errNodeUnavailable)
		return
	}
	h.local(w, r)
}

// errReader fails every read with err.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// answered reports whether a forward that ended with o wrote the reply
// (else nothing was written and the caller answers).
func answered(o Outcome) bool { return o == OutcomeOK || o == OutcomeFailed }

// refusedSignature reports whether resp, from node target, is its 401
// bad_node_signature: a refusal of this node's signature (a client's
// forward headers never get past the node it called). resp keeps its
// body either way.
func refusedSignature(resp *http.Response, target string) bool {
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get(HeaderNode) != target {
		return false
	}
	peek, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(peek), resp.Body), resp.Body}
	if err != nil {
		return false
	}
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	return json.Unmarshal(peek, &e) == nil && e.Error.Code == errBadSignature.Code
}

// errRefused is what ModifyResponse returns for a refused signature.
var errRefused = errors.New("the node refused this node's signature")

// errResent is what ModifyResponse returns for a signature refused after
// the transport sent the call again: the node read the first copy and
// dropped the connection before replying, and a bodiless call (a GET)
// is resent by the transport on another connection with the same
// signature, whose nonce the first copy spent. The node is not refusing
// this node's secret, so it is a failed forward.
var errResent = errors.New("the node dropped the connection before replying and refused the resent call's spent signature")

// forward proxies r to node target, streaming both ways, and reports how
// it ended. When target cannot be reached nothing is written to w, so the
// caller may still answer.
func (h *handler) forward(w http.ResponseWriter, r *http.Request, target store.NodeRow) (outcome Outcome) {
	outcome = OutcomeOK
	defer func() {
		if h.n.obs != nil {
			h.n.obs.ClusterForward(string(outcome))
		}
	}()
	u, err := url.Parse(target.URL)
	if err != nil || u.Host == "" {
		h.n.log.Error("cluster: node has no usable url", "node", target.Name)
		return OutcomeUnreachable
	}
	if h.n.s.RequireTLS && u.Scheme != "https" {
		// Nothing is sent: the call would cross the network in the clear.
		h.n.log.Error("cluster: not forwarding to a node with a plain http url (cluster.require_tls)",
			"request_id", r.Header.Get("X-Request-Id"), "node", target.Name, "url", target.URL)
		h.fail(w, r, errNodeUnavailable)
		return OutcomeFailed
	}
	in := r
	// Copies of the call written to the node: more than one when the
	// transport sent it again after a connection failed.
	var sent atomic.Int32
	trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { sent.Add(1) }}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			keepConnectionListed(pr.In.Header, pr.Out.Header) // first: what the node sets below wins
			pr.SetXForwarded()
			pr.Out.Header.Set("X-Request-Id", pr.In.Header.Get("X-Request-Id"))
			h.n.sig.sign(pr.Out.Header, pr.Out.Method, pr.Out.URL.RequestURI(), target.Name, h.n.now())
			pr.Out = pr.Out.WithContext(httptrace.WithClientTrace(pr.Out.Context(), trace))
		},
		Transport:     h.n.trans,
		FlushInterval: -1, // streams (SSE) reach the client as they are written
		ErrorLog:      h.n.proxyLog,
		ModifyResponse: func(resp *http.Response) error {
			if refusedSignature(resp, target.Name) {
				if sent.Load() > 1 {
					return errResent
				}
				return errRefused
			}
			if resp.Header.Get(HeaderNode) == "" {
				resp.Header.Set(HeaderNode, target.Name)
			}
			if resp.StatusCode != http.StatusSwitchingProtocols {
				resp.Body = &replyBody{ReadCloser: resp.Body, h: h, r: in, node: target.Name}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, errResent) {
				outcome = OutcomeFailed
				h.n.log.Warn("cluster: the node dropped the connection before replying", "request_id", r.Header.Get("X-Request-Id"),
					"node", target.Name, "err", err)
				h.fail(w, r, errNodeUnavailable)
				return
			}
			if errors.Is(err, errRefused) {
				outcome = OutcomeRefused
				h.n.refusedBy(target.Name)
				h.n.log.Error("cluster: a node refused this node's signature: their cluster.secret differ or their clocks are more than 30s apart",
					"request_id", r.Header.Get("X-Request-Id"), "node", target.Name)
				return
			}
			var op *net.OpError
			if errors.As(err, &op) && op.Op == "dial" {
				outcome = OutcomeUnreachable
				h.n.log.Warn("cluster: node unreachable", "request_id", r.Header.Get("X-Request-Id"), "node", target.Name, "err", err)
				return
			}
			outcome = OutcomeFailed
			if untrusted(err) {
				// Every call there fails the same way until a
				// configuration changes: no new session goes there for
				// a while, as for a refused signature.
				h.n.refusedBy(target.Name)
				h.n.log.Error("cluster: the node's TLS certificate does not verify: check cluster.ca_file here and the names of its certificate",
					"request_id", r.Header.Get("X-Request-Id"), "node", target.Name, "url", target.URL, "err", err)
				h.fail(w, r, errNodeUnavailable)
				return
			}
			if wb, ok := in.Body.(*watchedBody); ok && wb.err != nil {
				// The client's body stopped (read_timeout, or cut):
				// its request context ends with it, but it may still
				// read the answer, which a node serving it would give.
				h.n.log.Info("cluster: the client's body could not be read", "request_id", r.Header.Get("X-Request-Id"),
					"node", target.Name, "err", wb.err)
				h.fail(w, r, errBodyUnread)
				return
			}
			if r.Context().Err() != nil {
				return // the client went away
			}
			h.n.log.Warn("cluster: forward failed", "request_id", r.Header.Get("X-Request-Id"), "node", target.Name, "err", err)
			h.fail(w, r, errNodeUnavailable)
		},
	}
	rp.ServeHTTP(w, r)
	return outcome
}

// replyBody is the body of a node's reply on its way to the client. A
// read that fails before the reply's end, while the client is still
// there, is logged once with the call's request id: the proxy then drops
// the client's connection (the client sees its reply cut short: an
// unexpected EOF), and the line tells the operator which call and which
// node.
type replyBody struct {
	io.ReadCloser
	h      *handler
	r      *http.Request // the client's call
	node   string
	n      int64 // bytes read
	logged bool
}

func (b *replyBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) && !b.logged && b.r.Context().Err() == nil {
		b.logged = true
		b.h.n.log.Warn("cluster: the node's reply was cut short; the client's connection is dropped", "request_id", b.r.Header.Get("X-Request-Id"),
			"node", b.node, "method", b.r.Method, "path", b.r.URL.Path, "bytes", b.n, "err", err)
	}
	return n, err
}

// untrusted reports whether err, from a forward, is a TLS handshake that
// failed on the other node's certificate (an unknown CA, names that do
// not cover its URL's host, an expired certificate) or on a node that
// answered in plain HTTP.
func untrusted(err error) bool {
	var cert *tls.CertificateVerificationError
	var rec tls.RecordHeaderError
	return errors.As(err, &cert) || errors.As(err, &rec)
}

// hopByHop are the headers a forward never passes on (the ones
// httputil.ReverseProxy removes by name).
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// keepConnectionListed copies to out the headers of in that in's
// Connection header names, which httputil.ReverseProxy drops: the API
// reads them on one node (a key, Accept choosing a stream), so the node
// a call is forwarded to must see them too. Hop-by-hop headers proper
// and forward headers stay out.
func keepConnectionListed(in, out http.Header) {
	for _, v := range in.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			name = http.CanonicalHeaderKey(strings.TrimSpace(name))
			if name == "" || slices.Contains(hopByHop, name) || isForwarded(http.Header{name: nil}) {
				continue
			}
			if vs, ok := in[name]; ok {
				out[name] = slices.Clone(vs)
			}
		}
	}
}

// sleep waits d or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
