package policy

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkDecide times one decision for a resolved name (the per-address
// call the proxy makes) with full lists, 256 allow and 256 deny entries
// (the API's caps, half names and half prefixes, the match last), against
// a baseline of one allow entry, run alternately in the same loop; it
// reports both and their ratio.
func BenchmarkDecide(b *testing.B) {
	v := Vetter{ExtraAllowed: []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}}
	small := Policy{Enabled: true, Allow: MustParseEntries(ListAllowed, "*.example.com")}
	var allow, deny []string
	for i := range 255 {
		if i%2 == 0 {
			allow = append(allow, fmt.Sprintf("h%d.example.org", i))
			deny = append(deny, fmt.Sprintf("d%d.example.org", i))
		} else {
			allow = append(allow, fmt.Sprintf("93.%d.0.0/16", i))
			deny = append(deny, fmt.Sprintf("94.%d.0.0/16", i))
		}
	}
	full, err := New(Rules{Enabled: true, Allowed: append(allow, "*.example.com"), Denied: append(deny, "95.0.0.0/8")})
	if err != nil {
		b.Fatal(err)
	}
	args := Args{Host: "api.example.com", Addr: netip.MustParseAddr("93.184.216.34"), Port: 443}
	const inner = 1000
	var base, big time.Duration
	run := func(p Policy, into *time.Duration) {
		a := args
		a.Policy = p
		start := time.Now()
		for range inner {
			if !v.Decide(a).Allowed() {
				b.Fatal("denied")
			}
		}
		*into += time.Since(start)
	}
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			run(small, &base)
			run(full, &big)
		} else {
			run(full, &big)
			run(small, &base)
		}
	}
	n := float64(b.N * inner)
	b.ReportMetric(float64(base.Nanoseconds())/n, "ns/decide-1-entry")
	b.ReportMetric(float64(big.Nanoseconds())/n, "ns/decide-512-entries")
	b.ReportMetric(float64(big)/float64(base), "ratio")
}
