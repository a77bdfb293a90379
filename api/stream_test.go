package api

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// floodSandboxes streams output without end until its context is
// cancelled, then reports the cancellation on cancelled.
type floodSandboxes struct {
	*fakeSandboxes
	cancelled chan struct{}
}

func (f *floodSandboxes) ExecuteStateless(ctx context.Context, owner string, req sandbox.ExecRequest) (sandbox.Result, error) {
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	for {
		select {
		case <-ctx.Done():
			close(f.cancelled)
			return sandbox.Result{}, ctx.Err()
		default:
		}
		req.OnOutput("stdout", chunk)
	}
}

// smallBufListener shrinks the send buffer of each accepted connection so
// a reader that stops fills it quickly.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

// TestStreamStalledReaderCancelsRun checks that a streaming client that
// stops reading does not hold its execution: the event write times out,
// the run's context is cancelled and the handler returns.
func TestStreamStalledReaderCancelsRun(t *testing.T) {
	t.Parallel()
	srv, fake := newFakeServerWith(t, func(c *Config) { c.StreamWriteTimeout = 300 * time.Millisecond })
	flood := &floodSandboxes{fakeSandboxes: fake, cancelled: make(chan struct{})}
	srv.sb = flood
	returned := make(chan struct{})
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		srv.ServeHTTP(w, r)
		close(returned)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts.Listener.Close()
	ts.Listener = smallBufListener{ln}
	ts.Start()
	defer ts.Close()

	d := net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"language":"python3","code":"flood","stream":true}`
	fmt.Fprintf(conn, "POST /v1/execute HTTP/1.1\r\nHost: x\r\nX-API-Key: key-BASIC\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	// The client now reads nothing.

	const bound = 10 * time.Second
	select {
	case <-flood.cancelled:
	case <-time.After(bound):
		t.Fatalf("the run was not cancelled within %v of the client stalling", bound)
	}
	select {
	case <-returned:
	case <-time.After(bound):
		t.Fatalf("the handler did not return within %v of the client stalling", bound)
	}
}
