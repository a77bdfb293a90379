// Package canary measures a sandbox network from the inside: a canary
// sandbox tries a list of targets and reports what each did, beside a
// decoy listener that nothing should reach. The installer's and the
// session networks' topology checks share it. It does no I/O of its own
// beyond the decoy and the host's address list.
package canary

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/clip"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Runner runs one job in a fresh sandbox (the executor).
type Runner interface {
	RunJob(ctx context.Context, job sandbox.Job) (sandbox.Result, error)
}

// script tries each target and prints {"target": "open"|"<error>"}; a
// target "GET url" fetches url and reports "status <code>"; a target
// "DNS host:port" sends one DNS query over UDP and reports
// "answered rcode <n>".
const script = `
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

// Run runs one canary sandbox (on the network namespace netns, or with
// no network) that tries every target and returns what it saw per target
// (see Reached).
func Run(ctx context.Context, runner Runner, netns string, targets []string) (map[string]string, error) {
	tb, _ := json.Marshal(targets)
	res, err := runner.RunJob(ctx, sandbox.Job{
		NetnsPath: netns,
		Files:     []sandbox.File{{Path: "canary.py", Content: []byte(script)}, {Path: "targets.json", Content: tb}},
		Argv:      []string{"/usr/bin/python3", "-I", "{dir}/canary.py", "{dir}/targets.json"},
		Env:       []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		Timeout:   time.Duration(len(targets))*3*time.Second + 10*time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("running canary: %w", err)
	}
	out := map[string]string{}
	if res.Status != sandbox.StatusOK || json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &out) != nil {
		return nil, fmt.Errorf("canary failed: %s (exit %d): %s %s", res.Status, res.ExitCode, clip.Tail(res.Stdout, 200), clip.LastLine(res.Stderr))
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
