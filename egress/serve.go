package egress

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/elazarl/goproxy"
	"github.com/miekg/dns"

	"github.com/sandboxapi/sandboxapi/egress/policy"
)

// Reasons written to the audit log by the connection handlers.
const (
	ReasonSNIMismatch = "TLS SNI differs from CONNECT host"
	ReasonNoSNI       = "TLS ClientHello without SNI"
	ReasonBadSNI      = "TLS SNI is not a valid host name"
	ReasonNotTLS      = "tunnel did not start with a TLS ClientHello"
	ReasonTunnelLimit = "tunnel limit per session reached"
)

// refuse writes a short HTTP error on a hijacked CONNECT and closes it.
func refuse(c net.Conn, code int, reason string) {
	c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\negress denied: %s\n",
		code, http.StatusText(code), reason)
	c.Close()
}

// handleConnect owns a hijacked CONNECT connection until it is closed.
func (p *Proxy) handleConnect(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
	start := time.Now()
	d := Decision{Time: start, Mode: ModeConnect, Host: req.RequestURI}
	finish := func(o Outcome, c Class, reason string) {
		d.Outcome, d.Class, d.Reason, d.Duration = o, c, reason, time.Since(start)
		p.audit.record(d)
	}
	s, err := p.sessionOf(client)
	if s != nil {
		d.Session = s.ID
	}
	if err != nil {
		finish(OutcomeDeny, sessionErrClass(err), err.Error())
		refuse(client, http.StatusForbidden, "unknown session")
		return
	}
	release, err := p.acquire(s)
	if err != nil {
		reason := ReasonTunnelLimit
		if !errors.Is(err, ErrTooManyTunnels) {
			reason = err.Error()
		}
		finish(OutcomeDeny, sessionErrClass(err), reason)
		refuse(client, http.StatusTooManyRequests, reason)
		return
	}
	defer release()
	settlePending(client)

	tg, err := policy.ParseTarget(req.RequestURI, p.cfg.AllowedPorts)
	if err != nil {
		finish(OutcomeDeny, ClassBadTarget, err.Error())
		refuse(client, http.StatusForbidden, "bad CONNECT target")
		return
	}
	d.Host, d.Port = tg.Host, tg.Port
	if tg.Addr.IsValid() {
		d.Host = tg.Addr.String()
	}
	tgt, derr := p.decide(s.ctx, s, policy.ModeConnect, tg, "")
	if derr != nil {
		d.Addr = derr.addr
		d.note(derr.decision)
		code := http.StatusForbidden
		if derr.outcome == OutcomeError {
			code = http.StatusBadGateway
		}
		finish(derr.outcome, derr.class, derr.reason)
		public := derr.reason
		if derr.outcome == OutcomeError {
			public = "name resolution failed" // do not leak resolver details
		}
		refuse(client, code, public)
		return
	}
	up, pd, addr, err := p.dial(s.ctx, tgt)
	if err != nil {
		finish(OutcomeError, ClassDialFailed, err.Error())
		refuse(client, http.StatusBadGateway, "upstream unreachable")
		return
	}
	d.Addr = addr
	d.note(pd)
	// Track from here on so Stop and RemoveSession also close tunnels
	// still waiting for their ClientHello.
	t := &tunnel{client: client, upstream: up, target: policy.Args{Mode: policy.ModeConnect, Host: tg.Host, Addr: addr, Port: tg.Port}}
	untrack := p.track(s, t)
	defer untrack()
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		finish(OutcomeError, ClassError, "writing CONNECT reply: "+err.Error())
		t.close()
		return
	}
	sni, hello, err := peekClientHello(client, p.cfg.HandshakeTimeout)
	var why string
	var class Class
	switch {
	case err != nil:
		why, class = ReasonNotTLS+": "+err.Error(), ClassNotTLS
	case tg.Addr.IsValid():
		// An address target takes any server name (or none): the tunnel
		// goes to the vetted address whatever the name says; a name on the
		// deny list still refuses it.
		if sni == "" {
			break
		}
		name, err := policy.CanonicalHost(sni)
		if err != nil {
			why, class = fmt.Sprintf("%s (%q): %v", ReasonBadSNI, sni, err), ClassBadTarget
			break
		}
		if again := p.vet.Decide(policy.Args{Policy: s.rules(), Mode: policy.ModeConnect, Addr: addr, Port: tg.Port, SNI: name}); !again.Allowed() {
			d.note(again)
			why, class = fmt.Sprintf("TLS SNI %q: %s", name, again), classOf(again)
		}
	case sni == "":
		why, class = ReasonNoSNI, ClassNoSNI
	case !sameHost(sni, tg.Host):
		why, class = fmt.Sprintf("%s (%q)", ReasonSNIMismatch, sni), ClassSNIMismatch
	}
	if why != "" {
		finish(OutcomeDeny, class, why)
		t.close()
		return
	}
	// Credentials are for host names: an address target never gets one.
	if hs := s.credentialsFor(tg.Host); hs != nil && !tg.Addr.IsValid() {
		o, c, why := p.terminate(s, t, hello, tg.Host, hs, &d)
		finish(o, c, cmp.Or(why, pd.String()+t.endNote()))
		return
	}
	p.splice(s, t, hello, &d)
	finish(OutcomeAllow, ClassAllowed, pd.String()+t.endNote())
}

