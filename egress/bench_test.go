package egress

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"
)

const benchBytes = 100 << 20

// fetch does one HTTPS GET of n bytes over c (already connected to the
// server or tunnelled to it) and returns the body size.
func fetch(tb testing.TB, f *fakeNet, c net.Conn, n int) int64 {
	tc := tls.Client(c, &tls.Config{ServerName: "bench.example.com", RootCAs: f.roots})
	defer tc.Close()
	fmt.Fprintf(tc, "GET /bytes?n=%d HTTP/1.1\r\nHost: bench.example.com\r\nConnection: close\r\n\r\n", n)
	resp, err := http.ReadResponse(bufio.NewReaderSize(tc, 64<<10), nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	return got
}

func benchConnect(tb testing.TB, s testSession, target string) net.Conn {
	code, c := rawConnect(tb, s, s.SandboxAddr, target)
	if code != 200 {
		tb.Fatalf("CONNECT status %d", code)
	}
	return c
}

// BenchmarkTunnel100MiB moves 100 MiB over HTTPS directly and through a
// proxy tunnel on loopback and reports both rates and their ratio.
func BenchmarkTunnel100MiB(b *testing.B) {
	f := sharedFakeNet(b)
	p := newTestProxy(b, testConfig(f))
	s := addSession(b, p, "*.example.com")
	target := fmt.Sprintf("bench.example.com:%d", f.httpsAP.Port())
	var direct, tunnel time.Duration
	runDirect := func() {
		start := time.Now()
		c, err := net.Dial("tcp", f.httpsAP.String())
		if err != nil {
			b.Fatal(err)
		}
		if got := fetch(b, f, c, benchBytes); got != benchBytes {
			b.Fatalf("direct got %d", got)
		}
		direct += time.Since(start)
	}
	runTunnel := func() {
		start := time.Now()
		if got := fetch(b, f, benchConnect(b, s, target), benchBytes); got != benchBytes {
			b.Fatalf("tunnel got %d", got)
		}
		tunnel += time.Since(start)
	}
	b.SetBytes(2 * benchBytes)
	for i := 0; b.Loop(); i++ {
		// Alternate which goes first so warm-up and GC hit both alike.
		if i%2 == 0 {
			runDirect()
			runTunnel()
		} else {
			runTunnel()
			runDirect()
		}
	}
	mib := float64(benchBytes) / (1 << 20) * float64(b.N)
	b.ReportMetric(mib/direct.Seconds(), "direct-MiB/s")
	b.ReportMetric(mib/tunnel.Seconds(), "tunnel-MiB/s")
	b.ReportMetric(direct.Seconds()/tunnel.Seconds(), "tunnel/direct")
}

// BenchmarkConnectSetup measures time to a completed TLS handshake,
// directly and through CONNECT (which adds the proxy's own A+AAAA lookup
// against the loopback DNS and its upstream dial), and reports p50s.
func BenchmarkConnectSetup(b *testing.B) {
	f := sharedFakeNet(b)
	p := newTestProxy(b, testConfig(f))
	s := addSession(b, p, "*.example.com")
	target := fmt.Sprintf("bench.example.com:%d", f.httpsAP.Port())
	handshake := func(c net.Conn) {
		tc := tls.Client(c, &tls.Config{ServerName: "bench.example.com", RootCAs: f.roots})
		if err := tc.Handshake(); err != nil {
			b.Fatal(err)
		}
		tc.Close()
	}
	var direct, proxied, connectOnly []time.Duration
	for b.Loop() {
		start := time.Now()
		c, err := net.Dial("tcp", f.httpsAP.String())
		if err != nil {
			b.Fatal(err)
		}
		handshake(c)
		direct = append(direct, time.Since(start))

		start = time.Now()
		c = benchConnect(b, s, target)
		connectOnly = append(connectOnly, time.Since(start))
		handshake(c)
		proxied = append(proxied, time.Since(start))
	}
	p50 := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	pd, pp := p50(direct), p50(proxied)
	b.ReportMetric(float64(pd.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(pp.Microseconds()), "proxied-p50-µs")
	b.ReportMetric(float64((pp - pd).Microseconds()), "overhead-p50-µs")
	b.ReportMetric(float64(p50(connectOnly).Microseconds()), "connect200-p50-µs")
}
