package egress

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/sandboxapi/sandboxapi/egress/policy"
)

// publicIP is where the fake internet's HTTPS server lives; tests allow it
// through extra_allowed_cidrs while the rest of loopback stays forbidden.
var publicIP = netip.MustParseAddr("127.0.0.2")

// fakeNet is a fake internet on loopback: an HTTPS server on publicIP and
// an authoritative DNS server for the test zones.
type fakeNet struct {
	caPEM    []byte
	caFile   string
	roots    *x509.CertPool
	https    *httptest.Server
	httpsAP  netip.AddrPort
	dnsAddr  string
	mu       sync.Mutex
	queries  map[string]int // "name/TYPE" -> count
	rebindOK atomic.Bool
}

var (
	fakeOnce sync.Once
	fakeInst *fakeNet
	fakeErr  error
)

// sharedFakeNet starts one fake internet per test binary.
func sharedFakeNet(t testing.TB) *fakeNet {
	t.Helper()
	fakeOnce.Do(func() { fakeInst, fakeErr = startFakeNet() })
	if fakeErr != nil {
		t.Fatalf("starting fake internet: %v", fakeErr)
	}
	return fakeInst
}

func startFakeNet() (*fakeNet, error) {
	f := &fakeNet{queries: map[string]int{}}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandboxapi test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "fake internet"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames:    []string{"example.com", "*.example.com", "*.a.example.com", "*.allowed.test", "evilexample.com", "*.evil.test"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	f.roots = x509.NewCertPool()
	f.roots.AddCert(ca)
	f.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	dir, err := os.MkdirTemp("", "egress-fakenet")
	if err != nil {
		return nil, err
	}
	f.caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(f.caFile, f.caPEM, 0o644); err != nil {
		return nil, err
	}

	ln, err := net.Listen("tcp", netip.AddrPortFrom(publicIP, 0).String())
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.TLS.ServerName)
	})
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		// Echoes the request's headers, one "Name: value" a line, and the
		// body's length.
		n, _ := io.Copy(io.Discard, r.Body)
		for k, vs := range r.Header {
			for _, v := range vs {
				fmt.Fprintf(w, "%s: %s\n", k, v)
			}
		}
		fmt.Fprintf(w, "body: %d\n", n)
	})
	mux.HandleFunc("/bytes", func(w http.ResponseWriter, r *http.Request) {
		var n int64
		fmt.Sscan(r.URL.Query().Get("n"), &n)
		io.CopyN(w, zeroReader{}, n)
	})
	f.https = httptest.NewUnstartedServer(mux)
	f.https.Listener.Close()
	f.https.Listener = ln
	f.https.Config.ErrorLog = log.New(io.Discard, "", 0)
	f.https.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}}
	f.https.StartTLS()
	f.httpsAP = ln.Addr().(*net.TCPAddr).AddrPort()

	pc, tl, _, err := listenUDPTCP(context.Background(), "127.0.0.1", 0)
	if err != nil {
		return nil, err
	}
	f.dnsAddr = pc.LocalAddr().String()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: f}, {Listener: tl, Handler: f}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
	}
	return f, nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func (f *fakeNet) count(name string, qtype uint16) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queries[strings.ToLower(name)+"/"+dns.TypeToString[qtype]]
}

// ServeDNS is the authoritative server of the test zones.
func (f *fakeNet) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	f.mu.Lock()
	f.queries[name+"/"+dns.TypeToString[q.Qtype]]++
	n := f.queries[name+"/"+dns.TypeToString[q.Qtype]]
	f.mu.Unlock()
	_, tcp := w.RemoteAddr().(*net.TCPAddr)
	a := func(owner, ip string) {
		if q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: net.ParseIP(ip)})
		}
	}
	aaaa := func(owner, ip string) {
		if q.Qtype == dns.TypeAAAA {
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 1}, AAAA: net.ParseIP(ip)})
		}
	}
	cname := func(owner, target string) {
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 1}, Target: target})
	}
	pub := publicIP.String()
	v4 := map[string]string{
		"loopback.evil.test.": "127.0.0.1", "private.evil.test.": "10.0.0.1", "private172.evil.test.": "172.16.0.1",
		"private192.evil.test.": "192.168.1.1", "metadata.evil.test.": "169.254.169.254", "linklocal.evil.test.": "169.254.1.1",
		"cgnat.evil.test.": "100.64.0.1", "multicast.evil.test.": "224.0.0.1", "unspecified.evil.test.": "0.0.0.0",
		"broadcast.evil.test.": "255.255.255.255", "benchmark.evil.test.": "198.18.0.1", "doc.evil.test.": "192.0.2.1",
		"reserved.evil.test.": "240.0.0.1", "zeronet.evil.test.": "0.1.2.3", "loopback2.evil.test.": "127.0.0.3",
		"selfproxy.evil.test.": "127.1.250.1", "othersandbox.evil.test.": "127.1.249.2",
	}
	v6 := map[string]string{
		"ula.evil.test.": "fd00::1", "ll6.evil.test.": "fe80::1", "mapped.evil.test.": "::ffff:127.0.0.1",
		"compat.evil.test.": "::127.0.0.1", "nat64.evil.test.": "64:ff9b::7f00:1", "sixtofour.evil.test.": "2002:7f00:1::1",
		"teredo.evil.test.": "2001::1", "loop6.evil.test.": "::1", "mappedmeta.evil.test.": "::ffff:169.254.169.254",
	}
	switch {
	case v4[name] != "":
		a(q.Name, v4[name])
	case v6[name] != "":
		aaaa(q.Name, v6[name])
	case name == "mixed.evil.test.":
		a(q.Name, pub)
		a(q.Name, "169.254.169.254")
	case name == "mixed6.evil.test.":
		a(q.Name, pub)
		aaaa(q.Name, "::ffff:127.0.0.1")
	case strings.HasPrefix(name, "rebind") && strings.HasSuffix(name, ".evil.test."):
		// TTL 0, as a rebinding attacker sends, so no cache keeps the
		// first answer and the next lookup gets the second.
		ip := pub
		if n > 1 {
			ip = "127.0.0.1"
		}
		if q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 0}, A: net.ParseIP(ip)})
		}
	case name == "cname.evil.test.":
		cname(q.Name, "loopback.evil.test.")
		a("loopback.evil.test.", "127.0.0.1")
	case name == "cnameext.evil.test.":
		cname(q.Name, "metadata.evil.test.") // target answered by a second query
	case name == "cnameloop.evil.test.":
		cname(q.Name, "cnameloop2.evil.test.")
	case name == "cnameloop2.evil.test.":
		cname(q.Name, "cnameloop.evil.test.")
	case name == "inject.evil.test.":
		a("ok.example.com.", pub) // other owner: must be ignored
	case name == "servfail.evil.test.":
		m.Rcode = dns.RcodeServerFailure
	case name == "trunc.example.com.":
		if !tcp {
			m.Truncated = true
		} else {
			a(q.Name, pub)
		}
	case name == "cnameok.example.com.":
		cname(q.Name, "ok.example.com.")
		a("ok.example.com.", pub)
	case name == "example.com." || strings.HasSuffix(name, ".example.com.") || name == "evilexample.com." ||
		strings.HasSuffix(name, ".allowed.test.") || name == "example.com.evil.test." || name == "other.evil.test.":
		a(q.Name, pub)
	default:
		m.Rcode = dns.RcodeNameError
	}
	if m.Rcode == dns.RcodeSuccess && len(m.Answer) == 0 {
		m.Ns = append(m.Ns, nodataSOA(q.Name)) // as real servers answer NODATA
	}
	w.WriteMsg(m)
}

