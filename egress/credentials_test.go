package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

const testSecret = "Bearer s3cret-value-never-in-the-sandbox"

// credProxy is a proxy with a CA of its own that trusts the fake
// internet's CA upstream (upstream_ca_file), logging into a buffer.
func credProxy(t *testing.T, f *fakeNet, upstreamCA bool) (*Proxy, *CA, *testenv.LogBuffer) {
	t.Helper()
	ca, err := LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(f)
	if upstreamCA {
		cfg.UpstreamCAFile = f.caFile
	}
	logs := &testenv.LogBuffer{}
	p, err := NewProxy(cfg, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), CA: ca})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	return p, ca, logs
}

func credSession(t *testing.T, p *Proxy, creds Credentials, patterns ...string) testSession {
	t.Helper()
	host, sbx := testAddrs()
	pol, err := policy.New(policy.Rules{Enabled: true, Allowed: patterns})
	if err != nil {
		t.Fatal(err)
	}
	s := Session{ID: fmt.Sprintf("cred-%s", host), HostAddr: host, SandboxAddr: sbx, Policy: pol, Credentials: creds}
	ep, err := p.AddSession(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return testSession{Session: s, ep: ep}
}

// sandboxClient is an HTTP client as in the sandbox: through the CONNECT
// proxy, trusting the system's roots (here the fake internet's CA) and
// the proxy's CA, verification on, keep-alive on.
func sandboxClient(f *fakeNet, ca *CA, s testSession) *http.Client {
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	roots.AppendCertsFromPEM(f.caPEM)
	d := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(s.SandboxAddr, 0)), Timeout: 2 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: s.ep.Connect.String()}), DialContext: d.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true,
	}}
}

