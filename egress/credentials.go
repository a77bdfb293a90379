package egress

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Header is one credential header in the clear. Its String and LogValue
// hide the value, so that printing or logging it shows the name only.
type Header struct {
	Name  string // canonical (policy.CanonicalHeader)
	Value string
}

func (h Header) String() string { return h.Name + ": [redacted]" }

// LogValue hides the value from slog.
func (h Header) LogValue() slog.Value { return slog.StringValue(h.String()) }

// MarshalJSON hides the value from any JSON encoding.
func (h Header) MarshalJSON() ([]byte, error) { return json.Marshal(h.String()) }

// Credentials are the headers the proxy sets on a session's requests, by
// canonical host. Only the hosts named here have their TLS terminated by
// the proxy; the map is never changed once given to the proxy.
type Credentials map[string][]Header

// Opener opens the sealed credential values of stored network requests
// (internal/seal.Keys).
type Opener interface {
	Open(sealed, context string) (string, error)
}

// ErrCredentials is wrapped by errors about a session's credentials.
var ErrCredentials = errors.New("egress credentials")

// OpenCredentials opens the sealed values of req's credentials with o.
// The error never holds a value.
func OpenCredentials(o Opener, req sandbox.NetworkRequest) (Credentials, error) {
	if len(req.Credentials) == 0 {
		return nil, nil
	}
	if o == nil {
		return nil, fmt.Errorf("%w: no credentials key", ErrCredentials)
	}
	out := Credentials{}
	for i, c := range req.Credentials {
		host, err := policy.CanonicalHost(c.Host)
		if err != nil {
			return nil, fmt.Errorf("%w: credential %d: bad host", ErrCredentials, i)
		}
		v, err := o.Open(c.Sealed, c.SealContext())
		if err != nil {
			return nil, fmt.Errorf("%w: credential %d for %s: %w", ErrCredentials, i, host, err)
		}
		out[host] = append(out[host], Header{Name: policy.CanonicalHeader(c.Header), Value: v})
	}
	return out, nil
}

// SetCredentials replaces the credentials of a live session; connections
// opened from then on use them, and open ones to a host whose credentials
// changed are closed.
func (p *Proxy) SetCredentials(id string, c Credentials) error {
	p.mu.Lock()
	s := p.sessions[id]
	p.mu.Unlock()
	if s == nil {
		return fmt.Errorf("setting credentials of %s: %w", id, ErrUnknownSession)
	}
	if len(c) > 0 && p.ca == nil {
		return fmt.Errorf("setting credentials of %s: %w: the proxy has no CA", id, ErrCredentials)
	}
	prev := s.creds.Swap(&c)
	// An open connection to a host whose credentials changed is closed: it
	// would go on carrying the old value (a revoked key must stop at
	// once), or, for a host that just gained one, go on without it.
	var old Credentials
	if prev != nil {
		old = *prev
	}
	p.mu.Lock()
	var doomed []*tunnel
	for t := range s.tunnels {
		if h := t.target.Host; h != "" && !slices.Equal(old[h], c[h]) {
			doomed = append(doomed, t)
		}
	}
	p.mu.Unlock()
	for _, t := range doomed {
		t.revoke()
	}
	return nil
}

// credentialsFor returns the headers for host in s, nil when none.
func (s *session) credentialsFor(host string) []Header {
	c := s.creds.Load()
	if c == nil {
		return nil
	}
	return (*c)[host]
}

// applyCredentials sets each header of hs on h, replacing every value the
// client sent under that name.
func applyCredentials(h http.Header, hs []Header) {
	for _, c := range hs {
		for k := range h {
			if strings.EqualFold(k, c.Name) {
				delete(h, k)
			}
		}
		h[c.Name] = []string{c.Value}
	}
}

// upstreamRoots are the system roots plus the PEM certificates in file
// (egress.upstream_ca_file; none when empty).
func upstreamRoots(file string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if file == "" {
		return pool, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading upstream_ca_file: %w", err)
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: upstream_ca_file %s holds no PEM certificate", ErrInvalidConfig, file)
	}
	return pool, nil
}

// Limits of the proxy-terminated path.
const (
	// maxRequestHead bounds one request's or response's line and
	// headers.
	maxRequestHead = 64 << 10
)

// ReasonUpstreamTLS starts the reason of a refused upstream handshake.
const ReasonUpstreamTLS = "upstream TLS: "

