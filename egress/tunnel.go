package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
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
