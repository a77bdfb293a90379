package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// maxIdleCheck bounds the watchdog's check interval, so a long idle
// timeout is still enforced within this much of its end.
const maxIdleCheck = 15 * time.Second

// fallbackBuf is the copy buffer of the user-space path.
const fallbackBuf = 64 << 10

// tunnel is one client<->upstream connection pair. Only client and
// upstream need setting; run moves the bytes. up and down count the bytes
// delivered each way; they are final once run returns (while it runs they
// may lag behind, by up to everything moved in the kernel). close is
// idempotent and safe from any goroutine.
//
// Where both ends are TCP sockets on Linux the bytes move in the kernel
// (io.Copy between two *net.TCPConn uses splice(2) through a pipe), with
// no per-read work in Go: the byte counts come from splice's return values
// and idleness from the sockets' own counters (TCP_INFO bytes received and
// acknowledged), sampled by a coarse watchdog. Elsewhere a user-space copy
// counts each write.
type tunnel struct {
	client, upstream net.Conn
	up, down         atomic.Int64
	once             sync.Once

	// Set by run: the sockets under client and upstream when both are
	// TCP and their kernel counters can be read, else nil.
	rawClient, rawUpstream *net.TCPConn
}

func (t *tunnel) close() {
	t.once.Do(func() {
		t.client.Close()
		t.upstream.Close()
	})
}

// progress is a number that changes whenever bytes move either way: the
// sockets' kernel counters plus the counts of finished copies.
func (t *tunnel) progress() uint64 {
	n := uint64(t.up.Load() + t.down.Load())
	if t.rawClient != nil {
		n += tcpMoved(t.rawClient) + tcpMoved(t.rawUpstream)
	}
	return n
}

// run copies both ways until both directions have ended, either fails,
// no byte moved either way for idle, or ctx is done. It closes both
// connections before returning.
//
// A watchdog samples progress every idle/4 (at most maxIdleCheck) and
// closes the tunnel once it has seen none for idle, so the tunnel ends
// between idle and idle plus one interval after the last byte moved, never
// earlier. Bytes stuck behind a receiver that stopped reading are no
// progress: once the socket buffers fill, nothing is received or
// acknowledged any more.
func (t *tunnel) run(ctx context.Context, idle time.Duration) {
	client, pre := tcpUnder(t.client)
	upstream, _ := tcpUnder(t.upstream)
	if len(pre) > 0 { // read ahead by a wrapper: forward it first
		n, err := t.upstream.Write(pre)
		t.up.Add(int64(n))
		if err != nil {
			t.close()
			return
		}
	}
	if client != nil && upstream != nil && tcpCounters(client) && tcpCounters(upstream) {
		t.rawClient, t.rawUpstream = client, upstream
	}
	ended := make(chan struct{}, 2)
	go func() { t.pipe(upstream, client, t.upstream, t.client, &t.up); ended <- struct{}{} }()
	go func() { t.pipe(client, upstream, t.client, t.upstream, &t.down); ended <- struct{}{} }()

	every := min(max(idle/4, time.Millisecond), maxIdleCheck)
	watchdog := time.NewTicker(every)
	defer watchdog.Stop()
	last, lastAt := t.progress(), time.Now()
	done := ctx.Done()
	for open := 2; open > 0; {
		select {
		case <-ended:
			open--
		case <-done:
			t.close()
			done = nil
		case now := <-watchdog.C:
			if p := t.progress(); p != last {
				last, lastAt = p, now
			} else if now.Sub(lastAt) >= idle {
				t.close()
			}
		}
	}
	t.close()
}

type closeWriter interface{ CloseWrite() error }

// pipe copies from src to dst and adds the bytes written to n. rawSrc and
// rawDst are the TCP sockets under src and dst (nil if not TCP): with both
// the copy is a splice in the kernel. At EOF from src it half-closes dst
// (or, if dst cannot, the tunnel) so the other direction can finish; any
// other error closes the tunnel.
func (t *tunnel) pipe(rawDst, rawSrc *net.TCPConn, dst, src net.Conn, n *atomic.Int64) {
	var err error
	if rawDst != nil && rawSrc != nil && t.rawClient != nil {
		var w int64
		w, err = rawDst.ReadFrom(rawSrc) // splice(2) on Linux
		n.Add(w)
	} else {
		buf := make([]byte, fallbackBuf)
		_, err = io.CopyBuffer(countingWriter{dst, n}, readerOnly{src}, buf)
	}
	if err == nil {
		var cw closeWriter = rawDst
		if rawDst == nil {
			cw, _ = dst.(closeWriter)
		}
		if cw != nil && cw.CloseWrite() == nil {
			return
		}
	}
	t.close()
}

// countingWriter adds every byte written to n (the user-space path's
// progress); it hides the writer's ReadFrom so io.CopyBuffer uses its
// buffer.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	w, err := c.w.Write(p)
	c.n.Add(int64(w))
	return w, err
}

// readerOnly hides a reader's WriteTo.
type readerOnly struct{ io.Reader }

// tcpUnder returns the TCP socket under c's wrappers (nil if none) and the
// bytes a wrapper read ahead that the socket will not return again.
// Unwrapped, the socket is read directly: any other bookkeeping the
// wrappers do on Read is skipped, so only wrappers whose Read work is done
// by the time a tunnel runs may be unwrapped here.
func tcpUnder(c net.Conn) (*net.TCPConn, []byte) {
	var pre []byte
	for {
		switch v := c.(type) {
		case *net.TCPConn:
			return v, pre
		case *pendingConn:
			c = v.Conn
		case *prefixedConn:
			pre = append(pre, v.pre...)
			v.pre = nil
			c = v.Conn
		default:
			return nil, pre
		}
	}
}

// errNoCounters is returned by tcpInfo where the platform has none.
var errNoCounters = errors.New("no TCP counters on this platform")

// tcpCounters reports whether c's kernel byte counters can be read.
func tcpCounters(c *net.TCPConn) bool {
	_, _, err := tcpInfo(c)
	return err == nil
}

// tcpMoved is c's bytes received plus bytes acknowledged (0 if unreadable,
// e.g. once closed).
func tcpMoved(c *net.TCPConn) uint64 {
	r, a, _ := tcpInfo(c)
	return r + a
}