// nodataSOA is the SOA record an authoritative server puts in a NODATA
// answer (RFC 2308), with a negative TTL of 1s like the zones' records.
func nodataSOA(name string) dns.RR {
	return &dns.SOA{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 1},
		Ns: "ns." + name, Mbox: "hostmaster." + name, Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 1}
}

var sessionSeq atomic.Uint32

// testAddrs returns a unique host/sandbox loopback pair for one session.
func testAddrs() (host, sandbox netip.Addr) {
	n := sessionSeq.Add(1)
	x, y := byte(10+n>>8), byte(n)
	return netip.AddrFrom4([4]byte{127, x, y, 1}), netip.AddrFrom4([4]byte{127, x, y, 2})
}

func testConfig(f *fakeNet) Config {
	cfg := DefaultConfig()
	cfg.ConnectPort, cfg.TransparentPort, cfg.DNSPort = 0, 0, 0
	cfg.TransparentUpstreamPort = f.httpsAP.Port()
	cfg.AllowedPorts = []uint16{443, f.httpsAP.Port()}
	cfg.Resolvers = []string{f.dnsAddr}
	cfg.ExtraAllowedCIDRs = []string{publicIP.String() + "/32"}
	cfg.HandshakeTimeout = 2 * time.Second
	return cfg
}

func newTestProxy(t testing.TB, cfg Config) *Proxy {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := NewProxy(cfg, Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := p.Stop(ctx); err != nil {
			t.Errorf("stopping proxy: %v", err)
		}
	})
	return p
}

type testSession struct {
	Session
	ep Endpoints
}

func addSession(t testing.TB, p *Proxy, patterns ...string) testSession {
	t.Helper()
	host, sbx := testAddrs()
	pol := policy.Policy{Enabled: true, Allow: policy.MustParseEntries(policy.ListAllowed, patterns...)}
	s := Session{ID: fmt.Sprintf("sess-%s", host), HostAddr: host, SandboxAddr: sbx, Policy: pol}
	ep, err := p.AddSession(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return testSession{Session: s, ep: ep}
}

// dialFrom connects to addr with the sandbox's source address.
func dialFrom(t testing.TB, src netip.Addr, addr netip.AddrPort) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0)), Timeout: 2 * time.Second}
	c, err := d.Dial("tcp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawConnect sends a CONNECT for authority and returns the status code
// and the connection (open only if the status is 200).
func rawConnect(t testing.TB, s testSession, src netip.Addr, authority string) (int, net.Conn) {
	t.Helper()
	c := dialFrom(t, src, s.ep.Connect)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", authority, authority)
	buf := make([]byte, 0, 512)
	one := make([]byte, 1)
	for !strings.HasSuffix(string(buf), "\r\n\r\n") && len(buf) < 4096 {
		if _, err := c.Read(one); err != nil {
			break
		}
		buf = append(buf, one[0])
	}
	var code int
	fmt.Sscanf(string(buf), "HTTP/1.1 %d", &code)
	c.SetDeadline(time.Time{})
	return code, c
}

// lastDecision waits briefly for the session's latest decision.
func lastDecision(t testing.TB, p *Proxy, id string) Decision {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if ds := p.Decisions(id); len(ds) > 0 {
			return ds[len(ds)-1]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no decision recorded for %s", id)
	return Decision{}
}

func (f *fakeNet) httpClient(s testSession) *http.Client {
	d := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(s.SandboxAddr, 0)), Timeout: 2 * time.Second}
	proxyURL := &url.URL{Scheme: "http", Host: s.ep.Connect.String()}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:             http.ProxyURL(proxyURL),
			DialContext:       d.DialContext,
			TLSClientConfig:   &tls.Config{RootCAs: f.roots},
			DisableKeepAlives: true,
		},
	}
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
