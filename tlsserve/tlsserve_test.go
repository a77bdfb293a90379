package tlsserve

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testEnv is what Listen needs: an address, a data folder, the tls
// section and a logger.
type testEnv struct {
	Config *testConfig
	Log    *slog.Logger
}

// testConfig holds the parts of the root config Listen reads.
type testConfig struct {
	Listen, DataDir string
	TLS             Settings
}

// tlsTestEnv is a config on loopback with a fresh data dir.
func tlsTestEnv(t *testing.T, tc Settings) *testEnv {
	t.Helper()
	cfg := &testConfig{Listen: "127.0.0.1:0", DataDir: t.TempDir(), TLS: tc}
	if err := tc.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	return &testEnv{Config: cfg, Log: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
}

// serveTLS runs an http.Server on listen's listener answering "hello".
func serveTLS(t *testing.T, env *testEnv) *tlsListener {
	t.Helper()
	ln, err := Listen(t.Context(), env.Config.Listen, env.Config.DataDir, env.Config.TLS, env.Log)
	if err != nil {
		t.Fatal(err)
	}
	tl, ok := ln.(*tlsListener)
	if !ok {
		t.Fatalf("Listen returned %T, want a TLS listener", ln)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello "+r.URL.Path)
	}), ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
	})
	return tl
}

