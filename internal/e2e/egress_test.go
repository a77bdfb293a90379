package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// fakeInternet is a network namespace the test creates, joined to the root
// namespace by a veth pair, holding HTTPS servers and an authoritative DNS
// server for the test zones. Only the egress proxy (in the root namespace)
// talks to it; sandboxes reach it only through the proxy.
type fakeInternet struct {
	netns    string
	hostLink string
	prefix   netip.Prefix // the veth's /24
	web      netip.Addr   // HTTPS server for *.allowed.test
	other    netip.Addr   // HTTPS server for *.denied.test and *.public.test
	dnsAddr  netip.AddrPort
	caPEM    []byte
}

// zone answers of the fake internet's authoritative DNS.
func (f *fakeInternet) zone() map[string]netip.Addr {
	return map[string]netip.Addr{
		"www.allowed.test.":  f.web,
		"api.allowed.test.":  f.web,
		"evil.denied.test.":  f.other,
		"open.public.test.":  f.other,
		"allowed.test.evil.": f.other,
	}
}

func sh(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// inNetns runs fn on an OS thread switched into the namespace at path;
// sockets fn opens stay in that namespace.
func inNetns(path string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := os.Open(path)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering netns: %w", err)
	}
	ferr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Leave the thread locked: it dies with the goroutine.
		return fmt.Errorf("leaving netns: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// claimFakeInternetOctet picks a 198.18.X.0/24 (X in 64-127) that no
// other fake internet on this host uses, in this test process or another
// one running beside it: two with one prefix would route the proxy's
// connections to the other's servers (and their certificates). The claim
// is a flocked file held until the test ends.
func claimFakeInternetOctet(t *testing.T) int {
	t.Helper()
	dir := "/run/sandboxapi-e2e"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, i := range mathrand.Perm(64) {
		octet := 64 + i
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("fakeinet-%d.lock", octet)), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		// A route left by a killed run would still shadow the prefix.
		if out, _ := exec.Command("ip", "route", "show", fmt.Sprintf("198.18.%d.0/24", octet)).Output(); len(bytes.TrimSpace(out)) != 0 {
			f.Close()
			continue
		}
		t.Cleanup(func() { f.Close() })
		return octet
	}
	t.Fatal("every fake internet prefix 198.18.64-127.0/24 is in use")
	return 0
}

// startFakeInternet creates the namespace, veth, addresses and servers and
// registers their removal.
func startFakeInternet(t *testing.T) *fakeInternet {
	t.Helper()
	if os.Geteuid() != 0 {
		testenv.Skip(t, "egress e2e needs root (netns, veth, nft)")
	}
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("egress e2e needs %s: %v", tool, err)
		}
	}
	r := randHex(3)
	octet := claimFakeInternetOctet(t) // 198.18.64.0 - 198.18.127.0
	f := &fakeInternet{
		netns:    "e2einet-" + r,
		hostLink: "e2ei" + r,
		prefix:   netip.MustParsePrefix(fmt.Sprintf("198.18.%d.0/24", octet)),
		web:      netip.MustParseAddr(fmt.Sprintf("198.18.%d.2", octet)),
		other:    netip.MustParseAddr(fmt.Sprintf("198.18.%d.3", octet)),
	}
	f.dnsAddr = netip.AddrPortFrom(f.web, 53)
	peer := "e2eo" + r
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", f.hostLink).Run()
		_ = exec.Command("ip", "netns", "del", f.netns).Run()
	})
	sh(t, "ip", "netns", "add", f.netns)
	sh(t, "ip", "link", "add", f.hostLink, "type", "veth", "peer", "name", peer, "netns", f.netns)
	sh(t, "ip", "addr", "add", fmt.Sprintf("198.18.%d.1/24", octet), "dev", f.hostLink)
	sh(t, "ip", "link", "set", f.hostLink, "up")
	sh(t, "ip", "-n", f.netns, "link", "set", "lo", "up")
	for _, a := range []netip.Addr{f.web, f.other} {
		sh(t, "ip", "-n", f.netns, "addr", "add", a.String()+"/24", "dev", peer)
	}
	sh(t, "ip", "-n", f.netns, "link", "set", peer, "up")

	ca, leaf := testCerts(t)
	f.caPEM = ca
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s from %s\n", r.TLS.ServerName, r.Context().Value(http.LocalAddrContextKey))
	})
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		// Echoes the request's headers, one "Name: value" a line.
		for k, vs := range r.Header {
			for _, v := range vs {
				fmt.Fprintf(w, "%s: %s\n", k, v)
			}
		}
		fmt.Fprintf(w, "served-name: %s\n", r.TLS.ServerName)
	})
	var lns []net.Listener
	var pc net.PacketConn
	var dnsLn net.Listener
	err := inNetns("/var/run/netns/"+f.netns, func() error {
		for _, a := range []netip.Addr{f.web, f.other} {
			ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 443).String())
			if err != nil {
				return err
			}
			lns = append(lns, ln)
		}
		var err error
		if pc, err = net.ListenPacket("udp", f.dnsAddr.String()); err != nil {
			return err
		}
		dnsLn, err = net.Listen("tcp", f.dnsAddr.String())
		return err
	})
	if err != nil {
		t.Fatalf("listening in fake internet: %v", err)
	}
	for _, ln := range lns {
		srv := httptest.NewUnstartedServer(mux)
		srv.Listener.Close()
		srv.Listener = ln
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
		srv.StartTLS()
		t.Cleanup(srv.Close)
	}
	zone := f.zone()
	h := dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Authoritative = true
		name := strings.ToLower(q.Question[0].Name)
		a, ok := zone[name]
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Question[0].Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: a.AsSlice()})
		}
		_ = w.WriteMsg(m)
	})
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: h}, {Listener: dnsLn, Handler: h}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go func() { _ = srv.ActivateAndServe() }()
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return f
}

