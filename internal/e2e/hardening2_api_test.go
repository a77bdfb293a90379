package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// perReadConn gives every Read its own deadline: a client with a read
// timeout, not a whole-request timeout.
type perReadConn struct {
	net.Conn
	timeout time.Duration
}

func (c perReadConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

// TestStreamHeartbeatSilentProgram streams a program that prints nothing
// for 25 s to two clients whose every read times out after 10 s (Python
// requests with timeout=10, the common setting, and a Go client with a
// per-read deadline): with the default stream_heartbeat (5 s) the headers
// come at once and a ": keepalive" comment follows every 5 s of silence,
// so both read the whole stream and the result.
func TestStreamHeartbeatSilentProgram(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")
	const readTimeout = 10 * time.Second
	py := make(chan string, 1)
	go func() { py <- pythonSilentStream(t, s, key) }()
	client := &http.Client{Transport: s.checked(&http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return perReadConn{Conn: c, timeout: readTimeout}, nil
		},
	})}
	body, _ := json.Marshal(map[string]any{"language": "python3", "timeout": 60, "stream": true,
		"code": "import time\ntime.sleep(25)\nprint('done')"})
	req, _ := http.NewRequest("POST", s.url("/v1/execute"), strings.NewReader(string(body)))
	req.Header.Set("X-RapidAPI-Key", key)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("headers with a %v read timeout: %v", readTimeout, err)
	}
	defer resp.Body.Close()
	headersAfter := time.Since(start)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	// Read line by line, noting the longest wait for a line.
	br := bufio.NewReader(resp.Body)
	var lines []string
	last, maxGap := time.Now(), time.Duration(0)
	for {
		line, err := br.ReadString('\n')
		if line != "" {
			maxGap = max(maxGap, time.Since(last))
			last = time.Now()
			lines = append(lines, strings.TrimRight(line, "\n"))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("reading the stream with a %v read timeout after %v: %v (read %q)", readTimeout, time.Since(start), err, lines)
		}
	}
	total := time.Since(start)
	keepalives, result := 0, ""
	for i, l := range lines {
		if l == ": keepalive" {
			keepalives++
		}
		if l == "event: result" && i+1 < len(lines) {
			result = strings.TrimPrefix(lines[i+1], "data: ")
		}
	}
	var res struct {
		Stdout string `json:"stdout"`
		Status string `json:"status"`
	}
	if err := json.Unmarshal([]byte(result), &res); err != nil || res.Status != "ok" || res.Stdout != "done\n" {
		t.Fatalf("result %q, want ok with stdout done: stream %q", result, lines)
	}
	if keepalives < 1 {
		t.Errorf("no keepalive comment in %v of silence: %q", total, lines)
	}
	if headersAfter > 5*time.Second {
		t.Errorf("headers after %v: they waited for output", headersAfter)
	}
	t.Logf("headers after %v, %d keepalive comments, longest wait for a line %v, whole stream %v", headersAfter.Round(time.Millisecond),
		keepalives, maxGap.Round(time.Millisecond), total.Round(time.Millisecond))
	if out := <-py; out != "" {
		t.Error(out)
	}
}

// pythonSilentStream runs the same silent program through Python requests
// with timeout=10 (a read timeout per socket read) and returns what went
// wrong, "" when it read the result.
func pythonSilentStream(t *testing.T, s *server, key string) string {
	python := ""
	for _, p := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(p, "-c", "import requests").Run() == nil {
			python = p
			break
		}
	}
	if python == "" {
		return "no python3 with requests on this machine (apt-get install python3-requests)"
	}
	script := `
import json, os, requests
resp = requests.post(os.environ["BASE_URL"] + "/v1/execute", timeout=10, stream=True,
    headers={"X-RapidAPI-Key": os.environ["KEY"]},
    json={"language": "python3", "timeout": 60, "stream": True,
          "code": "import time\ntime.sleep(25)\nprint('done')"})
resp.raise_for_status()
event = ""
for line in resp.iter_lines(decode_unicode=True):
    if line.startswith("event: "):
        event = line[len("event: "):]
    elif line.startswith("data: ") and event == "result":
        print("RESULT " + json.dumps(json.loads(line[len("data: "):])["stdout"]))
`
	cmd := exec.Command(python, "-c", script)
	cmd.Env = append(os.Environ(), "BASE_URL=http://"+s.addr, "KEY="+key)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `RESULT "done\n"`) {
		return fmt.Sprintf("python requests client (timeout=10): %v\n%s", err, out)
	}
	return ""
}

// TestEgressRouteWithEgressOff checks GET /v1/sessions/{id}/egress on a
// server whose egress is off (the default): the owner gets 200 with no
// decisions, live and after delete; another key gets 404 not_found.
func TestEgressRouteWithEgressOff(t *testing.T) {
	s := startServer(t, "")
	owner, other := s.key("PRO"), s.key("ULTRA")
	id := s.session(owner, "bash")
	check := func(when string) {
		r := s.do("GET", "/v1/sessions/"+id+"/egress", owner, nil)
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d %s", when, r.status, r.body)
		}
		m := r.json(t)
		if d, ok := m["decisions"].([]any); !ok || len(d) != 0 || m["session_id"] != id {
			t.Errorf("%s: %s, want the session id and no decisions", when, r.body)
		}
		r = s.do("GET", "/v1/sessions/"+id+"/egress", other, nil)
		if r.status != http.StatusNotFound || r.errCode(t) != "not_found" {
			t.Errorf("%s, another key: %d %s, want 404 not_found", when, r.status, r.body)
		}
	}
	check("live session")
	if r := s.do("DELETE", "/v1/sessions/"+id, owner, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	check("ended session")
	if r := s.do("GET", "/v1/sessions/s0000000000000000000/egress", owner, nil); r.status != http.StatusNotFound || r.errCode(t) != "not_found" {
		t.Errorf("unknown session: %d %s", r.status, r.body)
	}
}

