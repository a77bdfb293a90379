package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// held lists what the host still holds for a hibernated session id: a
// runsc container or process, a mount, a loop device, cgroups, an agent
// channel, a capacity slot, and (with a fault env) netns, veth and nft
// chain. A hibernated session must hold none of them; its folder (the
// home image) and its plan slot it keeps.
func held(t *testing.T, e *Executor, id string) []string {
	t.Helper()
	var out []string
	cs, err := e.runsc.List(context.Background())
	if err != nil {
		t.Fatalf("runsc list: %v", err)
	}
	for _, c := range cs {
		if c.ID == id {
			out = append(out, "sandbox "+string(c.Status))
		}
	}
	for _, p := range host.RootProcesses(e.runsc.Root) {
		if strings.Contains(strings.Join(p.Argv, " "), id) {
			out = append(out, fmt.Sprintf("process %d", p.PID))
		}
	}
	dir := e.boxes.dir(id)
	if host.Mounted(host.HomeMount(dir)) {
		out = append(out, "mount")
	}
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range loops {
		if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), dir+"/") {
			out = append(out, "loop device "+p)
		}
	}
	for _, cg := range host.CgroupDirs() {
		if filepath.Base(cg) == id {
			out = append(out, "cgroup "+cg)
		}
	}
	if e.agents.Has(id) {
		out = append(out, "agent channel")
	}
	e.mu.Lock()
	if s := e.sessions[id]; s != nil && s.hasSandbox {
		out = append(out, "capacity slot")
	}
	e.mu.Unlock()
	return out
}