// testCerts makes a CA and a leaf for the fake internet's names.
func testCerts(t *testing.T) (caPEM []byte, leaf tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandboxapi e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "fake internet"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames:    []string{"*.allowed.test", "*.denied.test", "*.public.test"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// egressEnv is the sandboxapi egress config for this test run: its own
// address pool, nft table and name prefix, so parallel runs do not meet.
type egressEnv struct {
	pool   string
	table  string
	prefix string
	// The installer's network, kept apart from other runs' too.
	ipool, itable, iprefix string
}

func newEgressEnv(t *testing.T) egressEnv {
	n, i := testenv.NewNet(t, 'x'), testenv.NewNet(t, 'y')
	return egressEnv{pool: n.Pool, table: n.Table, prefix: n.Prefix, ipool: i.Pool, itable: i.Table, iprefix: i.Prefix}
}

// sweepAfter stops s at the end of the test and then removes any sandbox
// process and mount the server left under its data dir, so the temp dir
// can go. A server should leave none; what it left is logged.
func sweepAfter(t testing.TB, s *server) {
	t.Cleanup(func() {
		s.stop()
		root := "--root=" + filepath.Join(s.dataDir, "runsc")
		var killed []string
		ents, _ := os.ReadDir("/proc")
		for _, en := range ents {
			var pid int
			if _, err := fmt.Sscan(en.Name(), &pid); err != nil {
				continue
			}
			b, err := os.ReadFile("/proc/" + en.Name() + "/cmdline")
			if err != nil || !strings.Contains(string(b), root+"\x00") && !strings.Contains(string(b), root+" ") {
				continue
			}
			if p, err := os.FindProcess(pid); err == nil && p.Kill() == nil {
				killed = append(killed, strings.Fields(strings.ReplaceAll(string(b), "\x00", " "))[0]+"/"+en.Name())
			}
		}
		if len(killed) > 0 {
			time.Sleep(2 * time.Second)
		}
		var mounts []string
		if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], s.dataDir+"/") {
					mounts = append(mounts, f[4])
				}
			}
		}
		for i := len(mounts) - 1; i >= 0; i-- {
			_ = unix.Unmount(mounts[i], unix.MNT_DETACH)
		}
		if len(killed)+len(mounts) > 0 {
			t.Logf("server left behind sandbox processes %q and mounts %q (removed)", killed, mounts)
		}
	})
}

func (e egressEnv) yaml(f *fakeInternet) string {
	return fmt.Sprintf(`egress:
  enabled: true
  resolvers: ["%s"]
  extra_allowed_cidrs: ["%s"]
  idle_timeout: 60s
  network:
    pool: %s
    table: %s
    prefix: %s
installer:
  pool: %s
  table: %s
  prefix: %s
readiness:
  topology_interval: 1h
`, f.dnsAddr, f.prefix, e.pool, e.table, e.prefix, e.ipool, e.itable, e.iprefix)
}

// sessionShort is the name egress gives a session's network parts
// (netns <prefix>-<short>, veth <prefix>h<short>, chain s_<short>).
func sessionShort(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:4])
}

