package executor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// testConfig returns a config for a real executor under dir. It has no
// warm pool: a test of the pool, or of a session made from it, sets one
// (a pool makes sandboxes at start and after every take, which the other
// tests would pay for and throw away).
func testConfig(t testing.TB, dir string) Config {
	t.Helper()
	bin := testenv.Runsc(t)
	rootfs, versions, err := FindRootfs(os.Getenv("SANDBOXAPI_ROOTFS"), "")
	if err != nil {
		testenv.Skip(t, "%v", err)
	}
	return Config{
		Runsc: bin, Platform: "systrap", Rootfs: rootfs, VersionsFile: versions, DataDir: dir,
		GuestBinary: testenv.Guest(t), MaxSandboxes: 8, HomeBytes: 64 << 20, MemoryBytes: 256 << 20,
		Pids: 128, CPUs: 1, TmpBytes: 32 << 20, DefaultTimeout: 10 * time.Second, MaxTimeout: 60 * time.Second,
		CompileTimeout: 60 * time.Second, MaxOutputBytes: 64 << 10, DefaultIdleTTL: time.Minute, MaxIdleTTL: time.Hour,
		ReapInterval: 200 * time.Millisecond, WarmPool: 0,
	}
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startExecutor starts a real executor on a fresh data dir; it is stopped
// when the test ends.
func startExecutor(t testing.TB, mutate ...func(*Config)) (*Executor, Config) {
	t.Helper()
	dir := t.TempDir()
	cfg := testConfig(t, dir)
	for _, m := range mutate {
		m(&cfg)
	}
	return openExecutor(t, cfg), cfg
}

func openExecutor(t testing.TB, cfg Config) *Executor {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(cfg.DataDir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	rt, err := LoadRuntimes(configs.Runtimes, cfg.VersionsFile)
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(cfg, rt, st, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Stop(context.Background()); err != nil {
			t.Errorf("stopping executor: %v", err)
		}
		st.Close()
	})
	return e
}

func mustSession(t testing.TB, e *Executor, lang string) Session {
	t.Helper()
	s, err := e.CreateSession(context.Background(), SessionSpec{Language: lang, Owner: "k1"})
	if err != nil {
		t.Fatalf("creating session: %v", err)
	}
	return s
}

func run(t *testing.T, e *Executor, id, code string, timeout time.Duration) Result {
	t.Helper()
	res, err := e.Execute(context.Background(), "k1", id, ExecRequest{Code: code, Timeout: timeout})
	if err != nil {
		t.Fatalf("execute %q: %v", code, err)
	}
	return res
}

func TestFilesPersistVariablesDoNot(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "python3")
	r := run(t, e, s.ID, "x = 41\nopen('/home/sandbox/state.txt','w').write('kept')\nprint('one')", 0)
	if r.Status != StatusOK || r.Stdout != "one\n" {
		t.Fatalf("first call: %+v", r)
	}
	r = run(t, e, s.ID, "print(open('/home/sandbox/state.txt').read())\ntry:\n    print(x)\nexcept NameError:\n    print('no x')", 0)
	if r.Status != StatusOK || r.Stdout != "kept\nno x\n" {
		t.Fatalf("second call: %+v", r)
	}
	r = run(t, e, s.ID, "import sys; sys.stderr.write('bad\\n'); sys.exit(3)", 0)
	if r.Status != StatusError || r.ExitCode != 3 || r.Stderr != "bad\n" {
		t.Fatalf("exit 3: %+v", r)
	}
	res, err := e.Execute(context.Background(), "k1", s.ID, ExecRequest{Code: "import sys; print(sys.stdin.read().upper())", Stdin: []byte("hello")})
	if err != nil || res.Stdout != "HELLO\n" {
		t.Fatalf("stdin: %+v %v", res, err)
	}
}

func TestTimeoutKeepsSession(t *testing.T) {
	// Serial (no t.Parallel): a 1 s timeout must end the call within 5 s (DurationMS); other tests' load would break that.
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	r := run(t, e, s.ID, "echo start; sleep 30 & sleep 30; echo never", time.Second)
	if r.Status != StatusTimeout || r.Stdout != "start\n" || r.Signal != "SIGKILL" {
		t.Fatalf("timeout: %+v", r)
	}
	if r.DurationMS > 5000 {
		t.Fatalf("timeout took %d ms", r.DurationMS)
	}
	// The background sleep died with the call.
	r = run(t, e, s.ID, "ps -eo user,comm | grep -c '^sandbox.*sleep' || true", 0)
	if strings.TrimSpace(r.Stdout) != "0" {
		t.Fatalf("background process survived: %+v", r)
	}
}

