package egress

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxapi/sandboxapi/egress/policy"
)

// addRuleSession adds a session with allow and deny entries.
func addRuleSession(t *testing.T, p *Proxy, allow, deny []string) testSession {
	t.Helper()
	pol, err := policy.New(policy.Rules{Enabled: true, Allowed: allow, Denied: deny})
	if err != nil {
		t.Fatal(err)
	}
	host, sbx := testAddrs()
	s := Session{ID: fmt.Sprintf("rules-%s", host), HostAddr: host, SandboxAddr: sbx, Policy: pol}
	ep, err := p.AddSession(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return testSession{Session: s, ep: ep}
}

// TestConnectAddressRules drives CONNECTs to addresses and names through
// a real proxy on loopback against the fake internet (publicIP, opened by
// extra_allowed_cidrs; the rest of loopback is forbidden) and checks the
// status, the TLS result and the audit's rule and address class.
func TestConnectAddressRules(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	port := f.httpsAP.Port()
	at := func(a string) string { return netip.AddrPortFrom(netip.MustParseAddr(a), port).String() }
	tests := []struct {
		name      string
		allow     []string
		deny      []string
		target    string
		sni       string // "": no SNI (verification skipped: the test checks routing)
		code      int    // of the CONNECT
		served    bool   // the tunnel reaches the server
		outcome   Outcome
		class     Class
		rule      string
		addrClass policy.AddrClass
	}{
		{name: "ip rule, any sni", allow: []string{publicIP.String()}, target: at("127.0.0.2"), sni: "ok.example.com", code: 200, served: true,
			outcome: OutcomeAllow, class: ClassAllowed, rule: `allowed_domains "127.0.0.2"`, addrClass: policy.ClassExtraAllowed},
		{name: "ip rule, no sni", allow: []string{"127.0.0.2/32"}, target: at("127.0.0.2"), code: 200, served: true,
			outcome: OutcomeAllow, class: ClassAllowed, rule: `allowed_domains "127.0.0.2"`, addrClass: policy.ClassExtraAllowed},
		{name: "mapped v6 target is the v4 address", allow: []string{"127.0.0.2"}, target: "[::ffff:127.0.0.2]:" + fmt.Sprint(port), sni: "ok.example.com", code: 200, served: true,
			outcome: OutcomeAllow, class: ClassAllowed, rule: `allowed_domains "127.0.0.2"`, addrClass: policy.ClassExtraAllowed},
		{name: "cidr rule allows inside", allow: []string{"127.0.0.0/30"}, target: at("127.0.0.2"), sni: "ok.example.com", code: 200, served: true,
			outcome: OutcomeAllow, class: ClassAllowed, rule: `allowed_domains "127.0.0.0/30"`, addrClass: policy.ClassExtraAllowed},
		{name: "cidr rule does not open loopback", allow: []string{"127.0.0.0/30"}, target: at("127.0.0.1"), code: 403,
			outcome: OutcomeDeny, class: ClassForbiddenAddr, rule: `allowed_domains "127.0.0.0/30"`, addrClass: policy.ClassLoopback},
		{name: "/0 does not open loopback", allow: []string{"0.0.0.0/0"}, target: at("127.0.0.3"), code: 403,
			outcome: OutcomeDeny, class: ClassForbiddenAddr, rule: `allowed_domains "0.0.0.0/0"`, addrClass: policy.ClassLoopback},
		{name: "v6 loopback rule refused", allow: []string{"::1"}, target: "[::1]:" + fmt.Sprint(port), code: 403,
			outcome: OutcomeDeny, class: ClassForbiddenAddr, rule: `allowed_domains "::1"`, addrClass: policy.ClassLoopback},
		{name: "other address not allowed", allow: []string{"127.0.0.2"}, target: at("127.0.0.4"), code: 403,
			outcome: OutcomeDeny, class: ClassNotAllowed, addrClass: policy.ClassLoopback},
		{name: "domain rule does not allow an address", allow: []string{"*.example.com"}, target: at("127.0.0.2"), code: 403,
			outcome: OutcomeDeny, class: ClassNotAllowed, addrClass: policy.ClassExtraAllowed},
		{name: "deny ip beats allow cidr", allow: []string{"127.0.0.0/30"}, deny: []string{"127.0.0.2"}, target: at("127.0.0.2"), code: 403,
			outcome: OutcomeDeny, class: ClassDenied, rule: `denied "127.0.0.2"`, addrClass: policy.ClassExtraAllowed},
		{name: "denied sni on an allowed address", allow: []string{"127.0.0.2"}, deny: []string{"*.evil.test"}, target: at("127.0.0.2"), sni: "x.evil.test", code: 200,
			outcome: OutcomeDeny, class: ClassDenied, rule: `denied "*.evil.test"`, addrClass: policy.ClassExtraAllowed},
		{name: "deny name beats wildcard allow", allow: []string{"*.example.com"}, deny: []string{"ok.example.com"}, target: "ok.example.com:" + fmt.Sprint(port), code: 403,
			outcome: OutcomeDeny, class: ClassDenied, rule: `denied "ok.example.com"`},
		{name: "deny name leaves siblings", allow: []string{"*.example.com"}, deny: []string{"bad.example.com"}, target: "ok.example.com:" + fmt.Sprint(port), sni: "ok.example.com", code: 200, served: true,
			outcome: OutcomeAllow, class: ClassAllowed, rule: `allowed_domains "*.example.com"`, addrClass: policy.ClassExtraAllowed},
		{name: "allowed name resolving into a denied cidr", allow: []string{"*.example.com"}, deny: []string{"127.0.0.0/30"}, target: "ok.example.com:" + fmt.Sprint(port), code: 403,
			outcome: OutcomeDeny, class: ClassDenied, rule: `denied "127.0.0.0/30"`, addrClass: policy.ClassExtraAllowed},
		{name: "name not allowed by its address", allow: []string{"127.0.0.2"}, target: "ok.example.com:" + fmt.Sprint(port), code: 403,
			outcome: OutcomeDeny, class: ClassNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := addRuleSession(t, p, tt.allow, tt.deny)
			code, c := rawConnect(t, s, s.SandboxAddr, tt.target)
			if code != tt.code {
				t.Fatalf("CONNECT %s: status %d, want %d", tt.target, code, tt.code)
			}
			if code == 200 {
				cfg := &tls.Config{ServerName: tt.sni, RootCAs: f.roots}
				if tt.sni == "" {
					cfg.InsecureSkipVerify = true //nolint:gosec // no name to verify: the case checks where the tunnel goes
				}
				tc := tls.Client(c, cfg)
				tc.SetDeadline(time.Now().Add(5 * time.Second))
				err := tc.Handshake()
				body := ""
				if err == nil {
					fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
					b, _ := io.ReadAll(tc)
					body = string(b)
				}
				tc.Close()
				if served := err == nil && strings.Contains(body, "hello "+tt.sni); served != tt.served {
					t.Fatalf("served = %v (%v, %q), want %v", served, err, body, tt.served)
				}
			}
			d := lastDecision(t, p, s.ID)
			if d.Outcome != tt.outcome || d.Class != tt.class || d.Rule != tt.rule || d.AddrClass != tt.addrClass {
				t.Fatalf("decision = %+v; want %s %s rule %q address class %q", d, tt.outcome, tt.class, tt.rule, tt.addrClass)
			}
		})
	}
}

