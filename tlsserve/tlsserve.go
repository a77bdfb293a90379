// Package tlsserve opens the API's listener: plain TCP, or HTTPS with
// certificates from ACME (certmagic), a local CA kept on disk, or operator
// files, plus the HTTP->HTTPS redirect listener. Plain HTTP stays open to
// loopback peers on the same port.
package tlsserve

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/caddyserver/certmagic"
)

// Listen opens the API listener: plain TCP when tls.mode is off, else a
// TLS listener whose certificates certmagic manages (acme, local) or that
// re-reads operator files (files), plus the HTTP->HTTPS redirect listener
// when tls.redirect_listen is set. Closing the returned listener (as
// http.Server.Shutdown does) stops the redirect listener and certificate
// maintenance too.
func Listen(ctx context.Context, addr, dataDir string, s Settings, log *slog.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	if !s.Enabled() {
		return ln, nil
	}
	tcfg, challenge, stop, err := tlsConfig(ctx, addr, dataDir, s, log, ln.Addr())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("setting up TLS (%s): %w", s.Mode, err)
	}
	tl := newTLSListener(ln, tcfg)
	tl.stops = append(tl.stops, stop)
	if s.RedirectListen != "" {
		addr, rs, err := startRedirect(s.RedirectListen, ln.Addr(), challenge, log)
		if err != nil {
			tl.Close()
			return nil, err
		}
		tl.redirect = addr
		tl.stops = append(tl.stops, rs)
	}
	log.Info("serving HTTPS", "mode", s.Mode, "domains", s.Domains, "redirect_listen", s.RedirectListen)
	return tl, nil
}

// tlsListener serves TLS to everyone and, on the same port, plain HTTP to
// loopback peers only, so local tooling (the readiness probe, `sandboxapi
// readiness check`, `sandboxapi mcp --url http://127.0.0.1:...`) keeps
// working when TLS is on. A loopback connection is TLS if its first byte is
// a TLS handshake record. Closing it closes its helpers (the redirect
// listener, certificate maintenance). Safe for concurrent use.
type tlsListener struct {
	inner    net.Listener
	cfg      *tls.Config
	conns    chan acceptResult
	done     chan struct{}
	redirect net.Addr // the redirect listener's address, if any
	once     sync.Once
	stops    []func()
}

type acceptResult struct {
	c   net.Conn
	err error
}

func newTLSListener(ln net.Listener, cfg *tls.Config) *tlsListener {
	l := &tlsListener{inner: ln, cfg: cfg, conns: make(chan acceptResult), done: make(chan struct{})}
	go l.acceptLoop()
	return l
}

func (l *tlsListener) acceptLoop() {
	for {
		c, err := l.inner.Accept()
		if err != nil {
			select {
			case l.conns <- acceptResult{err: err}:
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(5 * time.Millisecond) // EMFILE and the like: do not spin
			continue
		}
		if !plainAllowed(c.RemoteAddr(), c.LocalAddr()) {
			select {
			case l.conns <- acceptResult{c: tls.Server(c, l.cfg)}:
			case <-l.done:
				c.Close()
				return
			}
			continue
		}
		go l.sniff(c)
	}
}

// sniff tells TLS from plain HTTP on a loopback connection.
func (l *tlsListener) sniff(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	first, err := br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	var out net.Conn = &peekedConn{Conn: c, r: br}
	if first[0] == 0x16 { // TLS handshake record
		out = tls.Server(out, l.cfg)
	}
	select {
	case l.conns <- acceptResult{c: out}:
	case <-l.done:
		c.Close()
	}
}

// plainAllowed reports whether a peer may speak plain HTTP: only this host
// itself, over loopback or from the very address it connected to (a
// server listening on one non-loopback address probes itself that way).
// Sandboxes connect from their own namespaces' addresses, never these.
func plainAllowed(remote, local net.Addr) bool {
	ra, ok := remote.(*net.TCPAddr)
	if !ok {
		return false
	}
	if ra.IP.IsLoopback() {
		return true
	}
	la, ok := local.(*net.TCPAddr)
	return ok && !ra.IP.IsUnspecified() && ra.IP.Equal(la.IP)
}

// peekedConn reads through the buffer that holds the sniffed byte.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (p *peekedConn) Read(b []byte) (int, error) { return p.r.Read(b) }

func (l *tlsListener) Accept() (net.Conn, error) {
	select {
	case r := <-l.conns:
		return r.c, r.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *tlsListener) Addr() net.Addr { return l.inner.Addr() }

func (l *tlsListener) Close() error {
	err := l.inner.Close()
	l.once.Do(func() {
		close(l.done)
		for _, stop := range l.stops {
			stop()
		}
	})
	return err
}

// tlsConfig builds the server's tls.Config for t. challenge wraps
// the redirect handler with ACME HTTP-01 answers (identity otherwise).
func tlsConfig(ctx context.Context, listen, dataDir string, t Settings, log *slog.Logger, addr net.Addr) (tcfg *tls.Config, challenge func(http.Handler) http.Handler, stop func(), err error) {
	challenge = func(h http.Handler) http.Handler { return h }
	if t.Mode == ModeFiles {
		fc := &fileCert{certFile: t.CertFile, keyFile: t.KeyFile}
		if _, err := fc.get(); err != nil {
			return nil, nil, nil, err
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return fc.get() },
			NextProtos: []string{"http/1.1"}}, challenge, func() {}, nil
	}
	storage := t.Storage(dataDir)
	if err := os.MkdirAll(storage, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("creating %s: %w", storage, err)
	}
	var magic *certmagic.Config
	cache := certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return magic, nil },
		Logger:           zapToSlog(log),
	})
	magic = certmagic.New(cache, certmagic.Config{Storage: &certmagic.FileStorage{Path: filepath.Join(storage, "certmagic")}, Logger: zapToSlog(log)})
	domains := t.Domains
	switch t.Mode {
	case ModeACME:
		tmpl := certmagic.ACMEIssuer{CA: t.ACMEDirectory, Email: t.Email, Agreed: true, Logger: zapToSlog(log)}
		if tmpl.CA == "" {
			tmpl.CA = certmagic.LetsEncryptProductionCA
		}
		if t.ACMERoots != "" {
			pool, err := loadRoots(t.ACMERoots)
			if err != nil {
				cache.Stop()
				return nil, nil, nil, err
			}
			tmpl.TrustedRoots = pool
		}
		// TLS-ALPN-01 is answered on the API listener itself (the CA must
		// reach it on 443), HTTP-01 by the redirect listener (on 80).
		_, lport, _ := net.SplitHostPort(addr.String())
		tmpl.AltTLSALPNPort = atoiOr(lport, 0)
		if t.RedirectListen == "" {
			tmpl.DisableHTTPChallenge = true
		} else if _, port, _ := net.SplitHostPort(t.RedirectListen); port != "80" {
			tmpl.AltHTTPPort = atoiOr(port, 0)
		}
		acme := certmagic.NewACMEIssuer(magic, tmpl)
		magic.Issuers = []certmagic.Issuer{acme}
		challenge = acme.HTTPChallengeHandler
		// The CA validates through the listeners, which serve only after
		// this returns: obtain in the background (handshakes for the
		// domains fail until the first certificate arrives; see the logs).
		if err := magic.ManageAsync(ctx, domains); err != nil {
			cache.Stop()
			return nil, nil, nil, fmt.Errorf("managing certificates for %v: %w", domains, err)
		}
		return finishTLS(magic), challenge, cache.Stop, nil
	case ModeLocal:
		ca, err := loadOrCreateLocalCA(filepath.Join(storage, "local-ca"))
		if err != nil {
			cache.Stop()
			return nil, nil, nil, err
		}
		magic.Issuers = []certmagic.Issuer{ca}
		if len(domains) == 0 {
			domains = localNames(listen)
		}
		magic.DefaultServerName = domains[0]
	}
	// Local: ManageSync obtains missing certificates now, so a broken setup
	// fails at start rather than at the first handshake; renewals run in
	// the background until cache.Stop.
	if err := magic.ManageSync(ctx, domains); err != nil {
		cache.Stop()
		return nil, nil, nil, fmt.Errorf("obtaining certificates for %v: %w", domains, err)
	}
	return finishTLS(magic), challenge, cache.Stop, nil
}

