package egress

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// refusedAtOnce dials ep from src and reports whether the connection was
// closed within d without a byte: the reset may already fail the dial.
func refusedAtOnce(t *testing.T, src netip.Addr, ep netip.AddrPort, d time.Duration) (bool, error) {
	t.Helper()
	dl := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: 2 * time.Second}
	c, err := dl.Dial("tcp", ep.String())
	if err != nil {
		return errors.Is(err, syscall.ECONNRESET), err
	}
	defer c.Close()
	return closedAtOnce(c, d)
}

// closedAtOnce reports whether the peer closed c within d without sending
// anything, and how it ended.
func closedAtOnce(c net.Conn, d time.Duration) (bool, error) {
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded), err
}

func TestPendingLimit(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	cfg := testConfig(f)
	cfg.MaxPendingPerSession = 3
	cfg.MaxTunnelsPerSession = 8
	cfg.HandshakeTimeout = 20 * time.Second // idle sockets outlive the test unless refused
	p := newTestProxy(t, cfg)
	s := addSession(t, p, "*.example.com")
	target := fmt.Sprintf("ok.example.com:%d", f.httpsAP.Port())

	// Established tunnels hold tunnel slots, not pending ones.
	for i := range 3 {
		code, c := rawConnect(t, s, s.SandboxAddr, target)
		if code != 200 {
			t.Fatalf("tunnel %d: status %d", i, code)
		}
		if err := tls.Client(c, &tls.Config{ServerName: "ok.example.com", RootCAs: f.roots}).Handshake(); err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
	}

	tests := []struct {
		name string
		ep   netip.AddrPort
		mode Mode // decision recorded for a refusal; "" for DNS
	}{
		{name: "connect", ep: s.ep.Connect, mode: ModeConnect},
		{name: "dns over tcp", ep: s.ep.DNS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idle := make([]net.Conn, 3)
			for i := range idle {
				idle[i] = dialFrom(t, s.SandboxAddr, tt.ep)
			}
			start := time.Now()
			if ok, err := refusedAtOnce(t, s.SandboxAddr, tt.ep, time.Second); !ok {
				t.Fatalf("connection past the cap not closed at once: %v", err)
			}
			t.Logf("connection past the cap closed after %v", time.Since(start))
			for i, c := range idle {
				if ok, err := closedAtOnce(c, 100*time.Millisecond); ok {
					t.Fatalf("pending connection %d within the cap closed: %v", i, err)
				}
			}
			if tt.mode != "" {
				if d := lastDecision(t, p, s.ID); d.Outcome != OutcomeDeny || d.Reason != ReasonPendingLimit || d.Mode != tt.mode || string(d.Class) != "pending_limit" {
					t.Fatalf("decision %+v (class %s)", d, string(d.Class))
				}
			}
			// Once the pending ones go, new connections are served again.
			for _, c := range idle {
				c.Close()
			}
			deadline := time.Now().Add(3 * time.Second)
			for {
				if ok, _ := refusedAtOnce(t, s.SandboxAddr, tt.ep, 200*time.Millisecond); !ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("still refused after the pending connections closed")
				}
			}
		})
	}

	// A full CONNECT works again, and the pending count went back to zero.
	code, c := rawConnect(t, s, s.SandboxAddr, target)
	if code != 200 {
		t.Fatalf("CONNECT after the pending ones closed: status %d", code)
	}
	if err := tls.Client(c, &tls.Config{ServerName: "ok.example.com", RootCAs: f.roots}).Handshake(); err != nil {
		t.Fatal(err)
	}
}

// The transparent port takes a tunnel slot on accept, before waiting for
// the ClientHello, so idle sockets there are bounded by the tunnel limit.
func TestTransparentIdleSocketsBounded(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	cfg := testConfig(f)
	cfg.MaxTunnelsPerSession = 2
	cfg.MaxPendingPerSession = 1 // settled at once: does not bite
	cfg.HandshakeTimeout = 20 * time.Second
	p := newTestProxy(t, cfg)
	s := addSession(t, p)
	// One at a time: the pending limit (1) lets a connection in once the
	// one before it has settled into its tunnel slot.
	a := dialFrom(t, s.SandboxAddr, s.ep.Transparent)
	waitActive(t, p, s.ID, 1)
	b := dialFrom(t, s.SandboxAddr, s.ep.Transparent)
	waitActive(t, p, s.ID, 2)
	if ok, err := refusedAtOnce(t, s.SandboxAddr, s.ep.Transparent, time.Second); !ok {
		t.Fatalf("third idle transparent socket not closed: %v", err)
	}
	for _, c := range []net.Conn{a, b} {
		if ok, err := closedAtOnce(c, 100*time.Millisecond); ok {
			t.Fatalf("idle socket within the limit closed: %v", err)
		}
	}
	if d := lastDecision(t, p, s.ID); d.Reason != ReasonTunnelLimit || d.Mode != ModeTransparent {
		t.Fatalf("decision %+v", d)
	}
}

