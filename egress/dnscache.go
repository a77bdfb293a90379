package egress

import (
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// DNS cache bounds: answers are kept for their TTL but never longer than
// maxCacheTTL, and for at most maxCacheEntries (name, type) pairs.
const (
	maxCacheTTL     = 60 * time.Second
	maxCacheEntries = 4096
)

// dnsCache keeps the Resolver's answers for their time to live, so a
// burst of connections to one host (a package manager fetching files)
// pays for one lookup. It holds address sets (empty for NODATA answers
// that carried an SOA, per RFC 2308) and never errors, NXDOMAIN or
// negative answers without an SOA. Every use still vets every address, so
// a cached answer is exactly as trusted as a fresh one. Safe for
// concurrent use; the zero value is an empty cache.
type dnsCache struct {
	mu sync.Mutex
	m  map[cacheKey]cacheEntry
}

type cacheKey struct {
	name  string // lower-case FQDN
	qtype uint16
}

type cacheEntry struct {
	addrs   []netip.Addr
	expires time.Time
}

func newCacheKey(name string, qtype uint16) cacheKey {
	return cacheKey{strings.ToLower(name), qtype}
}

// get returns a copy of the live answer for k.
func (c *dnsCache) get(k cacheKey, now time.Time) ([]netip.Addr, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return nil, false
	}
	if !now.Before(e.expires) {
		delete(c.m, k)
		return nil, false
	}
	return append([]netip.Addr(nil), e.addrs...), true
}

// put keeps addrs for ttl (capped at maxCacheTTL); ttl 0 keeps nothing.
// When full it drops expired entries, then arbitrary ones down to 7/8 of
// the bound, so a stream of new names (a sandbox may invent any number
// under an allowed wildcard) pays for a sweep only once per maxCacheEntries/8.
func (c *dnsCache) put(k cacheKey, addrs []netip.Addr, ttl time.Duration, now time.Time) {
	ttl = min(ttl, maxCacheTTL)
	if ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[cacheKey]cacheEntry{}
	}
	if _, ok := c.m[k]; !ok && len(c.m) >= maxCacheEntries {
		for ok, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, ok)
			}
		}
		for ok := range c.m {
			if len(c.m) <= maxCacheEntries*7/8 {
				break
			}
			delete(c.m, ok)
		}
	}
	c.m[k] = cacheEntry{addrs: append([]netip.Addr(nil), addrs...), expires: now.Add(ttl)}
}

// negativeTTL is how long a NODATA answer may be kept: the SOA's TTL or
// minimum, whichever is lower (RFC 2308); 0 without an SOA.
func negativeTTL(msg *dns.Msg) uint32 {
	for _, rr := range msg.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return min(soa.Hdr.Ttl, soa.Minttl)
		}
	}
	return 0
}
