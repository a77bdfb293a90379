package installer

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// canary tries each target and prints {"target": "open"|"<error>"}; a
// target "GET url" fetches url and reports "status <code>"; a target
// "DNS host:port" sends one DNS query over UDP and reports
// "answered rcode <n>".
const canary = `
import json, socket, sys, urllib.request
out = {}
for t in json.load(open(sys.argv[1])):
    try:
        if t.startswith("GET "):
            o = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with o.open(t[4:], timeout=3) as r:
                out[t] = "status %d" % r.status
        elif t.startswith("DNS "):
            h, p = t[4:].rsplit(":", 1)
            q = b"\x5a\x17\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05probe\x07invalid\x00\x00\x01\x00\x01"
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(2)
            s.sendto(q, (h.strip("[]"), int(p)))
            r = s.recv(512)
            s.close()
            out[t] = "answered rcode %d" % (r[3] & 15) if r[:2] == q[:2] else "unrelated answer"
        else:
            h, p = t.rsplit(":", 1)
            s = socket.create_connection((h.strip("[]"), int(p)), timeout=2)
            s.close()
            out[t] = "open"
    except Exception as e:
        out[t] = "%s: %s" % (type(e).__name__, e)
print(json.dumps(out))
`

// Reached reports whether a canary observation means the target answered.
func Reached(observed string) bool {
	return observed == "open" || strings.HasPrefix(observed, "status ") || strings.HasPrefix(observed, "answered ")
}

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
	tb, _ := json.Marshal(targets)
	res, err := runner.RunJob(ctx, sandbox.Job{
		NetnsPath: netns,
		Files:     []sandbox.File{{Path: "canary.py", Content: []byte(canary)}, {Path: "targets.json", Content: tb}},
		Argv:      []string{"/usr/bin/python3", "-I", "{dir}/canary.py", "{dir}/targets.json"},
		Env:       []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		Timeout:   time.Duration(len(targets))*3*time.Second + 10*time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("running canary: %w", err)
	}
	out := map[string]string{}
	if res.Status != sandbox.StatusOK || json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &out) != nil {
		return nil, fmt.Errorf("canary failed: %s (exit %d): %s %s", res.Status, res.ExitCode, tail(res.Stdout, 200), lastLine(res.Stderr))
	}
	return out, nil
}

// Decoy listens on every host address on a free port and accepts and
// drops connections: a port that nothing should reach, but that answers
// if a fence lets a canary through. Close it when done.
func Decoy() (net.Listener, uint16, error) {
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, 0, fmt.Errorf("opening decoy listener: %w", err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l, uint16(l.Addr().(*net.TCPAddr).Port), nil
}

// HostAddrs lists the host's own IPv4 addresses (not loopback).
func HostAddrs() []netip.Addr {
	var out []netip.Addr
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil || !pfx.Addr().Is4() || pfx.Addr().IsLoopback() {
			continue
		}
		out = append(out, pfx.Addr())
	}
	return out
}
