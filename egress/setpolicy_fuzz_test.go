package egress

import (
	"context"
	"net"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/egress/policy"
)

// FuzzSetPolicy checks the tunnel bookkeeping of a policy change on any
// lists: open tunnels are given (one per line of hosts) under the old
// policy, the new one is built from newList (when it parses), and then
// exactly the tunnels whose host the new policy refuses are closed, and
// a tunnel tracked after the change (decided under the old policy) is
// closed at once unless the new policy allows it.
func FuzzSetPolicy(f *testing.F) {
	f.Add("a.example.com\nb.example.com\nx.cdn.test", "b.example.com\n*.cdn.test", true)
	f.Add("a.example.com", "", false)
	f.Add("a.example.com\nA.EXAMPLE.COM.", "a.example.com", true)
	f.Add("cdn.test\nx.cdn.test", "*.cdn.test", true)
	f.Add("a.example.com", "*", true)
	f.Fuzz(func(t *testing.T, hosts, newList string, enabled bool) {
		var entries []string
		if newList != "" {
			entries = strings.Split(newList, "\n")
		}
		pol, err := policy.New(policy.Rules{Enabled: enabled, Allowed: entries})
		if err != nil {
			return // the API refuses it with 400 before anything changes
		}
		var targets []policy.Args
		for _, h := range strings.Split(hosts, "\n") {
			c, err := policy.CanonicalHost(h)
			if err != nil {
				continue // decide refuses it before any tunnel
			}
			targets = append(targets, policy.Args{Host: c, Port: 443})
			if len(targets) == 16 {
				break
			}
		}
		if len(targets) == 0 {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := &session{Session: Session{ID: "fuzz", Policy: policy.Policy{Enabled: true}}, tunnels: map[*tunnel]struct{}{}, ctx: ctx, cancel: cancel}
		p := &Proxy{log: discardLogger(), sessions: map[string]*session{"fuzz": s}}
		newTunnel := func(hp policy.Args) (*tunnel, net.Conn) {
			c1, c2 := net.Pipe()
			u1, u2 := net.Pipe()
			t.Cleanup(func() { c1.Close(); c2.Close(); u1.Close(); u2.Close() })
			return &tunnel{client: c1, upstream: u1, target: hp}, c2
		}
		var open []*tunnel
		for _, hp := range targets {
			tun, _ := newTunnel(hp)
			p.track(s, tun)
			if tun.revoked.Load() {
				t.Fatalf("tunnel to %s closed under a policy allowing everything", hp.Host)
			}
			open = append(open, tun)
		}
		// One decided under the old policy, tracked after the change.
		late, _ := newTunnel(targets[0])

		closed, err := p.SetPolicy("fuzz", pol)
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		for _, tun := range open {
			allowed := p.stillAllowed(pol, tun)
			if !allowed {
				want++
			}
			if tun.revoked.Load() == allowed {
				t.Fatalf("tunnel to %s: closed %v, new policy allows it %v", tun.target.Host, tun.revoked.Load(), allowed)
			}
		}
		if closed != want {
			t.Fatalf("SetPolicy closed %d, want %d", closed, want)
		}
		p.track(s, late)
		if allowed := p.stillAllowed(pol, late); late.revoked.Load() == allowed {
			t.Fatalf("late tunnel to %s: closed %v, allowed %v", late.target.Host, late.revoked.Load(), allowed)
		}
		if got := s.rules(); got.Enabled != pol.Enabled || len(got.Allow) != len(pol.Allow) {
			t.Fatalf("policy in force %+v, want %+v", got, pol)
		}
	})
}
