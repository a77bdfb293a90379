package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/installer"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// probeSessionPrefix names the session networks the topology check makes;
// their egress decisions are not a client's and are not kept or counted.
const probeSessionPrefix = "probe-"

// sessionNetworkProbe measures a session network as a sandbox sees it: a
// canary on a fresh session network (made exactly as for a session with
// network) must reach the egress proxy's CONNECT and transparent ports and
// get an answer from its DNS, and must reach nothing else: not a decoy on
// the host (on the network's own host address and on every other host
// address), not SSH, not the proxy or DNS ports on the host's other
// addresses.
func sessionNetworkProbe(ex *executor.Executor, n *egress.Sessions) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		decoy, dport, err := installer.Decoy()
		if err != nil {
			return "", err
		}
		defer decoy.Close()
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		id := probeSessionPrefix + hex.EncodeToString(b)
		att, err := n.Attach(ctx, id, sandbox.NetworkRequest{Enabled: true})
		if err != nil {
			return "", fmt.Errorf("setting up a session network: %w", err)
		}
		defer func() { _ = n.Detach(context.WithoutCancel(ctx), id) }()
		ea, ok := n.Network().Attachment(id)
		if !ok {
			return "", errors.New("session network vanished during the probe")
		}
		host := ea.HostAddr
		at := func(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }
		cfg := n.Config()
		must := []string{at(host, cfg.ConnectPort), at(host, cfg.TransparentPort), "DNS " + at(host, cfg.DNSPort)}
		forbidden := []string{at(host, dport), at(host, 22)}
		for _, a := range installer.HostAddrs() {
			if a != host {
				forbidden = append(forbidden, at(a, dport), at(a, cfg.ConnectPort), "DNS "+at(a, cfg.DNSPort))
			}
		}
		got, err := installer.Canary(ctx, ex, att.NetnsPath, append(append([]string{}, must...), forbidden...))
		if err != nil {
			return "", err
		}
		return judgeSessionProbe(got, must, forbidden)
	}
}

// judgeSessionProbe turns what the canary saw into the check's verdict.
func judgeSessionProbe(got map[string]string, must, forbidden []string) (string, error) {
	var bad []string
	for _, t := range must {
		if !installer.Reached(got[t]) {
			bad = append(bad, fmt.Sprintf("%s not reachable (%s)", t, got[t]))
		}
	}
	for _, t := range forbidden {
		if installer.Reached(got[t]) {
			bad = append(bad, t+" reachable")
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return "", fmt.Errorf("session network is not fenced: %s", strings.Join(bad, "; "))
	}
	return fmt.Sprintf("session network reaches the proxy and its DNS only (%d other addresses refused)", len(forbidden)), nil
}
