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
	"strconv"
	"strings"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/clip"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Runner runs one job in a fresh sandbox (the executor).
type Runner interface {
	RunJob(ctx context.Context, job sandbox.Job) (sandbox.Result, error)
}

// script tries every target and prints {"target": "open"|"<error>"}; a
// target "GET url" fetches url and reports "status <code>"; a target
// "DNS host:port" sends one DNS query over UDP and reports
// "answered rcode <n>". The targets are tried `workers` at a time, a
// thread each: a fenced target costs its whole timeout (a dropped packet
// answers nothing) and the list grows with the host's addresses, so one
// after another the run outlasted the readiness check's deadline on a
// host with many session networks.
const script = `
import json, socket, sys, threading, urllib.request
def probe(t):
    if t.startswith("GET "):
        o = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with o.open(t[4:], timeout=3) as r:
            return "status %d" % r.status
    if t.startswith("DNS "):
        h, p = t[4:].rsplit(":", 1)
        q = b"\x5a\x17\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x05probe\x07invalid\x00\x00\x01\x00\x01"
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.settimeout(2)
            s.sendto(q, (h.strip("[]"), int(p)))
            r = s.recv(512)
        finally:
            s.close()
        return "answered rcode %d" % (r[3] & 15) if r[:2] == q[:2] else "unrelated answer"
    h, p = t.rsplit(":", 1)
    s = socket.create_connection((h.strip("[]"), int(p)), timeout=2)
    s.close()
    return "open"
todo = list(json.load(open(sys.argv[1])))
out = {}
lock = threading.Lock()
def work():
    while True:
        with lock:
            if not todo:
                return
            t = todo.pop()
        try:
            r = probe(t)
        except Exception as e:
            r = "%s: %s" % (type(e).__name__, e)
        with lock:
            out[t] = r
ws = [threading.Thread(target=work) for _ in range(min(int(sys.argv[2]), len(todo)))]
for w in ws:
    w.start()
for w in ws:
    w.join()
print(json.dumps(out))
`

// workers is how many targets a canary tries at once (each a thread,
// well under a sandbox's pids limit).
const workers = 8

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
		Argv:      []string{"/usr/bin/python3", "-I", "{dir}/canary.py", "{dir}/targets.json", strconv.Itoa(workers)},
		Env:       []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		// Each round of workers takes at most one target's timeout (3 s).
		Timeout: time.Duration((len(targets)+workers-1)/workers)*3*time.Second + 10*time.Second,
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
