package installer

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"

	"github.com/sandboxapi/sandboxapi/internal/canary"
)

// Reached reports whether a canary observation means the target answered.
func Reached(observed string) bool { return canary.Reached(observed) }

// ProbeResult is what one canary saw.
type ProbeResult struct {
	Reached   map[string]string `json:"reached"`
	Mirror    string            `json:"mirror"`
	Forbidden []string          `json:"forbidden"`
}

// Probe measures the installer network by real connection attempts: a
// canary sandbox on a fresh installer network must fetch the mirror's
// index and must not reach a decoy listener on the host (on the network's
// host address and on every host address), nor the mirror's port on any
// other host address, nor loopback, nor any extra target; a canary
// without network must not reach the mirror address. It returns an error
// naming anything that was wrong.
func (i *Installer) Probe(ctx context.Context, extra ...string) (string, error) {
	res, err := i.ProbeDetail(ctx, extra...)
	if err != nil {
		return "", err
	}
	var bad []string
	if !strings.HasPrefix(res.Reached[res.Mirror], "status 200") {
		bad = append(bad, "mirror not reachable: "+res.Reached[res.Mirror])
	}
	for _, t := range res.Forbidden {
		if Reached(res.Reached[t]) {
			bad = append(bad, t+" reachable")
		}
	}
	if len(bad) > 0 {
		return "", fmt.Errorf("installer network is not fenced: %s", strings.Join(bad, "; "))
	}
	return fmt.Sprintf("installer reaches the mirror only (%d other addresses refused); no-network canary reaches nothing", len(res.Forbidden)), nil
}

// ProbeDetail runs the canaries and returns every observation.
func (i *Installer) ProbeDetail(ctx context.Context, extra ...string) (ProbeResult, error) {
	decoy, dport, err := Decoy()
	if err != nil {
		return ProbeResult{}, err
	}
	defer decoy.Close()

	ep, stop, err := i.serveMirror(ctx)
	if err != nil {
		return ProbeResult{}, err
	}
	defer stop()
	mirrorURL := fmt.Sprintf("GET http://%s/mirror/pypi/simple/", netip.AddrPortFrom(ep.HostAddr, i.cfg.Port))
	forbidden := []string{netip.AddrPortFrom(ep.HostAddr, dport).String(), netip.AddrPortFrom(ep.HostAddr, 22).String()}
	for _, a := range HostAddrs() {
		if a != ep.HostAddr {
			forbidden = append(forbidden, netip.AddrPortFrom(a, dport).String(), netip.AddrPortFrom(a, i.cfg.Port).String())
		}
	}
	// Loopback inside the installer's namespace: nothing listens there,
	// and the host's own loopback must not show through.
	for _, a := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()} {
		forbidden = append(forbidden, netip.AddrPortFrom(a, i.cfg.Port).String(), netip.AddrPortFrom(a, dport).String())
	}
	forbidden = append(forbidden, extra...)
	targets := append([]string{mirrorURL}, forbidden...)
	got, err := i.runCanary(ctx, ep.NetnsPath, targets)
	if err != nil {
		return ProbeResult{}, err
	}
	// Without network, not even the mirror address.
	off, err := i.runCanary(ctx, "", []string{mirrorURL})
	if err != nil {
		return ProbeResult{}, err
	}
	got["no-network "+mirrorURL] = off[mirrorURL]
	forbidden = append(forbidden, "no-network "+mirrorURL)
	sort.Strings(forbidden)
	return ProbeResult{Reached: got, Mirror: mirrorURL, Forbidden: forbidden}, nil
}

func (i *Installer) runCanary(ctx context.Context, netns string, targets []string) (map[string]string, error) {
	return Canary(ctx, i.runner, netns, targets)
}

// Canary runs one canary sandbox (on the network namespace netns, or with
// no network) that tries every target and returns what it saw per target
// (see Reached).
func Canary(ctx context.Context, runner Runner, netns string, targets []string) (map[string]string, error) {
	return canary.Run(ctx, runner, netns, targets)
}

// Decoy listens on every host address on a free port that nothing should
// reach (see canary.Decoy). Close it when done.
func Decoy() (net.Listener, uint16, error) { return canary.Decoy() }

// HostAddrs lists the host's own IPv4 addresses (not loopback).
func HostAddrs() []netip.Addr { return canary.HostAddrs() }