func clientTrusting(t *testing.T, pemFile string) *http.Client {
	t.Helper()
	b, err := os.ReadFile(pemFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		t.Fatalf("%s holds no certificate", pemFile)
	}
	return &http.Client{
		Timeout:       10 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

func getBody(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestTLSLocalIssuer serves HTTPS with certificates that certmagic obtains
// from the local CA, checks them from a client that trusts only that CA,
// and follows the HTTP redirect listener to HTTPS.
func TestTLSLocalIssuer(t *testing.T) {
	env := tlsTestEnv(t, Settings{Mode: ModeLocal, RedirectListen: "127.0.0.1:0"})
	tl := serveTLS(t, env)
	_, port, _ := net.SplitHostPort(tl.Addr().String())
	caFile := filepath.Join(env.Config.DataDir, "tls", "local-ca", "ca.pem")
	c := clientTrusting(t, caFile)

	for _, host := range []string{"127.0.0.1", "localhost"} {
		resp, body := getBody(t, c, "https://"+net.JoinHostPort(host, port)+"/healthz")
		if resp.StatusCode != 200 || body != "hello /healthz" {
			t.Fatalf("%s: %d %q", host, resp.StatusCode, body)
		}
		leaf := resp.TLS.PeerCertificates[0]
		if leaf.NotAfter.Sub(leaf.NotBefore) > 8*24*time.Hour {
			t.Errorf("leaf lifetime %v, want about a week", leaf.NotAfter.Sub(leaf.NotBefore))
		}
	}
	// Loopback peers may still speak plain HTTP on the same port (local
	// tooling); others may not.
	resp, body := getBody(t, &http.Client{Timeout: 5 * time.Second}, "http://127.0.0.1:"+port+"/plain")
	if resp.StatusCode != 200 || body != "hello /plain" || resp.TLS != nil {
		t.Errorf("plain HTTP from loopback: %d %q", resp.StatusCode, body)
	}
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 5000} }
	for _, c := range []struct {
		remote, local string
		ok            bool
	}{
		{"127.0.0.1", "127.0.0.1", true},
		{"::1", "::1", true},
		{"127.0.0.5", "10.0.0.1", true},
		{"10.0.0.1", "10.0.0.1", true}, // the host itself, on the address it listens on
		{"192.0.2.7", "10.0.0.1", false},
		{"10.200.0.2", "10.200.0.1", false}, // a sandbox beside a session's host address
		{"::ffff:192.0.2.7", "10.0.0.1", false},
		{"0.0.0.0", "0.0.0.0", false},
	} {
		if got := plainAllowed(tcp(c.remote), tcp(c.local)); got != c.ok {
			t.Errorf("plainAllowed(%s -> %s) = %v, want %v", c.remote, c.local, got, c.ok)
		}
	}
	if plainAllowed(&net.UnixAddr{Name: "x"}, tcp("127.0.0.1")) {
		t.Error("plainAllowed took a non-TCP peer")
	}
	// A client that does not trust the local CA is refused.
	if _, err := http.Get("https://" + tl.Addr().String() + "/"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusting client: err = %v", err)
	}

	// The redirect listener sends plain HTTP to HTTPS, path and query kept.
	resp, _ = getBody(t, c, "http://"+tl.redirect.String()+"/v1/runtimes?x=1")
	if resp.StatusCode != http.StatusPermanentRedirect {
		t.Fatalf("redirect status %d", resp.StatusCode)
	}
	loc := resp.Header.Get("Location")
	if want := "https://127.0.0.1:" + port + "/v1/runtimes?x=1"; loc != want {
		t.Fatalf("Location %q, want %q", loc, want)
	}
	resp, body = getBody(t, c, loc)
	if resp.StatusCode != 200 || body != "hello /v1/runtimes" {
		t.Fatalf("after redirect: %d %q", resp.StatusCode, body)
	}

	// Certificates persist: a second start reuses the CA and the leaf.
	first := resp.TLS.PeerCertificates[0].SerialNumber
	tl.Close()
	if _, err := net.DialTimeout("tcp", tl.redirect.String(), time.Second); err == nil {
		t.Error("redirect listener still open after the TLS listener closed")
	}
	tl2 := serveTLS(t, env)
	resp, _ = getBody(t, c, "https://"+tl2.Addr().String()+"/")
	if got := resp.TLS.PeerCertificates[0].SerialNumber; got.Cmp(first) != 0 {
		t.Errorf("restart issued a new certificate (%v, was %v)", got, first)
	}
	tl2.Close()
}

// TestTLSFiles serves operator-provided files and picks up a replaced
// certificate without a restart.
func TestTLSFiles(t *testing.T) {
	dir := t.TempDir()
	ca, err := loadOrCreateLocalCA(filepath.Join(dir, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "fullchain.pem"), filepath.Join(dir, "privkey.pem")
	writeLeaf(t, ca, certFile, keyFile)
	env := tlsTestEnv(t, Settings{Mode: ModeFiles, CertFile: certFile, KeyFile: keyFile})
	tl := serveTLS(t, env)
	defer tl.Close()
	c := clientTrusting(t, filepath.Join(dir, "ca", "ca.pem"))
	url := "https://" + tl.Addr().String() + "/x"
	resp, body := getBody(t, c, url)
	if resp.StatusCode != 200 || body != "hello /x" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	first := resp.TLS.PeerCertificates[0].SerialNumber

	time.Sleep(1100 * time.Millisecond) // files are looked at once a second
	writeLeaf(t, ca, certFile, keyFile)
	c.Transport.(*http.Transport).CloseIdleConnections()
	resp, _ = getBody(t, c, url)
	if resp.TLS.PeerCertificates[0].SerialNumber.Cmp(first) == 0 {
		t.Error("the replaced certificate was not picked up")
	}
}

// writeLeaf issues a 127.0.0.1 certificate from ca into the two files.
func writeLeaf(t *testing.T, ca *localCA, certFile, keyFile string) {
	t.Helper()
	dir := t.TempDir()
	magicLike, err := loadOrCreateLocalCA(dir) // a throwaway key pair to sign a CSR with
	if err != nil {
		t.Fatal(err)
	}
	csrDER, err := x509.CreateCertificateRequest(nil, &x509.CertificateRequest{IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}, magicLike.key)
	if err != nil {
		t.Fatal(err)
	}
	csr, _ := x509.ParseCertificateRequest(csrDER)
	issued, err := ca.Issue(t.Context(), csr)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := os.ReadFile(filepath.Join(dir, "ca-key.pem"))
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, issued.Certificate, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTLSConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		tls     Settings
		wantErr string
	}{
		{name: "off", tls: Settings{Mode: "off"}},
		{name: "empty is off", tls: Settings{}},
		{name: "acme", tls: Settings{Mode: "acme", Domains: []string{"api.example.com"}, Email: "ops@example.com", ACMEDirectory: "https://ca.internal/acme/directory", RedirectListen: ":80"}},
		{name: "acme without domain", tls: Settings{Mode: "acme"}, wantErr: "acme needs at least one domain"},
		{name: "acme with IP", tls: Settings{Mode: "acme", Domains: []string{"10.0.0.1"}}, wantErr: "not a domain name"},
		{name: "acme http directory", tls: Settings{Mode: "acme", Domains: []string{"a.example.com"}, ACMEDirectory: "http://ca/dir"}, wantErr: "not an https URL"},
		{name: "local", tls: Settings{Mode: "local", Domains: []string{"sandbox.lan", "10.0.0.5"}}},
		{name: "local with acme field", tls: Settings{Mode: "local", Email: "x@y.z"}, wantErr: "apply to mode acme only"},
		{name: "files", tls: Settings{Mode: "files", CertFile: "/c.pem", KeyFile: "/k.pem"}},
		{name: "files without key", tls: Settings{Mode: "files", CertFile: "/c.pem"}, wantErr: "needs cert_file and key_file"},
		{name: "bad redirect", tls: Settings{Mode: "local", RedirectListen: "80"}, wantErr: "redirect_listen"},
		{name: "unknown mode", tls: Settings{Mode: "on"}, wantErr: "tls.mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.tls.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
