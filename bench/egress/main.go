// Command egressbench compares the sandboxapi egress proxy with
// github.com/stripe/smokescreen (as a peer, not a product dependency) on a
// fake internet on loopback: 100 MiB HTTPS download throughput and
// CONNECT+TLS setup p50, each against a direct connection. All three
// paths run in this one process, so the CPU it uses per MiB (client and
// server TLS plus the proxy's work) compares their cost even when the
// machine is too busy for wall-clock rates to mean much.
//
//	cd bench/egress && go run . [-mib 100] [-runs 3] [-setups 300]
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/stripe/smokescreen/pkg/smokescreen"

	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/egress/policy"
)

const host = "bench.example.com"

var publicIP = netip.MustParseAddr("127.0.0.2")

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func main() {
	mib := flag.Int("mib", 100, "MiB per throughput run")
	runs := flag.Int("runs", 3, "throughput runs per path (median reported)")
	setups := flag.Int("setups", 300, "connection setups per path for p50")
	flag.Parse()
	if err := run(*mib, *runs, *setups); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// dialer opens a connection that carries TLS to the upstream server.
type dialer func() (net.Conn, error)

func run(mib, runs, setups int) error {
	roots, upstreamPEM, upstream, dnsAddr, err := fakeInternet()
	if err != nil {
		return fmt.Errorf("starting fake internet: %w", err)
	}
	target := fmt.Sprintf("%s:%d", host, upstream.Port())

	// sandboxapi egress proxy.
	cfg := egress.DefaultConfig()
	cfg.ConnectPort, cfg.TransparentPort, cfg.DNSPort = 0, 0, 0
	cfg.AllowedPorts = []uint16{upstream.Port()}
	cfg.Resolvers = []string{dnsAddr}
	cfg.ExtraAllowedCIDRs = []string{"127.0.0.2/32"}
	// The credential path: the proxy trusts the fake internet's
	// certificate upstream and terminates the client's TLS with its CA.
	dir, err := os.MkdirTemp("", "egressbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cfg.UpstreamCAFile = filepath.Join(dir, "upstream.pem")
	if err := os.WriteFile(cfg.UpstreamCAFile, upstreamPEM, 0o644); err != nil {
		return err
	}
	ca, err := egress.LoadCA(filepath.Join(dir, "ca"))
	if err != nil {
		return err
	}
	proxyRoots := x509.NewCertPool()
	proxyRoots.AddCert(ca.Certificate())
	p, err := egress.NewProxy(cfg, egress.Options{Logger: slog.New(slog.DiscardHandler), CA: ca})
	if err != nil {
		return err
	}
	sbx := netip.MustParseAddr("127.1.0.2")
	ep, err := p.AddSession(context.Background(), egress.Session{
		ID: "bench", HostAddr: netip.MustParseAddr("127.1.0.1"), SandboxAddr: sbx,
		Policy: policy.Policy{Enabled: true, Allow: policy.MustParseEntries(policy.ListAllowed, "*.example.com")},
	})
	if err != nil {
		return err
	}
	credSbx := netip.MustParseAddr("127.1.0.6")
	credEP, err := p.AddSession(context.Background(), egress.Session{
		ID: "bench-cred", HostAddr: netip.MustParseAddr("127.1.0.5"), SandboxAddr: credSbx,
		Policy:      policy.Policy{Enabled: true, Allow: policy.MustParseEntries(policy.ListAllowed, "*.example.com")},
		Credentials: egress.Credentials{host: {{Name: "Authorization", Value: "Bearer bench"}}},
	})
	if err != nil {
		return err
	}

	// smokescreen v0.1.0 with the same resolver and allow range.
	sc := smokescreen.NewConfig()
	sc.Log.SetOutput(io.Discard)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	sc.Listener = ln
	if err := sc.SetAllowRanges([]string{"127.0.0.2/32"}); err != nil {
		return err
	}
	if err := sc.SetResolverAddresses([]string{dnsAddr}); err != nil {
		return err
	}
	go smokescreen.StartWithConfig(sc, make(chan interface{}))
	time.Sleep(200 * time.Millisecond)

	paths := []struct {
		name  string
		dial  dialer
		roots *x509.CertPool // what the client trusts
	}{
		{"direct", func() (net.Conn, error) { return net.Dial("tcp", upstream.String()) }, roots},
		{"sandboxapi", connectVia(ep.Connect.String(), sbx, target), roots},
		{"sandboxapi, credential (proxy-terminated TLS)", connectVia(credEP.Connect.String(), credSbx, target), proxyRoots},
		{"smokescreen v0.1.0", connectVia(ln.Addr().String(), netip.Addr{}, target), roots},
	}
	type row struct {
		name       string
		mibps      float64
		ratio      float64       // median over runs of the path's rate / direct's in that run
		cpu        time.Duration // process CPU per 100 MiB
		setup, con time.Duration
	}
	load0 := loadAvg()
	// Interleave the paths run by run so machine noise hits all alike; a
	// run's ratios compare paths measured within seconds of each other.
	rates := make([][]float64, len(paths))
	cpus := make([][]time.Duration, len(paths))
	for r := range runs {
		for k := range paths {
			i := (k + r) % len(paths) // rotate the order too
			pth := paths[i]
			n, took, cpu, err := fetch(pth.dial, pth.roots, int64(mib)<<20)
			if err != nil {
				return fmt.Errorf("%s: %w", pth.name, err)
			}
			rates[i] = append(rates[i], float64(n)/(1<<20)/took.Seconds())
			cpus[i] = append(cpus[i], cpu*100*(1<<20)/time.Duration(n))
		}
	}
	total := make([][]time.Duration, len(paths))
	conn := make([][]time.Duration, len(paths))
	for range setups {
		for i, pth := range paths {
			start := time.Now()
			c, err := pth.dial()
			if err != nil {
				return fmt.Errorf("%s: %w", pth.name, err)
			}
			conn[i] = append(conn[i], time.Since(start))
			tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: pth.roots})
			if err := tc.Handshake(); err != nil {
				return fmt.Errorf("%s handshake: %w", pth.name, err)
			}
			total[i] = append(total[i], time.Since(start))
			tc.Close()
		}
	}
	load1 := loadAvg()
	var rows []row
	for i, pth := range paths {
		rows = append(rows, row{pth.name, median(slices.Clone(rates[i])), median(ratios(rates[i], rates[0])),
			p50(cpus[i]), p50(total[i]), p50(conn[i])})
	}
	d := rows[0]
	fmt.Printf("%d MiB HTTPS download (median of %d runs), setup = TCP/CONNECT + TLS handshake (p50 of %d), loopback, GOMAXPROCS=%d\n", mib, runs, setups, runtimeProcs())
	fmt.Printf("load average at start: %s; at end: %s\n\n", load0, load1)
	fmt.Println("| path | MiB/s | vs direct | CPU per 100 MiB | direct's CPU / path's | connect p50 | setup p50 | setup overhead p50 |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %.0f | %.2fx | %v | %.2fx | %v | %v | %v |\n", r.name, r.mibps, r.ratio,
			r.cpu.Round(time.Millisecond), float64(d.cpu)/float64(r.cpu),
			r.con.Round(time.Microsecond), r.setup.Round(time.Microsecond), (r.setup - d.setup).Round(time.Microsecond))
	}
	// Each run's rates as ratios, so a median can be told from its spread.
	fmt.Println("\nper run (in run order), rate vs direct in the same run:")
	for i, pth := range paths[1:] {
		fmt.Printf("  %s: %s\n", pth.name, fmtRatios(ratios(rates[i+1], rates[0])))
	}
	for i, pth := range paths {
		if strings.HasPrefix(pth.name, "smokescreen") {
			fmt.Printf("  sandboxapi vs %s: %s (median %.2fx)\n", pth.name, fmtRatios(ratios(rates[1], rates[i])), median(ratios(rates[1], rates[i])))
			// CPU per byte holds still when the machine is too busy for rates.
			cs, cr := durations(cpus[i]), durations(cpus[1])
			fmt.Printf("  %s's CPU per byte / sandboxapi's: %s (median %.2fx)\n", pth.name, fmtRatios(ratios(cs, cr)), median(ratios(cs, cr)))
		}
	}
	return nil
}

