package egress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// Resolver errors. Any of them means the connection is denied.
var (
	ErrNoAddresses  = errors.New("name has no addresses")
	ErrNXDomain     = errors.New("name does not exist")
	ErrCNAMEDepth   = errors.New("CNAME chain too long")
	ErrResolverFail = errors.New("upstream resolver failed")
)

// maxCNAMEDepth bounds CNAME chains (including re-queries).
const maxCNAMEDepth = 8

// Resolver resolves names with miekg/dns against fixed upstream servers,
// never the system resolver. It queries A and AAAA, follows CNAME chains
// (ignoring answer records for other owners), and retries over TCP when a
// UDP answer is truncated. Answers are cached for their TTL (see
// dnsCache). The zero value is not usable; it is safe for concurrent use.
type Resolver struct {
	servers []string
	timeout time.Duration
	cache   dnsCache
}

// NewResolver returns a Resolver for servers ("ip" or "ip:port").
func NewResolver(servers []string, timeout time.Duration) (*Resolver, error) {
	r := &Resolver{timeout: timeout}
	for _, s := range servers {
		ap, err := parseResolver(s)
		if err != nil {
			return nil, err
		}
		r.servers = append(r.servers, ap.String())
	}
	if len(r.servers) == 0 {
		return nil, fmt.Errorf("creating resolver: %w", ErrResolverFail)
	}
	return r, nil
}

// Resolve returns every A and AAAA address of the canonical host name. Any
// failure of either query is an error: the caller must deny.
func (r *Resolver) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	type result struct {
		addrs []netip.Addr
		err   error
	}
	ch := make(chan result, 2)
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		go func() {
			a, err := r.lookup(ctx, dns.Fqdn(host), qt)
			ch <- result{a, err}
		}()
	}
	var addrs []netip.Addr
	var errs []error
	for range 2 {
		res := <-ch
		addrs = append(addrs, res.addrs...)
		if res.err != nil {
			errs = append(errs, res.err)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("resolving %s: %w", host, errors.Join(errs...))
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("resolving %s: %w", host, ErrNoAddresses)
	}
	// IPv4 first, then IPv6, each in answer order: deterministic dialling.
	slices.SortStableFunc(addrs, func(a, b netip.Addr) int {
		switch {
		case a.Is4() && !b.Is4():
			return -1
		case !a.Is4() && b.Is4():
			return 1
		}
		return 0
	})
	return addrs, nil
}

// lookup answers from the cache or queries, caching the answer for the
// lowest TTL of the records it used.
func (r *Resolver) lookup(ctx context.Context, name string, qtype uint16) ([]netip.Addr, error) {
	key := newCacheKey(name, qtype)
	if addrs, ok := r.cache.get(key, time.Now()); ok {
		return addrs, nil
	}
	addrs, ttl, err := r.query(ctx, name, qtype)
	if err == nil {
		r.cache.put(key, addrs, time.Duration(ttl)*time.Second, time.Now())
	}
	return addrs, err
}

// query resolves name's qtype addresses and returns the lowest TTL of the
// records that gave the answer (0 if it may not be cached).
func (r *Resolver) query(ctx context.Context, name string, qtype uint16) ([]netip.Addr, uint32, error) {
	depth := 0
	ttl := uint32(maxCacheTTL / time.Second)
	for {
		msg, err := r.exchange(ctx, name, qtype)
		if err != nil {
			return nil, 0, err
		}
		if msg.Rcode == dns.RcodeNameError {
			return nil, 0, fmt.Errorf("looking up %s %s: %w", name, dns.TypeToString[qtype], ErrNXDomain)
		}
		if msg.Rcode != dns.RcodeSuccess {
			return nil, 0, fmt.Errorf("looking up %s %s: rcode %s: %w", name, dns.TypeToString[qtype], dns.RcodeToString[msg.Rcode], ErrResolverFail)
		}
		// Walk the chain inside this answer, trusting only records owned
		// by the current name.
		cur := name
		for {
			var addrs []netip.Addr
			next := ""
			for _, rr := range msg.Answer {
				if !strings.EqualFold(rr.Header().Name, cur) {
					continue
				}
				switch v := rr.(type) {
				case *dns.A:
					if qtype == dns.TypeA {
						if a, ok := netip.AddrFromSlice(v.A.To4()); ok {
							addrs = append(addrs, a)
							ttl = min(ttl, v.Hdr.Ttl)
						}
					}
				case *dns.AAAA:
					if qtype == dns.TypeAAAA {
						if a, ok := netip.AddrFromSlice(v.AAAA.To16()); ok {
							addrs = append(addrs, a)
							ttl = min(ttl, v.Hdr.Ttl)
						}
					}
				case *dns.CNAME:
					next = v.Target
					ttl = min(ttl, v.Hdr.Ttl)
				}
			}
			if len(addrs) > 0 {
				return addrs, ttl, nil
			}
			if next == "" {
				if cur == name {
					return nil, min(ttl, negativeTTL(msg)), nil // NODATA
				}
				break // chain leaves this answer: query the target
			}
			depth++
			if depth > maxCNAMEDepth {
				return nil, 0, fmt.Errorf("looking up %s: %w", name, ErrCNAMEDepth)
			}
			cur = next
		}
		name = cur
	}
}

func (r *Resolver) exchange(ctx context.Context, name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.RecursionDesired = true
	var errs []error
	for _, srv := range r.servers {
		msg, err := r.exchangeOne(ctx, q, srv)
		if err == nil {
			return msg, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("querying %s %s: %w: %w", name, dns.TypeToString[qtype], ErrResolverFail, errors.Join(errs...))
}

func (r *Resolver) exchangeOne(ctx context.Context, q *dns.Msg, srv string) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	c := &dns.Client{Net: "udp", Timeout: r.timeout}
	msg, _, err := c.ExchangeContext(ctx, q, srv)
	if err == nil && msg.Truncated {
		c = &dns.Client{Net: "tcp", Timeout: r.timeout}
		msg, _, err = c.ExchangeContext(ctx, q, srv)
	}
	if err != nil {
		return nil, fmt.Errorf("exchanging with %s: %w", srv, err)
	}
	if msg.Id != q.Id || len(msg.Question) != 1 || !strings.EqualFold(msg.Question[0].Name, q.Question[0].Name) {
		return nil, fmt.Errorf("exchanging with %s: mismatched answer", srv)
	}
	return msg, nil
}