// splice forwards the already-read hello and then tunnels until done. The
// caller tracks t.
func (p *Proxy) splice(s *session, t *tunnel, hello []byte, d *Decision) {
	if _, err := t.upstream.Write(hello); err != nil {
		t.close()
		return
	}
	t.up.Add(int64(len(hello)))
	t.run(s.ctx, p.cfg.IdleTimeout)
	d.BytesUp, d.BytesDown = t.up.Load(), t.down.Load()
}

// serveTransparent accepts TLS connections that the in-sandbox DNS sent
// to the proxy and routes them by SNI.
func (p *Proxy) serveTransparent(s *session, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Temporary() { //nolint:staticcheck // EMFILE and the like, as net/http retries them
				p.log.Warn("accepting transparent connection", slog.String("session", s.ID), slog.Any("err", err))
				time.Sleep(50 * time.Millisecond)
				continue
			}
			// The socket is gone (e.g. destroyed from outside): retrying
			// would spin; the session's transparent path is down.
			p.listenerEnded(s, "transparent", err)
			return
		}
		go p.handleTransparent(s, c)
	}
}

func (p *Proxy) handleTransparent(s *session, client net.Conn) {
	start := time.Now()
	d := Decision{Time: start, Mode: ModeTransparent, Session: s.ID, Port: p.cfg.TransparentUpstreamPort}
	finish := func(o Outcome, c Class, reason string) {
		d.Outcome, d.Class, d.Reason, d.Duration = o, c, reason, time.Since(start)
		p.audit.record(d)
	}
	if got, err := p.sessionOf(client); got != s || err != nil {
		finish(OutcomeDeny, ClassUnknownSession, ErrWrongSourceAddr.Error())
		client.Close()
		return
	}
	release, err := p.acquire(s)
	if err != nil {
		finish(OutcomeDeny, ClassTunnelLimit, ReasonTunnelLimit)
		client.Close()
		return
	}
	defer release()
	settlePending(client)
	sni, hello, err := peekClientHello(client, p.cfg.HandshakeTimeout)
	if err != nil || sni == "" {
		why, class := ReasonNoSNI, ClassNoSNI
		if err != nil {
			why, class = ReasonNotTLS+": "+err.Error(), ClassNotTLS
		}
		finish(OutcomeDeny, class, why)
		client.Close()
		return
	}
	d.Host = sni
	host, err := policy.CanonicalHost(sni)
	if err != nil {
		finish(OutcomeDeny, ClassBadTarget, err.Error())
		client.Close()
		return
	}
	d.Host = host
	tgt, derr := p.decide(s.ctx, s, policy.ModeTransparent, policy.Target{Host: host, Port: p.cfg.TransparentUpstreamPort}, "")
	if derr != nil {
		d.Addr = derr.addr
		d.note(derr.decision)
		finish(derr.outcome, derr.class, derr.reason)
		client.Close()
		return
	}
	up, pd, addr, err := p.dial(s.ctx, tgt)
	if err != nil {
		finish(OutcomeError, ClassDialFailed, err.Error())
		client.Close()
		return
	}
	d.Addr = addr
	d.note(pd)
	t := &tunnel{client: client, upstream: up, target: policy.Args{Mode: policy.ModeTransparent, Host: host, Addr: addr, Port: p.cfg.TransparentUpstreamPort}}
	untrack := p.track(s, t)
	defer untrack()
	if hs := s.credentialsFor(host); hs != nil {
		o, c, why := p.terminate(s, t, hello, host, hs, &d)
		finish(o, c, cmp.Or(why, pd.String()+t.endNote()))
		return
	}
	p.splice(s, t, hello, &d)
	finish(OutcomeAllow, ClassAllowed, pd.String()+t.endNote())
}