func durations(d []time.Duration) []float64 {
	f := make([]float64, len(d))
	for i, v := range d {
		f[i] = float64(v)
	}
	return f
}

// ratios is a[i]/b[i] for each run i.
func ratios(a, b []float64) []float64 {
	r := make([]float64, len(a))
	for i := range a {
		r[i] = a[i] / b[i]
	}
	return r
}

func fmtRatios(r []float64) string {
	s := make([]string, len(r))
	for i, v := range r {
		s[i] = fmt.Sprintf("%.2fx", v)
	}
	return strings.Join(s, " ")
}

// median sorts v and returns its middle value (the mean of the two middle
// ones for an even count).
func median(v []float64) float64 {
	slices.Sort(v)
	if len(v)%2 == 0 {
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return v[len(v)/2]
}

func p50(d []time.Duration) time.Duration {
	d = slices.Clone(d) // the per-run lines read them in run order
	slices.Sort(d)
	return d[len(d)/2]
}

// connectVia returns a dialer that opens a CONNECT tunnel through proxy.
func connectVia(proxy string, src netip.Addr, target string) dialer {
	return func() (net.Conn, error) {
		d := net.Dialer{Timeout: 5 * time.Second}
		if src.IsValid() {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
		}
		c, err := d.Dial("tcp", proxy)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("reading CONNECT reply: %w", err)
		}
		if resp.StatusCode != 200 {
			c.Close()
			return nil, fmt.Errorf("CONNECT %s: %s", target, resp.Status)
		}
		if br.Buffered() > 0 {
			c.Close()
			return nil, fmt.Errorf("unexpected bytes after CONNECT reply")
		}
		return c, nil
	}
}

