package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// The real server's log: every line written on a request's behalf (the
// API's request line and the executor's execution line among them) carries
// the id the client sent, and no line holds the API key.
func TestLogsCarryRequestIDAndNoKey(t *testing.T) {
	s := startServer(t, "")
	key := s.key("PRO")
	id := s.session(key, "python3")
	req, _ := http.NewRequest("POST", s.url("/v1/sessions/"+id+"/execute"), strings.NewReader(`{"code":"print(6*7)"}`))
	req.Header.Set("X-RapidAPI-Key", key)
	req.Header.Set("X-Request-Id", "rid-ops-test-42")
	resp, err := s.client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") != "rid-ops-test-42" {
		t.Fatalf("execute = %d %s (X-Request-Id %q)", resp.StatusCode, b, resp.Header.Get("X-Request-Id"))
	}
	s.stop()

	msgs := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(s.logs.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.Contains(line, key) || strings.Contains(line, key[len(key)-12:]) {
			t.Errorf("a log line holds the key: %s", line)
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if m["request_id"] == "rid-ops-test-42" {
			msgs[m["msg"].(string)] = true
		}
	}
	t.Logf("lines with the request id: %v", msgs)
	if len(msgs) < 2 {
		t.Errorf("lines with the request id: %v; want the request line and the executor's execution line at least\n%s", msgs, tail(s.logs.String(), 30))
	}
	if !msgs["request"] {
		t.Errorf("the API's request line lacks the request id (lines with it: %v)", msgs)
	}
}

// The mirror's catalogue shows in /metrics, refusals at ingest by another
// process (the operator CLI) included.
func TestMetricsCountMirrorCatalogue(t *testing.T) {
	s := startServer(t, "")
	s.cliArgs([]string{"mirror", "osv", "import"}, filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "osv"))
	dir := t.TempDir()
	s.cliArgs([]string{"mirror", "add"}, writeWheel(t, dir, "one", "1.0"))
	vuln := writeWheel(t, dir, "colorama-py", "0.6") // MAL-2024-4920 in the test data
	if out, err := exec.Command(s.bin, "mirror", "add", "--config", s.config, "--data-dir", s.dataDir, vuln).CombinedOutput(); err == nil {
		t.Fatalf("mirror add of an OSV-affected wheel passed: %s", out)
	}
	r := s.do("GET", "/metrics", "", nil)
	for _, want := range []string{
		`sandboxapi_mirror_artifacts{ecosystem="pypi",status="admitted"} 1`,
		`sandboxapi_mirror_artifacts{ecosystem="pypi",status="refused"} 1`,
	} {
		if r.status != 200 || !strings.Contains(string(r.body), want) {
			t.Errorf("/metrics (%d) lacks %s", r.status, want)
		}
	}
}

// warmIDs lists the sandbox ids runsc knows under the server's root.
func warmIDs(s *server) []string {
	m, _ := filepath.Glob(filepath.Join(s.dataDir, "runsc", "*.state"))
	var ids []string
	for _, p := range m {
		// runsc names them <sandbox>_sandbox:<container>.state.
		name := strings.TrimSuffix(filepath.Base(p), ".state")
		if _, c, ok := strings.Cut(name, "_sandbox:"); ok {
			name = c
		}
		ids = append(ids, name)
	}
	return ids
}

// A server killed with SIGKILL while its warm pool is full: the next start
// removes the pooled sandboxes (they were never handed out, and a new pool
// is made), keeps the session, and a clean stop leaves nothing.
func TestKilledServerWithWarmPoolLeaksNothing(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 2\n  home_size: 64M\n")
	key := s.key("PRO")
	id := s.session(key, "bash")
	var before []string
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if before = warmIDs(s); len(before) >= 3 { // the session and two pooled
			break
		}
	}
	if len(before) < 3 {
		t.Fatalf("warm pool did not fill: sandboxes %v", before)
	}
	s.kill()
	s.start()
	if out := s.exec(key, id, "echo adopted"); out["stdout"] != "adopted\n" {
		t.Fatalf("session after restart: %v", out)
	}
	var stale []string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		now := map[string]bool{}
		for _, w := range warmIDs(s) {
			now[w] = true
		}
		stale = stale[:0]
		for _, w := range before {
			if w != id && now[w] {
				stale = append(stale, w)
			}
		}
		if len(stale) == 0 {
			break
		}
	}
	if len(stale) > 0 {
		t.Errorf("pooled sandboxes of the killed server still exist after restart: %v", stale)
	}
	s.stop()
	s.waitNoLeftovers(t, append(before, warmIDs(s)...)...)
}

// A server whose log reader has gone (its stdout and stderr a pipe whose
// read end is closed: a supervisor or tee that died) goes on serving, and
// a SIGTERM still stops it cleanly with its sandboxes. By Go's default it
// would die of SIGPIPE at its next log line, leaving them running.
func TestServerOutlivesItsLogReader(t *testing.T) {
	t.Parallel()
	s := startServer(t, "")
	key := s.key("PRO")
	s.stop()
	s.logReaderGone = true
	s.start()
	id := s.session(key, "python3")
	if out := s.exec(key, id, "print(6*7)"); out["stdout"] != "42\n" {
		t.Fatalf("execute with no log reader: %v", out)
	}
	s.stop()
	if st := s.cmd.ProcessState; st == nil || !st.Success() {
		t.Fatalf("server ended with %v; want a clean exit after SIGTERM", st)
	}
	if n := countProcs(s.dataDir); n != 0 {
		t.Errorf("%d runsc processes left", n)
	}
}
