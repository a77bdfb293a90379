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
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/sandboxapi/sandboxapi/egress/policy"
)

// Proxy errors.
var (
	ErrStopped         = errors.New("egress proxy stopped")
	ErrSessionExists   = errors.New("egress session already exists")
	ErrUnknownSession  = errors.New("unknown egress session")
	ErrTooManyTunnels  = errors.New("too many tunnels for session")
	ErrForbiddenAddr   = errors.New("forbidden address")
	ErrDirectDial      = errors.New("direct dial refused: every CONNECT is handled explicitly")
	ErrInvalidSession  = errors.New("invalid egress session")
	ErrWrongSourceAddr = errors.New("connection not from the session's sandbox address")
	ErrListenerFailed  = errors.New("egress listener of a live session stopped serving")
)

// Options are the non-data dependencies of a Proxy.
type Options struct {
	// Logger receives the audit's lines (one per kept record, see
	// OnDecision); nil discards.
	Logger *slog.Logger
	// OnDecision, if set, is called synchronously for every record the
	// audit keeps (e.g. to persist the trail): single decisions, and
	// aggregates and summaries (Decision.Count) that bound what one
	// session can make the host store (Config.AuditRecordsPerMinute). It
	// must not block.
	OnDecision func(Decision)
	// Observe, if set, is called synchronously for every decision, also
	// those the audit aggregates (e.g. for metrics). It must not block.
	Observe func(Decision)
	// CA is the per-server CA whose leaves terminate the sandbox's TLS to
	// hosts that have credentials; nil: no session may have credentials.
	CA *CA
	// Credentials opens the sealed credential values of sessions'
	// network requests (Sessions uses it); nil: no credentials.
	Credentials Opener
	// Reserved are further prefixes the proxy never dials, whatever
	// extra_allowed_cidrs says, such as the installer networks' pool.
	// Config.Network.Pool is always reserved.
	Reserved []netip.Prefix
}

// Session binds a sandbox network to a policy. Each session has its own
// host-side address; the proxy serves it on listeners bound to that
// address and accepts only connections whose source is SandboxAddr, so the
// session is identified by the interface the packet arrived on (enforced by
// the firewall rules of Network) and never by anything the sandbox sends.
type Session struct {
	ID          string
	HostAddr    netip.Addr // proxy and DNS address seen by the sandbox
	SandboxAddr netip.Addr // the sandbox's only source address
	Policy      policy.Policy
	// Credentials are the headers set on requests to their hosts, whose
	// TLS the proxy terminates (see Proxy.SetCredentials).
	Credentials Credentials
}

// Endpoints are the bound addresses of a session's listeners.
type Endpoints struct {
	Connect     netip.AddrPort // explicit proxy: HTTPS_PROXY=http://Connect
	Transparent netip.AddrPort // SNI proxy
	DNS         netip.AddrPort // in-sandbox resolver (UDP and TCP)
}

type session struct {
	Session
	ep        Endpoints
	closers   []io.Closer
	tunnels   map[*tunnel]struct{}
	active    int
	ctx       context.Context
	cancel    context.CancelFunc
	listeners sync.WaitGroup
	broken    []string // listeners that stopped serving; guarded by Proxy.mu
	creds     atomic.Pointer[Credentials]
	// live is the policy in force once SetPolicy has replaced
	// Session.Policy (nil until then); read it through rules.
	live atomic.Pointer[policy.Policy]
}

// Proxy is the egress proxy: per-session explicit CONNECT (built on
// elazarl/goproxy with its unsafe defaults replaced), transparent SNI
// proxying and in-sandbox DNS, all under one policy with DNS pinning.
// Create it with NewProxy; its methods are safe for concurrent use.
type Proxy struct {
	cfg      Config
	log      *slog.Logger
	res      *Resolver
	vet      policy.Vetter
	audit    *auditor
	gp       *goproxy.ProxyHttpServer
	srv      *http.Server
	localIPs *hostAddrs     // the host's interface addresses, kept current
	ca       *CA            // nil: no credentials
	upRoots  *x509.CertPool // roots the proxy's own upstream TLS trusts

	mu       sync.Mutex
	stopped  bool
	sessions map[string]*session
	byHost   map[netip.Addr]*session
	handlers sync.WaitGroup
}

