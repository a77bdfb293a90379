package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

func TestConnectAllowed(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p, "*.example.com")
	resp, err := f.httpClient(s).Get(fmt.Sprintf("https://ok.example.com:%d/", f.httpsAP.Port()))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello ok.example.com" {
		t.Fatalf("body = %q", body)
	}
	d := lastDecision(t, p, s.ID)
	if d.Outcome != OutcomeAllow || d.Host != "ok.example.com" || d.Addr != publicIP || d.BytesUp == 0 || d.BytesDown == 0 || d.Mode != ModeConnect {
		t.Fatalf("decision = %+v", d)
	}
}

func TestConnectHostile(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	cfg := testConfig(f)
	p := newTestProxy(t, cfg)
	port := f.httpsAP.Port()
	hp := func(h string) string { return fmt.Sprintf("%s:%d", h, port) }
	tests := []struct {
		name     string
		patterns []string // nil: any public host
		target   string
		code     int
		outcome  Outcome
		reason   string
		class    string // Class of the decision; derived from reason when empty
	}{
		{name: "loopback", target: hp("loopback.evil.test"), code: 403, outcome: OutcomeDeny, reason: "loopback"},
		{name: "rest of loopback", target: hp("loopback2.evil.test"), code: 403, outcome: OutcomeDeny, reason: "loopback"},
		{name: "private 10", target: hp("private.evil.test"), code: 403, outcome: OutcomeDeny, reason: "private"},
		{name: "private 172", target: hp("private172.evil.test"), code: 403, outcome: OutcomeDeny, reason: "private"},
		{name: "private 192", target: hp("private192.evil.test"), code: 403, outcome: OutcomeDeny, reason: "private"},
		{name: "metadata", target: hp("metadata.evil.test"), code: 403, outcome: OutcomeDeny, reason: "cloud metadata"},
		{name: "link-local", target: hp("linklocal.evil.test"), code: 403, outcome: OutcomeDeny, reason: "link-local"},
		{name: "cgnat", target: hp("cgnat.evil.test"), code: 403, outcome: OutcomeDeny, reason: "carrier-grade NAT"},
		{name: "multicast", target: hp("multicast.evil.test"), code: 403, outcome: OutcomeDeny, reason: "multicast"},
		{name: "unspecified", target: hp("unspecified.evil.test"), code: 403, outcome: OutcomeDeny, reason: "unspecified"},
		{name: "zero net", target: hp("zeronet.evil.test"), code: 403, outcome: OutcomeDeny, reason: "this network"},
		{name: "broadcast", target: hp("broadcast.evil.test"), code: 403, outcome: OutcomeDeny, reason: "broadcast"},
		{name: "benchmarking", target: hp("benchmark.evil.test"), code: 403, outcome: OutcomeDeny, reason: "benchmarking"},
		{name: "documentation", target: hp("doc.evil.test"), code: 403, outcome: OutcomeDeny, reason: "documentation"},
		{name: "reserved", target: hp("reserved.evil.test"), code: 403, outcome: OutcomeDeny, reason: "reserved"},
		{name: "ula", target: hp("ula.evil.test"), code: 403, outcome: OutcomeDeny, reason: "unique local"},
		{name: "v6 link-local", target: hp("ll6.evil.test"), code: 403, outcome: OutcomeDeny, reason: "link-local"},
		{name: "v6 loopback", target: hp("loop6.evil.test"), code: 403, outcome: OutcomeDeny, reason: "loopback"},
		{name: "AAAA mapped loopback", target: hp("mapped.evil.test"), code: 403, outcome: OutcomeDeny, reason: "(loopback)"},
		{name: "AAAA mapped metadata", target: hp("mappedmeta.evil.test"), code: 403, outcome: OutcomeDeny, reason: "(cloud metadata)"},
		{name: "IPv4-compatible", target: hp("compat.evil.test"), code: 403, outcome: OutcomeDeny, reason: "IPv4-compatible"},
		{name: "NAT64", target: hp("nat64.evil.test"), code: 403, outcome: OutcomeDeny, reason: "NAT64"},
		{name: "6to4", target: hp("sixtofour.evil.test"), code: 403, outcome: OutcomeDeny, reason: "(6to4)"},
		{name: "Teredo", target: hp("teredo.evil.test"), code: 403, outcome: OutcomeDeny, reason: "Teredo"},
		{name: "mixed public and metadata", target: hp("mixed.evil.test"), code: 403, outcome: OutcomeDeny, reason: "cloud metadata"},
		{name: "public A with mapped AAAA", target: hp("mixed6.evil.test"), code: 403, outcome: OutcomeDeny, reason: "(loopback)"},
		{name: "CNAME to private name", target: hp("cname.evil.test"), code: 403, outcome: OutcomeDeny, reason: "loopback"},
		{name: "CNAME needing a second query", target: hp("cnameext.evil.test"), code: 403, outcome: OutcomeDeny, reason: "cloud metadata"},
		{name: "CNAME loop", target: hp("cnameloop.evil.test"), code: 502, outcome: OutcomeError, reason: "CNAME chain too long"},
		{name: "out-of-bailiwick answer ignored", target: hp("inject.evil.test"), code: 403, outcome: OutcomeDeny, reason: "no addresses"},
		{name: "resolver failure", target: hp("servfail.evil.test"), code: 502, outcome: OutcomeError, reason: "resolver failure"},
		{name: "nxdomain", target: hp("nope.evil.test"), code: 403, outcome: OutcomeDeny, reason: "does not exist"},
		{name: "decimal host", target: "2130706433:443", code: 403, outcome: OutcomeDeny, reason: "single-label"},
		{name: "hex host", target: "0x7f000001:443", code: 403, outcome: OutcomeDeny, reason: "single-label"},
		{name: "octal host", target: "0177.0.0.1:443", code: 403, outcome: OutcomeDeny, reason: "numeric host"},
		{name: "short host", target: "127.1:443", code: 403, outcome: OutcomeDeny, reason: "numeric host"},
		{name: "ip literal needs an address rule", target: "127.0.0.2:443", code: 403, outcome: OutcomeDeny, reason: "address not in allowed_domains", class: "not_allowed"},
		{name: "bracketed v6 needs an address rule", target: "[::1]:443", code: 403, outcome: OutcomeDeny, reason: "address not in allowed_domains", class: "not_allowed"},
		{name: "bracketed v4", target: "[127.0.0.2]:443", code: 400, outcome: OutcomeDeny, reason: "malformed", class: "bad_target"},        // refused by net/http itself
		{name: "bracketed name", target: "[ok.example.com]:443", code: 400, outcome: OutcomeDeny, reason: "malformed", class: "bad_target"}, // refused by net/http itself, audited on close
		{name: "percent encoded", target: "ok.ex%61mple.com:443", code: 400, outcome: OutcomeDeny, reason: "malformed", class: "bad_target"},
		{name: "NUL byte", target: "ok.example.com\x00.evil.test:443", code: 400, outcome: OutcomeDeny, reason: "malformed", class: "bad_target"},
		{name: "space", target: "ok.example.com .evil.test:443", code: 400, outcome: OutcomeDeny, reason: "malformed", class: "bad_target"},
		{name: "port 80", target: "ok.example.com:80", code: 403, outcome: OutcomeDeny, reason: "port 80 not allowed"},
		{name: "port 8443", target: "ok.example.com:8443", code: 403, outcome: OutcomeDeny, reason: "port 8443 not allowed"},
		{name: "no port", target: "ok.example.com", code: 403, outcome: OutcomeDeny, reason: "missing port"},
		{name: "double trailing dot", patterns: []string{"*.example.com"}, target: hp("ok.example.com.."), code: 403, outcome: OutcomeDeny, reason: "empty label"},
		{name: "suffix lookalike", patterns: []string{"*.example.com"}, target: hp("evilexample.com"), code: 403, outcome: OutcomeDeny, reason: "not in allowed_domains"},
		{name: "suffix inside name", patterns: []string{"*.example.com"}, target: hp("example.com.evil.test"), code: 403, outcome: OutcomeDeny, reason: "not in allowed_domains"},
		{name: "apex against wildcard", patterns: []string{"*.example.com"}, target: hp("example.com"), code: 403, outcome: OutcomeDeny, reason: "not in allowed_domains"},
		{name: "apex trailing dot against wildcard", patterns: []string{"*.example.com"}, target: hp("EXAMPLE.com."), code: 403, outcome: OutcomeDeny, reason: "not in allowed_domains"},
		{name: "exact does not cover sub", patterns: []string{"example.com"}, target: hp("ok.example.com"), code: 403, outcome: OutcomeDeny, reason: "not in allowed_domains"},
		{name: "case and trailing dot allowed", patterns: []string{"ok.example.com"}, target: hp("OK.Example.COM."), code: 200, outcome: OutcomeAllow},
		{name: "truncated UDP retried over TCP", patterns: []string{"*.example.com"}, target: hp("trunc.example.com"), code: 200, outcome: OutcomeAllow},
		{name: "CNAME to public", patterns: []string{"cnameok.example.com"}, target: hp("cnameok.example.com"), code: 200, outcome: OutcomeAllow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := addSession(t, p, tt.patterns...)
			code, c := rawConnect(t, s, s.SandboxAddr, tt.target)
			if code != tt.code {
				t.Fatalf("CONNECT %s: status %d, want %d", tt.target, code, tt.code)
			}
			if code == 200 {
				host, _, _ := strings.Cut(tt.target, ":")
				tc := tls.Client(c, &tls.Config{ServerName: strings.TrimSuffix(host, "."), RootCAs: f.roots})
				if err := tc.Handshake(); err != nil {
					t.Fatalf("TLS through tunnel: %v", err)
				}
				tc.Close()
			}
			if tt.outcome == "" {
				if ds := p.Decisions(s.ID); len(ds) != 0 {
					t.Fatalf("unexpected decisions %+v", ds)
				}
				return
			}
			d := lastDecision(t, p, s.ID)
			if d.Outcome != tt.outcome || !strings.Contains(d.Reason, tt.reason) {
				t.Fatalf("decision = %s %q, want %s containing %q", d.Outcome, d.Reason, tt.outcome, tt.reason)
			}
			if want := hostileClass(tt.outcome, tt.reason, tt.class); string(d.Class) != want {
				t.Fatalf("Class of %q = %s, want %s", d.Reason, string(d.Class), want)
			}
		})
	}
}

