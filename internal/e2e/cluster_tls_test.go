package e2e

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// TestClusterTLS runs 2 nodes of the real binary that talk TLS to each
// other (operations.md, "Encrypting node-to-node traffic"): each serves
// tls.mode files with its own certificate from a private CA, advertises
// https://127.0.0.1:PORT, trusts the CA through cluster.ca_file and has
// cluster.require_tls on. It checks, on the same cluster:
//
//   - every node serves its own certificate from its files;
//   - both nodes registered their https URLs;
//   - a session's calls, plain and streamed (SSE), work through the node
//     that does not hold it: forwarded over TLS, served by its holder
//     (X-Sandbox-Node);
//   - a node restarted with a ca_file of another CA forwards nothing: a
//     call for a session the other node holds is 503 node_unavailable,
//     named by the restarted node, whose log says the certificate does not
//     verify. (Plain HTTP cannot be refused here: the nodes listen on
//     loopback, where the listener lets local tooling speak plain HTTP.)
//
// Run with:
//
//	SANDBOXAPI_REQUIRE_RUNSC=1 SANDBOXAPI_REQUIRE_POSTGRES=1 go test -count=1 -run 'TestClusterTLS$' -v ./internal/e2e
func TestClusterTLS(t *testing.T) {
	ca := testenv.NewCA(t, "sandboxapi e2e cluster CA")
	other := testenv.NewCA(t, "another CA")
	dir := t.TempDir()
	caFile := writeTestFile(t, dir, "ca.PEM", ca.PEM)
	otherFile := writeTestFile(t, dir, "other-ca.PEM", other.PEM)
	c := startCluster(t, clusterOptions{nodes: 2, roots: ca.Pool(), nodeYAML: func(i int, addr string) (string, string) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("node%d", i+1)
		certPEM, keyPEM := ca.Issue(t, name, host)
		certFile := writeTestFile(t, dir, name+".crt", certPEM)
		keyFile := writeTestFile(t, dir, name+".key", keyPEM)
		return fmt.Sprintf("  ca_file: %s\n  require_tls: true\n", caFile),
			fmt.Sprintf("tls:\n  mode: files\n  cert_file: %s\n  key_file: %s\n", certFile, keyFile)
	}})
	c.admin.importOSV() // /readyz, over HTTPS, is green only with it
	c.waitReady(t, 3*time.Minute)

	for i, s := range c.nodes {
		conn, err := tls.Dial("tcp", s.addr, &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})
		if err != nil {
			t.Fatalf("TLS to %s: %v", c.names[i], err)
		}
		cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName
		conn.Close()
		if cn != c.names[i] {
			t.Errorf("%s serves the certificate of %q", c.names[i], cn)
		}
	}
	nodes, err := c.openStore(t).Nodes(t.Context())
	if err != nil || len(nodes) != 2 {
		t.Fatalf("nodes in the store: %v %v", nodes, err)
	}
	for _, n := range nodes {
		i := c.index(n.Name)
		if want := "https://" + c.nodes[max(i, 0)].addr; i < 0 || strings.TrimSuffix(n.URL, "/") != want {
			t.Errorf("node %s registered %q, want %q", n.Name, n.URL, want)
		}
	}

	key := c.key(t, "MEGA")
	type sess struct {
		id    string
		owner int
	}
	var ss []sess
	for i := range c.nodes {
		id, owner := c.create(t, i, key, map[string]any{"language": "bash"})
		t.Logf("session %s created through %s is held by %s", id, c.names[i], owner)
		if c.index(owner) < 0 {
			t.Fatalf("create through %s: X-Sandbox-Node %q", c.names[i], owner)
		}
		ss = append(ss, sess{id, c.index(owner)})
	}
	for _, s := range ss {
		via := c.other(s.owner, s.owner)
		r := c.exec(t, via, key, s.id, "echo forwarded-$((6*7))")
		if got := servedBy(r); got != c.names[s.owner] {
			t.Errorf("execute in %s through %s served by %q, want its holder %s", s.id, c.names[via], got, c.names[s.owner])
		}
		if got := r.json(t)["stdout"]; got != "forwarded-42\n" {
			t.Errorf("execute in %s through %s: stdout %q: %s", s.id, c.names[via], got, r.body)
		}
		ev := c.stream(t, via, key, s.id, "echo first; sleep 1; echo second")
		if got := servedBy(ev.reply); got != c.names[s.owner] {
			t.Errorf("streamed execute in %s through %s served by %q, want %s", s.id, c.names[via], got, c.names[s.owner])
		}
		if !strings.Contains(ev.text, "event: stdout") || !strings.Contains(ev.text, "event: result") ||
			!strings.Contains(ev.text, `"status":"ok"`) || !strings.Contains(ev.text, "second") {
			t.Errorf("stream in %s through %s: %q", s.id, c.names[via], ev.text)
		}
		// The holder got them as forwards from via.
		if l, ok := logHas(c.nodes[s.owner], time.Minute, `"msg":"cluster: forwarded call"`, `"from":"`+c.names[via]+`"`,
			`"path":"/v1/sessions/`+s.id+`/execute"`); !ok {
			t.Errorf("%s's log shows no forwarded execute in %s from %s:\n%s", c.names[s.owner], s.id, c.names[via], tail(l, 40))
		}
	}
	if t.Failed() {
		return
	}

	// node1 again, trusting another CA only: it hands its sessions over
	// as it stops; node2 takes each over on its next call.
	v, keep := 0, 1
	s := c.nodes[v]
	cfg, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), "  ca_file: "+caFile+"\n") {
		t.Fatalf("no ca_file in %s's config:\n%s", c.names[v], cfg)
	}
	cfg = []byte(strings.Replace(string(cfg), "  ca_file: "+caFile+"\n", "  ca_file: "+otherFile+"\n", 1))
	if err := os.WriteFile(s.config, cfg, 0o600); err != nil {
		t.Fatal(err)
	}
	s.stop()
	c.keepLogs(v)
	s.start()
	c.waitReady(t, 3*time.Minute)
	for _, ss := range ss {
		r := c.exec(t, keep, key, ss.id, "echo still-here")
		if got := servedBy(r); got != c.names[keep] || r.json(t)["stdout"] != "still-here\n" {
			t.Fatalf("execute in %s through %s after %s's restart: served by %q: %s", ss.id, c.names[keep], c.names[v], got, r.body)
		}
		r = c.call(t, v, request{method: "POST", path: "/v1/sessions/" + ss.id + "/execute", key: key, body: map[string]any{"code": "echo leaked"}})
		if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), `"code":"node_unavailable"`) || servedBy(r) != c.names[v] {
			t.Fatalf("execute in %s (held by %s) through %s, which does not trust its CA: %d %v %s",
				ss.id, c.names[keep], c.names[v], r.status, r.header, r.body)
		}
	}
	if l, ok := logHas(s, time.Minute, "the node's TLS certificate does not verify", `"node":"`+c.names[keep]+`"`); !ok {
		t.Errorf("%s's log does not say %s's certificate does not verify:\n%s", c.names[v], c.names[keep], tail(l, 40))
	}
	// The other end saw those forwards as TLS handshakes it lost.
	if l, ok := logHas(c.nodes[keep], time.Minute, "http: TLS handshake error from 127.0.0.1:", "bad certificate"); !ok {
		t.Errorf("%s's log shows no refused TLS handshake:\n%s", c.names[keep], tail(l, 40))
	}
}

// logHas waits up to within for a line of s's log holding every one of
// parts, and returns the log and whether it came.
func logHas(s *server, within time.Duration, parts ...string) (string, bool) {
	for deadline := time.Now().Add(within); ; time.Sleep(100 * time.Millisecond) {
		l := s.logs.String()
		for line := range strings.SplitSeq(l, "\n") {
			has := true
			for _, p := range parts {
				has = has && strings.Contains(line, p)
			}
			if has {
				return l, true
			}
		}
		if time.Now().After(deadline) {
			return l, false
		}
	}
}

// writeTestFile writes b to dir/name (mode 0600) and returns its path.
func writeTestFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