type ctxKey struct{}

// NewProxy validates cfg and builds a Proxy. It opens no sockets until
// AddSession.
func NewProxy(cfg Config, opts Options) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("creating egress proxy: %w", err)
	}
	res, err := NewResolver(cfg.Resolvers, cfg.ResolveTimeout)
	if err != nil {
		return nil, fmt.Errorf("creating egress proxy: %w", err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	roots, err := upstreamRoots(cfg.UpstreamCAFile)
	if err != nil {
		return nil, fmt.Errorf("creating egress proxy: %w", err)
	}
	p := &Proxy{
		ca:       opts.CA,
		upRoots:  roots,
		cfg:      cfg,
		log:      logger,
		res:      res,
		audit:    newAuditor(logger, opts, cfg.DecisionsPerSession, cfg.AuditRecordsPerMinute),
		sessions: map[string]*session{},
		byHost:   map[netip.Addr]*session{},
		localIPs: newHostAddrs(),
	}
	denied := append([]netip.Prefix(nil), opts.Reserved...)
	if pool, err := netip.ParsePrefix(cfg.Network.Pool); err == nil {
		denied = append(denied, pool.Masked())
	}
	p.vet = policy.Vetter{ExtraAllowed: cfg.extraAllowed(), SandboxNets: denied, Own: p.isOwn}
	p.gp = p.newGoproxy()
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, ok := r.Context().Value(ctxKey{}).(net.Conn); ok {
				markServed(c)
			}
			if r.Method == http.MethodConnect {
				w = keepBuffered{w}
			}
			p.gp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: cfg.HandshakeTimeout,
		IdleTimeout:       cfg.HandshakeTimeout,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          log.New(io.Discard, "", 0),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, ctxKey{}, c)
		},
	}
	return p, nil
}

// newGoproxy configures goproxy so that nothing is accepted by default: no
// transport (plain HTTP is refused before it), no environment proxy, no
// direct CONNECT dial, and every CONNECT is hijacked by handleConnect.
func (p *Proxy) newGoproxy() *goproxy.ProxyHttpServer {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(io.Discard, "", 0)
	gp.Verbose = false
	gp.Tr = &http.Transport{
		Proxy:           nil,
		TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12},
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			return nil, ErrDirectDial
		},
	}
	gp.ConnectDial = nil
	gp.ConnectDialWithReq = func(*http.Request, string, string) (net.Conn, error) {
		return nil, ErrDirectDial
	}
	deny := func(w http.ResponseWriter, r *http.Request) {
		p.denyPlain(r)
		http.Error(w, "egress denied: only HTTPS CONNECT is allowed", http.StatusForbidden)
	}
	gp.NonproxyHandler = http.HandlerFunc(deny)
	gp.OnRequest().DoFunc(func(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
		p.denyPlain(r)
		return r, goproxy.NewResponse(r, "text/plain", http.StatusForbidden, "egress denied: only HTTPS CONNECT is allowed\n")
	})
	gp.OnRequest().HandleConnectFunc(func(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		return &goproxy.ConnectAction{Action: goproxy.ConnectHijack, Hijack: p.handleConnect}, host
	})
	return gp
}