// hostileClass is the metrics class a hostile case's decision must get.
func hostileClass(o Outcome, reason, class string) string {
	switch {
	case class != "":
		return class
	case o == OutcomeAllow:
		return "allowed"
	case reason == "not in allowed_domains":
		return "not_allowed"
	case reason == "resolver failure" || reason == "CNAME chain too long":
		return "resolver_failure"
	case reason == "no addresses" || reason == "does not exist":
		return "unresolvable"
	case map[string]bool{"single-label": true, "numeric host": true, "missing port": true, "empty label": true}[reason],
		strings.HasPrefix(reason, "port "):
		return "bad_target"
	}
	return "forbidden_address"
}

func TestConnectToProxyItself(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	cfg := testConfig(f)
	// Even when the operator allows the proxy's network, its own address stays forbidden.
	cfg.ExtraAllowedCIDRs = append(cfg.ExtraAllowedCIDRs, "127.1.250.0/24")
	p := newTestProxy(t, cfg)
	sess := Session{ID: "self", HostAddr: netip.MustParseAddr("127.1.250.1"), SandboxAddr: netip.MustParseAddr("127.1.250.2")}
	sess.Policy.Enabled = true
	ep, err := p.AddSession(context.Background(), sess)
	if err != nil {
		t.Fatal(err)
	}
	s := testSession{Session: sess, ep: ep}
	code, _ := rawConnect(t, s, s.SandboxAddr, fmt.Sprintf("selfproxy.evil.test:%d", f.httpsAP.Port()))
	if d := lastDecision(t, p, s.ID); code != 403 || d.Reason != "resolved to forbidden address (proxy's own address)" {
		t.Fatalf("CONNECT to proxy itself: %d %+v", code, d)
	}
}

