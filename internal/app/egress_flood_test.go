package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/metrics"
	"github.com/sandboxapi/sandboxapi/store"
)

// lineCounter counts the log lines that name one session.
type lineCounter struct {
	mu      sync.Mutex
	session string
	lines   int
	bytes   int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range bytes.Split(p, []byte("\n")) {
		if bytes.Contains(l, []byte("session="+c.session)) {
			c.lines++
			c.bytes += len(l) + 1
		}
	}
	return len(p), nil
}

func (c *lineCounter) count() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lines, c.bytes
}

// One session flooding the proxy with refused requests for 30 s (the same
// denial, ever new denied names, plain HTTP) makes the host store and log
// at most 2*cap+9 records per minute, and the records still account for
// every decision (their counts add up). Wired as serve wires it: the
// proxy's hooks from egressAudit, the store's writer, a real SQLite file.
func TestEgressAuditFloodBounded(t *testing.T) {
	flood := 30 * time.Second
	if testing.Short() {
		flood = 3 * time.Second
	}
	ctx := context.Background()
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "sandboxapi.db")
	st, err := store.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	trail := store.NewEgressWriter(ctx, st, egressFlushInterval, slog.New(slog.DiscardHandler))
	defer trail.Close()
	const id = "sess_flood"
	lc := &lineCounter{session: id}
	onDecision, observe := egressAudit(trail, metrics.New())
	var decisions atomic.Int64
	cfg := egress.DefaultConfig()
	cfg.ConnectPort, cfg.TransparentPort, cfg.DNSPort = 0, 0, 0
	cfg.Resolvers = []string{"127.0.0.1:1"} // never asked: every name is refused by policy first
	p, err := egress.NewProxy(cfg, egress.Options{
		Logger:     slog.New(slog.NewTextHandler(lc, nil)),
		OnDecision: onDecision,
		Observe:    func(d egress.Decision) { decisions.Add(1); observe(d) },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)
	host, sbx := netip.MustParseAddr("127.77.3.1"), netip.MustParseAddr("127.77.3.2")
	ep, err := p.AddSession(ctx, egress.Session{ID: id, HostAddr: host, SandboxAddr: sbx,
		Policy: policy.Policy{Enabled: true, Allow: policy.MustParseEntries(policy.ListAllowed, "*.allowed.test")}})
	if err != nil {
		t.Fatal(err)
	}
	dbSize := func() int64 {
		var n int64
		for _, f := range []string{dbPath, dbPath + "-wal"} {
			if fi, err := os.Stat(f); err == nil {
				n += fi.Size()
			}
		}
		return n
	}
	before := dbSize()

	start := time.Now()
	var wg sync.WaitGroup
	var sent atomic.Int64
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(sbx, 0)), Timeout: 2 * time.Second}
			for i := 0; time.Since(start) < flood; i++ {
				c, err := d.Dial("tcp", ep.Connect.String())
				if err != nil {
					continue
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				switch i % 4 {
				case 0: // the same refusal again and again
					fmt.Fprintf(c, "CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n")
				case 1: // a new name every time
					h := fmt.Sprintf("w%d-%d.denied.test:443", w, i)
					fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", h, h)
				case 2: // as long a target as the request line allows, new each time
					h := fmt.Sprintf("%d-%d-%s:443", w, i, strings.Repeat("x", 8000))
					fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", h, h)
				default:
					fmt.Fprintf(c, "GET http://plain.test/ HTTP/1.1\r\nHost: plain.test\r\nConnection: close\r\n\r\n")
				}
				io.Copy(io.Discard, c)
				c.Close()
				sent.Add(1)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := p.RemoveSession(ctx, id); err != nil { // keeps what the open window holds
		t.Fatal(err)
	}
	trail.Flush(ctx)

	rows, err := st.EgressDecisions(ctx, id, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	total, aggregated, summaries := 0, 0, 0
	for _, r := range rows {
		total += r.Count
		switch {
		case r.Summary:
			summaries++
		case r.Count > 1:
			aggregated++
		}
	}
	lines, logBytes := lc.count()
	windows := int(elapsed/time.Minute) + 1
	bound := windows * (2*cfg.AuditRecordsPerMinute + 9)
	t.Logf("%d requests, %d decisions in %v; %d rows (%d aggregates, %d summaries), +%d bytes of SQLite+WAL, %d log lines (%d bytes); bound %d",
		sent.Load(), decisions.Load(), elapsed.Round(time.Millisecond), len(rows), aggregated, summaries, dbSize()-before, lines, logBytes, bound)
	if decisions.Load() < int64(4*bound) {
		t.Fatalf("the flood made only %d decisions: not a flood", decisions.Load())
	}
	if len(rows) > bound || lines > bound {
		t.Fatalf("%d rows and %d log lines for %d decisions, want at most %d each", len(rows), lines, decisions.Load(), bound)
	}
	// Host and reason are clipped to 512 bytes each, in the log too.
	if logBytes > lines*1600 {
		t.Fatalf("%d log bytes in %d lines: more than 1600 bytes a line", logBytes, lines)
	}
	if int64(total) != decisions.Load() {
		t.Fatalf("the rows' counts add up to %d, want every decision (%d)", total, decisions.Load())
	}
	if aggregated == 0 || summaries == 0 {
		t.Fatalf("want aggregates and summaries, got %d and %d", aggregated, summaries)
	}

	// The API shows the count and the first and last time of a row that
	// stands for several decisions.
	got, err := (&egressTrail{st: st, w: trail}).EgressDecisions(ctx, id, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var sawAgg, sawSummary bool
	for _, d := range got {
		switch {
		case d.Summary:
			sawSummary = sawSummary || d.Count > 1 && d.First != nil && d.Last != nil && strings.HasPrefix(d.Reason, egress.ReasonAuditCap) && d.Host == ""
		case d.Count > 1:
			sawAgg = sawAgg || d.Host == "denied.test" && d.First != nil && d.Last != nil && !d.Last.Before(*d.First) && d.First.Equal(d.Time)
		case d.Count != 1 || d.First != nil:
			t.Fatalf("single decision shown as %+v", d)
		}
	}
	if !sawAgg || !sawSummary {
		t.Fatalf("API view lacks a well-formed aggregate (%v) or summary (%v)", sawAgg, sawSummary)
	}
}
