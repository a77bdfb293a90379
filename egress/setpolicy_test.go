package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// openTLS opens a CONNECT tunnel to host through s and finishes the TLS
// handshake, or returns the CONNECT status it got instead.
func openTLS(t *testing.T, f *fakeNet, s testSession, host string) (*tls.Conn, int) {
	t.Helper()
	code, c := rawConnect(t, s, s.SandboxAddr, fmt.Sprintf("%s:%d", host, f.httpsAP.Port()))
	if code != 200 {
		return nil, code
	}
	tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: f.roots})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake with %s: %v", host, err)
	}
	tc.SetDeadline(time.Time{})
	return tc, code
}

// openTransparent opens a transparent (SNI) tunnel to host and finishes
// the TLS handshake.
func openTransparent(t *testing.T, f *fakeNet, s testSession, host string) *tls.Conn {
	t.Helper()
	c := dialFrom(t, s.SandboxAddr, s.ep.Transparent)
	tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: f.roots})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("transparent handshake with %s: %v", host, err)
	}
	tc.SetDeadline(time.Time{})
	return tc
}

// get sends one request on an open tunnel and returns the body.
func get(tc *tls.Conn, host string) (string, error) {
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host); err != nil {
		return "", err
	}
	b, err := io.ReadAll(tc)
	return string(b), err
}

// closedNow reports whether the tunnel's far end has closed it: a read
// ends with an error that is not the deadline.
func closedNow(tc *tls.Conn) bool {
	tc.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := tc.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// waitDecision waits briefly for a decision of the session that match
// accepts (records of allowed tunnels arrive when they end, in any order).
func waitDecision(t *testing.T, p *Proxy, id, what string, match func(Decision) bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, d := range p.Decisions(id) {
			if match(d) {
				return
			}
		}
	}
	t.Fatalf("no decision of %s: %+v", what, p.Decisions(id))
}