// The sandbox pools are never dialled: from the host namespace their
// addresses are other sessions' sandboxes, whatever extra_allowed_cidrs says.
func TestConnectToSandboxPool(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	target := fmt.Sprintf("othersandbox.evil.test:%d", f.httpsAP.Port()) // resolves to 127.1.249.2
	tests := []struct {
		name     string
		pool     string   // Config.Network.Pool
		extra    []string // added to extra_allowed_cidrs
		reserved []string // Options.Reserved
		wantErr  bool     // NewProxy refuses the config
		reason   string
	}{
		{name: "session pool, no extra", pool: "127.1.249.0/24", reason: policy.ClassSandboxNet.Describe()},
		{name: "session pool under extra", pool: "127.1.249.0/24", extra: []string{"127.1.0.0/16"}, wantErr: true},
		{name: "reserved pool under extra", extra: []string{"127.1.249.0/24"}, reserved: []string{"127.1.249.0/24"}, reason: policy.ClassSandboxNet.Describe()},
		{name: "reserved bigger than extra", extra: []string{"127.1.249.0/30"}, reserved: []string{"127.1.0.0/16"}, reason: policy.ClassSandboxNet.Describe()},
		{name: "extra without reservation reaches it", extra: []string{"127.1.249.0/24"}, reason: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(f)
			if tt.pool != "" {
				cfg.Network.Pool = tt.pool
			}
			cfg.ExtraAllowedCIDRs = append(cfg.ExtraAllowedCIDRs, tt.extra...)
			var opts Options
			for _, r := range tt.reserved {
				opts.Reserved = append(opts.Reserved, netip.MustParsePrefix(r))
			}
			p, err := NewProxy(cfg, opts)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "overlaps network.pool") {
					t.Fatalf("NewProxy = %v, want the overlap refused", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Stop(context.Background()) })
			s := addSession(t, p)
			code, _ := rawConnect(t, s, s.SandboxAddr, target)
			d := lastDecision(t, p, s.ID)
			if tt.reason == "" {
				// Nothing listens there: the dial fails, but it was attempted.
				if d.Outcome == OutcomeDeny || !strings.HasPrefix(d.Reason, reasonDialing) {
					t.Fatalf("CONNECT: %d %+v, want a dial attempt", code, d)
				}
				return
			}
			if code != 403 || d.Reason != reasonForbiddenAddr+" ("+tt.reason+")" || string(d.Class) != "forbidden_address" {
				t.Fatalf("CONNECT: %d %+v", code, d)
			}
		})
	}
}

