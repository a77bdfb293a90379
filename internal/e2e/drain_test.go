package e2e

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// On SIGTERM the server drains before it closes: /readyz answers 503
// "draining" and new work gets 503 "draining" while the listener is still
// open, reads still work, a running call finishes, and afterwards nothing
// is left on the host.
//
// Not parallel: what it checks happens in fixed windows after SIGTERM
// (300 ms in, the drain delay's 3 s), which other tests' load could
// outlast.
func TestSigtermDrainDelay(t *testing.T) {
	s := startServer(t, "server:\n  drain_delay: 3s\n  shutdown_grace: 10s\n")
	key := s.key("PRO")
	id := s.session(key, "bash")
	running := make(chan reply, 1)
	go func() {
		running <- s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": "sleep 2; echo finished", "timeout": 30})
	}()
	time.Sleep(500 * time.Millisecond)
	s.waitExecutionsRunning(t, id) // the call is running, not new work
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)

	resp, err := s.client().Get(s.url("/readyz"))
	if err != nil {
		t.Fatalf("readyz during the drain: %v (the listener closed too early)", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("readyz during the drain = %d, want 503", resp.StatusCode)
	}
	if r := s.do("POST", "/v1/sessions", key, map[string]any{"language": "bash"}); r.status != 503 || r.errCode(t) != "draining" || r.header.Get("Retry-After") == "" {
		t.Errorf("new session during the drain = %d %s, want 503 draining with Retry-After", r.status, r.body)
	}
	if r := s.do("POST", "/v1/sessions/"+id+"/execute", key, map[string]any{"code": "echo new"}); r.status != 503 || r.errCode(t) != "draining" {
		t.Errorf("new execute during the drain = %d %s, want 503 draining", r.status, r.body)
	}
	if r := s.do("GET", "/v1/sessions/"+id, key, nil); r.status != 200 {
		t.Errorf("read during the drain = %d %s, want 200", r.status, r.body)
	}
	if r := <-running; r.status != 200 || !strings.Contains(string(r.body), `"stdout":"finished\n"`) {
		t.Errorf("call running at SIGTERM = %d %s, want it finished", r.status, r.body)
	}
	select {
	case <-s.exited:
	case <-time.After(60 * time.Second):
		t.Fatal("server did not exit after SIGTERM")
	}
	s.waitNoLeftovers(t, id)
}

// A second signal during the drain exits at once; the next start cleans up
// what the first left.
//
// Not parallel: "at once" is a bound (5 s) on the exit, which other
// tests' load could stretch.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	s := startServer(t, "server:\n  drain_delay: 20s\n  shutdown_grace: 20s\n")
	key := s.key("PRO")
	id := s.session(key, "bash")
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("second signal did not end the server")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("exit after the second signal took %v", took)
	}
	if code := s.cmd.ProcessState.ExitCode(); code != 2 {
		t.Errorf("exit code %d, want 2", code)
	}
	// The restart, with no drain delay: its stop below waits for no
	// delay that this test is not about (20 s idle otherwise).
	s.setDrainDelay(t, "0s")
	s.start()
	if r := s.do("GET", "/v1/sessions/"+id, key, nil); r.status != 200 && r.status != 404 {
		t.Errorf("session after restart = %d %s", r.status, r.body)
	}
	s.stop()
	s.waitNoLeftovers(t, id)
}

// setDrainDelay rewrites server.drain_delay in the server's config file,
// for its next start.
func (s *server) setDrainDelay(t *testing.T, d string) {
	t.Helper()
	b, err := os.ReadFile(s.config)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^  drain_delay: .*$`)
	if !re.Match(b) {
		t.Fatalf("no server.drain_delay in %s:\n%s", s.config, b)
	}
	if err := os.WriteFile(s.config, re.ReplaceAll(b, []byte("  drain_delay: "+d)), 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitExecutionsRunning waits until the store holds a running execution
// of each session in ids: a call sent in the background is then under
// way in the server (not still in flight to it, which on a loaded machine
// a fixed pause does not ensure).
func (s *server) waitExecutionsRunning(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			running := false
			for _, st := range s.executions(t, id) {
				running = running || st[0] == "running"
			}
			if running {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no execution of %s showed as running within 30 s", id)
			}
		}
	}
}