func TestCredentialTerminated(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p, ca, logs := credProxy(t, f, true)
	s := credSession(t, p, Credentials{"api.example.com": {{Name: "Authorization", Value: testSecret}}}, "*.example.com")
	c := sandboxClient(f, ca, s)
	port := f.httpsAP.Port()

	// Two requests on one connection, the client's own Authorization
	// replaced, a streamed body of unknown length.
	for i := range 2 {
		req, _ := http.NewRequest("POST", fmt.Sprintf("https://api.example.com:%d/headers", port), io.MultiReader(strings.NewReader(strings.Repeat("x", 100000))))
		req.Header.Set("Authorization", "Bearer from-the-sandbox")
		req.Header.Add("authorization", "second")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || strings.Count(string(body), "Authorization: ") != 1 || !strings.Contains(string(body), "Authorization: "+testSecret+"\n") {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if !strings.Contains(string(body), "body: 100000") {
			t.Fatalf("request %d: body not forwarded whole: %q", i, body)
		}
		if resp.TLS == nil || resp.TLS.PeerCertificates[0].Issuer.CommonName != ca.Certificate().Subject.CommonName {
			t.Fatalf("request %d: not served by the proxy's leaf", i)
		}
		if resp.ProtoMajor != 1 {
			t.Fatalf("request %d: proto %s, want HTTP/1.1", i, resp.Proto)
		}
	}
	c.CloseIdleConnections()
	d := lastDecision(t, p, s.ID)
	if d.Outcome != OutcomeAllow || !d.Credential || d.Host != "api.example.com" || d.BytesUp < 200000 || d.BytesDown == 0 {
		t.Fatalf("decision = %+v", d)
	}

	// Another allowed host: the end-to-end tunnel, no credential, the
	// upstream's own certificate.
	resp, err := c.Get(fmt.Sprintf("https://ok.example.com:%d/headers", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if strings.Contains(string(body), "Authorization") || resp.TLS.PeerCertificates[0].Issuer.CommonName != "sandboxapi test CA" {
		t.Fatalf("other host: %q issuer %s", body, resp.TLS.PeerCertificates[0].Issuer.CommonName)
	}
	c.CloseIdleConnections()
	var other *Decision
	for deadline := time.Now().Add(5 * time.Second); other == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, d := range p.Decisions(s.ID) {
			if d.Host == "ok.example.com" {
				other = &d
			}
		}
	}
	if other == nil || other.Credential || other.Outcome != OutcomeAllow {
		t.Fatalf("other host decision = %+v", other)
	}
	for _, d := range p.Decisions(s.ID) {
		if strings.Contains(fmt.Sprintf("%+v", d), "s3cret") {
			t.Fatalf("decision holds the secret: %+v", d)
		}
	}
	if strings.Contains(logs.String(), "s3cret") {
		t.Fatalf("log holds the secret: %s", logs)
	}
}

func TestCredentialTransparent(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p, ca, _ := credProxy(t, f, true)
	s := credSession(t, p, Credentials{"www.allowed.test": {{Name: "X-Api-Key", Value: "k-123"}}}, "*.allowed.test")
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	conn := dialFrom(t, s.SandboxAddr, s.ep.Transparent)
	tc := tls.Client(conn, &tls.Config{ServerName: "www.allowed.test", RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	if got := tc.ConnectionState().NegotiatedProtocol; got != "http/1.1" {
		t.Fatalf("ALPN %q, want http/1.1", got)
	}
	fmt.Fprintf(tc, "GET /headers HTTP/1.1\r\nHost: www.allowed.test\r\nX-API-KEY: mine\r\nConnection: close\r\n\r\n")
	b, _ := io.ReadAll(tc)
	if !strings.Contains(string(b), "X-Api-Key: k-123\n") || strings.Contains(string(b), "mine") {
		t.Fatalf("reply %q", b)
	}
	if d := lastDecision(t, p, s.ID); !d.Credential || d.Mode != ModeTransparent || d.Outcome != OutcomeAllow {
		t.Fatalf("decision = %+v", d)
	}
}

// TestCredentialHostile: what the sandbox may try on a terminated
// connection, and an upstream the proxy does not trust.
func TestCredentialHostile(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	port := f.httpsAP.Port()
	tests := []struct {
		name       string
		upstreamCA bool
		request    string
		status     int
		class      Class
	}{
		{name: "host header for another name", upstreamCA: true, request: "GET /headers HTTP/1.1\r\nHost: ok.example.com\r\n\r\n", status: 421, class: ClassAllowed},
		{name: "malformed request", upstreamCA: true, request: "GET /headers HTTP/1.1\r\nHost api.example.com\r\n\r\n", status: 400, class: ClassAllowed},
		{name: "credential header as a trailer", upstreamCA: true, request: "POST /headers HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\nTrailer: Authorization\r\n\r\n0\r\nAuthorization: Bearer mine\r\n\r\n", status: 400, class: ClassAllowed},
		{name: "head too large", upstreamCA: true, request: "GET /headers HTTP/1.1\r\nHost: api.example.com\r\nX-Big: " + strings.Repeat("a", maxRequestHead) + "\r\n\r\n", status: 400, class: ClassAllowed},
		{name: "upstream certificate not trusted", upstreamCA: false, request: "GET /headers HTTP/1.1\r\nHost: api.example.com\r\n\r\n", status: 502, class: ClassUpstreamTLS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, ca, _ := credProxy(t, f, tt.upstreamCA)
			s := credSession(t, p, Credentials{"api.example.com": {{Name: "Authorization", Value: testSecret}}}, "*.example.com")
			code, conn := rawConnect(t, s, s.SandboxAddr, fmt.Sprintf("api.example.com:%d", port))
			if code != 200 {
				t.Fatalf("CONNECT %d", code)
			}
			roots := x509.NewCertPool()
			roots.AddCert(ca.Certificate())
			tc := tls.Client(conn, &tls.Config{ServerName: "api.example.com", RootCAs: roots})
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			go io.WriteString(tc, tt.request)
			resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status || strings.Contains(string(b), "s3cret") {
				t.Fatalf("status %d %q, want %d", resp.StatusCode, b, tt.status)
			}
			tc.Close()
			if d := lastDecision(t, p, s.ID); d.Class != tt.class || !d.Credential {
				t.Fatalf("decision = %+v", d)
			}
		})
	}
}

func TestCredentialNeedsCA(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	host, sbx := testAddrs()
	_, err := p.AddSession(context.Background(), Session{ID: "nocas", HostAddr: host, SandboxAddr: sbx,
		Credentials: Credentials{"api.example.com": {{Name: "Authorization", Value: "x"}}}})
	if err == nil {
		t.Fatal("session with credentials added to a proxy without a CA")
	}
}

func TestHeaderHidesValue(t *testing.T) {
	h := Header{Name: "Authorization", Value: testSecret}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "h", h, "hs", []Header{h})
	if s := fmt.Sprint(h, []Header{h}, Credentials{"a.b": {h}}) + buf.String(); strings.Contains(s, "s3cret") {
		t.Fatalf("value printed: %s", s)
	}
}

func TestCALeaf(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadCA(dir)
	if err != nil || !again.Certificate().Equal(ca.Certificate()) {
		t.Fatalf("reloading the CA: %v", err)
	}
	leaf, err := ca.Leaf("api.example.com")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "api.example.com"}); err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "other.example.com"}); err == nil {
		t.Fatal("leaf valid for another name")
	}
	if cached, _ := ca.Leaf("api.example.com"); cached != leaf {
		t.Fatal("leaf not cached")
	}
	if d := leaf.Leaf.NotAfter.Sub(leaf.Leaf.NotBefore); d > 25*time.Hour {
		t.Fatalf("leaf valid for %v", d)
	}
	if len(ca.Certificate().ExcludedIPRanges) != 2 || !ca.Certificate().MaxPathLenZero {
		t.Fatal("CA without its constraints")
	}
}

