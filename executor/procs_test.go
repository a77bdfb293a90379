package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// procOutput collects a process's output events until the stream ends.
type procOutput struct {
	data    map[string]string
	exit    *sandbox.Process
	dropped int64
}

func readProcess(t *testing.T, e *Executor, id string, pid int, follow bool, timeout time.Duration) procOutput {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out := procOutput{data: map[string]string{}}
	next := int64(-1)
	err := e.procs.ProcessOutput(ctx, "k1", id, pid, 0, follow, func(ev sandbox.ProcessEvent) error {
		switch {
		case ev.Exit != nil:
			out.exit = ev.Exit
		case ev.Dropped > 0:
			out.dropped += ev.Dropped
		default:
			if next >= 0 && ev.Offset != next {
				t.Errorf("chunk at offset %d, want %d", ev.Offset, next)
			}
			next = ev.Offset + int64(len(ev.Data))
			out.data[ev.Stream] += string(ev.Data)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("output of %d: %v", pid, err)
	}
	return out
}

// waitOutput polls a running process's output until it holds want.
func waitOutput(t *testing.T, e *Executor, id string, pid int, stream, want string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		o := readProcess(t, e, id, pid, false, 30*time.Second)
		if strings.Contains(o.data[stream], want) {
			return o.data[stream]
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d: %q never held %q", pid, o.data[stream], want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func startProc(t *testing.T, e *Executor, id string, spec sandbox.ProcessSpec) sandbox.Process {
	t.Helper()
	p, err := e.procs.StartProcess(context.Background(), "k1", id, spec)
	if err != nil {
		t.Fatalf("starting %s: %v", spec.Cmd, err)
	}
	if p.State != sandbox.ProcessRunning || p.PID <= 1 {
		t.Fatalf("started %+v", p)
	}
	return p
}

func TestBackgroundProcesses(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	s := mustSession(t, e, "bash")
	ctx := context.Background()

	loop := startProc(t, e, s.ID, sandbox.ProcessSpec{Cmd: "python3", Args: []string{"-u", "-c", "import time,os\nprint('uid', os.getuid(), os.getcwd())\ni=0\nwhile True:\n    print('tick', i); i+=1; time.sleep(0.2)"}, Tag: "ticker"})
	if loop.Tag != "ticker" || loop.Cmd != "python3" {
		t.Fatalf("started %+v", loop)
	}
	waitOutput(t, e, s.ID, loop.PID, sandbox.StreamStdout, "tick 2")
	if o := readProcess(t, e, s.ID, loop.PID, false, 30*time.Second); !strings.Contains(o.data["stdout"], "uid 1000 /home/sandbox") || o.exit != nil {
		t.Fatalf("ticker output %+v", o)
	}

	t.Run("stdin round trip", func(t *testing.T) {
		cat := startProc(t, e, s.ID, sandbox.ProcessSpec{Cmd: "cat", Stdin: true})
		if n, err := e.procs.WriteProcessStdin(ctx, "k1", s.ID, cat.PID, []byte("hello\n"), false); err != nil || n != 6 {
			t.Fatalf("stdin: %d %v", n, err)
		}
		if _, err := e.procs.WriteProcessStdin(ctx, "k1", s.ID, cat.PID, []byte("world\n"), true); err != nil {
			t.Fatal(err)
		}
		o := readProcess(t, e, s.ID, cat.PID, true, 60*time.Second)
		if o.data["stdout"] != "hello\nworld\n" || o.exit == nil || *o.exit.ExitCode != 0 || o.exit.State != sandbox.ProcessExited {
			t.Fatalf("cat: %+v exit %+v", o.data, o.exit)
		}
		if _, err := e.procs.WriteProcessStdin(ctx, "k1", s.ID, cat.PID, []byte("x"), false); !errors.Is(err, sandbox.ErrProcessNotRunning) {
			t.Fatalf("stdin after the end: %v", err)
		}
	})

	t.Run("survives runs and their kills", func(t *testing.T) {
		if r := run(t, e, s.ID, "echo hi", 0); r.Stdout != "hi\n" {
			t.Fatalf("execute beside a process: %+v", r)
		}
		// A run that times out is killed with what it started; the
		// background process is not.
		r := run(t, e, s.ID, "sleep 30 & sleep 30", time.Second)
		if r.Status != StatusTimeout {
			t.Fatalf("timeout run: %+v", r)
		}
		r = run(t, e, s.ID, "ps -eo user,comm | grep -c '^sandbox.*sleep' || true; ps -eo comm | grep -c python3", 0)
		if got := strings.Fields(r.Stdout); len(got) != 2 || got[0] != "0" || got[1] != "1" {
			t.Fatalf("after the run's kill: sleeps and pythons %q", r.Stdout)
		}
		p, err := e.procs.GetProcess(ctx, "k1", s.ID, loop.PID)
		if err != nil || p.State != sandbox.ProcessRunning {
			t.Fatalf("ticker after the run's kill: %+v %v", p, err)
		}
	})

	t.Run("terminal", func(t *testing.T) {
		term := startProc(t, e, s.ID, sandbox.ProcessSpec{Cmd: "python3", Args: []string{"-c", "import os,sys\nprint(os.get_terminal_size(), os.isatty(0), os.environ['TERM'])\nsys.stdin.readline()\nprint(os.get_terminal_size())"},
			PTY: &sandbox.TermSize{Cols: 80, Rows: 24}})
		if !term.PTY || !term.Stdin {
			t.Fatalf("terminal process %+v", term)
		}
		waitOutput(t, e, s.ID, term.PID, sandbox.StreamPTY, "columns=80, lines=24) True xterm-256color")
		if err := e.procs.ResizeProcess(ctx, "k1", s.ID, term.PID, sandbox.TermSize{Cols: 120, Rows: 40}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.procs.WriteProcessStdin(ctx, "k1", s.ID, term.PID, []byte("\n"), false); err != nil {
			t.Fatal(err)
		}
		o := readProcess(t, e, s.ID, term.PID, true, 60*time.Second)
		if !strings.Contains(o.data["pty"], "columns=120, lines=40") || o.exit == nil || *o.exit.ExitCode != 0 {
			t.Fatalf("terminal after resize: %q exit %+v", o.data["pty"], o.exit)
		}
	})

	t.Run("bad calls", func(t *testing.T) {
		tests := []struct {
			name string
			call func() error
			want error
		}{
			{"unknown pid", func() error { _, err := e.procs.GetProcess(ctx, "k1", s.ID, 99999); return err }, sandbox.ErrProcessNotFound},
			{"another key", func() error { _, err := e.procs.GetProcess(ctx, "k2", s.ID, loop.PID); return err }, ErrNotFound},
			{"bad signal", func() error { return e.procs.SignalProcess(ctx, "k1", s.ID, loop.PID, "SIGBOGUS") }, sandbox.ErrInvalid},
			{"resize without terminal", func() error {
				return e.procs.ResizeProcess(ctx, "k1", s.ID, loop.PID, sandbox.TermSize{Cols: 10, Rows: 10})
			}, sandbox.ErrProcessNotPTY},
			{"resize too big", func() error {
				return e.procs.ResizeProcess(ctx, "k1", s.ID, loop.PID, sandbox.TermSize{Cols: 5000, Rows: 10})
			}, sandbox.ErrInvalid},
			{"stdin not opened", func() error {
				_, err := e.procs.WriteProcessStdin(ctx, "k1", s.ID, loop.PID, []byte("x"), false)
				return err
			}, sandbox.ErrProcessNoStdin},
			{"missing program", func() error {
				_, err := e.procs.StartProcess(ctx, "k1", s.ID, sandbox.ProcessSpec{Cmd: "no-such-program"})
				return err
			}, sandbox.ErrProcessStart},
			{"relative cwd", func() error {
				_, err := e.procs.StartProcess(ctx, "k1", s.ID, sandbox.ProcessSpec{Cmd: "true", Cwd: "tmp"})
				return err
			}, sandbox.ErrInvalid},
			{"timeout past the longest idle TTL", func() error {
				_, err := e.procs.StartProcess(ctx, "k1", s.ID, sandbox.ProcessSpec{Cmd: "true", Timeout: 2 * time.Hour})
				return err
			}, sandbox.ErrInvalid},
		}
		for _, tt := range tests {
			if err := tt.call(); !errors.Is(err, tt.want) {
				t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
			}
		}
	})

	t.Run("cap", func(t *testing.T) {
		list, err := e.procs.ListProcesses(ctx, "k1", s.ID)
		if err != nil {
			t.Fatal(err)
		}
		running := 0
		for _, p := range list {
			if p.State == sandbox.ProcessRunning {
				running++
			}
		}
		for range 16 - running {
			startProc(t, e, s.ID, sandbox.ProcessSpec{Cmd: "sleep", Args: []string{"300"}})
		}
		if _, err := e.procs.StartProcess(ctx, "k1", s.ID, sandbox.ProcessSpec{Cmd: "sleep", Args: []string{"1"}}); !errors.Is(err, sandbox.ErrProcessLimit) {
			t.Fatalf("17th process: %v", err)
		}
	})

	t.Run("signal", func(t *testing.T) {
		if err := e.procs.SignalProcess(ctx, "k1", s.ID, loop.PID, "SIGTERM"); err != nil {
			t.Fatal(err)
		}
		o := readProcess(t, e, s.ID, loop.PID, true, 60*time.Second)
		if o.exit == nil || o.exit.Signal != "SIGTERM" || *o.exit.ExitCode != 143 || o.exit.EndedAt.IsZero() {
			t.Fatalf("after SIGTERM: %+v", o.exit)
		}
	})

	if err := e.DeleteSession(ctx, "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.procs.ListProcesses(ctx, "k1", s.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("processes of a deleted session: %v", err)
	}
	if n := hostProcsOf(s.ID); n != 0 {
		t.Fatalf("%d host processes of the deleted session left", n)
	}
}

// hostProcsOf counts host processes whose command line names sandbox id.
func hostProcsOf(id string) int {
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), id) {
			n++
		}
	}
	return n
}

// A running process keeps its session from being idle until it ends (here
// at its own timeout); then the idle TTL ends the session.
func TestBackgroundProcessKeepsSessionAlive(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0; c.DefaultIdleTTL = 2 * time.Second })
	s := mustSession(t, e, "bash")
	ctx := context.Background()
	p := startProc(t, e, s.ID, sandbox.ProcessSpec{Cmd: "sleep", Args: []string{"300"}, Timeout: 10 * time.Second})
	time.Sleep(4 * time.Second)
	got, err := e.procs.GetProcess(ctx, "k1", s.ID, p.PID)
	if err != nil || got.State != sandbox.ProcessRunning {
		t.Fatalf("session with a running process, past its idle TTL: %+v %v", got, err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := e.GetSession(ctx, "k1", s.ID)
		if errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session not reaped after its process's timeout: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// After a restart the adopted sandbox has no agent channel: process calls
// say so at once, and a run through `runsc exec` still spares the
// background process the old server started.
func TestBackgroundProcessAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	cfg.WarmPool = 0
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(dir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	rt, _ := LoadRuntimes(configs.Runtimes, cfg.VersionsFile)
	first, err := New(cfg, rt, st, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	s := mustSession(t, first, "bash")
	startProc(t, first, s.ID, sandbox.ProcessSpec{Cmd: "sleep", Args: []string{"300"}})
	close(first.stop)
	first.wg.Wait()
	st.Close()

	second := openExecutor(t, cfg)
	// The adopted sandbox has no agent channel until the executor has
	// checkpointed and restored it (regainLive, in the background): until
	// then process calls say so; after, they list the process.
	if l, err := second.procs.ListProcesses(ctx, "k1", s.ID); err != nil && !errors.Is(err, sandbox.ErrNoProcessChannel) || err == nil && len(l) != 1 {
		t.Fatalf("processes of an adopted sandbox: %+v %v", l, err)
	}
	r := run(t, second, s.ID, "sleep 30 & echo started", 0)
	if r.Stdout != "started\n" {
		t.Fatalf("run in the adopted sandbox: %+v", r)
	}
	r = run(t, second, s.ID, "ps -eo user,args | grep -c '^sandbox *sleep 30$' || true; ps -eo user,args | grep -c '^sandbox *sleep 300$' || true", 0)
	if got := strings.Fields(r.Stdout); len(got) != 2 || got[0] != "0" || got[1] != "1" {
		t.Fatalf("after runs through runsc exec: run sleeps and background sleeps %q", r.Stdout)
	}
	// Once the channel is back, the process is there, running.
	deadline := time.Now().Add(time.Minute)
	for {
		l, err := second.procs.ListProcesses(ctx, "k1", s.ID)
		if err == nil {
			if len(l) != 1 || l[0].State != sandbox.ProcessRunning {
				t.Fatalf("the background process after the restart: %+v", l)
			}
			break
		}
		if !errors.Is(err, sandbox.ErrNoProcessChannel) || time.Now().After(deadline) {
			t.Fatalf("processes after the channel came back: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A fork bomb's run is killed whole, pass after pass, while the background
// process's session is spared: the kill reads /proc and skips it.
func TestForkBombBesideBackgroundProcess(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	s := mustSession(t, e, "bash")
	ctx := context.Background()
	bg := startProc(t, e, s.ID, sandbox.ProcessSpec{Cmd: "bash", Args: []string{"-c", "sleep 300 & wait"}})
	bomb := "f() { f | f & }; f\nSECONDS=0; while ((SECONDS < 2)); do :; done; echo done"
	r, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: bomb, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("fork bomb call: %v", err)
	}
	if p, err := e.procs.GetProcess(ctx, "k1", s.ID, bg.PID); err != nil || p.State != sandbox.ProcessRunning {
		t.Fatalf("background process after the fork bomb (%+v): %+v %v", r, p, err)
	}
	// Left of the user's: the background bash and its sleep, this call's
	// shell, its ps and grep (and a subshell of the pipeline, maybe).
	r = run(t, e, s.ID, "ps -eo user,comm | grep -c '^sandbox' || true; ps -eo user,args | grep -c '^sandbox *sleep 300$' || true", 0)
	var users, sleeps int
	if _, err := fmt.Sscanf(r.Stdout, "%d\n%d\n", &users, &sleeps); err != nil || users > 6 || sleeps != 1 {
		t.Fatalf("after the fork bomb: user processes and background sleeps %q", r.Stdout)
	}
}

// A background process that takes more memory than the sandbox may have is
// killed (oom_killed) before the host's limit ends the sandbox; another
// background process and the session go on.
func TestBackgroundProcessOverMemory(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	s := mustSession(t, e, "python3")
	ctx := context.Background()
	quiet := startProc(t, e, s.ID, sandbox.ProcessSpec{Cmd: "sleep", Args: []string{"300"}})
	hog := startProc(t, e, s.ID, sandbox.ProcessSpec{Cmd: "python3", Args: []string{"-c", "import time\nx=[]\nwhile True:\n    x.append(bytearray(8<<20)); time.sleep(0.01)"}})
	o := readProcess(t, e, s.ID, hog.PID, true, 2*time.Minute)
	if o.exit == nil || !o.exit.OOMKilled || o.exit.Signal != "SIGKILL" {
		t.Fatalf("memory hog ended as %+v", o.exit)
	}
	if p, err := e.procs.GetProcess(ctx, "k1", s.ID, quiet.PID); err != nil || p.State != sandbox.ProcessRunning || p.OOMKilled {
		t.Fatalf("the quiet process after the hog's kill: %+v %v", p, err)
	}
	if r := run(t, e, s.ID, "print('alive')", 0); r.Stdout != "alive\n" {
		t.Fatalf("session after the hog: %+v", r)
	}
}

// A hibernation stops the sandbox under a follower: its stream ends with
// the session's state (409 session_not_running), not a hang; the next
// process call resumes the session, as an execute would.
func TestBackgroundProcessAcrossHibernation(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	s := mustSession(t, e, "bash")
	ctx := context.Background()
	p := startProc(t, e, s.ID, sandbox.ProcessSpec{Cmd: "bash", Args: []string{"-c", "echo up; sleep 300"}})
	waitOutput(t, e, s.ID, p.PID, sandbox.StreamStdout, "up")
	ended := make(chan error, 1)
	go func() {
		fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		ended <- e.procs.ProcessOutput(fctx, "k1", s.ID, p.PID, 0, true, func(sandbox.ProcessEvent) error { return nil })
	}()
	// The follower has taken the running session's channel (a call that
	// came after the hibernation would resume the session and follow the
	// process on), and then waits in the guest.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		e.mu.Lock()
		busy := e.sessions[s.ID].busy
		e.mu.Unlock()
		if busy > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the follower did not start")
		}
	}
	time.Sleep(300 * time.Millisecond)
	if _, err := e.Durable().HibernateSession(ctx, "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ended:
		if !errors.Is(err, ErrBadState) {
			t.Fatalf("follower after hibernation: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("follower still waiting after the hibernation")
	}
	// The session was live (a process ran), so it hibernated into a
	// checkpoint: the resume the list does restores the process itself.
	list, err := e.procs.ListProcesses(ctx, "k1", s.ID)
	if err != nil {
		t.Fatalf("list after hibernation: %v", err)
	}
	if len(list) != 1 || list[0].PID != p.PID || list[0].State != sandbox.ProcessRunning {
		v, err := e.GetSession(ctx, "k1", s.ID)
		t.Fatalf("the process did not survive the hibernation: %+v (the session's memory: %+v, %v)", list, v.Memory, err)
	}
	if got, err := e.GetSession(ctx, "k1", s.ID); err != nil || got.State != StateRunning {
		t.Fatalf("session after the list: %+v %v", got, err)
	}
	// It still takes signals and reports its end.
	if err := e.procs.SignalProcess(ctx, "k1", s.ID, p.PID, "SIGTERM"); err != nil {
		t.Fatalf("signal after the resume: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		got, err := e.procs.GetProcess(ctx, "k1", s.ID, p.PID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State == sandbox.ProcessExited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process did not end after SIGTERM: %+v", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
