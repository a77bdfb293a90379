//go:build unix

package egress

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
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

// BenchmarkTunnelCopy moves 256 MiB of plain TCP over loopback through
// each relay once per op, in an order that rotates from op to op, so that
// every relay sees the same machine: a direct connection, the tunnel's
// copy (with its large buffer and with others, to weigh the size), the
// copy smokescreen makes (io.Copy between wrapped connections: 32 KiB
// reads and writes) and io.Copy between the two raw *net.TCPConn (splice(2)
// on Linux). The sender writes 16 KiB at a time, as a TLS server writes
// its records, and the receiver reads 64 KiB at a time. It reports the
// median over ops of each relay's process CPU per GiB and MiB/s, and the
// tunnel's CPU as a ratio to the two io.Copy relays' and to the tunnel's
// with a 256 KiB buffer (median of per-op ratios); a relay's own cost
// is its CPU minus direct's. Run it with -benchtime Nx (N ops).
func BenchmarkTunnelCopy(b *testing.B) {
	const size = 256 << 20
	relays := copyRelays()
	cpus := make([][]float64, len(relays))  // ms per GiB, one per op
	rates := make([][]float64, len(relays)) // MiB/s
	op := 0
	for b.Loop() {
		for k := range relays {
			i := (k + op) % len(relays)
			cpu, wall := relayOnce(b, relays[i].relay, size)
			gib := float64(size) / (1 << 30)
			cpus[i] = append(cpus[i], float64(cpu.Microseconds())/1e3/gib)
			rates[i] = append(rates[i], gib*1024/wall.Seconds())
		}
		op++
	}
	med := func(v []float64) float64 {
		v = slices.Clone(v)
		slices.Sort(v)
		return v[len(v)/2]
	}
	idx := func(name string) int {
		return slices.IndexFunc(relays, func(r copyRelay) bool { return r.name == name })
	}
	for i, r := range relays {
		b.ReportMetric(med(cpus[i]), r.name+"-cpu-ms/GiB")
		b.ReportMetric(med(rates[i]), r.name+"-MiB/s")
	}
	tun := idx("tunnel")
	for _, base := range []string{"iocopy-32KiB", "splice", "tunnel-256KiB"} {
		b.ReportMetric(ratioMedian(cpus[tun], cpus[idx(base)]), "tunnel/"+base+"-cpu")
	}
}

// BenchmarkTunnelCopyEach runs one relay of BenchmarkTunnelCopy per
// sub-benchmark, so that a tool counting for the whole process sees one
// relay, e.g. system calls per MiB:
//
//	go test -c -o /tmp/egress.test ./egress
//	perf stat -e 'syscalls:sys_enter_read,syscalls:sys_enter_write' \
//	  /tmp/egress.test -test.run '^$' -test.bench 'TunnelCopyEach/tunnel$' -test.benchtime 4x
//
// (each op is 256 MiB; the sender writes 16 KiB and the receiver reads
// 64 KiB at a time, so direct's counts are the floor).
func BenchmarkTunnelCopyEach(b *testing.B) {
	const size = 256 << 20
	for _, r := range copyRelays() {
		b.Run(r.name, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				c, _ := relayOnce(b, r.relay, size)
				cpu += c
			}
			b.ReportMetric(float64(cpu.Microseconds())/1e3/(float64(size)/(1<<30)*float64(b.N)), "cpu-ms/GiB")
		})
	}
}

// copyRelay copies from near (the client side) to far until done; a nil
// relay is a direct connection.
type copyRelay struct {
	name  string
	relay func(near, far *net.TCPConn)
}

// copyRelays are the relays the copy benchmarks compare.
func copyRelays() []copyRelay {
	sized := func(n int) *sync.Pool {
		return &sync.Pool{New: func() any { b := make([]byte, n); return &b }}
	}
	tunnelWith := func(pool *sync.Pool) func(near, far *net.TCPConn) {
		return func(near, far *net.TCPConn) {
			(&tunnel{client: near, upstream: far, large: pool}).run(context.Background(), time.Minute)
		}
	}
	type wrapped struct{ net.Conn } // hides ReadFrom and WriteTo, as smokescreen's conns do
	return []copyRelay{
		{name: "direct"},
		{name: "tunnel", relay: tunnelWith(nil)},
		{name: "tunnel-256KiB", relay: tunnelWith(sized(256 << 10))},
		{name: "tunnel-2MiB", relay: tunnelWith(sized(2 << 20))},
		{name: "iocopy-32KiB", relay: func(near, far *net.TCPConn) {
			io.Copy(wrapped{far}, wrapped{near})
			far.CloseWrite()
		}},
		{name: "splice", relay: func(near, far *net.TCPConn) {
			far.ReadFrom(near)
			far.CloseWrite()
		}},
	}
}

// ratioMedian is the median over ops of a[i]/b[i].
func ratioMedian(a, b []float64) float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	slices.Sort(r)
	return r[len(r)/2]
}

// relayOnce sends size bytes from a sender to a receiver, through relay
// if it is not nil, and returns the process CPU and wall time it took.
func relayOnce(b *testing.B, relay func(near, far *net.TCPConn), size int) (cpu, wall time.Duration) {
	sender, receiver := tcpPairTB(b)
	if relay != nil {
		near, sender2 := tcpPairTB(b)
		far, receiver2 := tcpPairTB(b)
		go relay(near, far)
		sender.Close()
		receiver.Close()
		sender, receiver = sender2, receiver2
	}
	c0, w0 := processCPU(b), time.Now()
	go func() {
		buf := make([]byte, 16<<10)
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := sender.Write(buf); err != nil {
				return
			}
		}
		sender.CloseWrite()
	}()
	// Plain Reader and Writer: io.Discard's ReadFrom would read 8 KiB at a time.
	got, err := io.CopyBuffer(struct{ io.Writer }{io.Discard}, struct{ io.Reader }{receiver}, make([]byte, 64<<10))
	cpu, wall = processCPU(b)-c0, time.Since(w0)
	if err != nil || got != int64(size) {
		b.Fatalf("received %d, %v", got, err)
	}
	return cpu, wall
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