// TestDeniedNamesInDNSAndTransparent checks that a denied name gets no
// answer from the in-sandbox DNS and is refused on the transparent path,
// while its allowed siblings work.
func TestDeniedNamesInDNSAndTransparent(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addRuleSession(t, p, []string{"*.allowed.test"}, []string{"evil.allowed.test"})
	ask := func(name string) int {
		m := new(dns.Msg)
		m.SetQuestion(name, dns.TypeA)
		cl := &dns.Client{Net: "udp", Dialer: &net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.AddrPortFrom(s.SandboxAddr, 0))}}
		r, _, err := cl.Exchange(m, s.ep.DNS.String())
		if err != nil {
			t.Fatal(err)
		}
		return r.Rcode
	}
	if rc := ask("www.allowed.test."); rc != dns.RcodeSuccess {
		t.Fatalf("allowed name: rcode %s", dns.RcodeToString[rc])
	}
	if rc := ask("Evil.Allowed.test."); rc != dns.RcodeNameError {
		t.Fatalf("denied name: rcode %s, want NXDOMAIN", dns.RcodeToString[rc])
	}
	get := func(sni string) error {
		c := dialFrom(t, s.SandboxAddr, s.ep.Transparent)
		tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: f.roots})
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		return tc.Handshake()
	}
	if err := get("www.allowed.test"); err != nil {
		t.Fatalf("transparent to an allowed name: %v", err)
	}
	if d := lastDecision(t, p, s.ID); d.Outcome != OutcomeAllow || d.Rule != `allowed_domains "*.allowed.test"` || d.AddrClass != policy.ClassExtraAllowed {
		t.Fatalf("decision %+v", d)
	}
	if err := get("evil.allowed.test"); err == nil {
		t.Fatal("transparent to a denied name completed a handshake")
	}
	if d := lastDecision(t, p, s.ID); d.Mode != ModeTransparent || d.Outcome != OutcomeDeny || d.Class != ClassDenied || d.Rule != `denied "evil.allowed.test"` {
		t.Fatalf("decision %+v", d)
	}
}