// finishTLS is certmagic's tls.Config (which answers acme-tls/1) for HTTP/1.1.
func finishTLS(magic *certmagic.Config) *tls.Config {
	tcfg := magic.TLSConfig()
	tcfg.MinVersion = tls.VersionTLS12
	tcfg.NextProtos = append([]string{"http/1.1"}, tcfg.NextProtos...)
	return tcfg
}

// localNames are the default names of a local certificate: localhost and
// the listen host when it is a specific address.
func localNames(listen string) []string {
	names := []string{"localhost"}
	if host, _, err := net.SplitHostPort(listen); err == nil && host != "" {
		if ip := net.ParseIP(host); ip == nil || !ip.IsUnspecified() {
			names = append(names, host)
		}
	}
	return names
}

func atoiOr(s string, def int) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return def
		}
		n = n*10 + int(c-'0')
	}
	return n
}

func loadRoots(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading tls.acme_roots: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls.acme_roots %s: no PEM certificates", path)
	}
	return pool, nil
}

// startRedirect serves 308 redirects to the HTTPS listener on addr (and
// ACME HTTP-01 answers through challenge); the func stops it.
func startRedirect(addr string, tlsAddr net.Addr, challenge func(http.Handler) http.Handler, log *slog.Logger) (net.Addr, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listening on tls.redirect_listen %s: %w", addr, err)
	}
	_, tlsPort, _ := net.SplitHostPort(tlsAddr.String())
	hs := &http.Server{Handler: challenge(redirectHandler(tlsPort)), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("redirect listener", "err", err)
		}
	}()
	return ln.Addr(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
	}, nil
}

// redirectHandler sends every request to the same host and path over
// HTTPS on tlsPort (omitted when 443).
func redirectHandler(tlsPort string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if host == "" {
			http.Error(w, "no Host header", http.StatusBadRequest)
			return
		}
		if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
			host = "[" + host + "]"
		}
		if tlsPort != "443" && tlsPort != "" {
			host += ":" + tlsPort
		}
		w.Header().Set("Connection", "close")
		http.Redirect(w, r, "https://"+host+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
}

// fileCert serves an operator's certificate files, re-reading them when
// either changes (certbot renewals need no restart). Safe for concurrent use.
type fileCert struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	certMod, keyMod   time.Time
	checked           time.Time
}

func (f *fileCert) get() (*tls.Certificate, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cert != nil && time.Since(f.checked) < time.Second {
		return f.cert, nil
	}
	f.checked = time.Now()
	ci, err1 := os.Stat(f.certFile)
	ki, err2 := os.Stat(f.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		if f.cert != nil {
			return f.cert, nil // keep serving the last good pair
		}
		return nil, fmt.Errorf("tls files: %w", err)
	}
	if f.cert != nil && ci.ModTime().Equal(f.certMod) && ki.ModTime().Equal(f.keyMod) {
		return f.cert, nil
	}
	c, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		if f.cert != nil {
			return f.cert, nil
		}
		return nil, fmt.Errorf("loading %s and %s: %w", f.certFile, f.keyFile, err)
	}
	f.cert, f.certMod, f.keyMod = &c, ci.ModTime(), ki.ModTime()
	return f.cert, nil
}