// naming keeps the entries of left that contain one of names.
func naming(left []string, names ...string) []string {
	var out []string
	for _, l := range left {
		for _, n := range names {
			if strings.Contains(l, n) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// settledLeftovers is leftovers once it is empty, or as it is when
// within has passed: a topology canary's network goes away when its check
// ends, which on a loaded machine can be after the check's own timeout.
func (e egressEnv) settledLeftovers(t *testing.T, within time.Duration) []string {
	t.Helper()
	left := e.leftovers(t)
	for end := time.Now().Add(within); len(left) != 0 && time.Now().Before(end); left = e.leftovers(t) {
		time.Sleep(200 * time.Millisecond)
	}
	return left
}

// leftovers lists this run's sandbox namespaces, host veths and session
// chains that exist right now.
func (e egressEnv) leftovers(t *testing.T) []string {
	t.Helper()
	var out []string
	if ents, err := os.ReadDir("/var/run/netns"); err == nil {
		for _, en := range ents {
			if strings.HasPrefix(en.Name(), e.prefix+"-") {
				out = append(out, "netns "+en.Name())
			}
		}
	}
	if ents, err := os.ReadDir("/sys/class/net"); err == nil {
		for _, en := range ents {
			if strings.HasPrefix(en.Name(), e.prefix+"h") {
				out = append(out, "link "+en.Name())
			}
		}
	}
	if b, err := exec.Command("nft", "list", "table", "inet", e.table).CombinedOutput(); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			line = strings.TrimSpace(line)
			if strings.HasPrefix(line, "chain s_") {
				out = append(out, line)
			}
			if strings.Contains(line, `"`+e.prefix+"h") && strings.Contains(line, "jump") {
				out = append(out, "map "+line)
			}
		}
	}
	return out
}

// run executes code in a session with the fake CA trusted.
func (s *server) run(key, id, code string, env map[string]string) map[string]any {
	s.t.Helper()
	r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": code, "env": env, "timeout": 90})
	if r.status != http.StatusOK {
		s.t.Fatalf("execute: %d %s", r.status, r.body)
	}
	return r.json(s.t)
}

const caPath = "/home/sandbox/fake-ca.pem"

var caEnv = map[string]string{
	"SSL_CERT_FILE":       caPath,
	"REQUESTS_CA_BUNDLE":  caPath,
	"NODE_EXTRA_CA_CERTS": caPath,
	"CURL_CA_BUNDLE":      caPath,
}

// installCA writes the fake internet's CA into the session's home.
func (s *server) installCA(key, id string, f *fakeInternet) {
	s.t.Helper()
	res := s.run(key, id, "cat > "+caPath+" <<'EOF'\n"+string(f.caPEM)+"EOF\n", nil)
	if res["exit_code"].(float64) != 0 {
		s.t.Fatalf("writing CA: %v", res)
	}
}

func (s *server) networkSession(key string, network map[string]any) string {
	s.t.Helper()
	r := s.do("POST", "/v1/sessions", key, map[string]any{"language": "bash", "network": network})
	if r.status != http.StatusCreated {
		s.t.Fatalf("create session with network: %d %s\n%s", r.status, r.body, s.logs)
	}
	return r.json(s.t)["id"].(string)
}

func out(res map[string]any) string {
	return fmt.Sprintf("exit=%v status=%v stdout=%q stderr=%q", res["exit_code"], res["status"], res["stdout"], res["stderr"])
}

func exitCode(res map[string]any) int {
	f, _ := res["exit_code"].(float64)
	return int(f)
}

const javaClient = `import java.io.*;
import java.net.URI;
import java.net.http.*;
import java.security.KeyStore;
import java.security.cert.*;
import javax.net.ssl.*;

public class Main {
  public static void main(String[] a) throws Exception {
    CertificateFactory cf = CertificateFactory.getInstance("X.509");
    KeyStore ks = KeyStore.getInstance(KeyStore.getDefaultType());
    ks.load(null, null);
    try (InputStream in = new FileInputStream("/home/sandbox/fake-ca.pem")) {
      ks.setCertificateEntry("ca", cf.generateCertificate(in));
    }
    TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
    tmf.init(ks);
    SSLContext ctx = SSLContext.getInstance("TLS");
    ctx.init(null, tmf.getTrustManagers(), null);
    HttpClient c = HttpClient.newBuilder().sslContext(ctx).connectTimeout(java.time.Duration.ofSeconds(10)).build();
    for (String u : a) {
      long t0 = System.nanoTime();
      try {
        HttpResponse<String> r = c.send(HttpRequest.newBuilder(URI.create(u)).build(), HttpResponse.BodyHandlers.ofString());
        System.out.println("OK " + u + " " + r.statusCode() + " " + r.body().trim());
      } catch (Exception e) {
        StringBuilder chain = new StringBuilder();
        for (Throwable x = e.getCause(); x != null; x = x.getCause()) chain.append(" cause=").append(x);
        System.out.println("FAIL " + u + " " + e + chain + " ms=" + (System.nanoTime() - t0) / 1000000);
      }
    }
  }
}
`

// TestEgressFromSandboxes drives real runsc sandboxes against the fake
// internet through the real egress proxy and sandbox networks.
func TestEgressFromSandboxes(t *testing.T) {
	f := startFakeInternet(t)
	ee := newEgressEnv(t)
	s := startServer(t, ee.yaml(f))
	sweepAfter(t, s)
	ultra := s.key("ULTRA")
	pro := s.key("PRO")

	id := s.networkSession(ultra, map[string]any{"enabled": true, "allowed_domains": []string{"*.allowed.test"}})
	s.installCA(ultra, id, f)
	run := func(t *testing.T, code string) map[string]any {
		t.Helper()
		return s.run(ultra, id, code, caEnv)
	}

	t.Run("proxy env is set", func(t *testing.T) {
		res := run(t, `env | grep -i -E '^(https?_proxy|no_proxy|npm_config_https_proxy|pip_proxy)=' | sort`)
		o := res["stdout"].(string)
		for _, want := range []string{"HTTPS_PROXY=http://", "https_proxy=http://", "NO_PROXY=localhost", "npm_config_https_proxy=http://", "PIP_PROXY=http://"} {
			if !strings.Contains(o, want) {
				t.Errorf("missing %s in\n%s", want, o)
			}
		}
	})
	t.Run("only eth0 and lo", func(t *testing.T) {
		res := run(t, `python3 -c 'import socket; print(sorted(n for _, n in socket.if_nameindex()))'`)
		if got := strings.TrimSpace(res["stdout"].(string)); got != "['eth0', 'lo']" {
			t.Fatalf("interfaces: %s", out(res))
		}
	})
	t.Run("curl explicit proxy allowed", func(t *testing.T) {
		res := run(t, `curl -sS --max-time 30 https://www.allowed.test/`)
		if exitCode(res) != 0 || !strings.Contains(res["stdout"].(string), "hello www.allowed.test from "+f.web.String()) {
			t.Fatalf("%s", out(res))
		}
	})
	t.Run("curl transparent allowed", func(t *testing.T) {
		res := run(t, `curl -sS --noproxy '*' --max-time 30 https://api.allowed.test/`)
		if exitCode(res) != 0 || !strings.Contains(res["stdout"].(string), "hello api.allowed.test from "+f.web.String()) {
			t.Fatalf("%s", out(res))
		}
	})
	t.Run("curl explicit proxy denied", func(t *testing.T) {
		res := run(t, `curl -sS --max-time 30 https://evil.denied.test/; echo "rc=$?"`)
		o := res["stdout"].(string) + res["stderr"].(string)
		if strings.Contains(o, "hello") || !strings.Contains(o, "rc=56") || !strings.Contains(o, "403") {
			t.Fatalf("want CONNECT refused with 403: %s", out(res))
		}
	})
	t.Run("plain HTTP refused by the proxy", func(t *testing.T) {
		res := run(t, `curl -sS --max-time 30 -o /dev/null -w '%{http_code}' http://www.allowed.test/; echo " rc=$?"`)
		if o := res["stdout"].(string); !strings.HasPrefix(o, "403") {
			t.Fatalf("want 403 from the proxy: %s", out(res))
		}
	})
	t.Run("curl transparent denied by DNS", func(t *testing.T) {
		res := run(t, `curl -sS --noproxy '*' --max-time 30 https://evil.denied.test/; echo "rc=$?"`)
		if o := res["stdout"].(string); strings.Contains(o, "hello") || !strings.Contains(o, "rc=6") {
			t.Fatalf("want could not resolve (6): %s", out(res))
		}
	})
	t.Run("DNS answers only allowed names", func(t *testing.T) {
		res := run(t, `getent ahostsv4 www.allowed.test | head -1; getent hosts evil.denied.test; echo "denied_rc=$?"; getent hosts open.public.test; echo "public_rc=$?"`)
		o := res["stdout"].(string)
		if !strings.Contains(o, "denied_rc=2") || !strings.Contains(o, "public_rc=2") || strings.Contains(o, f.web.String()) || !strings.HasPrefix(o, "10.") {
			t.Fatalf("want the proxy address for the allowed name and NXDOMAIN for the rest: %s", out(res))
		}
	})
	t.Run("direct connection to an address fails fast", func(t *testing.T) {
		res := run(t, fmt.Sprintf(`start=$(date +%%s%%N); curl -sS --noproxy '*' --connect-timeout 20 https://%s/; rc=$?; echo "rc=$rc ms=$(( ($(date +%%s%%N)-start)/1000000 ))"
python3 - <<'EOF'
import socket, time
t=time.time()
try:
    socket.create_connection(("%s", 443), timeout=20); print("py=connected")
except OSError as e:
    print("py=%%s ms=%%d" %% (type(e).__name__, (time.time()-t)*1000))
EOF`, f.web, f.web))
		o := res["stdout"].(string)
		var ms, pyms int
		var rc int
		if i := strings.Index(o, "rc="); i >= 0 {
			fmt.Sscanf(o[i:], "rc=%d ms=%d", &rc, &ms)
		}
		if i := strings.Index(o, "py="); i >= 0 {
			if j := strings.Index(o[i:], "ms="); j >= 0 {
				fmt.Sscanf(o[i+j:], "ms=%d", &pyms)
			}
		}
		if rc == 0 || strings.Contains(o, "hello") || strings.Contains(o, "py=connected") || ms > 10000 || pyms > 5000 {
			t.Fatalf("want a fast failure: %s", out(res))
		}
		t.Logf("direct connect: curl rc=%d in %d ms, python in %d ms", rc, ms, pyms)
	})
	t.Run("host ports other than the proxy are closed", func(t *testing.T) {
		// A wildcard listener in the root netns, as any host service has.
		ln, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Write([]byte("host service\n"))
				c.Close()
			}
		}()
		port := ln.Addr().(*net.TCPAddr).Port
		res := run(t, fmt.Sprintf(`python3 - <<'EOF'
import socket, time
host = open("/etc/resolv.conf").read().split()[1]
for p in [%d, 22, 3128]:
    t = time.time()
    try:
        s = socket.create_connection((host, p), timeout=5); s.close(); print("open", p)
    except OSError as e:
        print("closed", p, type(e).__name__, int((time.time()-t)*1000))
EOF`, port))
		o := res["stdout"].(string)
		if !strings.Contains(o, fmt.Sprintf("closed %d", port)) || !strings.Contains(o, "closed 22") || !strings.Contains(o, "open 3128") {
			t.Fatalf("want only the proxy port open on the host side: %s", out(res))
		}
		t.Logf("host side from the sandbox: %s", strings.ReplaceAll(strings.TrimSpace(o), "\n", "; "))
	})
	t.Run("IP literal through the proxy denied", func(t *testing.T) {
		res := run(t, fmt.Sprintf(`curl -sS --max-time 30 -k https://%s/; echo "rc=$?"`, f.web))
		if o := res["stdout"].(string); strings.Contains(o, "hello") || strings.Contains(o, "rc=0") {
			t.Fatalf("%s", out(res))
		}
	})
	t.Run("python urllib", func(t *testing.T) {
		res := run(t, `python3 - <<'EOF'
import urllib.request
for u in ["https://www.allowed.test/", "https://evil.denied.test/"]:
    try:
        print("OK", u, urllib.request.urlopen(u, timeout=30).read().decode().strip())
    except Exception as e:
        print("FAIL", u, type(e).__name__, e)
EOF`)
		o := res["stdout"].(string)
		if !strings.Contains(o, "OK https://www.allowed.test/ hello www.allowed.test") || !strings.Contains(o, "FAIL https://evil.denied.test/") {
			t.Fatalf("%s", out(res))
		}
		// Through the proxy the denial is the CONNECT's 403; without it,
		// the in-sandbox DNS refuses the name.
		if !strings.Contains(o, "FAIL https://evil.denied.test/ URLError <urlopen error Tunnel connection failed: 403") {
			t.Errorf("want the proxy's 403 through the proxy: %s", out(res))
		}
		res = run(t, `python3 - <<'EOF'
import socket, urllib.request
op = urllib.request.build_opener(urllib.request.ProxyHandler({}))
for u in ["https://www.allowed.test/", "https://evil.denied.test/"]:
    try:
        print("OK", u, op.open(u, timeout=30).read().decode().strip())
    except Exception as e:
        r = getattr(e, "reason", e)
        print("FAIL", u, type(r).__name__, getattr(r, "errno", None) == socket.EAI_NONAME)
EOF`)
		o = res["stdout"].(string)
		if !strings.Contains(o, "OK https://www.allowed.test/ hello www.allowed.test") || !strings.Contains(o, "FAIL https://evil.denied.test/ gaierror True") {
			t.Fatalf("want the transparent path to work and DNS to refuse the denied name (EAI_NONAME): %s", out(res))
		}
	})
	t.Run("python requests", func(t *testing.T) {
		res := run(t, `python3 - <<'EOF'
import requests
for u in ["https://www.allowed.test/", "https://evil.denied.test/"]:
    try:
        print("OK", u, requests.get(u, timeout=30).text.strip())
    except Exception as e:
        print("FAIL", u, type(e).__name__)
EOF`)
		o := res["stdout"].(string)
		if !strings.Contains(o, "OK https://www.allowed.test/ hello www.allowed.test") || !strings.Contains(o, "FAIL https://evil.denied.test/") {
			t.Fatalf("%s", out(res))
		}
	})
	t.Run("node fetch transparent", func(t *testing.T) {
		res := run(t, fmt.Sprintf(`node - <<'EOF'
(async () => {
  for (const u of ["https://www.allowed.test/", "https://evil.denied.test/", "https://%s/"]) {
    const t0 = Date.now();
    try {
      const r = await fetch(u, {signal: AbortSignal.timeout(30000)});
      console.log("OK", u, (await r.text()).trim());
    } catch (e) {
      console.log("FAIL", u, e.cause ? e.cause.code : e.name, "ms=" + (Date.now() - t0));
    }
  }
})();
EOF`, f.web))
		o := res["stdout"].(string)
		if !strings.Contains(o, "OK https://www.allowed.test/ hello www.allowed.test") || !strings.Contains(o, "FAIL https://evil.denied.test/ ENOTFOUND") {
			t.Fatalf("%s", out(res))
		}
		direct := "FAIL https://" + f.web.String() + "/ "
		i := strings.Index(o, direct)
		if i < 0 || strings.Contains(o, "OK https://"+f.web.String()) {
			t.Fatalf("want a direct connection to the address to fail: %s", out(res))
		}
		var code string
		var ms int
		fmt.Sscanf(o[i+len(direct):], "%s ms=%d", &code, &ms)
		if code == "TimeoutError" || ms > 10000 {
			t.Fatalf("want a fast failure of the direct connection, got %s after %d ms: %s", code, ms, out(res))
		}
		t.Logf("node direct connection: %s in %d ms", code, ms)
	})
	t.Run("java HttpClient transparent", func(t *testing.T) {
		res := run(t, "mkdir -p /tmp/j && cat > /tmp/j/Main.java <<'EOF'\n"+javaClient+"EOF\njava /tmp/j/Main.java https://www.allowed.test/ https://evil.denied.test/ https://"+f.web.String()+"/")
		o := res["stdout"].(string)
		if !strings.Contains(o, "OK https://www.allowed.test/ 200 hello www.allowed.test") {
			t.Fatalf("%s", out(res))
		}
		// DNS refuses the denied name: the client never gets an address.
		if !strings.Contains(o, "FAIL https://evil.denied.test/ java.net.ConnectException") || !strings.Contains(o, "UnresolvedAddressException") {
			t.Errorf("want an unresolved address for the denied name: %s", out(res))
		}
		direct := "FAIL https://" + f.web.String() + "/ "
		i := strings.Index(o, direct)
		if i < 0 || strings.Contains(o, "OK https://"+f.web.String()) {
			t.Fatalf("want a direct connection to the address to fail: %s", out(res))
		}
		line, _, _ := strings.Cut(o[i:], "\n")
		var ms int
		if j := strings.LastIndex(line, "ms="); j >= 0 {
			fmt.Sscanf(line[j:], "ms=%d", &ms)
		}
		if !strings.Contains(line, "java.net.ConnectException") || strings.Contains(line, "HttpConnectTimeoutException") || ms > 10000 {
			t.Fatalf("want a fast connect failure of the direct connection: %s", line)
		}
		t.Logf("java direct connection: %s", line)
	})

	t.Run("egress log", func(t *testing.T) {
		var body map[string]any
		deadline := time.Now().Add(30 * time.Second)
		for {
			r := s.do("GET", "/v1/sessions/"+id+"/egress", ultra, nil)
			if r.status != http.StatusOK {
				t.Fatalf("egress log: %d %s", r.status, r.body)
			}
			body = r.json(t)
			allow, deny := 0, 0
			for _, d := range body["decisions"].([]any) {
				m := d.(map[string]any)
				switch {
				case m["outcome"] == "allow" && m["host"] == "www.allowed.test":
					allow++
				case m["outcome"] == "deny" && m["host"] == "evil.denied.test":
					deny++
				}
			}
			if allow > 0 && deny > 0 {
				t.Logf("%d decisions, %d allowed www.allowed.test, %d denied evil.denied.test", len(body["decisions"].([]any)), allow, deny)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no allow and deny decisions: %s", r.body)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if r := s.do("GET", "/v1/sessions/"+id+"/egress", pro, nil); r.status != http.StatusNotFound {
			t.Fatalf("another key's egress log: %d %s", r.status, r.body)
		}
	})

	t.Run("no network has only loopback", func(t *testing.T) {
		plain := s.session(pro, "bash")
		res := s.run(pro, plain, fmt.Sprintf(`python3 - <<'EOF'
import socket
print(sorted(n for _, n in socket.if_nameindex()))
for host in ["%s", "www.allowed.test"]:
    try:
        socket.create_connection((host, 443), timeout=5); print("connected", host)
    except OSError as e:
        print("failed", host, type(e).__name__)
EOF
env | grep -ci proxy`, f.web), nil)
		o := res["stdout"].(string)
		if !strings.HasPrefix(o, "['lo']") || strings.Contains(o, "connected") || strings.Count(o, "failed") != 2 {
			t.Fatalf("%s", out(res))
		}
		s.do("DELETE", "/v1/sessions/"+plain, pro, nil)
	})

	t.Run("PRO without a list reaches any public host", func(t *testing.T) {
		pid := s.networkSession(pro, map[string]any{"enabled": true})
		s.installCA(pro, pid, f)
		res := s.run(pro, pid, `for u in https://open.public.test/ https://evil.denied.test/ https://www.allowed.test/; do curl -sS --max-time 30 $u; done; curl -sS --noproxy '*' --max-time 30 https://open.public.test/; curl -sS --max-time 30 https://nx.public.test/; echo "nx_rc=$?"`, caEnv)
		o := res["stdout"].(string)
		for _, want := range []string{"hello open.public.test from " + f.other.String(), "hello evil.denied.test", "hello www.allowed.test"} {
			if !strings.Contains(o, want) {
				t.Errorf("missing %q: %s", want, out(res))
			}
		}
		if strings.Count(o, "hello open.public.test") != 2 || strings.Contains(o, "nx_rc=0") {
			t.Errorf("transparent or NXDOMAIN case wrong: %s", out(res))
		}
		// The other session's proxy is out of reach.
		ultraHost := strings.TrimSpace(run(t, `awk '/^nameserver/{print $2}' /etc/resolv.conf`)["stdout"].(string))
		res = s.run(pro, pid, fmt.Sprintf(`curl -sS --max-time 10 -x http://%s:3128 https://open.public.test/; echo "rc=$?"`, ultraHost), caEnv)
		if o := res["stdout"].(string); ultraHost == "" || strings.Contains(o, "hello") || strings.Contains(o, "rc=0") {
			t.Errorf("reached another session's proxy %s: %s", ultraHost, out(res))
		}
		if r := s.do("DELETE", "/v1/sessions/"+pid, pro, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
	})

	t.Run("ULTRA list entries validated", func(t *testing.T) {
		r := s.do("POST", "/v1/sessions", ultra, map[string]any{"language": "bash", "network": map[string]any{"enabled": true, "allowed_domains": []string{"*"}}})
		if r.status != http.StatusBadRequest {
			t.Fatalf("want 400 for *, got %d %s", r.status, r.body)
		}
		r = s.do("POST", "/v1/sessions", pro, map[string]any{"language": "bash", "network": map[string]any{"enabled": true, "allowed_domains": []string{"a.test"}}})
		if r.status != http.StatusForbidden {
			t.Fatalf("want 403 for PRO with a list, got %d %s", r.status, r.body)
		}
	})

	t.Run("readiness measures the session network", func(t *testing.T) {
		// The topology check ran at start: a canary on a fresh session
		// network reached the proxy and its DNS and nothing else.
		st, detail := s.readinessCheck("topology", 90*time.Second)
		if st != "pass" || !strings.Contains(detail, "sessions: session network reaches the proxy and its DNS only") {
			t.Fatalf("topology: %s %s", st, detail)
		}
		if st, detail := s.readinessCheck("firewall", 30*time.Second); st != "pass" || !strings.Contains(detail, "sessions-chains") {
			t.Fatalf("firewall: %s %s", st, detail)
		}
	})
	t.Run("delete removes netns, veth and rules", func(t *testing.T) {
		if left := ee.leftovers(t); len(left) == 0 {
			t.Fatalf("expected the live session's network to exist")
		}
		if r := s.do("DELETE", "/v1/sessions/"+id, ultra, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
		if left := naming(ee.leftovers(t), sessionShort(id)); len(left) != 0 {
			t.Fatalf("left after delete: %q", left)
		}
		// A topology canary whose check timed out on a loaded machine
		// may still be tearing its own network down.
		if left := ee.settledLeftovers(t, 30*time.Second); len(left) != 0 {
			t.Fatalf("left after delete (other than the session's): %q", left)
		}
		if ents, _ := os.ReadDir(filepath.Join(s.dataDir, "egress")); len(ents) != 0 {
			t.Fatalf("egress records left: %v", ents)
		}
	})
	t.Run("audit trail outlives the session", func(t *testing.T) {
		r := s.do("GET", "/v1/sessions/"+id+"/egress?limit=10000", ultra, nil)
		if r.status != http.StatusOK {
			t.Fatalf("egress log of a deleted session: %d %s", r.status, r.body)
		}
		body := string(r.body)
		for _, want := range []string{`"host":"www.allowed.test"`, `"outcome":"allow"`, `"host":"evil.denied.test"`, `"outcome":"deny"`} {
			if !strings.Contains(body, want) {
				t.Fatalf("trail lacks %s: %s", want, tail(body, 2000))
			}
		}
		if r := s.do("GET", "/v1/sessions/"+id+"/egress", pro, nil); r.status != http.StatusNotFound {
			t.Fatalf("another key reads the trail: %d %s", r.status, r.body)
		}
	})
	t.Run("decisions counted in metrics", func(t *testing.T) {
		m := string(s.do("GET", "/metrics", "", nil).body)
		for _, want := range []string{`sandboxapi_egress_decisions_total{decision="allow"`, `sandboxapi_egress_decisions_total{decision="deny"`} {
			if !strings.Contains(m, want) {
				t.Fatalf("/metrics lacks %s", want)
			}
		}
	})
}

// TestEgressRestartReconciles kills the server with SIGKILL while a
// session with network is alive and leftovers of a vanished session exist,
// then checks that the restarted server removes the leftovers and serves
// the adopted session again.
func TestEgressRestartReconciles(t *testing.T) {
	f := startFakeInternet(t)
	ee := newEgressEnv(t)
	s := startServer(t, ee.yaml(f))
	sweepAfter(t, s)
	ultra := s.key("ULTRA")
	id := s.networkSession(ultra, map[string]any{"enabled": true, "allowed_domains": []string{"www.allowed.test"}})
	s.installCA(ultra, id, f)
	curl := `curl -sS --max-time 30 https://www.allowed.test/; curl -sS --noproxy '*' --max-time 30 https://www.allowed.test/; curl -sS --max-time 30 https://api.allowed.test/; echo "rc=$?"`
	res := s.run(ultra, id, curl, caEnv)
	if o := res["stdout"].(string); strings.Count(o, "hello www.allowed.test") != 2 || strings.Contains(o, "rc=0") {
		t.Fatalf("before restart: %s", out(res))
	}
	// The topology check's canary makes a session network of its own for
	// a while after each start: count networks once it is done.
	s.readinessCheck("topology", 90*time.Second)
	// Count only this session's network and the ghost's: a topology
	// canary whose check timed out on a loaded machine may still be
	// tearing its own network down.
	ghost := "deadbeef"
	ours := func(left []string) []string { return naming(left, sessionShort(id), ghost) }
	before := ours(ee.leftovers(t))

	// If the test stops between kill and start, a server must still come
	// up once to end the surviving sandboxes (s.stop runs after this).
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			s.start()
		}
	})
	s.kill()
	// Leftovers of a session the server no longer knows: netns, veth
	// (peer inside that netns) and chain, as Network.Setup makes them.
	sh(t, "ip", "netns", "add", ee.prefix+"-"+ghost)
	sh(t, "ip", "link", "add", ee.prefix+"h"+ghost, "type", "veth", "peer", "name", "eth0", "netns", ee.prefix+"-"+ghost)
	sh(t, "nft", "add", "chain", "inet", ee.table, "s_"+ghost)
	if left := ours(ee.leftovers(t)); len(left) != len(before)+3 {
		t.Fatalf("planting leftovers: %q (before: %q)", left, before)
	}
	s.start()
	restarted = true

	s.readinessCheck("topology", 90*time.Second)
	after := ours(ee.leftovers(t))
	for _, l := range after {
		if strings.Contains(l, ghost) {
			t.Errorf("leftover not reconciled: %s", l)
		}
	}
	r := s.do("GET", "/v1/sessions/"+id, ultra, nil)
	if r.status == http.StatusOK {
		if len(after) != len(before) {
			t.Errorf("adopted session's network changed: before %q after %q", before, after)
		}
		res := s.run(ultra, id, curl, caEnv)
		if o := res["stdout"].(string); strings.Count(o, "hello www.allowed.test") != 2 || strings.Contains(o, "rc=0") {
			t.Errorf("adopted session after restart: %s\n%s", out(res), s.logs)
		}
		if logs := s.logs.String(); !strings.Contains(logs, "egress session adopted") || !strings.Contains(logs, "removing leftover sandbox network") {
			t.Errorf("no adoption or leftover removal logged:\n%s", logs)
		}
		t.Logf("session adopted after SIGKILL and served again; leftovers before restart %d, after %d", len(before)+3, len(after))
		if r := s.do("DELETE", "/v1/sessions/"+id, ultra, nil); r.status != http.StatusNoContent {
			t.Fatalf("delete: %d %s", r.status, r.body)
		}
	} else {
		t.Logf("session not adopted after SIGKILL (%d): its network must be gone", r.status)
	}
	if left := ours(ee.leftovers(t)); len(left) != 0 {
		t.Fatalf("left after delete: %q", left)
	}
	if left := ee.settledLeftovers(t, 30*time.Second); len(left) != 0 {
		t.Fatalf("left after delete (other than the session's): %q", left)
	}

	// A graceful stop ends the sessions and takes their networks along.
	s.networkSession(ultra, map[string]any{"enabled": true})
	if left := ee.leftovers(t); len(left) == 0 {
		t.Fatal("the new session has no network")
	}
	s.stop()
	if left := ee.leftovers(t); len(left) != 0 {
		t.Fatalf("left after SIGTERM: %q", left)
	}
}

// readinessCheck waits until the named check has run and returns its
// status and detail.
func (s *server) readinessCheck(name string, within time.Duration) (string, string) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		r := s.do("GET", "/readyz", "", nil)
		var body struct {
			Checks []struct{ Name, Status, Detail string } `json:"checks"`
		}
		_ = json.Unmarshal([]byte(r.body), &body)
		for _, c := range body.Checks {
			if c.Name == name && c.Status != "pending" {
				return c.Status, c.Detail
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("check %s did not run within %s: %s", name, within, r.body)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
