package e2e

import (
	"strings"
	"testing"
	"time"
)

// A warm-pool sandbox has run every language's warm-up (the compiled
// languages' warm code through their own compile and run steps) without
// a failure, and a stateless call that gets it finds /tmp and the home as
// a fresh sandbox has them: the warm-up leaves nothing behind.
func TestWarmUpCompilesEveryLanguageAndLeavesNothing(t *testing.T) {
	s := startServer(t, "executor:\n  warm_pool: 1\n  home_size: 64M\n")
	key := s.key("MEGA")
	deadline := time.Now().Add(120 * time.Second)
	for !strings.Contains(string(s.do("GET", "/metrics", "", nil).body), "sandboxapi_warm_pool_ready 1\n") {
		if time.Now().After(deadline) {
			t.Fatal("the warm pool did not fill in 120 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	out := s.do("POST", "/v1/execute", key, map[string]any{"language": "bash",
		"code": "find /tmp /home/sandbox -mindepth 1 -path /tmp/.sbx -prune -o ! -path /home/sandbox/lost+found -print; echo done"})
	if m := out.json(t); out.status != 200 || m["stdout"] != "done\n" || m["stderr"] != "" || m["status"] != "ok" {
		t.Errorf("a stateless call in a warm sandbox found: %d %s", out.status, out.body)
	}
	s.stop()
	if l := s.logs.String(); strings.Contains(l, "warming up a pool sandbox") {
		t.Errorf("a warm-up failed:\n%s", tail(l, 40))
	}
}
