package egress

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/sandboxapi/sandboxapi/internal/canary"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// ProbeSessionPrefix names the session networks the topology check makes;
// their egress decisions are not a client's and are not kept or counted.
const ProbeSessionPrefix = "probe-"

// Probe measures a session network as a sandbox sees it (the topology
// check): a canary run by runner on a fresh session network, made exactly
// as for a session with network, must reach the proxy's CONNECT and
// transparent ports and get an answer from its DNS, and must reach
// nothing else: not a decoy on the host (on the network's own host
// address and on every other host address), not SSH, not the proxy or DNS
// ports on the host's other addresses.
func (s *Sessions) Probe(ctx context.Context, runner canary.Runner) (string, error) {
	decoy, dport, err := canary.Decoy()
	if err != nil {
		return "", err
	}
	defer decoy.Close()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	id := ProbeSessionPrefix + hex.EncodeToString(b)
	att, err := s.Attach(ctx, id, sandbox.NetworkRequest{Enabled: true})
	if err != nil {
		return "", fmt.Errorf("setting up a session network: %w", err)
	}
	defer func() { _ = s.Detach(context.WithoutCancel(ctx), id) }()
	ea, ok := s.net.Attachment(id)
	if !ok {
		return "", errors.New("session network vanished during the probe")
	}
	host := ea.HostAddr
	at := func(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }
	must := []string{at(host, s.cfg.ConnectPort), at(host, s.cfg.TransparentPort), "DNS " + at(host, s.cfg.DNSPort)}
	forbidden := []string{at(host, dport), at(host, 22)}
	for _, a := range canary.HostAddrs() {
		if a != host {
			forbidden = append(forbidden, at(a, dport), at(a, s.cfg.ConnectPort), "DNS "+at(a, s.cfg.DNSPort))
		}
	}
	got, err := canary.Run(ctx, runner, att.NetnsPath, append(append([]string{}, must...), forbidden...))
	if err != nil {
		return "", err
	}
	return judgeSessionProbe(got, must, forbidden)
}

// judgeSessionProbe turns what the canary saw into the check's verdict.
func judgeSessionProbe(got map[string]string, must, forbidden []string) (string, error) {
	var bad []string
	for _, t := range must {
		if !canary.Reached(got[t]) {
			bad = append(bad, fmt.Sprintf("%s not reachable (%s)", t, got[t]))
		}
	}
	for _, t := range forbidden {
		if canary.Reached(got[t]) {
			bad = append(bad, t+" reachable")
		}
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return "", fmt.Errorf("session network is not fenced: %s", strings.Join(bad, "; "))
	}
	return fmt.Sprintf("session network reaches the proxy and its DNS only (%d other addresses refused)", len(forbidden)), nil
}