func TestRebindingNoSecondLookup(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p)
	name := fmt.Sprintf("rebind%d.evil.test", sessionSeq.Add(1)) // fresh name per run
	code, c := rawConnect(t, s, s.SandboxAddr, fmt.Sprintf("%s:%d", name, f.httpsAP.Port()))
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	tc := tls.Client(c, &tls.Config{ServerName: name, RootCAs: f.roots})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	tc.Close()
	d := lastDecision(t, p, s.ID)
	if d.Addr != publicIP || d.Outcome != OutcomeAllow {
		t.Fatalf("decision = %+v", d)
	}
	if n := f.count(name+".", dns.TypeA); n != 1 {
		t.Fatalf("A queries for rebind name = %d, want exactly 1 (no second lookup)", n)
	}
	// A second CONNECT resolves afresh and now gets the private answer.
	code, _ = rawConnect(t, s, s.SandboxAddr, fmt.Sprintf("%s:%d", name, f.httpsAP.Port()))
	if d := lastDecision(t, p, s.ID); code != 403 || !strings.Contains(d.Reason, "loopback") {
		t.Fatalf("second CONNECT: %d %+v", code, d)
	}
}

func TestPlainHTTPDenied(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p)
	resp, err := f.httpClient(s).Get(fmt.Sprintf("http://ok.example.com:%d/", f.httpsAP.Port()))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if d := lastDecision(t, p, s.ID); d.Mode != ModePlainHTTP || d.Outcome != OutcomeDeny || string(d.Class) != "plain_http" {
		t.Fatalf("decision %+v", d)
	}
	// A non-proxy request (relative path) is refused too.
	c := dialFrom(t, s.SandboxAddr, s.ep.Connect)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err = http.ReadResponse(bufioReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("relative GET: %v %v", resp, err)
	}
}

