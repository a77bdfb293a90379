package executor

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
)

func TestFrameRoundTripAndLimit(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	for _, p := range [][]byte{nil, []byte("x"), bytes.Repeat([]byte("y"), 70000)} {
		if err := guest.WriteFrame(&b, guest.FrameStdout, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int{0, 1, 70000} {
		typ, p, err := guest.ReadFrame(&b, 1<<20)
		if err != nil || typ != guest.FrameStdout || len(p) != want {
			t.Fatalf("frame: %c %d %v, want %d bytes", typ, len(p), err, want)
		}
	}
	// A length over the limit is refused before anything is allocated.
	_ = guest.WriteFrame(&b, guest.FrameRun, make([]byte, 100))
	if _, _, err := guest.ReadFrame(&b, 99); err == nil {
		t.Fatal("oversize frame accepted")
	}
	// A frame cut short is an error, not a short payload.
	b.Reset()
	_ = guest.WriteFrame(&b, guest.FrameRun, []byte("abcdef"))
	if _, _, err := guest.ReadFrame(bytes.NewReader(b.Bytes()[:8]), 99); err == nil {
		t.Fatal("truncated frame accepted")
	}
}

// The agent path and the runsc exec path give the same results for the
// same requests, and the session keeps working when the channel breaks.
func TestAgentMatchesExecPath(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "python3")
	if e.agents.For(s.ID) == nil {
		t.Fatal("a new session has no agent channel")
	}
	cases := []struct {
		name    string
		code    string
		stdin   string
		timeout time.Duration
	}{
		{"ok", "print('out'); import sys; print('err', file=sys.stderr)", "", 0},
		{"exit code", "import sys; sys.exit(7)", "", 0},
		{"stdin", "import sys; print(sys.stdin.read()[::-1])", "abc", 0},
		{"signal", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)", "", 0},
		{"timeout", "import time; time.sleep(30)", "", time.Second},
		{"background", "import subprocess; subprocess.Popen(['sleep', '60']); print('left')", "", 0},
		{"big output", "print('z' * 300000)", "", 0},
	}
	rt := s.Language
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := ExecRequest{Code: tc.code, Stdin: []byte(tc.stdin), Timeout: tc.timeout}
			viaAgent, err := e.Execute(context.Background(), "k1", s.ID, req)
			if err != nil {
				t.Fatalf("agent: %v", err)
			}
			r, _ := e.rt.Lookup(rt)
			timeout, _ := e.ClampTimeout(tc.timeout)
			greq := e.sessionRequest(r, nil, req, timeout)
			viaExec, err := e.agents.Exec(context.Background(), s.ID, greq, req.Stdin, nil)
			if err != nil {
				t.Fatalf("exec: %v", err)
			}
			if viaAgent.Status != viaExec.Status || viaAgent.ExitCode != viaExec.ExitCode || viaAgent.Signal != viaExec.Signal ||
				viaAgent.Stdout != viaExec.Stdout || viaAgent.Stderr != viaExec.Stderr {
				t.Fatalf("paths differ:\nagent %+v\nexec  %+v", short(viaAgent), short(viaExec))
			}
		})
	}
	// Nothing a call started outlives it, on either path.
	if r := run(t, e, s.ID, "import subprocess; print(subprocess.run(['pgrep', '-c', 'sleep'], capture_output=True, text=True).stdout.strip() or '0')", 0); r.Stdout != "0\n" {
		t.Fatalf("background process survived: %+v", r)
	}
	// A broken channel: the next call goes through runsc exec and works.
	e.agents.For(s.ID).Close()
	if r := run(t, e, s.ID, "print('after')", 0); r.Stdout != "after\n" {
		t.Fatalf("after the channel broke: %+v", r)
	}
	if e.agents.For(s.ID) != nil {
		t.Fatal("broken channel still in use")
	}
}

// Stateless calls and warm sandboxes have the channel too.
func TestStatelessUsesTheAgent(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 1 })
	deadline := time.Now().Add(30 * time.Second)
	for e.Pool().Ready() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	ws, ok := e.pool.take()
	if !ok {
		t.Fatal("no warm sandbox")
	}
	if e.agents.For(ws.id) == nil {
		t.Fatal("warm sandbox without an agent channel")
	}
	if err := e.pool.destroy(context.Background(), ws.id); err != nil {
		t.Fatal(err)
	}
	r, err := e.ExecuteStateless(context.Background(), "k1", ExecRequest{Language: "bash", Code: "echo $((6*7))"})
	if err != nil || r.Stdout != "42\n" {
		t.Fatalf("stateless: %+v %v", r, err)
	}
}

func short(r Result) Result {
	if len(r.Stdout) > 80 {
		r.Stdout = r.Stdout[:40] + "..." + r.Stdout[len(r.Stdout)-40:]
	}
	return r
}

// A call cancelled mid-run (the client went away) ends its reader before
// the next call uses the channel: the next call sees only its own output.
func TestAgentCancelThenNextCall(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "python3")
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
		_, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "import sys, time\nwhile True:\n    print('old' * 10, flush=True)\n    time.sleep(0.01)"})
		cancel()
		if err == nil {
			t.Fatalf("round %d: cancelled call reported success", i)
		}
		if r := run(t, e, s.ID, "print('new')", 0); r.Stdout != "new\n" || r.Status != StatusOK {
			t.Fatalf("round %d: next call %+v", i, short(r))
		}
	}
	if e.agents.For(s.ID) == nil {
		t.Fatal("the channel was given up after a plain cancel")
	}
}

// TestWarmPoolHoldsWhatItSays: the warm pool's sandboxes, waiting or being
// made, are never more than warm_pool, also while it refills after a take
// (its filler once made one beyond a full pool and held it).
func TestWarmPoolHoldsWhatItSays(t *testing.T) {
	t.Parallel()
	const warm = 2
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = warm })
	full := func() {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); e.Pool().Ready() < warm; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the warm pool holds %d of %d after 60 s", e.Pool().Ready(), warm)
			}
		}
	}
	// atMost samples the sandboxes under the runsc root for a while: a
	// filler making one too many starts it within a sandbox's start time.
	atMost := func(want int) {
		t.Helper()
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if ids := e.runsc.SandboxIDs(); len(ids) > want {
				t.Fatalf("%d sandboxes under the runsc root, want at most %d: %v", len(ids), want, ids)
			}
		}
	}
	full()
	atMost(warm)
	s := mustSession(t, e, "bash") // takes a warm sandbox
	full()
	atMost(warm + 1)
	if got := len(e.runsc.SandboxIDs()); got != warm+1 {
		t.Fatalf("%d sandboxes, want the session's and the pool's %d", got, warm)
	}
	if err := e.DeleteSession(context.Background(), "k1", s.ID); err != nil {
		t.Fatal(err)
	}
}