type dnsCloser struct{ srv *dns.Server }

func (c dnsCloser) Close() error { return c.srv.Shutdown() }

// startDNS serves the in-sandbox resolver on HostAddr:DNSPort (UDP and
// TCP). It never queries upstream: allowed names get the proxy's address,
// everything else NXDOMAIN, so DNS carries nothing out of the sandbox.
func (p *Proxy) startDNS(ctx context.Context, s *session) error {
	pc, tl, port, err := listenUDPTCP(ctx, s.HostAddr.String(), p.cfg.DNSPort)
	if err != nil {
		return err
	}
	s.ep.DNS = netip.AddrPortFrom(s.HostAddr, uint16(port))
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { p.answerDNS(s, w, r) })
	// DNS over TCP connections are never settled: the cap bounds them all.
	capped := newPendingListener(tl, p.cfg.MaxPendingPerSession, nil)
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: capped, Handler: h}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		s.closers = append(s.closers, dnsCloser{srv})
		s.listeners.Add(1)
		go func() {
			defer s.listeners.Done()
			if err := srv.ActivateAndServe(); err != nil {
				p.listenerEnded(s, "DNS", err)
			}
		}()
		<-started
	}
	return nil
}

// listenUDPTCP binds UDP and TCP on the same port. With port 0 it retries
// until an ephemeral UDP port is also free for TCP.
func listenUDPTCP(ctx context.Context, host string, port uint16) (net.PacketConn, net.Listener, int, error) {
	var lc net.ListenConfig
	var lastErr error
	for range 16 {
		pc, err := lc.ListenPacket(ctx, "udp", net.JoinHostPort(host, fmt.Sprint(port)))
		if err != nil {
			return nil, nil, 0, fmt.Errorf("listening for DNS over UDP: %w", err)
		}
		got := pc.LocalAddr().(*net.UDPAddr).Port
		tl, err := lc.Listen(ctx, "tcp", net.JoinHostPort(host, fmt.Sprint(got)))
		if err == nil {
			return pc, tl, got, nil
		}
		pc.Close()
		lastErr = err
		if port != 0 {
			break
		}
	}
	return nil, nil, 0, fmt.Errorf("listening for DNS over TCP: %w", lastErr)
}

func (p *Proxy) answerDNS(s *session, w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.RecursionAvailable = false
	defer w.WriteMsg(m)
	remote, _ := netip.ParseAddrPort(w.RemoteAddr().String())
	if remote.Addr().Unmap() != s.SandboxAddr {
		m.Rcode = dns.RcodeRefused
		return
	}
	if r.Opcode != dns.OpcodeQuery || len(r.Question) != 1 {
		m.Rcode = dns.RcodeNotImplemented
		return
	}
	q := r.Question[0]
	if q.Qclass != dns.ClassINET {
		m.Rcode = dns.RcodeRefused
		return
	}
	host, err := policy.CanonicalHost(strings.TrimSuffix(q.Name, "."))
	allowed := false
	if err == nil {
		allowed = p.vet.Decide(policy.Args{Policy: s.rules(), Mode: policy.ModeTransparent, Host: host, Port: p.cfg.TransparentUpstreamPort}).Allowed()
	}
	p.log.Debug("egress dns", slog.String("session", s.ID), slog.String("name", q.Name),
		slog.String("type", dns.TypeToString[q.Qtype]), slog.Bool("allowed", allowed))
	if !allowed {
		m.Rcode = dns.RcodeNameError
		return
	}
	hdr := dns.RR_Header{Name: q.Name, Class: dns.ClassINET, Ttl: 30}
	switch {
	case q.Qtype == dns.TypeA && s.HostAddr.Is4():
		hdr.Rrtype = dns.TypeA
		m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: s.HostAddr.AsSlice()})
	case q.Qtype == dns.TypeAAAA && s.HostAddr.Is6():
		hdr.Rrtype = dns.TypeAAAA
		m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: s.HostAddr.AsSlice()})
	}
}
