package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// zoneServer is an authoritative DNS server on loopback whose answers the
// test sets per name, counting the queries it gets.
type zoneServer struct {
	addr    string
	mu      sync.Mutex
	answers map[string]func(q dns.Question, m *dns.Msg) // by lower-case FQDN
	queries map[string]int                              // "name/TYPE"
}

func startZoneServer(t *testing.T) *zoneServer {
	t.Helper()
	z := &zoneServer{answers: map[string]func(dns.Question, *dns.Msg){}, queries: map[string]int{}}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	z.addr = pc.LocalAddr().String()
	srv := &dns.Server{PacketConn: pc, Handler: z}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return z
}

func (z *zoneServer) ServeDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	q := r.Question[0]
	name := strings.ToLower(q.Name)
	z.mu.Lock()
	z.queries[name+"/"+dns.TypeToString[q.Qtype]]++
	answer := z.answers[name]
	z.mu.Unlock()
	if answer == nil {
		m.Rcode = dns.RcodeNameError
	} else {
		answer(q, m)
	}
	w.WriteMsg(m)
}

func (z *zoneServer) set(name string, answer func(q dns.Question, m *dns.Msg)) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.answers[dns.Fqdn(name)] = answer
}

func (z *zoneServer) count(name string, qtype uint16) int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.queries[dns.Fqdn(name)+"/"+dns.TypeToString[qtype]]
}

func aRecord(name string, ttl uint32, ip string) dns.RR {
	return &dns.A{Hdr: dns.RR_Header{Name: dns.Fqdn(name), Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.ParseIP(ip)}
}

func soaRecord(ttl, minttl uint32) dns.RR {
	return &dns.SOA{Hdr: dns.RR_Header{Name: "test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns: "ns.test.", Mbox: "hostmaster.test.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: minttl}
}

// TestResolverCache: answers are reused for their TTL (the lowest along a
// CNAME chain, capped) and re-queried after it; TTL 0, NXDOMAIN, server
// failures and NODATA without an SOA are never reused; NODATA with an SOA
// is reused for the SOA's negative TTL.
func TestResolverCache(t *testing.T) {
	t.Parallel()
	z := startZoneServer(t)
	r, err := NewResolver([]string{z.addr}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	v4 := func(ttl uint32) func(dns.Question, *dns.Msg) {
		return func(q dns.Question, m *dns.Msg) {
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, aRecord(q.Name, ttl, "192.0.2.10"))
			} else {
				m.Ns = append(m.Ns, soaRecord(300, 300))
			}
		}
	}
	z.set("target.test", v4(60)) // a CNAME target outside the answer
	tests := []struct {
		name   string
		answer func(q dns.Question, m *dns.Msg)
		// queries of each type expected after two resolves in a row
		wantA, wantAAAA int
		wantErr         bool
	}{
		{name: "A with TTL, NODATA with SOA", answer: v4(60), wantA: 1, wantAAAA: 1},
		{name: "TTL 0", answer: v4(0), wantA: 2, wantAAAA: 1},
		{name: "NODATA without SOA", wantA: 1, wantAAAA: 2, answer: func(q dns.Question, m *dns.Msg) {
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, aRecord(q.Name, 60, "192.0.2.10"))
			}
		}},
		{name: "NODATA with SOA minimum 0", wantA: 1, wantAAAA: 2, answer: func(q dns.Question, m *dns.Msg) {
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, aRecord(q.Name, 60, "192.0.2.10"))
			} else {
				m.Ns = append(m.Ns, soaRecord(300, 0))
			}
		}},
		{name: "CNAME with TTL 0 in the chain", wantA: 2, wantAAAA: 2, answer: func(q dns.Question, m *dns.Msg) {
			m.Answer = append(m.Answer, &dns.CNAME{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 0}, Target: "target.test."})
			if q.Qtype == dns.TypeA {
				m.Answer = append(m.Answer, aRecord("target.test.", 60, "192.0.2.10"))
			} else {
				m.Ns = append(m.Ns, soaRecord(300, 300))
			}
		}},
		{name: "server failure", wantA: 2, wantAAAA: 2, wantErr: true, answer: func(q dns.Question, m *dns.Msg) {
			m.Rcode = dns.RcodeServerFailure
		}},
		{name: "NXDOMAIN", wantA: 2, wantAAAA: 2, wantErr: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			host := fmt.Sprintf("h%d.test", i)
			if tt.answer != nil {
				z.set(host, tt.answer)
			}
			for range 2 {
				addrs, err := r.Resolve(context.Background(), host)
				if (err != nil) != tt.wantErr {
					t.Fatalf("Resolve: %v, %v", addrs, err)
				}
				if err == nil && !slices.Equal(addrs, []netip.Addr{netip.MustParseAddr("192.0.2.10")}) {
					t.Fatalf("Resolve = %v", addrs)
				}
			}
			if a, aaaa := z.count(host, dns.TypeA), z.count(host, dns.TypeAAAA); a != tt.wantA || aaaa != tt.wantAAAA {
				t.Errorf("queries A %d AAAA %d, want %d and %d", a, aaaa, tt.wantA, tt.wantAAAA)
			}
		})
	}
}