// isOwn reports whether a is one of the host's addresses as they are now
// (see hostAddrs) or a session's listening address.
func (p *Proxy) isOwn(a netip.Addr) bool {
	if p.localIPs.has(a) {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.byHost[a]
	return ok
}

// AddSession opens the session's listeners (CONNECT, transparent, DNS) on
// s.HostAddr and starts serving them. The ports come from Config.
func (p *Proxy) AddSession(ctx context.Context, s Session) (Endpoints, error) {
	if s.ID == "" || !s.HostAddr.IsValid() || !s.SandboxAddr.IsValid() {
		return Endpoints{}, fmt.Errorf("adding session %q: %w: id, host and sandbox address are required", s.ID, ErrInvalidSession)
	}
	s.HostAddr, s.SandboxAddr = s.HostAddr.Unmap(), s.SandboxAddr.Unmap()
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return Endpoints{}, fmt.Errorf("adding session %s: %w", s.ID, ErrStopped)
	}
	if _, ok := p.sessions[s.ID]; ok {
		p.mu.Unlock()
		return Endpoints{}, fmt.Errorf("adding session %s: %w", s.ID, ErrSessionExists)
	}
	if _, ok := p.byHost[s.HostAddr]; ok {
		p.mu.Unlock()
		return Endpoints{}, fmt.Errorf("adding session %s: host address %s in use: %w", s.ID, s.HostAddr, ErrSessionExists)
	}
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	if len(s.Credentials) > 0 && p.ca == nil {
		p.mu.Unlock()
		cancel()
		return Endpoints{}, fmt.Errorf("adding session %s: %w: the proxy has no CA", s.ID, ErrCredentials)
	}
	sess := &session{Session: s, tunnels: map[*tunnel]struct{}{}, ctx: sctx, cancel: cancel}
	sess.creds.Store(&s.Credentials)
	sess.Session.Credentials = nil // held in creds only
	p.sessions[s.ID] = sess
	p.byHost[s.HostAddr] = sess
	p.mu.Unlock()
	p.audit.open(s.ID)

	if err := p.listen(ctx, sess); err != nil {
		p.RemoveSession(ctx, s.ID)
		return Endpoints{}, fmt.Errorf("adding session %s: %w", s.ID, err)
	}
	return sess.ep, nil
}

func (p *Proxy) listen(ctx context.Context, s *session) error {
	var lc net.ListenConfig
	host := s.HostAddr.String()
	bind := func(port uint16) string { return net.JoinHostPort(host, fmt.Sprint(port)) }

	cl, err := lc.Listen(ctx, "tcp", bind(p.cfg.ConnectPort))
	if err != nil {
		return fmt.Errorf("listening for CONNECT: %w", err)
	}
	s.closers = append(s.closers, cl)
	s.ep.Connect = cl.Addr().(*net.TCPAddr).AddrPort()
	pl := newPendingListener(cl, p.cfg.MaxPendingPerSession, p.refusePending(s, ModeConnect))
	pl.malformed = p.refuseMalformed(s)
	cl = pl

	tl, err := lc.Listen(ctx, "tcp", bind(p.cfg.TransparentPort))
	if err != nil {
		return fmt.Errorf("listening for transparent TLS: %w", err)
	}
	s.closers = append(s.closers, tl)
	s.ep.Transparent = tl.Addr().(*net.TCPAddr).AddrPort()
	tl = newPendingListener(tl, p.cfg.MaxPendingPerSession, p.refusePending(s, ModeTransparent))

	if err := p.startDNS(ctx, s); err != nil {
		return err
	}
	s.listeners.Add(2)
	go func() {
		defer s.listeners.Done()
		if err := p.srv.Serve(cl); !errors.Is(err, http.ErrServerClosed) {
			p.listenerEnded(s, "CONNECT", err)
		}
	}()
	go func() {
		defer s.listeners.Done()
		p.serveTransparent(s, tl)
	}()
	return nil
}

// listenerEnded notes a listener of a live session that stopped serving
// (its socket destroyed from outside, say): Health reports the session
// until it is removed. Ends caused by RemoveSession or Stop are ignored.
func (p *Proxy) listenerEnded(s *session, which string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || s.ctx.Err() != nil {
		return
	}
	p.log.Error("egress listener failed", slog.String("session", s.ID), slog.String("listener", which), slog.Any("err", err))
	s.broken = append(s.broken, which)
}

// Health reports an error naming every live session one of whose
// listeners stopped serving; such a session's sandbox can no longer reach
// the proxy. It returns ErrStopped once the proxy is stopped.
func (p *Proxy) Health() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return ErrStopped
	}
	var bad []string
	for id, s := range p.sessions {
		if len(s.broken) > 0 {
			bad = append(bad, id+" ("+strings.Join(s.broken, ", ")+")")
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return fmt.Errorf("%w: %s", ErrListenerFailed, strings.Join(bad, "; "))
	}
	return nil
}

// refuseMalformed records the deny decision for a CONNECT-port connection
// that net/http refused before the handler (see ReasonMalformed).
func (p *Proxy) refuseMalformed(s *session) func(net.Conn) {
	return func(net.Conn) {
		p.audit.record(Decision{Time: time.Now(), Session: s.ID, Mode: ModeConnect, Outcome: OutcomeDeny, Class: ClassBadTarget, Reason: ReasonMalformed})
	}
}