// terminate serves a tunnel to a host that has credentials: it opens the
// proxy's own verified TLS to the pinned upstream connection, terminates
// the sandbox's TLS (whose ClientHello, hello, was already read) with a
// leaf of the CA, and forwards HTTP/1.1 requests one by one with the
// credential headers set. The caller tracks t (closing it closes both
// raw connections) and records d.
func (p *Proxy) terminate(s *session, t *tunnel, hello []byte, host string, hs []Header, d *Decision) (Outcome, Class, string) {
	d.Credential = true
	deadline := time.Now().Add(p.cfg.HandshakeTimeout)
	_ = t.upstream.SetDeadline(deadline)
	up := tls.Client(t.upstream, &tls.Config{ServerName: host, RootCAs: p.upRoots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	uerr := up.HandshakeContext(s.ctx)
	_ = t.upstream.SetDeadline(time.Time{})

	_ = t.client.SetDeadline(deadline)
	cl := tls.Server(&prefixedConn{Conn: t.client, pre: hello}, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return p.ca.Leaf(host)
		},
	})
	cerr := cl.HandshakeContext(s.ctx)
	_ = t.client.SetDeadline(time.Time{})
	if cerr != nil {
		t.close()
		return OutcomeDeny, ClassClientTLS, "sandbox TLS handshake: " + cerr.Error()
	}
	if uerr != nil {
		// Tell the sandbox in HTTP: read its request (briefly), answer 502.
		_ = cl.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := http.ReadRequest(bufio.NewReader(io.LimitReader(cl, maxRequestHead))); err == nil {
			writeStatus(cl, http.StatusBadGateway, "egress: upstream TLS certificate not trusted\n")
		}
		t.close()
		return OutcomeError, ClassUpstreamTLS, ReasonUpstreamTLS + uerr.Error()
	}
	ended := make(chan struct{}, 1)
	go func() {
		p.forward(host, hs, &tallyConn{Conn: cl, n: &t.down}, &tallyConn{Conn: up, n: &t.up})
		ended <- struct{}{}
	}()
	t.watch(s.ctx, p.cfg.IdleTimeout, ended, 1)
	d.BytesUp, d.BytesDown = t.up.Load(), t.down.Load()
	return OutcomeAllow, ClassAllowed, ""
}

// writeStatus writes a short response that closes the connection.
func writeStatus(w io.Writer, code int, body string) {
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// forward relays requests from client to upstream and their responses
// back until either side closes, a message is malformed, or a message
// says the connection closes. Bodies stream; heads are bounded by
// maxRequestHead.
func (p *Proxy) forward(host string, hs []Header, client, upstream net.Conn) {
	cb := &budget{r: client}
	ub := &budget{r: upstream}
	cr, ur := bufio.NewReader(cb), bufio.NewReader(ub)
	uw := bufio.NewWriter(upstream)
	cw := bufio.NewWriter(client)
	for {
		cb.n.Store(maxRequestHead)
		req, err := http.ReadRequest(cr)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				writeStatus(client, http.StatusBadRequest, "egress: malformed request\n")
			}
			return
		}
		cb.n.Store(-1)
		if !sameRequestHost(req.Host, host) {
			writeStatus(client, http.StatusMisdirectedRequest, "egress: Host differs from the TLS server name\n")
			return
		}
		if trailerNames(req, hs) {
			writeStatus(client, http.StatusBadRequest, "egress: a trailer may not carry a credential header\n")
			return
		}
		if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
			req.Header.Del("Expect")
			if _, err := io.WriteString(client, "HTTP/1.1 100 Continue\r\n\r\n"); err != nil {
				return
			}
		}
		applyCredentials(req.Header, hs)
		if _, ok := req.Header["User-Agent"]; !ok {
			req.Header["User-Agent"] = []string{""} // write none, as the client did
		}
		if err := req.Write(uw); err != nil || uw.Flush() != nil {
			return
		}
		ub.n.Store(maxRequestHead)
		resp, err := http.ReadResponse(ur, req)
		for err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			if resp.Write(cw) != nil || cw.Flush() != nil {
				return
			}
			resp, err = http.ReadResponse(ur, req)
		}
		if err != nil {
			writeStatus(client, http.StatusBadGateway, "egress: upstream sent a malformed response\n")
			return
		}
		ub.n.Store(-1)
		werr := resp.Write(cw)
		if werr == nil {
			werr = cw.Flush()
		}
		resp.Body.Close()
		if werr != nil {
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			relayRaw(client, upstream, cr, ur)
			return
		}
		if req.Close || resp.Close {
			return
		}
	}
}

// trailerNames reports whether req announces a trailer under one of the
// credential headers' names (which would reach the upstream after the
// body, beside the credential).
func trailerNames(req *http.Request, hs []Header) bool {
	for k := range req.Trailer {
		for _, h := range hs {
			if strings.EqualFold(k, h.Name) {
				return true
			}
		}
	}
	return false
}

// relayRaw copies both ways after a protocol switch, starting with what
// the readers had buffered, until either side ends.
func relayRaw(client, upstream net.Conn, cr, ur *bufio.Reader) {
	done := make(chan struct{}, 2)
	go func() { io.Copy(upstream, cr); done <- struct{}{} }()
	go func() { io.Copy(client, ur); done <- struct{}{} }()
	<-done
}

// sameRequestHost compares a request's Host (with or without a port) with
// the TLS server name.
func sameRequestHost(reqHost, host string) bool {
	h := reqHost
	if hh, _, err := net.SplitHostPort(reqHost); err == nil {
		h = hh
	}
	c, err := policy.CanonicalHost(h)
	return err == nil && c == host
}

// budget reads from r while n (bytes left; negative: unlimited) allows.
type budget struct {
	r io.Reader
	n atomic.Int64
}

var errHeadTooLarge = errors.New("message head too large")

func (b *budget) Read(p []byte) (int, error) {
	left := b.n.Load()
	if left == 0 {
		return 0, errHeadTooLarge
	}
	if left > 0 && int64(len(p)) > left {
		p = p[:left]
	}
	n, err := b.r.Read(p)
	if left > 0 {
		b.n.Add(-int64(n))
	}
	return n, err
}

// tallyConn counts the bytes written through it into n.
type tallyConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *tallyConn) Write(b []byte) (int, error) {
	w, err := c.Conn.Write(b)
	c.n.Add(int64(w))
	return w, err
}
