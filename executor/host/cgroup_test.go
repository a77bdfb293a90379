package host

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCgroupOOM(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("memory/sandboxapi/v1hit/memory.failcnt", "12\n")
	write("memory/sandboxapi/v1ok/memory.failcnt", "0\n")
	// Kernel 6.18, cgroup v1: the OOM killer took the sandbox, failcnt
	// stayed 0.
	write("memory/sandboxapi/v1kill/memory.failcnt", "0\n")
	write("memory/sandboxapi/v1kill/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
	write("memory/sandboxapi/v1ok/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
	write("sandboxapi/v2hit/memory.events", "low 0\nhigh 0\nmax 40\noom 1\noom_kill 1\noom_group_kill 0\n")
	write("sandboxapi/v2ok/memory.events", "low 0\nhigh 0\nmax 3\noom 0\noom_kill 0\n")
	for id, want := range map[string]bool{"v1hit": true, "v1kill": true, "v1ok": false, "v2hit": true, "v2ok": false, "missing": false} {
		if got := CgroupOOM(root, id); got != want {
			t.Errorf("CgroupOOM(%s) = %v, want %v", id, got, want)
		}
	}
}
