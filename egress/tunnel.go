package egress

import (
	"bytes"
	"cmp"
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

	"github.com/sandboxapi/sandboxapi/egress/policy"
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

// Copy buffers. A pipe reads into its own small buffer while traffic is
// light and borrows a large one from largePool once a read fills the buffer
// it has (more is queued in the socket), until a read comes back short. A
// bulk transfer then moves up to largeBuf per read(2)/write(2) pair, while
// a quiet tunnel, blocked in Read, holds only its two small buffers; a
// tunnel in a bulk transfer holds at most one large buffer per direction,
// less than the kernel may queue in either of its sockets.
//
// The hop costs the process a read and a write per chunk, each a system
// call and a copy, and a wakeup of the other side per write, so on a busy
// machine (the sender ahead of the proxy, more queued at each read) a
// larger buffer means fewer of them. `go test ./egress -run '^$' -bench
// 'TunnelCopy$' -benchtime 15x` on this project's 2-vCPU VM (Linux 6.18,
// load average 50 -> 44, 2026-12-03; 256 MiB per relay and op, sent in
// 16 KiB writes): process CPU per GiB 931 ms direct, 1505 ms through this
// copy with a 256 KiB large buffer, 1388 ms with 1 MiB and the same with
// 2 MiB (medians of 15), so 1 MiB takes about a fifth off the hop.
//
// The copy is a plain read/write rather than splice(2) (which io.Copy
// between two *net.TCPConn uses): in the same run splice cost 1945 ms per
// GiB and smokescreen's copy (io.Copy, 32 KiB) 1936 ms. A splice loop of
// our own that kept per-chunk byte counts (pipes of 64 KiB and 1 MiB) was
// tried as well and also cost more than this copy. Splice saves the
// proxy's two copies; what it costs instead (page references, and likely
// more segments: the host's TcpOutSegs per GiB was 15-20% higher in one
// count) came out larger on this paravirtualised VM.
//
// A read may fill the whole large buffer, but the writes that pass it on
// are at most maxWrite each: the watchdog sees progress only when a write
// returns, so this bounds how slow a receiver may be before it counts as
// stalled (maxWrite per idle timeout, as before the buffer grew).
const (
	smallBuf = 32 << 10
	largeBuf = 1 << 20
	maxWrite = 256 << 10
)

var largePool = &sync.Pool{New: func() any { b := make([]byte, largeBuf); return &b }}

// maxIdleCheck bounds the watchdog's sampling interval, so a long idle
// timeout is still enforced within this much of its end.
const maxIdleCheck = 15 * time.Second

// tunnel is one client<->upstream connection pair. Only client and
// upstream need setting (and target, the vetted destination, for a tunnel
// a session tracks); run moves the bytes. up and down count the bytes
// delivered each way and may be read at any time; close and revoke are
// idempotent and safe from any goroutine.
type tunnel struct {
	client, upstream net.Conn
	target           policy.Args // the vetted destination (Policy unset)
	large            *sync.Pool  // large copy buffers (*[]byte); nil: largePool
	up, down         atomic.Int64
	revoked          atomic.Bool // closed because the session's policy changed
	once             sync.Once
}

// revoke closes the tunnel because its session's policy no longer allows
// its target; the audit record says so.
func (t *tunnel) revoke() {
	t.revoked.Store(true)
	t.close()
}

// endNote is what the audit adds to the reason of an allowed tunnel: why
// the proxy closed it, if a policy change did.
func (t *tunnel) endNote() string {
	if t.revoked.Load() {
		return ReasonPolicyChanged
	}
	return ""
}

func (t *tunnel) close() {
	t.once.Do(func() {
		t.client.Close()
		t.upstream.Close()
	})
}

// run copies both ways until both directions have ended, either fails,
// no byte moved either way for idle, or ctx is done. It closes both
// connections before returning.
//
// The copy loops do no timekeeping: the byte counts they keep anyway are
// the progress signal. A watchdog samples them every idle/4 (at most
// maxIdleCheck) and closes the tunnel once they have not changed for idle,
// so it ends between idle and idle plus one interval after the last byte
// moved, never earlier. Progress is counted per write (at most maxWrite),
// so a receiver taking longer than idle to accept one write counts as
// stalled.
func (t *tunnel) run(ctx context.Context, idle time.Duration) {
	ended := make(chan struct{}, 2)
	go func() { t.pipe(t.upstream, t.client, &t.up); ended <- struct{}{} }()
	go func() { t.pipe(t.client, t.upstream, &t.down); ended <- struct{}{} }()
	t.watch(ctx, idle, ended, 2)
}

// watch waits for open sends on ended, closing the tunnel when ctx is
// done or no byte moved for idle (see run), and closes it at the end.
func (t *tunnel) watch(ctx context.Context, idle time.Duration, ended <-chan struct{}, open int) {
	watchdog := time.NewTicker(min(max(idle/4, time.Millisecond), maxIdleCheck))
	defer watchdog.Stop()
	moved, movedAt := t.moved(), time.Now()
	done := ctx.Done()
	for open > 0 {
		select {
		case <-ended:
			open--
		case <-done:
			t.close()
			done = nil
		case now := <-watchdog.C:
			if m := t.moved(); m != moved {
				moved, movedAt = m, now
			} else if now.Sub(movedAt) >= idle {
				t.close()
			}
		}
	}
	t.close()
}

// moved is the bytes delivered so far, both ways.
func (t *tunnel) moved() int64 { return t.up.Load() + t.down.Load() }

type closeWriter interface{ CloseWrite() error }

// pipe copies src to dst and counts the bytes written into n. At EOF from
// src it half-closes dst (or, if dst cannot, the tunnel) so the other
// direction can finish; any other error closes the tunnel.
func (t *tunnel) pipe(dst, src net.Conn, n *atomic.Int64) {
	pool := cmp.Or(t.large, largePool)
	small := make([]byte, smallBuf)
	buf := small
	var large *[]byte
	defer func() {
		if large != nil {
			pool.Put(large)
		}
	}()
	for {
		r, err := src.Read(buf)
		for p := buf[:r]; len(p) > 0; {
			k := min(len(p), maxWrite)
			w, werr := dst.Write(p[:k])
			n.Add(int64(w))
			if werr == nil && w < k {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				t.close()
				return
			}
			p = p[w:]
		}
		if err != nil {
			if cw, ok := dst.(closeWriter); ok && errors.Is(err, io.EOF) {
				if cw.CloseWrite() == nil {
					return
				}
			}
			t.close()
			return
		}
		switch {
		case r == len(buf) && large == nil:
			large = pool.Get().(*[]byte)
			buf = *large
		case r < len(buf) && large != nil:
			pool.Put(large)
			large, buf = nil, small
		}
	}
}
