package egress

import (
	"net"
	"net/netip"
	"sync"
)

// hostAddrs is the set of addresses configured on the host's interfaces,
// kept current for the proxy's own-address rule: an address added after
// start (an elastic IP, DHCP renumbering, a new interface) must be refused
// from the moment it exists. On Linux a netlink socket subscribed to
// address events tells when the set changed; every lookup first drains it
// without blocking and re-reads the interfaces if anything arrived (the
// kernel queues the event before the change is acknowledged, so a lookup
// after the change always sees it). Without a subscription every lookup
// re-reads the interfaces. Safe for concurrent use; the zero value
// re-reads on every lookup.
type hostAddrs struct {
	mu     sync.Mutex
	events addrEvents // nil: no subscription
	set    map[netip.Addr]bool
	read   func() ([]net.Addr, error) // net.InterfaceAddrs unless testing
}

// addrEvents reports whether the host's addresses may have changed since
// the last call (true also when events were lost).
type addrEvents interface {
	changed() bool
	close() error
}

func newHostAddrs() *hostAddrs {
	h := &hostAddrs{}
	if ev, err := subscribeAddrEvents(); err == nil {
		h.events = ev
	}
	return h
}

// has reports whether a (unmapped) is one of the host's addresses now.
func (h *hostAddrs) has(a netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.set == nil || h.events == nil || h.events.changed() {
		h.reload()
	}
	return h.set[a.Unmap()]
}

// reload re-reads the interface addresses. A failed read keeps the old
// set (still refusing what it held). Callers hold h.mu.
func (h *hostAddrs) reload() {
	read := h.read
	if read == nil {
		read = net.InterfaceAddrs
	}
	addrs, err := read()
	if err != nil && h.set != nil {
		return
	}
	set := make(map[netip.Addr]bool, len(addrs))
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			set[pfx.Addr().Unmap().WithZone("")] = true
		}
	}
	h.set = set
}

func (h *hostAddrs) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.events != nil {
		h.events.close()
		h.events = nil
	}
}