func mustPolicy(t *testing.T, enabled bool, domains ...string) policy.Policy {
	t.Helper()
	pol, err := policy.New(policy.Rules{Enabled: enabled, Allowed: domains})
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// TestSetPolicy changes a live session's policy: open tunnels (CONNECT and
// transparent) to hosts no longer allowed are closed and say why in the
// audit, the others go on, new connections and DNS answers follow the new
// policy, and disabling closes everything.
func TestSetPolicy(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p, "a.allowed.test", "b.allowed.test")

	tunA, _ := openTLS(t, f, s, "a.allowed.test")
	transA := openTransparent(t, f, s, "a.allowed.test")
	tunB, _ := openTLS(t, f, s, "b.allowed.test")
	if tunA == nil || tunB == nil {
		t.Fatal("tunnels under the first policy refused")
	}
	if _, code := openTLS(t, f, s, "c.allowed.test"); code != 403 {
		t.Fatalf("c.allowed.test before the change: %d, want 403", code)
	}

	closed, err := p.SetPolicy(s.ID, mustPolicy(t, true, "b.allowed.test", "c.allowed.test"))
	if err != nil || closed != 2 {
		t.Fatalf("SetPolicy = %d, %v; want the 2 tunnels to a.allowed.test closed", closed, err)
	}
	if !closedNow(tunA) || !closedNow(transA) {
		t.Fatal("a tunnel to a host no longer allowed is still open")
	}
	if body, err := get(tunB, "b.allowed.test"); err != nil || !strings.HasSuffix(body, "hello b.allowed.test") {
		t.Fatalf("tunnel to a host still allowed: %q %v", body, err)
	}
	tunB.Close()
	// The records of allowed tunnels are written when they end.
	var revoked, kept int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		revoked, kept = 0, 0
		for _, d := range p.Decisions(s.ID) {
			switch {
			case d.Outcome != OutcomeAllow:
			case d.Host == "a.allowed.test" && strings.HasSuffix(d.Reason, ReasonPolicyChanged):
				revoked++
			case d.Host == "b.allowed.test" && !strings.Contains(d.Reason, ReasonPolicyChanged):
				kept++
			}
		}
		if revoked == 2 && kept == 1 {
			break
		}
	}
	if revoked != 2 || kept != 1 {
		t.Errorf("%d records of closed tunnels saying why (want 2), %d of the kept one (want 1): %+v", revoked, kept, p.Decisions(s.ID))
	}

	// New connections follow the new policy, DNS too.
	if tc, code := openTLS(t, f, s, "c.allowed.test"); code != 200 {
		t.Fatalf("c.allowed.test after the change: %d", code)
	} else {
		body, err := get(tc, "c.allowed.test")
		tc.Close()
		if err != nil || !strings.HasSuffix(body, "hello c.allowed.test") {
			t.Fatalf("c.allowed.test: %q %v", body, err)
		}
	}
	if _, code := openTLS(t, f, s, "a.allowed.test"); code != 403 {
		t.Fatalf("a.allowed.test after the change: %d, want 403", code)
	}
	waitDecision(t, p, s.ID, "a refusal of a.allowed.test as not allowed", func(d Decision) bool {
		return d.Host == "a.allowed.test" && d.Outcome == OutcomeDeny && d.Class == ClassNotAllowed
	})
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
	if ask("a.allowed.test.") != dns.RcodeNameError || ask("c.allowed.test.") != dns.RcodeSuccess {
		t.Fatal("the in-sandbox DNS does not follow the new policy")
	}

	// Disabled: every tunnel closes, every new connection is refused.
	tunC, _ := openTLS(t, f, s, "c.allowed.test")
	transB := openTransparent(t, f, s, "b.allowed.test")
	// (Tunnels the test closed may not be untracked yet: at least 2.)
	if closed, err := p.SetPolicy(s.ID, mustPolicy(t, false)); err != nil || closed < 2 {
		t.Fatalf("disabling = %d, %v; want the 2 open tunnels closed", closed, err)
	}
	if !closedNow(tunC) || !closedNow(transB) {
		t.Fatal("a tunnel is open after network was disabled")
	}
	if _, code := openTLS(t, f, s, "b.allowed.test"); code != 403 {
		t.Fatalf("connection with network disabled: %d", code)
	}
	waitDecision(t, p, s.ID, "a refusal as network disabled", func(d Decision) bool {
		return d.Host == "b.allowed.test" && d.Outcome == OutcomeDeny && d.Class == ClassNetworkDisabled
	})
	// And enabled again on the same listeners.
	if _, err := p.SetPolicy(s.ID, mustPolicy(t, true, "b.allowed.test")); err != nil {
		t.Fatal(err)
	}
	if tc, code := openTLS(t, f, s, "b.allowed.test"); code != 200 {
		t.Fatalf("re-enabled: %d", code)
	} else {
		tc.Close()
	}

	if _, err := p.SetPolicy("no-such-session", policy.Policy{}); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("SetPolicy of an unknown session = %v", err)
	}
}

