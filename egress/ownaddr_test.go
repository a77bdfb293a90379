package egress

import (
	"errors"
	"net"
	"net/netip"
	"testing"
)

type fakeAddrEvents struct{ pending bool }

func (f *fakeAddrEvents) changed() bool { c := f.pending; f.pending = false; return c }
func (f *fakeAddrEvents) close() error  { return nil }

// hostAddrs re-reads the interfaces exactly when it must: on every lookup
// without a subscription, and after an event with one.
func TestHostAddrsRefresh(t *testing.T) {
	t.Parallel()
	a1, a2 := netip.MustParseAddr("192.0.2.10"), netip.MustParseAddr("2001:db8::10")
	type step struct {
		event   bool // an address event is queued before the lookup
		addrs   []string
		readErr bool // the interface read fails
		ask     netip.Addr
		want    bool
		reads   int // reads so far
	}
	tests := []struct {
		name   string
		events bool
		steps  []step
	}{
		{name: "no subscription reads every time", steps: []step{
			{addrs: []string{"192.0.2.10/24"}, ask: a1, want: true, reads: 1},
			{addrs: nil, ask: a1, want: false, reads: 2},
		}},
		{name: "subscription reads once until an event", events: true, steps: []step{
			{addrs: []string{"192.0.2.10/24"}, ask: a1, want: true, reads: 1},
			{addrs: []string{"192.0.2.10/24", "2001:db8::10/64"}, ask: a2, want: false, reads: 1},
			{event: true, addrs: []string{"192.0.2.10/24", "2001:db8::10/64"}, ask: a2, want: true, reads: 2},
			{event: true, addrs: []string{"2001:db8::10/64"}, ask: a1, want: false, reads: 3},
		}},
		{name: "the mapped form matches", events: true, steps: []step{
			{addrs: []string{"192.0.2.10/24", "fe80::1/64"}, ask: netip.MustParseAddr("::ffff:192.0.2.10"), want: true, reads: 1},
			{ask: netip.MustParseAddr("fe80::1"), want: true, reads: 1},
		}},
		{name: "a failed read keeps the old set", events: true, steps: []step{
			{addrs: []string{"192.0.2.10/24"}, ask: a1, want: true, reads: 1},
			{event: true, readErr: true, ask: a1, want: true, reads: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var cur step
			reads := 0
			h := &hostAddrs{read: func() ([]net.Addr, error) {
				reads++
				if cur.readErr {
					return nil, errors.New("netlink gone")
				}
				var out []net.Addr
				for _, s := range cur.addrs {
					p := netip.MustParsePrefix(s)
					out = append(out, &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())})
				}
				return out, nil
			}}
			ev := &fakeAddrEvents{}
			if tt.events {
				h.events = ev
			}
			for i, s := range tt.steps {
				cur = s
				ev.pending = s.event
				if got := h.has(s.ask); got != s.want || reads != s.reads {
					t.Fatalf("step %d: has(%s) = %v after %d reads, want %v after %d", i, s.ask, got, reads, s.want, s.reads)
				}
			}
		})
	}
}
