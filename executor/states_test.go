package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

func TestSessionTransitions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		from, to State
		ok       bool
	}{
		{StateCreating, StateRunning, true},
		{StateCreating, StateFailed, true},
		{StateCreating, StateEnding, false},
		{StateRunning, StateEnding, true},
		{StateRunning, StateFailed, true},
		{StateRunning, StateCreating, false},
		{StateEnding, StateEnded, true},
		{StateEnding, StateRunning, false},
		{StateFailed, StateEnding, true},
		{StateFailed, StateRunning, false},
		{StateEnded, StateRunning, false},
		{StateEnded, StateEnding, false},
		{StateRunning, StateHibernated, true},
		{StateHibernated, StateRunning, true},
		{StateHibernated, StateEnding, true},
		{StateHibernated, StateCreating, false},
		{StateCreating, StateHibernated, true},  // a fork's copy is made hibernated
		{StateRunning, StateHibernating, false}, // store-only states are never held
		{StateHibernated, StateResuming, false},
		{StateHibernating, StateHibernated, false},
		{StateResuming, StateRunning, false},
		{StateHibernated, StateHibernated, false},
		{StateRunning, StateEnded, true}, // a row the node cannot serve is ended
		{StateEnding, StateHibernated, false},
		{StateFailed, StateHibernated, false},
	}
	for _, tc := range cases {
		if got := canMove(tc.from, tc.to); got != tc.ok {
			t.Errorf("%s -> %s: got %v, want %v", tc.from, tc.to, got, tc.ok)
		}
	}
}

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
		if got := cgroupOOM(root, id); got != want {
			t.Errorf("cgroupOOM(%s) = %v, want %v", id, got, want)
		}
	}
}

// TestNoSessionStateLiterals reads the executor's source and fails on a
// session state written out as a quoted string outside comments: the
// executor names states by sandbox.State only (the store-only ones
// included), so that no second spelling can drift from the type.
func TestNoSessionStateLiterals(t *testing.T) {
	t.Parallel()
	states := map[string]bool{}
	for _, s := range sandbox.AllStates {
		states[string(s)] = true
	}
	for _, l := range testenv.QuotedWords(t, states, 10) {
		if strings.Contains(l.Text, "containerStatus = ") {
			continue // runsc's OCI statuses, another type (runsc.go)
		}
		t.Errorf("%s:%d: session state %q written out: use sandbox.State (%s)", l.File, l.Line, l.Word, l.Text)
	}
}