// TestSetPolicyRacesNewTunnels removes a host while connections to it are
// being decided, dialled and set up: none of them stays open once both
// are done (track checks a tunnel against the policy in force).
func TestSetPolicyRacesNewTunnels(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	cfg := testConfig(f)
	cfg.MaxTunnelsPerSession, cfg.MaxPendingPerSession = 64, 64
	p := newTestProxy(t, cfg)
	s := addSession(t, p, "a.allowed.test", "b.allowed.test")
	const n = 24
	var wg sync.WaitGroup
	conns := make(chan net.Conn, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			time.Sleep(time.Duration(i) * 200 * time.Microsecond)
			d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(s.SandboxAddr, 0)), Timeout: 2 * time.Second}
			c, err := d.Dial("tcp", s.ep.Connect.String())
			if err != nil {
				t.Errorf("dialling the proxy: %v", err)
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "CONNECT a.allowed.test:%d HTTP/1.1\r\nHost: a.allowed.test\r\n\r\n", f.httpsAP.Port())
			line, _ := bufioReader(c).ReadString('\n')
			if strings.HasPrefix(line, "HTTP/1.1 200") {
				conns <- c
				return
			}
			c.Close()
		}()
	}
	close(start)
	// The change comes once the first tunnel is up, while the others are
	// being decided, dialled and answered.
	first := <-conns
	if _, err := p.SetPolicy(s.ID, mustPolicy(t, true, "b.allowed.test")); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(conns)
	all := append([]net.Conn{first}, drain(conns)...)
	for _, c := range all {
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a tunnel to a removed host is open after the change: %v", err)
		}
	}
	t.Logf("%d of %d CONNECTs answered 200 around the change", len(all), n)
	p.mu.Lock()
	defer p.mu.Unlock()
	for tun := range p.sessions[s.ID].tunnels {
		if tun.target.Host == "a.allowed.test" && !tun.revoked.Load() {
			t.Fatalf("tracked tunnel to a removed host: %+v", tun.target)
		}
	}
}

func drain(ch chan net.Conn) []net.Conn {
	var out []net.Conn
	for c := range ch {
		out = append(out, c)
	}
	return out
}

// TestSessionsUpdate checks the state file and the proxy change together:
// the file holds the new request, and a refused update changes neither.
func TestSessionsUpdate(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p, "a.allowed.test")
	ss := &Sessions{proxy: p, dir: t.TempDir(), log: discardLogger()}
	old := sandbox.NetworkRequest{Enabled: true, AllowedDomains: []string{"a.allowed.test"}}
	if err := os.WriteFile(ss.stateFile(s.ID), old.JSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stored := func(id string) string {
		b, _ := os.ReadFile(ss.stateFile(id))
		return string(b)
	}

	next := sandbox.NetworkRequest{Enabled: true, AllowedDomains: []string{"b.allowed.test"}}
	if err := ss.Update(ctx, s.ID, next); err != nil {
		t.Fatal(err)
	}
	if got := stored(s.ID); got != string(next.JSON()) {
		t.Fatalf("state file %s, want %s", got, next.JSON())
	}
	if _, code := openTLS(t, f, s, "a.allowed.test"); code != 403 {
		t.Fatalf("old host after Update: %d", code)
	}

	tests := []struct {
		name, id string
		req      sandbox.NetworkRequest
		want     error
	}{
		{name: "bad pattern", id: s.ID, req: sandbox.NetworkRequest{Enabled: true, AllowedDomains: []string{"*"}}, want: policy.ErrInvalidPattern},
		{name: "path in id", id: "../" + s.ID, req: next, want: ErrBadSessionID},
		{name: "dot id", id: ".x", req: next, want: ErrBadSessionID},
		{name: "not served here", id: "sess-none", req: next, want: ErrUnknownSession},
	}
	for _, tt := range tests {
		if err := ss.Update(ctx, tt.id, tt.req); !errors.Is(err, tt.want) {
			t.Errorf("%s: Update = %v, want %v", tt.name, err, tt.want)
		}
		if got := stored(s.ID); got != string(next.JSON()) {
			t.Fatalf("%s: state file changed to %s", tt.name, got)
		}
	}
	if _, err := os.Stat(ss.stateFile("sess-none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a state file was made for a session not served: %v", err)
	}
	// A record without a proxy session (the proxy lost it): the record is
	// put back as it was.
	orphan := "sess-orphan"
	if err := os.WriteFile(ss.stateFile(orphan), old.JSON(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ss.Update(ctx, orphan, next); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("Update without a proxy session = %v", err)
	}
	if got := stored(orphan); got != string(old.JSON()) {
		t.Fatalf("record of a failed update = %s, want the old %s", got, old.JSON())
	}
}