func TestSNIMismatch(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p, "ok.example.com")
	code, c := rawConnect(t, s, s.SandboxAddr, fmt.Sprintf("ok.example.com:%d", f.httpsAP.Port()))
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "other.evil.test", RootCAs: f.roots})
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake with mismatched SNI succeeded")
	}
	if d := lastDecision(t, p, s.ID); d.Outcome != OutcomeDeny || !strings.Contains(d.Reason, ReasonSNIMismatch) || string(d.Class) != "sni_mismatch" {
		t.Fatalf("decision %+v (class %s)", d, string(d.Class))
	}
	// Not TLS at all.
	code, c = rawConnect(t, s, s.SandboxAddr, fmt.Sprintf("ok.example.com:%d", f.httpsAP.Port()))
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: ok.example.com\r\n\r\n")
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("plain bytes in tunnel got an answer")
	}
	if d := lastDecision(t, p, s.ID); d.Outcome != OutcomeDeny || !strings.Contains(d.Reason, ReasonNotTLS) || string(d.Class) != "not_tls" {
		t.Fatalf("decision %+v (class %s)", d, string(d.Class))
	}
}

func TestAnotherSessionsTraffic(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	a := addSession(t, p) // any host
	b := addSession(t, p, "nothing.example.com")
	// a's sandbox connects to b's listener: refused, never judged by a's policy.
	code, _ := rawConnect(t, b, a.SandboxAddr, fmt.Sprintf("ok.example.com:%d", f.httpsAP.Port()))
	if code != 403 {
		t.Fatalf("status %d", code)
	}
	if d := lastDecision(t, p, b.ID); d.Outcome != OutcomeDeny || !strings.Contains(d.Reason, ErrWrongSourceAddr.Error()) || string(d.Class) != "unknown_session" {
		t.Fatalf("decision %+v (class %s)", d, string(d.Class))
	}
	if ds := p.Decisions(a.ID); len(ds) != 0 {
		t.Fatalf("session a has decisions %+v", ds)
	}
	// Same for the in-sandbox DNS: refused.
	m := new(dns.Msg)
	m.SetQuestion("ok.example.com.", dns.TypeA)
	cl := &dns.Client{Net: "udp", Dialer: &net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(a.SandboxAddr, 0))}}
	r, _, err := cl.Exchange(m, b.ep.DNS.String())
	if err != nil || r.Rcode != dns.RcodeRefused {
		t.Fatalf("cross-session DNS: %v %v", r, err)
	}
}

func TestIdleTunnelClosed(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	cfg := testConfig(f)
	cfg.IdleTimeout = 300 * time.Millisecond
	p := newTestProxy(t, cfg)
	s := addSession(t, p)
	code, c := rawConnect(t, s, s.SandboxAddr, fmt.Sprintf("ok.example.com:%d", f.httpsAP.Port()))
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "ok.example.com", RootCAs: f.roots})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := tc.Read(make([]byte, 1))
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) > 3*time.Second {
		t.Fatalf("idle tunnel not closed: %v after %v", err, time.Since(start))
	}
	if d := lastDecision(t, p, s.ID); d.Outcome != OutcomeAllow || d.Duration < 300*time.Millisecond {
		t.Fatalf("decision %+v", d)
	}
}

func TestTunnelLimit(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	cfg := testConfig(f)
	cfg.MaxTunnelsPerSession = 2
	p := newTestProxy(t, cfg)
	s := addSession(t, p)
	target := fmt.Sprintf("ok.example.com:%d", f.httpsAP.Port())
	for i := range 2 {
		code, c := rawConnect(t, s, s.SandboxAddr, target)
		if code != 200 {
			t.Fatalf("tunnel %d: status %d", i, code)
		}
		tc := tls.Client(c, &tls.Config{ServerName: "ok.example.com", RootCAs: f.roots})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
	}
	code, _ := rawConnect(t, s, s.SandboxAddr, target)
	if code != http.StatusTooManyRequests {
		t.Fatalf("third tunnel: status %d", code)
	}
	if d := lastDecision(t, p, s.ID); d.Reason != ReasonTunnelLimit || string(d.Class) != "tunnel_limit" {
		t.Fatalf("decision %+v", d)
	}
}

