package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// pipelinedConn sends the CONNECT request together with the first bytes
// the TLS client writes (its ClientHello), in one write, and reads the
// proxy's reply before handing the stream to TLS.
type pipelinedConn struct {
	net.Conn
	connect []byte
	sent    bool
	br      *bufio.Reader
	replied bool
}

func (c *pipelinedConn) Write(p []byte) (int, error) {
	if !c.sent {
		c.sent = true
		if _, err := c.Conn.Write(append(append([]byte{}, c.connect...), p...)); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *pipelinedConn) Read(p []byte) (int, error) {
	if !c.replied {
		c.replied = true
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK {
			return 0, fmt.Errorf("CONNECT answered %d", resp.StatusCode)
		}
	}
	return c.br.Read(p)
}

// A client that does not wait for the CONNECT reply before its
// ClientHello still gets its tunnel: the bytes the proxy's HTTP server
// read past the request are not lost in the hijack.
func TestConnectPipelinedWithClientHello(t *testing.T) {
	t.Parallel()
	f := sharedFakeNet(t)
	p := newTestProxy(t, testConfig(f))
	s := addSession(t, p, "ok.example.com")
	authority := fmt.Sprintf("ok.example.com:%d", f.httpsAP.Port())
	raw := dialFrom(t, s.SandboxAddr, s.ep.Connect)
	raw.SetDeadline(time.Now().Add(10 * time.Second))
	pc := &pipelinedConn{Conn: raw, connect: []byte("CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"), br: bufio.NewReader(raw)}
	tc := tls.Client(pc, &tls.Config{ServerName: "ok.example.com", RootCAs: f.roots})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS through a pipelined CONNECT: %v", err)
	}
	fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: ok.example.com\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if string(body) != "hello ok.example.com" {
		t.Fatalf("body %q", body)
	}
	tc.Close() // an allowed tunnel is audited when it ends
	if d := lastDecision(t, p, s.ID); d.Outcome != OutcomeAllow || d.Host != "ok.example.com" {
		t.Fatalf("decision %+v", d)
	}
}
