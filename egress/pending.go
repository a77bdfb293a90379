package egress

import (
	"net"
	"sync"
	"sync/atomic"
)

// ReasonPendingLimit is the deny reason for a connection closed on accept
// because the session already had MaxPendingPerSession connections waiting
// on that listener.
const ReasonPendingLimit = "pending connection limit per session reached"

// ReasonMalformed is the deny reason for a CONNECT-port connection that
// sent bytes but never reached the proxy's handler: net/http refused the
// request line or headers itself (a bracketed name, NUL, space or percent
// in the target, oversized headers) or the header timeout hit.
const ReasonMalformed = "malformed or incomplete proxy request"

// pendingListener caps the connections of one session listener that are
// accepted but not yet settled: a connection counts from Accept until it
// is closed or settle is called on it (once it holds a tunnel slot, which
// MaxTunnelsPerSession bounds). Past max, Accept closes new connections at
// once (with a reset, leaving no TIME_WAIT on the host) and calls refused,
// so a sandbox cannot hold more than max idle sockets per listener, each
// for up to HandshakeTimeout. Safe for concurrent use.
type pendingListener struct {
	net.Listener
	max     int64
	n       atomic.Int64
	refused func(net.Conn) // may be nil; called before the conn is closed
	// malformed, if set, is called once for a connection that read bytes
	// but was closed without markServed (no handler saw a request).
	malformed func(net.Conn)
}

func newPendingListener(ln net.Listener, max int, refused func(net.Conn)) *pendingListener {
	return &pendingListener{Listener: ln, max: int64(max), refused: refused}
}

// Accept returns the next connection within the cap, closing those past it.
func (l *pendingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.n.Add(1) <= l.max {
			return &pendingConn{Conn: c, l: l}, nil
		}
		l.n.Add(-1)
		if l.refused != nil {
			l.refused(c)
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetLinger(0)
		}
		c.Close()
	}
}

// pending is how many accepted connections are not yet settled.
func (l *pendingListener) pending() int { return int(l.n.Load()) }

// pendingConn is a connection counted by its pendingListener until it is
// closed or settled.
type pendingConn struct {
	net.Conn
	l         *pendingListener
	once      sync.Once
	closeOnce sync.Once
	gotBytes  atomic.Bool // the peer sent something
	served    atomic.Bool // a handler saw a request (markServed)
}

func (c *pendingConn) settle() { c.once.Do(func() { c.l.n.Add(-1) }) }

func (c *pendingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && !c.gotBytes.Load() {
		c.gotBytes.Store(true)
	}
	return n, err
}

func (c *pendingConn) Close() error {
	c.settle()
	c.closeOnce.Do(func() {
		if c.l.malformed != nil && !c.served.Load() && c.gotBytes.Load() {
			c.l.malformed(c)
		}
	})
	return c.Conn.Close()
}

// CloseWrite half-closes the underlying connection, as the tunnel expects.
func (c *pendingConn) CloseWrite() error {
	if cw, ok := c.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// markServed records that a handler saw a request on c (or the connection
// it wraps), so its close is not audited as malformed.
func markServed(c net.Conn) {
	for {
		switch v := c.(type) {
		case *pendingConn:
			v.served.Store(true)
			return
		case *prefixedConn:
			c = v.Conn
		default:
			return
		}
	}
}

// settlePending stops counting c (or the connection it wraps) against its
// listener's pending cap: it now holds a tunnel slot.
func settlePending(c net.Conn) {
	for {
		switch v := c.(type) {
		case *pendingConn:
			v.settle()
			return
		case *prefixedConn:
			c = v.Conn
		default:
			return
		}
	}
}