func TestTransparentAndDNS(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p, "*.allowed.test")

	ask := func(name string, qt uint16, src netip.Addr) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, qt)
		cl := &dns.Client{Net: "udp", Dialer: &net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}}
		r, _, err := cl.Exchange(m, s.ep.DNS.String())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r := ask("www.Allowed.test.", dns.TypeA, s.SandboxAddr)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != s.HostAddr.String() {
		t.Fatalf("allowed A: %v", r)
	}
	if r := ask("www.allowed.test.", dns.TypeAAAA, s.SandboxAddr); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
		t.Fatalf("allowed AAAA: %v", r)
	}
	for _, name := range []string{"allowed.test.", "evil.test.", "www.allowed.test.evil.test.", "1.2.3.4.", "x\\000.allowed.test."} {
		if r := ask(name, dns.TypeA, s.SandboxAddr); r.Rcode != dns.RcodeNameError {
			t.Fatalf("%s: rcode %s, want NXDOMAIN", name, dns.RcodeToString[r.Rcode])
		}
	}
	// TCP works too.
	m := new(dns.Msg)
	m.SetQuestion("a.allowed.test.", dns.TypeA)
	cl := &dns.Client{Net: "tcp", Dialer: &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(s.SandboxAddr, 0))}}
	if r, _, err := cl.Exchange(m, s.ep.DNS.String()); err != nil || len(r.Answer) != 1 {
		t.Fatalf("DNS over TCP: %v %v", r, err)
	}

	get := func(sni string) (string, error) {
		c := dialFrom(t, s.SandboxAddr, s.ep.Transparent)
		tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: f.roots})
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			return "", err
		}
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", sni)
		b, err := io.ReadAll(tc)
		return string(b), err
	}
	body, err := get("www.allowed.test")
	if err != nil || !strings.HasSuffix(body, "hello www.allowed.test") {
		t.Fatalf("transparent allowed: %q %v", body, err)
	}
	if d := lastDecision(t, p, s.ID); d.Mode != ModeTransparent || d.Outcome != OutcomeAllow || d.Addr != publicIP {
		t.Fatalf("decision %+v", d)
	}
	if _, err := get("ok.example.com"); err == nil {
		t.Fatal("transparent to non-allowed name succeeded")
	}
	if d := lastDecision(t, p, s.ID); d.Outcome != OutcomeDeny || d.Reason != "host not in allowed_domains" || string(d.Class) != "not_allowed" {
		t.Fatalf("decision %+v", d)
	}
}

func TestStopClosesTunnels(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p)
	code, c := rawConnect(t, s, s.SandboxAddr, fmt.Sprintf("ok.example.com:%d", f.httpsAP.Port()))
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "ok.example.com", RootCAs: f.roots})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	tc.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("tunnel still open after Stop: %v", err)
	}
	if _, err := p.AddSession(ctx, s.Session); !errors.Is(err, ErrStopped) {
		t.Fatalf("AddSession after Stop: %v", err)
	}
}

func TestCurlThroughProxy(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("curl"); err != nil {
		testenv.Skip(t, "curl not installed (setup installs it): %v", err)
	}
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p, "*.example.com")
	curl := func(url string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "curl", "-sS", "--fail", "--noproxy", "",
			"--proxy", "http://"+s.ep.Connect.String(), "--interface", s.SandboxAddr.String(),
			"--cacert", f.caFile, url).CombinedOutput()
		return string(out), err
	}
	out, err := curl(fmt.Sprintf("https://api.example.com:%d/", f.httpsAP.Port()))
	if err != nil || out != "hello api.example.com" {
		t.Fatalf("curl allowed: %q %v", out, err)
	}
	out, err = curl(fmt.Sprintf("https://evilexample.com:%d/", f.httpsAP.Port()))
	if err == nil || !strings.Contains(out, "403") {
		t.Fatalf("curl denied: %q %v", out, err)
	}
}

func TestRemoveSession(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p)
	// A tunnel still waiting for its ClientHello is closed too.
	code, c := rawConnect(t, s, s.SandboxAddr, fmt.Sprintf("ok.example.com:%d", f.httpsAP.Port()))
	if code != 200 {
		t.Fatalf("status %d", code)
	}
	if err := p.RemoveSession(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("tunnel open after RemoveSession: %v", err)
	}
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(s.SandboxAddr, 0))}
	if c, err := d.Dial("tcp", s.ep.Connect.String()); err == nil {
		c.Close()
		t.Fatal("listener still open")
	}
	if ds := p.Decisions(s.ID); ds != nil {
		t.Fatalf("decisions kept: %v", ds)
	}
	if err := p.RemoveSession(context.Background(), s.ID); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("second remove: %v", err)
	}
	// The address can be reused by a new session.
	if _, err := p.AddSession(context.Background(), s.Session); err != nil {
		t.Fatal(err)
	}
}