// refusePending records the deny decision for a connection closed on
// accept by the pending cap.
func (p *Proxy) refusePending(s *session, mode Mode) func(net.Conn) {
	return func(net.Conn) {
		d := Decision{Time: time.Now(), Session: s.ID, Mode: mode, Outcome: OutcomeDeny, Class: ClassPendingLimit, Reason: ReasonPendingLimit}
		if mode == ModeTransparent {
			d.Port = p.cfg.TransparentUpstreamPort
		}
		p.audit.record(d)
	}
}

// RemoveSession closes the session's listeners and tunnels and forgets its
// decisions. Removing an unknown session returns ErrUnknownSession.
func (p *Proxy) RemoveSession(ctx context.Context, id string) error {
	p.mu.Lock()
	s := p.sessions[id]
	if s == nil {
		p.mu.Unlock()
		return fmt.Errorf("removing session %s: %w", id, ErrUnknownSession)
	}
	delete(p.sessions, id)
	delete(p.byHost, s.HostAddr)
	p.mu.Unlock()
	p.closeSession(s)
	p.audit.drop(id)
	return nil
}

func (p *Proxy) closeSession(s *session) {
	s.cancel()
	for _, c := range s.closers {
		c.Close()
	}
	p.mu.Lock()
	for t := range s.tunnels {
		t.close()
	}
	p.mu.Unlock()
	s.listeners.Wait()
}

// Decisions returns a copy of the session's recent decisions, oldest first.
func (p *Proxy) Decisions(sessionID string) []Decision { return p.audit.list(sessionID) }

// Stop closes every listener and tunnel (including hijacked sockets) and
// waits for connection handlers until ctx is done.
func (p *Proxy) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	all := make([]*session, 0, len(p.sessions))
	for id, s := range p.sessions {
		all = append(all, s)
		delete(p.sessions, id)
		delete(p.byHost, s.HostAddr)
	}
	p.mu.Unlock()
	p.srv.Close()
	for _, s := range all {
		p.closeSession(s)
	}
	p.localIPs.close()
	done := make(chan struct{})
	go func() { p.handlers.Wait(); close(done) }()
	defer p.audit.flushAll() // after the tunnels' own decisions
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stopping egress proxy: %w", ctx.Err())
	}
}

// sessionOf identifies the session of an accepted connection by the local
// address it arrived on and checks its source address.
func (p *Proxy) sessionOf(c net.Conn) (*session, error) {
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	p.mu.Lock()
	s := p.byHost[local.Addr().Unmap()]
	p.mu.Unlock()
	if s == nil {
		return nil, ErrUnknownSession
	}
	if remote.Addr().Unmap() != s.SandboxAddr {
		return s, ErrWrongSourceAddr
	}
	return s, nil
}

// acquire reserves a tunnel slot; release must be called when done.
func (p *Proxy) acquire(s *session) (release func(), err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped || s.ctx.Err() != nil {
		return nil, ErrStopped
	}
	if s.active >= p.cfg.MaxTunnelsPerSession {
		return nil, ErrTooManyTunnels
	}
	s.active++
	p.handlers.Add(1)
	return func() {
		p.mu.Lock()
		s.active--
		p.mu.Unlock()
		p.handlers.Done()
	}, nil
}

// rules is the session's policy in force: the latest SetPolicy's, or the
// one it was added with.
func (s *session) rules() policy.Policy {
	if pol := s.live.Load(); pol != nil {
		return *pol
	}
	return s.Policy
}

// stillAllowed reports whether pol lets the open tunnel t go on: the
// decision a new connection to the same name, address and port would get.
func (p *Proxy) stillAllowed(pol policy.Policy, t *tunnel) bool {
	a := t.target
	a.Policy = pol
	return p.vet.Decide(a).Allowed()
}

// ReasonPolicyChanged ends the reason of an allowed tunnel that a change
// of the session's policy closed.
const ReasonPolicyChanged = "; closed: the session's allow-list no longer allows this host"

