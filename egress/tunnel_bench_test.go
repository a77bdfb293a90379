//go:build unix

package egress

import (
	"context"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time (user and system) this process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTunnelCopy moves 256 MiB of plain TCP over loopback per op: a
// direct connection, the tunnel's copy, and io.Copy between the two raw
// *net.TCPConn (splice(2) on Linux), with the same sender and receiver.
// It reports MiB/s and the process CPU per GiB; the copy's own cost is its
// CPU minus direct's. The tunnel copies in user space because this
// measured cheaper than splice (see tunnel.go).
func BenchmarkTunnelCopy(b *testing.B) {
	const size = 256 << 20
	// relay starts whatever copies from near (the client side) to far
	// and returns when done.
	relays := []struct {
		name  string
		relay func(near, far *net.TCPConn)
	}{
		{name: "direct"},
		{name: "tunnel", relay: func(near, far *net.TCPConn) {
			(&tunnel{client: near, upstream: far}).run(context.Background(), time.Minute)
		}},
		{name: "splice", relay: func(near, far *net.TCPConn) {
			far.ReadFrom(near)
			far.CloseWrite()
		}},
	}
	for _, rl := range relays {
		b.Run(rl.name, func(b *testing.B) {
			var cpu, wall time.Duration
			b.SetBytes(size)
			for b.Loop() {
				sender, receiver := tcpPairTB(b)
				if rl.relay != nil {
					near, sender2 := tcpPairTB(b)
					far, receiver2 := tcpPairTB(b)
					go rl.relay(near, far)
					sender.Close()
					receiver.Close()
					sender, receiver = sender2, receiver2
				}
				c0, w0 := processCPU(b), time.Now()
				go func() {
					buf := make([]byte, largeBuf)
					for sent := 0; sent < size; sent += len(buf) {
						if _, err := sender.Write(buf); err != nil {
							return
						}
					}
					sender.CloseWrite()
				}()
				got, err := io.CopyBuffer(io.Discard, receiver, make([]byte, largeBuf))
				cpu += processCPU(b) - c0
				wall += time.Since(w0)
				if err != nil || got != size {
					b.Fatalf("received %d, %v", got, err)
				}
			}
			gib := float64(size) / (1 << 30) * float64(b.N)
			b.ReportMetric(gib*1024/wall.Seconds(), "MiB/s")
			b.ReportMetric(float64(cpu.Milliseconds())/gib, "cpu-ms/GiB")
		})
	}
}

// tcpPairTB returns the two ends of one loopback TCP connection.
func tcpPairTB(tb testing.TB) (near, far *net.TCPConn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	a := <-accepted
	if a == nil {
		tb.Fatal("accept failed")
	}
	tb.Cleanup(func() { d.Close(); a.Close() })
	return a.(*net.TCPConn), d.(*net.TCPConn)
}