func TestMemoryBombIsOOMAndSessionSurvives(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "python3")
	r := run(t, e, s.ID, "x = bytearray(1024*1024*1024)\nprint(len(x))", 30*time.Second)
	if r.Status != StatusOOM {
		t.Fatalf("memory bomb: %+v", r)
	}
	r = run(t, e, s.ID, "print('alive')", 0)
	if r.Stdout != "alive\n" {
		t.Fatalf("after oom: %+v", r)
	}
}

func TestForkBombContained(t *testing.T) {
	// Serial (no t.Parallel): another session must answer within 5 s while the bomb goes off, 700 ms after it started; other tests' load would break that.
	e, cfg := startExecutor(t)
	s := mustSession(t, e, "bash")
	other := mustSession(t, e, "bash")
	// The bomb runs in the background while the call, with builtins only
	// (a fork may fail), waits two seconds and counts the processes it
	// sees; the user's processes are capped at cfg.Pids.
	bomb := "f() { f | f & }; f\nSECONDS=0; while ((SECONDS < 2)); do :; done\n" +
		"n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n"
	type outcome struct {
		r   Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := e.Execute(context.Background(), "k1", s.ID, ExecRequest{Code: bomb, Timeout: 15 * time.Second})
		done <- outcome{r, err}
	}()
	// Another session works normally while the bomb goes off.
	time.Sleep(700 * time.Millisecond)
	start := time.Now()
	r := run(t, e, other.ID, "echo other", 0)
	if r.Stdout != "other\n" || time.Since(start) > 5*time.Second {
		t.Fatalf("other session during the fork bomb: %+v after %v", r, time.Since(start))
	}
	out := <-done
	if out.err != nil {
		t.Fatalf("fork bomb call: %v", out.err)
	}
	var n int
	if _, err := fmt.Sscanf(lastLine(out.r.Stdout), "procs=%d", &n); err != nil {
		t.Fatalf("fork bomb call printed no count: %+v", out.r)
	}
	t.Logf("processes seen during the fork bomb: %d (cap %d)", n, cfg.Pids)
	// The bomb did run (the count is not just the shell), and stayed
	// under the cap (plus the guest's own few root processes).
	if n < 10 || n > int(cfg.Pids)+16 {
		t.Fatalf("processes seen during the fork bomb: %d, want 10..%d", n, cfg.Pids+16)
	}
	r = run(t, e, s.ID, "echo alive; n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo procs=$n", 0)
	if !strings.HasPrefix(r.Stdout, "alive\n") {
		t.Fatalf("after fork bomb: %+v", r)
	}
	if _, err := fmt.Sscanf(lastLine(r.Stdout), "procs=%d", &n); err != nil || n > 8 {
		t.Fatalf("the bomb's processes outlived its call: %q", r.Stdout)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestOutputFloodTruncated(t *testing.T) {
	t.Parallel()
	e, cfg := startExecutor(t)
	s := mustSession(t, e, "python3")
	r := run(t, e, s.ID, "import sys\nwhile True: sys.stdout.write('x'*65536)", 20*time.Second)
	if r.Status != StatusOutputLimit || !r.Truncated || int64(len(r.Stdout)) != cfg.MaxOutputBytes {
		t.Fatalf("flood: status=%s truncated=%v len=%d", r.Status, r.Truncated, len(r.Stdout))
	}
	if r.DurationMS > 10000 {
		t.Fatalf("flood was not stopped early: %d ms", r.DurationMS)
	}
	r = run(t, e, s.ID, "print('alive')", 0)
	if r.Stdout != "alive\n" {
		t.Fatalf("after flood: %+v", r)
	}
}

func TestBusyLoopDoesNotBlockOtherSession(t *testing.T) {
	// Serial (no t.Parallel): another session must answer within 3.5 s while a busy loop spins; other tests' load would break that.
	e, _ := startExecutor(t)
	a := mustSession(t, e, "python3")
	b := mustSession(t, e, "python3")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		run(t, e, a.ID, "while True: pass", 4*time.Second)
	}()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	r := run(t, e, b.ID, "print(2+2)", 0)
	took := time.Since(start)
	wg.Wait()
	if r.Stdout != "4\n" {
		t.Fatalf("other session: %+v", r)
	}
	// The busy session runs until its 4 s timeout; the other finished
	// while it was still spinning.
	if took > 3500*time.Millisecond {
		t.Fatalf("other session waited for the busy one: %v", took)
	}
}

func TestHomeDiskLimit(t *testing.T) {
	t.Parallel()
	e, _ := startExecutor(t)
	s := mustSession(t, e, "bash")
	r := run(t, e, s.ID, "dd if=/dev/zero of=/home/sandbox/big bs=1M count=200 2>&1; echo rc=$?; df -m /home/sandbox | tail -1", 30*time.Second)
	if !strings.Contains(r.Stdout, "No space left on device") || strings.Contains(r.Stdout, "rc=0") {
		t.Fatalf("disk fill: %+v", r)
	}
	r = run(t, e, s.ID, "rm /home/sandbox/big && echo ok > /home/sandbox/f && cat /home/sandbox/f", 0)
	if r.Stdout != "ok\n" {
		t.Fatalf("after freeing: %+v", r)
	}
}

func TestDeleteReturnsHostResources(t *testing.T) {
	t.Parallel()
	e, cfg := startExecutor(t, func(c *Config) { c.WarmPool = 0 })
	// runsc keeps one shared nsfs mount per root for --network=none; a first
	// session creates it, so it is part of the baseline.
	warm := mustSession(t, e, "bash")
	if err := e.DeleteSession(context.Background(), "k1", warm.ID); err != nil {
		t.Fatal(err)
	}
	before := hostResources(t, cfg)
	s := mustSession(t, e, "python3")
	run(t, e, s.ID, "open('/home/sandbox/a','w').write('x')", 0)
	during := hostResources(t, cfg)
	if during.mounts <= before.mounts || during.procs <= before.procs || during.loops <= before.loops {
		t.Fatalf("session left no trace to count: before %+v during %+v", before, during)
	}
	if err := e.DeleteSession(context.Background(), "k1", s.ID); err != nil {
		t.Fatal(err)
	}
	after := hostResources(t, cfg)
	if after != before {
		t.Fatalf("resources leaked: before %+v after %+v", before, after)
	}
	for _, cg := range host.CgroupDirs() {
		if filepath.Base(cg) == s.ID {
			t.Fatalf("cgroup left: %s", cg)
		}
	}
	if _, err := e.Execute(context.Background(), "k1", s.ID, ExecRequest{Code: "print(1)"}); err != ErrNotFound {
		t.Fatalf("execute after delete: %v", err)
	}
}

type resources struct {
	mounts, cgroups, procs, files, loops int
}

func hostResources(t *testing.T, cfg Config) resources {
	t.Helper()
	var r resources
	b, _ := os.ReadFile("/proc/self/mountinfo")
	r.mounts = strings.Count(string(b), cfg.DataDir)
	// Cgroups are host-wide (other tests run sandboxes too): count only
	// those of sandboxes this executor knows.
	ids := map[string]bool{}
	for _, pat := range []string{filepath.Join(cfg.DataDir, "sessions", "*"), filepath.Join(cfg.DataDir, "runsc", "*.state")} {
		m, _ := filepath.Glob(pat)
		for _, p := range m {
			id, _, _ := strings.Cut(filepath.Base(p), "_sandbox:")
			ids[id] = true
		}
	}
	for _, cg := range host.CgroupDirs() {
		if ids[filepath.Base(cg)] {
			r.cgroups++
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, ent := range ents {
		cmd, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err == nil && strings.Contains(string(cmd), filepath.Join(cfg.DataDir, "runsc")) {
			r.procs++
		}
	}
	// Loop devices backing the homes (the kernel's view: one whose image
	// was deleted still counts).
	loops, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, p := range loops {
		if b, err := os.ReadFile(p); err == nil && strings.HasPrefix(string(b), cfg.DataDir+"/") {
			r.loops++
		}
	}
	m, _ := filepath.Glob(filepath.Join(cfg.DataDir, "sessions", "*"))
	r.files = len(m)
	m, _ = filepath.Glob(filepath.Join(cfg.DataDir, "runsc", "*"))
	r.files += len(m)
	return r
}

func TestRestartAdoptsSessions(t *testing.T) {
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
	s := mustSession(t, first, "python3")
	run(t, first, s.ID, "open('/home/sandbox/f','w').write('before restart')", 0)
	// The first executor vanishes without Stop, as after SIGKILL.
	close(first.stop)
	first.wg.Wait()
	st.Close()

	second := openExecutor(t, cfg)
	r := run(t, second, s.ID, "print(open('/home/sandbox/f').read())", 0)
	if r.Stdout != "before restart\n" {
		t.Fatalf("adopted session: %+v", r)
	}
}