// SetPolicy replaces the policy of a live session: every connection
// decided from now on is held to pol, and every open tunnel (explicit or
// transparent) whose target pol refuses is closed before it returns. A
// connection decided under the old policy that is still being set up is
// checked again when its tunnel is tracked (track), so none slips
// through. It returns how many tunnels it closed; an unknown session is
// ErrUnknownSession.
func (p *Proxy) SetPolicy(id string, pol policy.Policy) (closed int, err error) {
	p.mu.Lock()
	s := p.sessions[id]
	if s == nil {
		p.mu.Unlock()
		return 0, fmt.Errorf("setting policy of session %s: %w", id, ErrUnknownSession)
	}
	s.live.Store(&pol)
	open := make([]*tunnel, 0, len(s.tunnels))
	for t := range s.tunnels {
		open = append(open, t)
	}
	p.mu.Unlock()
	// Decided outside p.mu: the address check takes it (isOwn). A tunnel
	// tracked after the unlock reads pol itself (track).
	for _, t := range open {
		if !p.stillAllowed(pol, t) {
			t.revoke()
			closed++
		}
	}
	return closed, nil
}

// track registers t with its session, so that Stop, RemoveSession and
// SetPolicy can close it, and closes it at once when the session is gone
// or its policy no longer allows t's target (changed while t was being
// decided and dialled).
func (p *Proxy) track(s *session, t *tunnel) (untrack func()) {
	p.mu.Lock()
	s.tunnels[t] = struct{}{}
	dead := s.ctx.Err() != nil
	pol := s.rules() // a SetPolicy after the unlock finds t among the tunnels
	p.mu.Unlock()
	revoked := !dead && !p.stillAllowed(pol, t) // outside p.mu: isOwn takes it
	switch {
	case dead:
		t.close()
	case revoked:
		t.revoke()
	}
	return func() {
		p.mu.Lock()
		delete(s.tunnels, t)
		p.mu.Unlock()
	}
}

// target is a vetted destination: the CONNECT target and the addresses
// to dial, every one of them allowed, each with its decision.
type target struct {
	t         policy.Target
	addrs     []netip.Addr
	decisions []policy.Decision // of addrs, index for index
}

// decideError carries the audit outcome of a refused connection.
type decideError struct {
	outcome  Outcome
	class    Class
	reason   string
	addr     netip.Addr
	decision policy.Decision // zero when the policy did not decide
	err      error
}

func (e *decideError) Error() string { return e.reason }
func (e *decideError) Unwrap() error { return e.err }

// Reason prefixes of decide and dial.
const (
	reasonResolving       = "resolving: "
	reasonResolverFailure = "resolver failure: "
	reasonForbiddenAddr   = "resolved to forbidden address"
	reasonDialing         = "dialing "
)

// classOf maps a refusing policy decision to the audit's class.
func classOf(d policy.Decision) Class {
	switch d.Cause {
	case policy.CauseNetworkDisabled:
		return ClassNetworkDisabled
	case policy.CauseDenied:
		return ClassDenied
	case policy.CauseForbiddenAddr:
		return ClassForbiddenAddr
	case policy.CauseNoTarget:
		return ClassBadTarget
	}
	return ClassNotAllowed
}

// refusal is the decideError of a refusing decision on addr (zero: the
// name alone).
func refusal(d policy.Decision, addr netip.Addr, resolved bool) *decideError {
	reason := d.String()
	if resolved && d.Cause == policy.CauseForbiddenAddr {
		reason = reasonForbiddenAddr + " (" + d.Class.Describe() + ")"
	}
	e := &decideError{outcome: OutcomeDeny, class: classOf(d), reason: reason, addr: addr, decision: d}
	if d.Cause == policy.CauseForbiddenAddr {
		e.err = ErrForbiddenAddr
	}
	return e
}

