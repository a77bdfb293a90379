package tlsserve

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// pebbleBinary finds a Pebble ACME test server: $PEBBLE, then PATH, then
// where `GOBIN=/tmp/pebblebin go install
// github.com/letsencrypt/pebble/v2/cmd/pebble@v2.7.0` puts it. Its test
// certificates come from the module cache.
func pebbleBinary(t *testing.T) (bin, certs string) {
	t.Helper()
	bin = os.Getenv("PEBBLE")
	if bin == "" {
		if p, err := exec.LookPath("pebble"); err == nil {
			bin = p
		} else if _, err := os.Stat("/tmp/pebblebin/pebble"); err == nil {
			bin = "/tmp/pebblebin/pebble"
		}
	}
	out, _ := exec.Command("go", "env", "GOMODCACHE").Output()
	certs = filepath.Join(strings.TrimSpace(string(out)), "github.com", "letsencrypt", "pebble", "v2@v2.7.0", "test", "certs")
	if _, err := os.Stat(filepath.Join(certs, "pebble.minica.pem")); bin == "" || err != nil {
		if os.Getenv("SANDBOXAPI_REQUIRE_PEBBLE") == "1" {
			t.Fatal("SANDBOXAPI_REQUIRE_PEBBLE=1 but Pebble is not installed")
		}
		t.Skip("Pebble not installed: GOBIN=/tmp/pebblebin go install github.com/letsencrypt/pebble/v2/cmd/pebble@v2.7.0")
	}
	return bin, certs
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, p, _ := net.SplitHostPort(ln.Addr().String())
	return p
}

// TestTLSACMEWithPebble obtains a certificate from a local Pebble through
// the real ACME flow: account, order, an HTTP-01 or TLS-ALPN-01 challenge
// answered by our listeners (Pebble resolves the domain through a DNS
// server of the test's own that points it at 127.0.0.1), finalize, and a
// handshake that chains to Pebble's root.
func TestTLSACMEWithPebble(t *testing.T) {
	bin, certs := pebbleBinary(t)
	const domain = "api.sandboxapi.test"

	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dnsSrv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, q *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(q)
		for _, qq := range q.Question {
			if qq.Qtype == dns.TypeA {
				rr, _ := dns.NewRR(qq.Name + " 5 IN A 127.0.0.1")
				m.Answer = append(m.Answer, rr)
			}
		}
		_ = w.WriteMsg(m)
	})}
	go dnsSrv.ActivateAndServe()
	defer dnsSrv.Shutdown()

	tlsPort, httpPort, acmePort, mgmtPort := freePort(t), freePort(t), freePort(t), freePort(t)
	dir := t.TempDir()
	pcfg := map[string]any{"pebble": map[string]any{
		"listenAddress": "127.0.0.1:" + acmePort, "managementListenAddress": "127.0.0.1:" + mgmtPort,
		"certificate": filepath.Join(certs, "localhost", "cert.pem"), "privateKey": filepath.Join(certs, "localhost", "key.pem"),
		"httpPort": atoiOr(httpPort, 0), "tlsPort": atoiOr(tlsPort, 0), "ocspResponderURL": "", "externalAccountBindingRequired": false,
	}}
	b, _ := json.Marshal(pcfg)
	cfgPath := filepath.Join(dir, "pebble.json")
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-config", cfgPath, "-dnsserver", pc.LocalAddr().String())
	cmd.Env = append(os.Environ(), "PEBBLE_VA_NOSLEEP=1", "PEBBLE_WFE_NONCEREJECT=0", "PEBBLE_AUTHZREUSE=0")
	var plog strings.Builder
	cmd.Stdout, cmd.Stderr = &plog, &plog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Log("pebble:\n" + plog.String())
		}
	}()
	minica := filepath.Join(certs, "pebble.minica.pem")
	waitTCP(t, "127.0.0.1:"+acmePort)
	waitTCP(t, "127.0.0.1:"+mgmtPort)

	env := tlsTestEnv(t, Settings{Mode: ModeACME, Domains: []string{domain}, Email: "ops@sandboxapi.test",
		ACMEDirectory: "https://127.0.0.1:" + acmePort + "/dir", ACMERoots: minica, RedirectListen: "127.0.0.1:" + httpPort})
	env.Config.Listen = "127.0.0.1:" + tlsPort
	tl := serveTLS(t, env)
	defer tl.Close()

	// Pebble's issuing root, from its management interface.
	mc := clientTrusting(t, minica)
	_, root := getBody(t, mc, "https://127.0.0.1:"+mgmtPort+"/roots/0")
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(root)) {
		t.Fatalf("no root from Pebble: %q", root)
	}
	dialer := &net.Dialer{Timeout: 2 * time.Second}
	var state tls.ConnectionState
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := tls.DialWithDialer(dialer, "tcp", "127.0.0.1:"+tlsPort, &tls.Config{ServerName: domain, RootCAs: pool})
		if err == nil {
			state = conn.ConnectionState()
			io.WriteString(conn, "GET /ping HTTP/1.1\r\nHost: "+domain+"\r\nConnection: close\r\n\r\n")
			reply, _ := io.ReadAll(conn)
			conn.Close()
			if !strings.Contains(string(reply), "hello /ping") {
				t.Fatalf("reply over ACME certificate: %q", reply)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no certificate from Pebble within 60s: %v", err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if got := state.PeerCertificates[0].DNSNames; len(got) != 1 || got[0] != domain {
		t.Errorf("certificate names %v", got)
	}

	// The redirect listener keeps answering with a redirect to HTTPS.
	req, _ := http.NewRequest("GET", "http://127.0.0.1:"+httpPort+"/v1/runtimes", nil)
	req.Host = domain
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusPermanentRedirect || loc != "https://"+domain+":"+tlsPort+"/v1/runtimes" {
		t.Errorf("redirect %d %q", resp.StatusCode, loc)
	}
}

func waitTCP(t *testing.T, addr string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never listened", addr)
}