// fetch downloads n bytes through dial and returns how many arrived, the
// time and process CPU from the first byte of the response body to the
// last (connection setup is measured apart, by the setup loop).
func fetch(dial dialer, roots *x509.CertPool, n int64) (int64, time.Duration, time.Duration, error) {
	c, err := dial()
	if err != nil {
		return 0, 0, 0, err
	}
	tc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: roots})
	defer tc.Close()
	fmt.Fprintf(tc, "GET /bytes?n=%d HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", n, host)
	resp, err := http.ReadResponse(bufio.NewReaderSize(tc, 64<<10), nil)
	if err != nil {
		return 0, 0, 0, err
	}
	defer resp.Body.Close()
	start, cpu0 := time.Now(), processCPU()
	got, err := io.Copy(io.Discard, resp.Body)
	took, cpu := time.Since(start), processCPU()-cpu0
	if err == nil && got != n {
		err = fmt.Errorf("received %d of %d bytes", got, n)
	}
	return got, took, cpu, err
}

// fakeInternet starts an HTTPS server on 127.0.0.2 and a DNS server on
// 127.0.0.1 answering *.example.com with it.
func fakeInternet() (*x509.CertPool, []byte, netip.AddrPort, string, error) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{host}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, netip.AddrPort{}, "", err
	}
	cert, _ := x509.ParseCertificate(der)
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return nil, nil, netip.AddrPort{}, "", err
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var n int64
			fmt.Sscan(r.URL.Query().Get("n"), &n)
			// A length, as a server sends with a file: no chunked framing.
			w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
			io.CopyN(w, zeroReader{}, n)
		}),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	go srv.ServeTLS(ln, "", "")
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, netip.AddrPort{}, "", err
	}
	h := dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		if q.Qtype == dns.TypeA && strings.HasSuffix(q.Name, ".example.com.") {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 1}, A: publicIP.AsSlice()})
		} else {
			// NODATA carries the zone's SOA, as real servers send it (RFC 2308).
			m.Ns = append(m.Ns, &dns.SOA{Hdr: dns.RR_Header{Name: "example.com.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 1},
				Ns: "ns.example.com.", Mbox: "hostmaster.example.com.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 1})
		}
		w.WriteMsg(m)
	})
	go (&dns.Server{PacketConn: pc, Handler: h}).ActivateAndServe()
	return roots, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ln.Addr().(*net.TCPAddr).AddrPort(), pc.LocalAddr().String(), nil
}