// decide applies the session's policy (policy.Vetter.Decide) to the
// target: a host name first by itself, then for every address it
// resolves to; an address target once.
func (p *Proxy) decide(ctx context.Context, s *session, mode policy.Mode, t policy.Target, sni string) (*target, *decideError) {
	args := policy.Args{Policy: s.rules(), Mode: mode, Host: t.Host, Addr: t.Addr, Port: t.Port, SNI: sni}
	if t.Addr.IsValid() {
		d := p.vet.Decide(args)
		if !d.Allowed() {
			return nil, refusal(d, t.Addr, false)
		}
		return &target{t: t, addrs: []netip.Addr{t.Addr}, decisions: []policy.Decision{d}}, nil
	}
	if d := p.vet.Decide(args); !d.Allowed() {
		return nil, refusal(d, netip.Addr{}, false)
	}
	addrs, err := p.res.Resolve(ctx, t.Host)
	if err != nil {
		if errors.Is(err, ErrNXDomain) || errors.Is(err, ErrNoAddresses) {
			return nil, &decideError{outcome: OutcomeDeny, class: ClassUnresolvable, reason: reasonResolving + err.Error(), err: err}
		}
		return nil, &decideError{outcome: OutcomeError, class: ClassResolverFailure, reason: reasonResolverFailure + err.Error(), err: err}
	}
	tgt := &target{t: t, addrs: addrs, decisions: make([]policy.Decision, len(addrs))}
	for i, a := range addrs {
		args.Addr = a
		d := p.vet.Decide(args)
		if !d.Allowed() {
			return nil, refusal(d, a, true)
		}
		tgt.decisions[i] = d
	}
	return tgt, nil
}

// dial connects to one of the vetted addresses; the dialer's control hook
// re-checks the exact address's class right before connect(2). It
// returns the decision of the address it connected to.
func (p *Proxy) dial(ctx context.Context, t *target) (net.Conn, policy.Decision, netip.Addr, error) {
	var errs []error
	for i, a := range t.addrs {
		pinned := a
		d := net.Dialer{
			Timeout: p.cfg.DialTimeout,
			ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return fmt.Errorf("parsing dial address %q: %w", address, err)
				}
				if ap.Addr().Unmap() != pinned.Unmap() {
					return fmt.Errorf("dialing %s instead of pinned %s: %w", ap.Addr(), pinned, ErrForbiddenAddr)
				}
				if c := p.vet.Class(ap.Addr()); !c.Dialable() {
					return fmt.Errorf("dialing %s (%s): %w", ap.Addr(), c.Describe(), ErrForbiddenAddr)
				}
				return nil
			},
		}
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, t.t.Port).String())
		if err == nil {
			return c, t.decisions[i], a, nil
		}
		errs = append(errs, err)
	}
	return nil, policy.Decision{}, netip.Addr{}, fmt.Errorf("%s%s: %w", reasonDialing, t.t, errors.Join(errs...))
}

func (p *Proxy) denyPlain(r *http.Request) {
	c, _ := r.Context().Value(ctxKey{}).(net.Conn)
	d := Decision{Time: time.Now(), Mode: ModePlainHTTP, Host: r.Host, Outcome: OutcomeDeny, Class: ClassPlainHTTP, Reason: "plain HTTP is not allowed"}
	if c != nil {
		if s, err := p.sessionOf(c); s != nil {
			d.Session = s.ID
			if err != nil {
				d.Reason = err.Error()
			}
		}
	}
	p.audit.record(d)
}

// sameHost compares an SNI with the CONNECT host the way matching does.
func sameHost(sni, host string) bool {
	c, err := policy.CanonicalHost(sni)
	return err == nil && strings.EqualFold(c, host)
}

// keepBuffered hands goproxy a ResponseWriter whose Hijack keeps what the
// HTTP server had already read past the CONNECT request: goproxy drops the
// hijack's buffered reader, so a client that sends its ClientHello in the
// same packet as the CONNECT would otherwise lose it.
type keepBuffered struct{ http.ResponseWriter }

func (k keepBuffered) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := k.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("connection cannot be hijacked")
	}
	c, brw, err := h.Hijack()
	if err != nil {
		return nil, nil, err
	}
	if n := brw.Reader.Buffered(); n > 0 {
		pre, _ := brw.Reader.Peek(n)
		c = &prefixedConn{Conn: c, pre: bytes.Clone(pre)}
	}
	return c, brw, nil
}

// prefixedConn reads pre before the connection itself.
type prefixedConn struct {
	net.Conn
	pre []byte
}

func (c *prefixedConn) Read(b []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(b, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// CloseWrite half-closes the underlying connection, as the tunnel expects.
func (c *prefixedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
