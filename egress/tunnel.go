package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ErrNotTLS means the first bytes of a tunnel were not a TLS ClientHello.
var ErrNotTLS = errors.New("not a TLS ClientHello")

var errHelloRead = errors.New("hello read") // stops the handshake once SNI is known

// recordingConn feeds crypto/tls from a connection while keeping a copy of
// every byte read, and swallows whatever tls tries to write (alerts).
type recordingConn struct {
	net.Conn
	buf bytes.Buffer
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.buf.Write(p[:n])
	if c.buf.Len() > 64<<10 {
		return n, fmt.Errorf("reading ClientHello: %w: too large", ErrNotTLS)
	}
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error) { return len(p), nil }

// peekClientHello reads the client's TLS ClientHello (using crypto/tls's
// own parser) and returns its SNI plus every byte consumed, which the
// caller must forward upstream first.
func peekClientHello(conn net.Conn, timeout time.Duration) (sni string, consumed []byte, err error) {
	if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", nil, fmt.Errorf("setting hello deadline: %w", err)
	}
	defer conn.SetReadDeadline(time.Time{})
	rc := &recordingConn{Conn: conn}
	var hello *tls.ClientHelloInfo
	srv := tls.Server(rc, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			hello = h
			return nil, errHelloRead
		},
	})
	herr := srv.Handshake()
	if hello == nil {
		if herr == nil {
			herr = ErrNotTLS
		}
		if errors.Is(herr, os.ErrDeadlineExceeded) {
			return "", rc.buf.Bytes(), fmt.Errorf("reading ClientHello: %w", herr)
		}
		return "", rc.buf.Bytes(), fmt.Errorf("reading ClientHello: %w: %w", ErrNotTLS, herr)
	}
	return hello.ServerName, rc.buf.Bytes(), nil
}

// tunnel is one spliced client<->upstream connection pair. Its close is
// idempotent and safe from any goroutine.
type tunnel struct {
	client, upstream net.Conn
	up, down         atomic.Int64
	last             atomic.Int64 // unix nanos of the last byte moved
	once             sync.Once
}

func (t *tunnel) close() {
	t.once.Do(func() {
		t.client.Close()
		t.upstream.Close()
	})
}

// run copies both ways until either side ends, the tunnel is idle for
// idle, or ctx is done. It closes both connections before returning.
func (t *tunnel) run(ctx context.Context, idle time.Duration) {
	t.last.Store(time.Now().UnixNano())
	stop := context.AfterFunc(ctx, t.close)
	defer stop()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); t.pipe(t.upstream, t.client, &t.up, idle) }()
	go func() { defer wg.Done(); t.pipe(t.client, t.upstream, &t.down, idle) }()
	wg.Wait()
	t.close()
}

type closeWriter interface{ CloseWrite() error }

// pipe copies src to dst in chunks so the idle deadline can be renewed;
// on TCP both ends use splice(2) via TCPConn.ReadFrom.
func (t *tunnel) pipe(dst, src net.Conn, n *atomic.Int64, idle time.Duration) {
	const chunk = 4 << 20
	lr := &io.LimitedReader{R: src}
	for {
		src.SetReadDeadline(time.Now().Add(idle))
		lr.N = chunk
		var w int64
		var err error
		if rf, ok := dst.(io.ReaderFrom); ok {
			w, err = rf.ReadFrom(lr)
		} else {
			w, err = io.Copy(dst, lr)
		}
		if w > 0 {
			n.Add(w)
			t.last.Store(time.Now().UnixNano())
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && time.Since(time.Unix(0, t.last.Load())) < idle {
				continue // the other direction is active
			}
			t.close()
			return
		}
		if w == 0 && lr.N > 0 { // EOF from src
			if cw, ok := dst.(closeWriter); ok {
				cw.CloseWrite()
			} else {
				t.close()
			}
			return
		}
	}
}