// TestResolverCacheExpires: a cached answer is used until its TTL ends,
// then the name is queried again and a changed answer seen.
func TestResolverCacheExpires(t *testing.T) {
	t.Parallel()
	z := startZoneServer(t)
	r, err := NewResolver([]string{z.addr}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ip := "192.0.2.1"
	var mu sync.Mutex
	z.set("moving.test", func(q dns.Question, m *dns.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, aRecord(q.Name, 1, ip))
		}
	})
	resolve := func() netip.Addr {
		addrs, err := r.Resolve(context.Background(), "moving.test")
		if err != nil || len(addrs) != 1 {
			t.Fatalf("Resolve: %v, %v", addrs, err)
		}
		return addrs[0]
	}
	first := resolve()
	mu.Lock()
	ip = "192.0.2.2"
	mu.Unlock()
	if got := resolve(); got != first {
		t.Fatalf("within the TTL got %v, want the cached %v", got, first)
	}
	time.Sleep(1100 * time.Millisecond)
	if got := resolve(); got != netip.MustParseAddr("192.0.2.2") {
		t.Fatalf("after the TTL got %v, want the new answer", got)
	}
	if n := z.count("moving.test", dns.TypeA); n != 2 {
		t.Fatalf("A queries = %d, want 2", n)
	}
}

// TestDNSCacheBounds: TTLs are capped, entries bounded, copies returned.
func TestDNSCacheBounds(t *testing.T) {
	t.Parallel()
	var c dnsCache
	now := time.Now()
	a := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	c.put(newCacheKey("Long.Test.", dns.TypeA), a, 24*time.Hour, now)
	if _, ok := c.get(newCacheKey("long.test.", dns.TypeA), now.Add(maxCacheTTL-time.Second)); !ok {
		t.Fatal("entry gone before the cap")
	}
	if _, ok := c.get(newCacheKey("long.test.", dns.TypeA), now.Add(maxCacheTTL)); ok {
		t.Fatal("entry kept past the cap")
	}
	got, _ := c.get(newCacheKey("x.test.", dns.TypeA), now)
	if got != nil {
		t.Fatal("unknown name answered")
	}
	c.put(newCacheKey("x.test.", dns.TypeA), a, time.Minute, now)
	got, _ = c.get(newCacheKey("x.test.", dns.TypeA), now)
	got[0] = netip.MustParseAddr("10.0.0.1")
	if again, _ := c.get(newCacheKey("x.test.", dns.TypeA), now); again[0] != a[0] {
		t.Fatal("a caller's change reached the cache")
	}
	for i := range 2 * maxCacheEntries {
		c.put(newCacheKey(fmt.Sprintf("n%d.test.", i), dns.TypeA), a, time.Minute, now)
	}
	if n := len(c.m); n > maxCacheEntries {
		t.Fatalf("%d entries, bound is %d", n, maxCacheEntries)
	}
}