// pendingListener on its own: the count follows accept, settle and close.
func TestPendingListenerCount(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	refused := make(chan struct{}, 8)
	ln := newPendingListener(raw, 2, func(net.Conn) { refused <- struct{}{} })
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	dial()
	dial()
	s1, s2 := <-accepted, <-accepted
	if n := ln.pending(); n != 2 {
		t.Fatalf("pending = %d, want 2", n)
	}
	// The third is reset on accept, so fast that the dial itself may
	// already see the reset: either way it must be refused.
	if c, err := net.Dial("tcp", raw.Addr().String()); err == nil {
		t.Cleanup(func() { c.Close() })
	}
	select {
	case <-refused:
	case <-time.After(2 * time.Second):
		t.Fatal("third connection not refused")
	}
	settlePending(&prefixedConn{Conn: s1}) // settled through a wrapper
	settlePending(s1)                      // idempotent
	if n := ln.pending(); n != 1 {
		t.Fatalf("pending after settle = %d, want 1", n)
	}
	dial()
	s3 := <-accepted
	s2.Close()
	s2.Close()
	s1.Close() // settled already: no second decrement
	if n := ln.pending(); n != 1 {
		t.Fatalf("pending after closes = %d, want 1 (s3)", n)
	}
	s3.Close()
	if n := ln.pending(); n != 0 {
		t.Fatalf("pending = %d, want 0", n)
	}
}

// A live session's listener whose socket dies under it (shut down here as
// `ss -K` would destroy it) is reported by Health, does not spin, and
// refuses connections at once; removing the session clears the report.
func TestListenerFailureReported(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p)
	other := addSession(t, p)
	if err := p.Health(); err != nil {
		t.Fatalf("Health before the fault: %v", err)
	}
	p.mu.Lock()
	sess := p.sessions[s.ID]
	p.mu.Unlock()
	for _, c := range sess.closers[:2] { // CONNECT and transparent listeners
		rc, err := c.(*net.TCPListener).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(fd uintptr) { syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
	}
	deadline := time.Now().Add(3 * time.Second)
	var herr error
	for herr = p.Health(); herr == nil && time.Now().Before(deadline); herr = p.Health() {
		time.Sleep(10 * time.Millisecond)
	}
	// Each listener's accept loop sees its own socket die, in its own time:
	// wait for both.
	for !(strings.Contains(fmt.Sprint(herr), "transparent") && strings.Contains(fmt.Sprint(herr), "CONNECT")) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		herr = p.Health()
	}
	if !errors.Is(herr, ErrListenerFailed) || !strings.Contains(herr.Error(), s.ID+" (") ||
		!strings.Contains(herr.Error(), "CONNECT") || !strings.Contains(herr.Error(), "transparent") || strings.Contains(herr.Error(), other.ID) {
		t.Fatalf("Health after the fault: %v", herr)
	}
	for _, ep := range []netip.AddrPort{s.ep.Connect, s.ep.Transparent} {
		start := time.Now()
		dl := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(s.SandboxAddr, 0)), Timeout: 2 * time.Second}
		c, err := dl.Dial("tcp", ep.String())
		if err == nil {
			ok, rerr := closedAtOnce(c, time.Second)
			c.Close()
			if !ok {
				t.Fatalf("%s still serves after its socket died: %v", ep, rerr)
			}
		}
		if time.Since(start) > time.Second {
			t.Fatalf("%s: failure took %v", ep, time.Since(start))
		}
	}
	// The other session is unaffected.
	if code, _ := rawConnect(t, other, other.SandboxAddr, fmt.Sprintf("ok.example.com:%d", f.httpsAP.Port())); code != 200 {
		t.Fatalf("other session: status %d", code)
	}
	if err := p.RemoveSession(t.Context(), s.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Health(); err != nil {
		t.Fatalf("Health after removing the broken session: %v", err)
	}
}

// A connection that sent bytes and closed without a handler seeing a
// request is reported once as malformed; a served one, or one that sent
// nothing, is not.
func TestPendingMalformedOnClose(t *testing.T) {
	t.Parallel()
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	var mu sync.Mutex
	reported := 0
	ln := newPendingListener(raw, 8, nil)
	ln.malformed = func(net.Conn) { mu.Lock(); reported++; mu.Unlock() }
	next := func(send string) net.Conn {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if send != "" {
			c.Write([]byte(send))
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		if send != "" {
			buf := make([]byte, len(send))
			if _, err := io.ReadFull(s, buf); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return reported }

	bad := next("CONNECT [x]:443 HTTP/1.1\r\n")
	bad.Close()
	bad.Close()
	if n := count(); n != 1 {
		t.Fatalf("malformed reports after an unserved close = %d, want 1", n)
	}
	served := next("CONNECT ok.example.com:443 HTTP/1.1\r\n\r\n")
	markServed(&prefixedConn{Conn: served})
	served.Close()
	silent := next("")
	silent.Close()
	if n := count(); n != 1 {
		t.Fatalf("malformed reports = %d, want 1 (served and silent connections are not malformed)", n)
	}
}

// waitActive waits (up to 10 s) until session id holds n tunnel slots.
func waitActive(t *testing.T, p *Proxy, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		active := -1
		if s := p.sessions[id]; s != nil {
			active = s.active
		}
		p.mu.Unlock()
		if active == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s holds %d tunnel slots, want %d", id, active, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