// metricValue reads one unlabelled sample from /metrics.
func (s *server) metricValue(name string) int {
	s.t.Helper()
	r := s.do("GET", "/metrics", "", nil)
	m := regexp.MustCompile(`(?m)^` + name + ` ([0-9.e+]+)$`).FindSubmatch(r.body)
	if m == nil {
		s.t.Fatalf("/metrics lacks %s", name)
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return int(v)
}

// ownSandboxProcs counts the runsc-sandbox processes of the server's
// runsc root: one per running sandbox of its own.
func (s *server) ownSandboxProcs() int {
	n := 0
	root := "--root=" + filepath.Join(s.dataDir, "runsc") + "\x00"
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(b), "runsc-sandbox\x00") && strings.Contains(string(b), root) {
			n++
		}
	}
	return n
}

// TestSandboxesLiveCountsOwnOnly checks that sandboxapi_sandboxes_live
// counts this server's running sandboxes (its runsc-sandbox processes)
// and no other: a sandbox cgroup of another server (made here as runsc
// makes them, under the controllers' sandboxapi/ folder, with a process in
// it) does not count, nor do other tests' sandboxes on the host.
func TestSandboxesLiveCountsOwnOnly(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 1\n  home_size: 64M\n")
	var b [8]byte
	_, _ = rand.Read(b[:])
	foreign := "foreign" + hex.EncodeToString(b[:])
	parent := "/sys/fs/cgroup/pids/sandboxapi"
	if _, err := os.Stat(filepath.Dir(parent)); err != nil {
		testenv.Skip(t, "no pids cgroup controller at %s", filepath.Dir(parent))
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(parent, foreign)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sleeper.Process.Kill()
		_ = sleeper.Wait()
		_ = os.Remove(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	// check waits until the count is steady (the warm pool fills in the
	// background), then compares it with this server's sandboxes.
	check := func(what string, atLeast int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		var own, got int
		for time.Now().Before(deadline) {
			own = s.ownSandboxProcs()
			got = s.metricValue("sandboxapi_sandboxes_live")
			if own >= atLeast && got == own && s.ownSandboxProcs() == own {
				cg, _ := filepath.Glob(parent + "/*/cgroup.procs")
				t.Logf("%s: sandboxapi_sandboxes_live %d, own sandboxes %d, sandboxapi cgroups on the host %d", what, got, own, len(cg))
				return
			}
			time.Sleep(300 * time.Millisecond)
		}
		t.Fatalf("%s: sandboxapi_sandboxes_live %d, this server runs %d sandboxes", what, got, own)
	}
	check("warm pool", 1)
	key := s.key("PRO")
	id := s.session(key, "bash")
	check("a session and the warm pool", 2)
	if r := s.do("DELETE", "/v1/sessions/"+id, key, nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	check("after delete", 1)
}

// TestMaxOutputBytesPerStream measures how limits.max_output_bytes
// applies, through the API on real sandboxes, and checks that docs/api.md
// and docs/config.md say exactly that: stdout and stderr are capped each,
// not together.
func TestMaxOutputBytesPerStream(t *testing.T) {
	const limit = 4096
	s := startServer(t, fmt.Sprintf("limits:\n  max_output_bytes: %d\n", limit))
	key := s.key("BASIC")
	run := func(code string) (stdout, stderr, status string, truncated bool) {
		t.Helper()
		r := s.do("POST", "/v1/execute", key, map[string]any{"language": "bash", "code": code})
		if r.status != http.StatusOK {
			t.Fatalf("execute: %d %s", r.status, r.body)
		}
		m := r.json(t)
		return m["stdout"].(string), m["stderr"].(string), m["status"].(string), m["truncated"].(bool)
	}
	// 3000 + 3000 bytes: over the limit together, under it each.
	out, errOut, status, trunc := run("head -c 3000 /dev/zero | tr '\\0' a; head -c 3000 /dev/zero | tr '\\0' b >&2")
	if status != "ok" || trunc || len(out) != 3000 || len(errOut) != 3000 {
		t.Errorf("3000 bytes on each stream: status %s truncated %v, %d + %d bytes kept; want ok, all kept", status, trunc, len(out), len(errOut))
	}
	// 5000 bytes on stderr: over the limit on one stream.
	out, errOut, status, trunc = run("echo hi; head -c 5000 /dev/zero | tr '\\0' b >&2; sleep 5")
	if status != "output_limit" || !trunc || len(errOut) != limit || out != "hi\n" {
		t.Errorf("5000 bytes on stderr: status %s truncated %v, stdout %q, %d stderr bytes; want output_limit, truncated, hi and %d", status, trunc, out, len(errOut), limit)
	}
	for _, doc := range []struct{ file, want string }{
		{"docs/api.md", "stdout and stderr each keep up to `limits.max_output_bytes`"},
		{"docs/config.md", "| `limits.max_output_bytes` | integer | `1048576` | MaxOutputBytes caps stdout and stderr each (not their sum)"},
	} {
		b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), doc.file))
		if err != nil {
			t.Fatal(err)
		}
		// Compared with runs of white space as one space: rewrapping a
		// paragraph does not change what it says.
		if !strings.Contains(strings.Join(strings.Fields(string(b)), " "), doc.want) {
			t.Errorf("%s does not say that the cap applies to each stream (%q)", doc.file, doc.want)
		}
	}
}