// TestSetCredentials: a live session's credentials change for the next
// connection, and without any its hosts go back to the end-to-end tunnel.
func TestSetCredentials(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p, ca, _ := credProxy(t, f, true)
	s := credSession(t, p, Credentials{"api.example.com": {{Name: "Authorization", Value: "Bearer one"}}}, "*.example.com")
	get := func() (string, string) {
		c := sandboxClient(f, ca, s)
		defer c.CloseIdleConnections()
		resp, err := c.Get(fmt.Sprintf("https://api.example.com:%d/headers", f.httpsAP.Port()))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b), resp.TLS.PeerCertificates[0].Issuer.CommonName
	}
	if b, _ := get(); !strings.Contains(b, "Authorization: Bearer one\n") {
		t.Fatalf("first: %q", b)
	}
	if err := p.SetCredentials(s.ID, Credentials{"api.example.com": {{Name: "Authorization", Value: "Bearer two"}}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := get(); !strings.Contains(b, "Authorization: Bearer two\n") || strings.Contains(b, "one") {
		t.Fatalf("after the swap: %q", b)
	}
	// A keep-alive connection opened under a credential does not outlive
	// its change: the proxy closes it, and the client's next request
	// (on a new connection) carries the new value.
	kept := sandboxClient(f, ca, s)
	defer kept.CloseIdleConnections()
	getKept := func() string {
		resp, err := kept.Get(fmt.Sprintf("https://api.example.com:%d/headers", f.httpsAP.Port()))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if b := getKept(); !strings.Contains(b, "Authorization: Bearer two\n") {
		t.Fatalf("kept connection, first: %q", b)
	}
	if err := p.SetCredentials(s.ID, Credentials{"api.example.com": {{Name: "Authorization", Value: "Bearer three"}}}); err != nil {
		t.Fatal(err)
	}
	if b := getKept(); !strings.Contains(b, "Authorization: Bearer three\n") || strings.Contains(b, "two") {
		t.Fatalf("kept connection after a revocation: %q", b)
	}
	if err := p.SetCredentials(s.ID, nil); err != nil {
		t.Fatal(err)
	}
	if b, issuer := get(); strings.Contains(b, "Authorization") || issuer != "sandboxapi test CA" {
		t.Fatalf("without credentials: %q issuer %s", b, issuer)
	}
	if err := p.SetCredentials("nope", nil); err == nil {
		t.Fatal("unknown session accepted")
	}
}

// plainOpener "opens" a sealed value by stripping its prefix: a seam for
// tests of Sessions, which never see the server's key.
type plainOpener struct{}

func (plainOpener) Open(sealed, _ string) (string, error) {
	v, ok := strings.CutPrefix(sealed, "sealed:")
	if !ok {
		return "", errors.New("not sealed")
	}
	return v, nil
}

// TestSessionsUpdateCredentials is PATCH's path for credentials: Update
// opens the request's sealed values and the proxy adds the new ones at
// once; a value that does not open changes nothing (record or proxy).
func TestSessionsUpdateCredentials(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p, ca, logs := credProxy(t, f, true)
	s := credSession(t, p, nil, "*.example.com")
	ss := &Sessions{proxy: p, dir: t.TempDir(), log: discardLogger(), open: plainOpener{}}
	first := sandbox.NetworkRequest{Enabled: true, AllowedDomains: []string{"*.example.com"}}
	if err := os.WriteFile(ss.stateFile(s.ID), first.JSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	get := func() string {
		c := sandboxClient(f, ca, s)
		defer c.CloseIdleConnections()
		resp, err := c.Get(fmt.Sprintf("https://api.example.com:%d/headers", f.httpsAP.Port()))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	if b := get(); strings.Contains(b, "Authorization") {
		t.Fatalf("before the update: %q", b)
	}
	next := first
	next.Credentials = []sandbox.Credential{{Host: "api.example.com", Header: "Authorization", Sealed: "sealed:Bearer patched"}}
	if err := ss.Update(context.Background(), s.ID, next); err != nil {
		t.Fatal(err)
	}
	if b := get(); !strings.Contains(b, "Authorization: Bearer patched\n") {
		t.Fatalf("after the update: %q", b)
	}
	rec, _ := os.ReadFile(ss.stateFile(s.ID))
	if strings.Contains(string(rec), "Bearer patched") && !strings.Contains(string(rec), "sealed:") {
		t.Fatalf("record holds the clear value: %s", rec)
	}
	bad := first
	bad.Credentials = []sandbox.Credential{{Host: "api.example.com", Header: "Authorization", Sealed: "garbage"}}
	if err := ss.Update(context.Background(), s.ID, bad); !errors.Is(err, ErrCredentials) {
		t.Fatalf("Update with a value that does not open = %v", err)
	}
	if b := get(); !strings.Contains(b, "Authorization: Bearer patched\n") {
		t.Fatalf("a failed update changed the credentials: %q", b)
	}
	if rec2, _ := os.ReadFile(ss.stateFile(s.ID)); string(rec2) != string(rec) {
		t.Fatalf("a failed update changed the record: %s", rec2)
	}
	if strings.Contains(logs.String(), "Bearer patched") {
		t.Fatal("the value reached the proxy's log")
	}
}