func state(t *testing.T, e *Executor, id string) State {
	t.Helper()
	s, err := e.GetSession(context.Background(), "k1", id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return s.State
}

func TestHibernateAndResume(t *testing.T) {
	t.Parallel()
	f := startFaultExecutor(t)
	e, ctx := f.e, context.Background()
	for _, network := range []bool{false, true} {
		t.Run(fmt.Sprintf("network=%v", network), func(t *testing.T) {
			spec := SessionSpec{Language: "python3", Owner: "k1"}
			if network {
				spec.Network = sandbox.NetworkRequest{Enabled: true}
			}
			s, err := e.CreateSession(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			defer e.DeleteSession(ctx, "k1", s.ID)
			run(t, e, s.ID, "open('/home/sandbox/f','w').write('kept')", 0)
			h, err := e.Durable().HibernateSession(ctx, "k1", s.ID)
			if err != nil || h.State != StateHibernated || h.HibernatedAt.IsZero() {
				t.Fatalf("hibernate: %+v %v", h, err)
			}
			if got := held(t, e, s.ID); len(got) != 0 {
				t.Fatalf("a hibernated session holds %v", got)
			}
			if network {
				if got := f.leftovers(t, ""); len(got) != 0 && !(len(got) == 1 && strings.HasPrefix(got[0], "plan slot")) {
					t.Fatalf("a hibernated session holds network: %v", got)
				}
			}
			row, err := f.st.GetSession(ctx, s.ID)
			if err != nil || row.State != StateHibernated || row.HibernatedAt.IsZero() {
				t.Fatalf("store row: %+v %v", row, err)
			}
			// Idempotent.
			if h, err := e.Durable().HibernateSession(ctx, "k1", s.ID); err != nil || h.State != StateHibernated {
				t.Fatalf("second hibernate: %+v %v", h, err)
			}
			var rep sandbox.ResumeReport
			nctx := sandbox.WithResumeReport(ctx, &rep)
			r, err := e.Execute(nctx, "k1", s.ID, ExecRequest{Code: "print(open('/home/sandbox/f').read())"})
			if err != nil || r.Stdout != "kept\n" {
				t.Fatalf("after resume: %+v %v", r, err)
			}
			if r.ResumedMS <= 0 || rep.Took() <= 0 || !rep.Pending() {
				t.Fatalf("resume not reported: result %d ms, report took %v, pending %v", r.ResumedMS, rep.Took(), rep.Pending())
			}
			t.Logf("resume took %d ms", r.ResumedMS)
			if st := state(t, e, s.ID); st != StateRunning {
				t.Fatalf("state after resume: %s", st)
			}
			r = run(t, e, s.ID, "print(2)", 0)
			if r.ResumedMS != 0 {
				t.Fatalf("a running session reported a resume: %+v", r)
			}
		})
	}
}

// TestParallelCallsResumeOnce: many calls on a hibernated session resume
// it once, and every one of them, having waited for that resume, reports
// it (resume report and resumed_ms).
func TestParallelCallsResumeOnce(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()
	s := mustSession(t, e, "bash")
	run(t, e, s.ID, "echo hi > /home/sandbox/f", 0)
	if _, err := e.Durable().HibernateSession(ctx, "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	results := make([]Result, n)
	errs := make([]error, n)
	reps := make([]sandbox.ResumeReport, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			results[i], errs[i] = e.Execute(sandbox.WithResumeReport(ctx, &reps[i]), "k1", s.ID, ExecRequest{Code: "cat /home/sandbox/f"})
		}(i)
	}
	wg.Wait()
	// Every call waited for the one resume, and each reports it (note and
	// resumed_ms), with the same time.
	for i := range results {
		if errs[i] != nil || results[i].Stdout != "hi\n" {
			t.Errorf("call %d: %+v %v", i, results[i], errs[i])
		}
		noted := reps[i].Took()
		if results[i].ResumedMS <= 0 || results[i].ResumedMS != results[0].ResumedMS || noted <= 0 || max(noted.Milliseconds(), 1) != results[i].ResumedMS {
			t.Errorf("call %d: resumed_ms %d, report %v; call 0 resumed_ms %d", i, results[i].ResumedMS, noted, results[0].ResumedMS)
		}
	}
	e.mu.Lock()
	resumes := e.sessions[s.ID].resumes
	e.mu.Unlock()
	if resumes != 1 {
		t.Fatalf("%d resumes, want 1", resumes)
	}
	// A call after the resume, on the running session, reports none.
	if r := run(t, e, s.ID, "true", 0); r.ResumedMS != 0 {
		t.Fatalf("a call after the resume reported one: %+v", r)
	}
}

// A session idle for hibernate_after is hibernated (it holds no sandbox,
// mount or process) and its next call works; idle past its TTL, the
// hibernated session ends and its home is deleted.
func TestIdleHibernationAndTTL(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0; c.HibernateAfter = time.Second })
	ctx := context.Background()
	s := mustSession(t, e, "bash")
	run(t, e, s.ID, "echo idle > /home/sandbox/f", 0)
	waitState(t, e, s.ID, StateHibernated, 10*time.Second)
	if got := held(t, e, s.ID); len(got) != 0 {
		t.Fatalf("an idle-hibernated session holds %v", got)
	}
	r := run(t, e, s.ID, "cat /home/sandbox/f", 0)
	if r.Stdout != "idle\n" || r.ResumedMS <= 0 {
		t.Fatalf("after idle hibernation: %+v", r)
	}

	// The TTL's end of a hibernated session. Hibernated explicitly, not by
	// waiting for the reaper to do it: a poll for a state that lasts only
	// until the TTL passes races the reaper (seen in CI: the session was
	// reaped while running, never seen hibernated, under a loaded machine).
	short, err := e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1", IdleTTL: 6 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := e.Durable().HibernateSession(ctx, "k1", short.ID); err != nil || got.State != StateHibernated {
		t.Fatalf("hibernating the short-TTL session: %+v %v", got, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := e.GetSession(ctx, "k1", short.ID); errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("idle TTL did not end the hibernated session")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := os.Stat(e.boxes.dir(short.ID)); !os.IsNotExist(err) {
		t.Fatalf("home of the ended session: %v", err)
	}
}

func waitState(t *testing.T, e *Executor, id string, want State, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for state(t, e, id) != want {
		if time.Now().After(deadline) {
			t.Fatalf("session %s is %s, want %s", id, state(t, e, id), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restartable opens executors one after the other on one data dir.
func restartable(t *testing.T) (Config, func() (*Executor, *store.Store)) {
	cfg := testConfig(t, t.TempDir())
	cfg.WarmPool = 0
	return cfg, func() (*Executor, *store.Store) {
		ctx := context.Background()
		st, err := store.Open(ctx, filepath.Join(cfg.DataDir, "sandboxapi.db"))
		if err != nil {
			t.Fatal(err)
		}
		rt, _ := LoadRuntimes(configs.Runtimes, cfg.VersionsFile)
		e, err := New(cfg, rt, st, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return e, st
	}
}

// crash makes an executor vanish without Stop, as after SIGKILL.
func crash(e *Executor, st *store.Store) {
	close(e.stop)
	e.wg.Wait()
	st.Close()
}

func TestStopHibernatesAndRestartServes(t *testing.T) {
	t.Parallel()
	_, open := restartable(t)
	first, st := open()
	s := mustSession(t, first, "python3")
	run(t, first, s.ID, "open('/home/sandbox/f','w').write('before stop')", 0)
	if err := first.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := held(t, first, s.ID); len(got) != 0 {
		t.Fatalf("after Stop the session holds %v", got)
	}
	st.Close()
	second, st2 := open()
	defer func() { second.Stop(context.Background()); st2.Close() }()
	if st := state(t, second, s.ID); st != StateHibernated {
		t.Fatalf("after restart: %s", st)
	}
	r := run(t, second, s.ID, "print(open('/home/sandbox/f').read())", 0)
	if r.Stdout != "before stop\n" || r.ResumedMS <= 0 {
		t.Fatalf("after restart: %+v", r)
	}
}

// Every runsc process and loop mount of the first executor is removed from
// outside while it is down; the next start serves the session hibernated.
func TestRestartAfterSandboxesRemovedFromOutside(t *testing.T) {
	t.Parallel()
	_, open := restartable(t)
	first, st := open()
	s := mustSession(t, first, "python3")
	run(t, first, s.ID, "open('/home/sandbox/f','w').write('outside')", 0)
	crash(first, st)
	procs := host.RootProcesses(first.runsc.Root)
	if len(procs) == 0 {
		t.Fatal("no runsc process to kill")
	}
	for _, p := range procs {
		_ = syscall.Kill(p.PID, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(10 * time.Second); len(host.RootProcesses(first.runsc.Root)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("runsc processes did not die")
		}
	}
	if err := exec.Command("umount", host.HomeMount(first.boxes.dir(s.ID))).Run(); err != nil {
		t.Fatalf("umount from outside: %v", err)
	}
	second, st2 := open()
	defer func() { second.Stop(context.Background()); st2.Close() }()
	if st := state(t, second, s.ID); st != StateHibernated {
		t.Fatalf("after restart: %s", st)
	}
	r := run(t, second, s.ID, "print(open('/home/sandbox/f').read())", 0)
	if r.Stdout != "outside\n" {
		t.Fatalf("after restart: %+v", r)
	}
}

func TestForkSession(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()
	parent := mustSession(t, e, "python3")
	run(t, e, parent.ID, "import os; os.makedirs('/home/sandbox/.local/python/pkg', exist_ok=True); open('/home/sandbox/.local/python/pkg/__init__.py','w').write('V=7'); open('/home/sandbox/f','w').write('parent')", 0)
	for _, hibernated := range []bool{false, true} {
		t.Run(fmt.Sprintf("source hibernated=%v", hibernated), func(t *testing.T) {
			if hibernated {
				if _, err := e.Durable().HibernateSession(ctx, "k1", parent.ID); err != nil {
					t.Fatal(err)
				}
			}
			child, err := e.Durable().ForkSession(ctx, parent.ID, ForkSpec{Owner: "k1"})
			if err != nil {
				t.Fatal(err)
			}
			if child.State != StateHibernated || child.ForkedFrom != parent.ID || child.Language != "python3" {
				t.Fatalf("child: %+v", child)
			}
			if _, err := e.Durable().ForkSession(ctx, parent.ID, ForkSpec{Owner: "k2"}); !errors.Is(err, ErrNotFound) {
				t.Fatalf("another owner's fork: %v", err)
			}
			r := run(t, e, child.ID, "import pkg; print(open('/home/sandbox/f').read(), pkg.V)", 0)
			if r.Stdout != "parent 7\n" {
				t.Fatalf("child sees: %+v", r)
			}
			run(t, e, child.ID, "open('/home/sandbox/f','w').write('child'); open('/home/sandbox/c','w').write('c')", 0)
			run(t, e, parent.ID, "open('/home/sandbox/p','w').write('p')", 0)
			if r := run(t, e, parent.ID, "import os; print(open('/home/sandbox/f').read(), os.path.exists('/home/sandbox/c'))", 0); r.Stdout != "parent False\n" {
				t.Fatalf("parent sees the child's writes: %+v", r)
			}
			if r := run(t, e, child.ID, "import os; print(os.path.exists('/home/sandbox/p'))", 0); r.Stdout != "False\n" {
				t.Fatalf("child sees the parent's later writes: %+v", r)
			}
			if err := e.DeleteSession(ctx, "k1", child.ID); err != nil {
				t.Fatal(err)
			}
			if r := run(t, e, parent.ID, "print(open('/home/sandbox/f').read())", 0); r.Stdout != "parent\n" {
				t.Fatalf("parent after the child's delete: %+v", r)
			}
			run(t, e, parent.ID, "import os; os.remove('/home/sandbox/p')", 0)
		})
	}
	// Deleting the parent leaves a child intact.
	child, err := e.Durable().ForkSession(ctx, parent.ID, ForkSpec{Owner: "k1", Language: "bash"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteSession(ctx, "k1", parent.ID); err != nil {
		t.Fatal(err)
	}
	if r := run(t, e, child.ID, "cat /home/sandbox/f", 0); r.Stdout != "parent" {
		t.Fatalf("child after the parent's delete: %+v", r)
	}
}

func TestDiskBudget(t *testing.T) {
	t.Parallel()
	e, cfg := startExecutor(t, func(c *Config) { c.WarmPool = 0; c.MaxDisk = 2 * c.HomeBytes })
	ctx := context.Background()
	a := mustSession(t, e, "bash")
	if _, err := e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1", DiskBytes: cfg.HomeBytes * 2}); !errors.Is(err, ErrNoStorage) {
		t.Fatalf("create past max_disk: %v", err)
	}
	b, err := e.Durable().ForkSession(ctx, a.ID, ForkSpec{Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(cfg.DataDir, "sessions"))
	if _, err := e.Durable().ForkSession(ctx, a.ID, ForkSpec{Owner: "k1"}); !errors.Is(err, ErrNoStorage) {
		t.Fatalf("fork past max_disk: %v", err)
	}
	if _, err := e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"}); !errors.Is(err, ErrNoStorage) {
		t.Fatalf("create past max_disk: %v", err)
	}
	// Nothing half-made: no new folder, no row, no listed session.
	if after, _ := os.ReadDir(filepath.Join(cfg.DataDir, "sessions")); len(after) != len(ents) {
		t.Fatalf("refused creates left folders: %d before, %d after", len(ents), len(after))
	}
	if n := e.CountSessions("k1"); n != 2 {
		t.Fatalf("%d sessions listed, want 2", n)
	}
	committed, used := e.Disk().Stats()
	if committed != 2*cfg.HomeBytes || used <= 0 || used >= committed {
		t.Fatalf("disk stats: committed %d used %d", committed, used)
	}
	if err := e.DeleteSession(ctx, "k1", b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.CreateSession(ctx, SessionSpec{Language: "bash", Owner: "k1"}); err != nil {
		t.Fatalf("create after a delete: %v", err)
	}
}

// blockForever is a fault hook's way to crash: the call stops at the step
// and never comes back, holding what it took, like a killed process.
func blockForever() { select {} }

// A resume that fails at any step leaves the session hibernated, holding
// nothing, and the next call resumes it; a crash at any step leaves it
// whole for the next start.
func TestResumeFaults(t *testing.T) {
	t.Parallel()
	steps := []createStep{stepResumeStore, stepResumeMount, stepResumeRunsc}
	t.Run("error", func(t *testing.T) {
		e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
		ctx := context.Background()
		s := mustSession(t, e, "bash")
		run(t, e, s.ID, "echo whole > /home/sandbox/f", 0)
		for _, step := range steps {
			if _, err := e.Durable().HibernateSession(ctx, "k1", s.ID); err != nil {
				t.Fatal(err)
			}
			e.createFault = func(at createStep, _ string) error {
				if at == step {
					return errors.New("injected")
				}
				return nil
			}
			if _, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "cat /home/sandbox/f"}); err == nil {
				t.Fatalf("%s: the call succeeded", step)
			}
			e.createFault = nil
			if st := state(t, e, s.ID); st != StateHibernated {
				t.Fatalf("%s: state %s after a failed resume", step, st)
			}
			// The kernel frees a loop device a moment after its last
			// unmount: what is left must be gone within a few seconds.
			got := held(t, e, s.ID)
			for end := time.Now().Add(5 * time.Second); len(got) != 0 && time.Now().Before(end); got = held(t, e, s.ID) {
				time.Sleep(100 * time.Millisecond)
			}
			if len(got) != 0 {
				t.Fatalf("%s: a failed resume left %v", step, got)
			}
			if r := run(t, e, s.ID, "cat /home/sandbox/f", 0); r.Stdout != "whole\n" {
				t.Fatalf("%s: next call: %+v", step, r)
			}
		}
	})
	for _, step := range steps {
		t.Run("crash/"+string(step), func(t *testing.T) {
			_, open := restartable(t)
			first, st := open()
			s := mustSession(t, first, "bash")
			run(t, first, s.ID, "echo whole > /home/sandbox/f", 0)
			if _, err := first.Durable().HibernateSession(context.Background(), "k1", s.ID); err != nil {
				t.Fatal(err)
			}
			reached := make(chan struct{})
			first.createFault = func(at createStep, _ string) error {
				if at == step {
					close(reached)
					blockForever()
				}
				return nil
			}
			go first.Execute(context.Background(), "k1", s.ID, ExecRequest{Code: "true"})
			<-reached
			crash(first, st)
			second, st2 := open()
			defer func() { second.Stop(context.Background()); st2.Close() }()
			if st := state(t, second, s.ID); st != StateHibernated {
				t.Fatalf("after a crash at %s: %s", step, st)
			}
			// The kernel frees a loop device a moment after its last
			// unmount: what is left must be gone within a few seconds.
			got := held(t, second, s.ID)
			for end := time.Now().Add(5 * time.Second); len(got) != 0 && time.Now().Before(end); got = held(t, second, s.ID) {
				time.Sleep(20 * time.Millisecond)
			}
			if len(got) != 0 {
				t.Fatalf("after a crash at %s the session holds %v", step, got)
			}
			if r := run(t, second, s.ID, "cat /home/sandbox/f", 0); r.Stdout != "whole\n" {
				t.Fatalf("after a crash at %s: %+v", step, r)
			}
		})
	}
}

// A fork that fails at any step leaves no child (no folder, no listed
// session, its row failed) and a source that works and takes writes (not
// left frozen); after a crash at any step the next start ends the child
// and serves the source whole.
func TestForkFaults(t *testing.T) {
	t.Parallel()
	steps := []createStep{stepForkInsert, stepForkCopy}
	check := func(t *testing.T, e *Executor, st *store.Store, parent, child string) {
		t.Helper()
		if child == "" {
			t.Fatal("the fault hook saw no child id")
		}
		if _, err := e.GetSession(context.Background(), "k1", child); !errors.Is(err, ErrNotFound) {
			t.Fatalf("child listed: %v", err)
		}
		if _, err := os.Stat(e.boxes.dir(child)); !os.IsNotExist(err) {
			t.Fatalf("child folder: %v", err)
		}
		if row, err := st.GetSession(context.Background(), child); err != nil || (row.State != StateFailed && row.State != StateEnded) {
			t.Fatalf("child row: %+v %v", row, err)
		}
		if n := e.CountSessions("k1"); n != 1 {
			t.Fatalf("%d sessions listed, want the source alone", n)
		}
		r := run(t, e, parent, "echo more >> /home/sandbox/f; cat /home/sandbox/f", 0)
		if !strings.HasPrefix(r.Stdout, "whole\n") {
			t.Fatalf("source: %+v", r)
		}
	}
	t.Run("error", func(t *testing.T) {
		for _, hibernated := range []bool{false, true} {
			e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
			s := mustSession(t, e, "bash")
			run(t, e, s.ID, "echo whole > /home/sandbox/f", 0)
			for _, step := range steps {
				if hibernated {
					if _, err := e.Durable().HibernateSession(context.Background(), "k1", s.ID); err != nil {
						t.Fatal(err)
					}
				}
				child := ""
				e.createFault = func(at createStep, id string) error {
					child = id
					if at == step {
						return errors.New("injected")
					}
					return nil
				}
				if _, err := e.Durable().ForkSession(context.Background(), s.ID, ForkSpec{Owner: "k1"}); err == nil {
					t.Fatalf("%s: fork succeeded", step)
				}
				e.createFault = nil
				committed, _ := e.Disk().Stats()
				if committed != e.cfg.HomeBytes {
					t.Fatalf("%s: disk reservation left: %d", step, committed)
				}
				check(t, e, e.store, s.ID, child)
			}
		}
	})
	for _, step := range steps {
		t.Run("crash/"+string(step), func(t *testing.T) {
			_, open := restartable(t)
			first, st := open()
			s := mustSession(t, first, "bash")
			run(t, first, s.ID, "echo whole > /home/sandbox/f", 0)
			reached := make(chan string)
			first.createFault = func(at createStep, id string) error {
				if at == step {
					reached <- id
					blockForever()
				}
				return nil
			}
			go first.Durable().ForkSession(context.Background(), s.ID, ForkSpec{Owner: "k1"})
			child := <-reached
			crash(first, st)
			second, st2 := open()
			defer func() { second.Stop(context.Background()); st2.Close() }()
			check(t, second, st2, s.ID, child)
		})
	}
}

// A crash in the middle of a hibernation leaves the session whole: the
// next start serves it hibernated.
func TestHibernateCrash(t *testing.T) {
	t.Parallel()
	for _, step := range []createStep{stepHibernateStore, stepHibernateSandbox} {
		t.Run(string(step), func(t *testing.T) {
			_, open := restartable(t)
			first, st := open()
			s := mustSession(t, first, "bash")
			run(t, first, s.ID, "echo whole > /home/sandbox/f", 0)
			reached := make(chan struct{})
			first.createFault = func(at createStep, _ string) error {
				if at == step {
					close(reached)
					blockForever()
				}
				return nil
			}
			go first.Durable().HibernateSession(context.Background(), "k1", s.ID)
			<-reached
			crash(first, st)
			second, st2 := open()
			defer func() { second.Stop(context.Background()); st2.Close() }()
			if st := state(t, second, s.ID); st != StateHibernated {
				t.Fatalf("after a crash at %s: %s", step, st)
			}
			if r := run(t, second, s.ID, "cat /home/sandbox/f", 0); r.Stdout != "whole\n" {
				t.Fatalf("after a crash at %s: %+v", step, r)
			}
		})
	}
}

// Files calls resume a hibernated session too, now that they travel over
// the agent channel without the session's lock: an upload, a download and
// a listing each find the session hibernated and work.
func TestFileCallsResumeHibernated(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	ctx := context.Background()
	s := mustSession(t, e, "bash")
	hibernate := func() {
		t.Helper()
		if _, err := e.Durable().HibernateSession(ctx, "k1", s.ID); err != nil {
			t.Fatal(err)
		}
	}
	hibernate()
	if _, err := e.files.PutFile(ctx, "k1", s.ID, "/home/sandbox/up.txt", strings.NewReader("uploaded"), 8); err != nil {
		t.Fatalf("upload into a hibernated session: %v", err)
	}
	hibernate()
	info, rc, err := e.files.GetFile(ctx, "k1", s.ID, "/home/sandbox/up.txt")
	if err != nil {
		t.Fatalf("download from a hibernated session: %v", err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "uploaded" || info.Size != 8 {
		t.Fatalf("download: %q %+v %v", b, info, err)
	}
	hibernate()
	if _, err := e.files.List(ctx, "k1", s.ID, "/home/sandbox"); err != nil {
		t.Fatalf("listing a hibernated session: %v", err)
	}
	if res := run(t, e, s.ID, "cat /home/sandbox/up.txt", 0); res.Stdout != "uploaded" {
		t.Fatalf("execute after the file calls: %+v", res)
	}
}

// TestResumeEvictsCopiedHomeMount: a mount namespace made while a
// session's home was mounted (here an `unshare -m` that lives on; in
// production another sandbox's runsc starting at that moment) holds a
// copy of the mount, and with it the loop device and the image, after
// the hibernation's unmount. The executor finds that copy of its own
// mount and unmounts it there, so the session hibernates cleanly and
// resumes; the namespace and its process live on.
func TestResumeEvictsCopiedHomeMount(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare")
	}
	f := startFaultExecutor(t)
	e, ctx := f.e, context.Background()
	s, err := e.CreateSession(ctx, SessionSpec{Language: "python3", Owner: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.DeleteSession(ctx, "k1", s.ID)
	run(t, e, s.ID, "open('/home/sandbox/f','w').write('kept')", 0)
	mnt := e.boxes.home(s.ID).Mount()
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "300")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = holder.Process.Kill()
		_ = holder.Wait()
	}()
	info := fmt.Sprintf("/proc/%d/mountinfo", holder.Process.Pid)
	held := func() bool {
		b, _ := os.ReadFile(info)
		return strings.Contains(string(b), " "+mnt+" ")
	}
	for deadline := time.Now().Add(5 * time.Second); !held(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the holder's namespace never showed %s", mnt)
		}
	}
	if h, err := e.Durable().HibernateSession(ctx, "k1", s.ID); err != nil || h.State != StateHibernated {
		t.Fatalf("hibernate: %+v %v", h, err)
	}
	if held() {
		t.Fatalf("the copy of %s is still mounted in the other namespace", mnt)
	}
	if devs := host.LoopDevices(e.boxes.home(s.ID).Image()); len(devs) != 0 {
		t.Fatalf("a hibernated session's image is still on %v", devs)
	}
	r, err := e.Execute(ctx, "k1", s.ID, ExecRequest{Code: "print(open('/home/sandbox/f').read())"})
	if err != nil || r.Stdout != "kept\n" || r.ResumedMS <= 0 {
		t.Fatalf("after resume: %+v %v", r, err)
	}
	if holder.ProcessState != nil {
		t.Fatal("the holder ended")
	}
}
