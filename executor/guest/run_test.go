package guest

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// These tests never start a process: the spawn is a fake and killRun is
// replaced, so nothing on the host is ever signalled (the real kill is
// kill(-1) as root).

func TestTimeoutOf(t *testing.T) {
	tests := []struct {
		name string
		ms   int64
		want time.Duration
	}{
		{name: "zero means the default", ms: 0, want: DefaultTimeoutMS * time.Millisecond},
		{name: "negative means the default", ms: -5, want: DefaultTimeoutMS * time.Millisecond},
		{name: "one millisecond", ms: 1, want: time.Millisecond},
		{name: "a second and a half", ms: 1500, want: 1500 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := newHost().timeoutOf(tc.ms); got != tc.want {
				t.Fatalf("timeoutOf(%d) = %v, want %v", tc.ms, got, tc.want)
			}
		})
	}
}

func TestCeilMS(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want int64
	}{
		{name: "sub-millisecond rounds up", d: 400 * time.Microsecond, want: 1},
		{name: "one nanosecond rounds up", d: 1, want: 1},
		{name: "exact", d: 2 * time.Millisecond, want: 2},
		{name: "just over", d: 2*time.Millisecond + 1, want: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := CeilMS(tc.d); got != tc.want {
				t.Fatalf("CeilMS(%v) = %d, want %d", tc.d, got, tc.want)
			}
		})
	}
}

// fakeKills replaces a test host's kill and records the pids killed.
type fakeKills struct {
	mu     sync.Mutex
	chans  map[int]chan struct{}
	killed []int
}

func installFakeKills(t *testing.T, h *host) *fakeKills {
	t.Helper()
	f := &fakeKills{chans: map[int]chan struct{}{}}
	h.kill = func(pid int) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.killed = append(f.killed, pid)
		if c, ok := f.chans[pid]; ok {
			close(c)
			delete(f.chans, pid)
		}
	}
	return f
}

func (f *fakeKills) register(pid int) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := make(chan struct{})
	f.chans[pid] = c
	return c
}

func TestWatchAlwaysArmsADeadline(t *testing.T) {
	h := newHost()
	h.defaultTimeout = 30 * time.Millisecond
	tests := []struct {
		name      string
		timeoutMS int64
	}{
		{name: "zero timeout gets the default deadline", timeoutMS: 0},
		{name: "negative timeout gets the default deadline", timeoutMS: -1},
		{name: "one millisecond", timeoutMS: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kills := installFakeKills(t, h)
			var reason atomic.Value
			done := make(chan struct{})
			defer close(done)
			returned := make(chan struct{})
			go func() {
				h.watch(&Request{TimeoutMS: tc.timeoutMS}, 4242, &reason, done)
				close(returned)
			}()
			select {
			case <-returned:
			case <-time.After(5 * time.Second):
				t.Fatal("watch armed no deadline")
			}
			if r, _ := reason.Load().(sandbox.KillReason); r != sandbox.KillTimeout {
				t.Fatalf("reason %q, want timeout", r)
			}
			if !slices.Equal(kills.killed, []int{4242}) {
				t.Fatalf("killed %v, want [4242]", kills.killed)
			}
		})
	}
}

// step is how a fake process behaves: it runs for d (forever when 0)
// unless killed; deaf ones ignore the kill.
type step struct {
	d    time.Duration
	deaf bool
}

// fakeSpawn plays the steps in order, one per spawned command.
type fakeSpawn struct {
	kills   *fakeKills
	steps   []step
	mu      sync.Mutex
	spawned [][]string
	took    []time.Duration
}

func (f *fakeSpawn) spawn(cmd *exec.Cmd, _ io.Reader, _, _ io.Writer, onStart func(int)) (syscall.WaitStatus, error) {
	f.mu.Lock()
	i := len(f.spawned)
	f.spawned = append(f.spawned, cmd.Args)
	f.mu.Unlock()
	if i >= len(f.steps) {
		return 0, errors.New("unexpected spawn")
	}
	st := f.steps[i]
	pid := 1000 + i
	killed := f.kills.register(pid)
	onStart(pid)
	start := time.Now()
	defer func() {
		f.mu.Lock()
		f.took = append(f.took, time.Since(start))
		f.mu.Unlock()
	}()
	var ran <-chan time.Time
	if st.d > 0 {
		ran = time.After(st.d)
	}
	if st.deaf {
		killed = nil
	}
	select {
	case <-ran:
		return 0, nil
	case <-killed:
		return syscall.WaitStatus(syscall.SIGKILL), nil
	}
}

func TestCompileCountsAgainstTheCallTimeout(t *testing.T) {
	tests := []struct {
		name      string
		timeoutMS int64
		compileMS int64
		steps     []step
		status    sandbox.Status
		spawns    int
		maxTotal  time.Duration
	}{
		{
			name: "compile longer than the call timeout is cut at the call timeout", timeoutMS: 100, compileMS: 60_000,
			steps: []step{{d: 0}}, status: "timeout", spawns: 1, maxTotal: time.Second,
		},
		{
			name: "compile cap below the call timeout still applies", timeoutMS: 10_000, compileMS: 50,
			steps: []step{{d: 0}}, status: "timeout", spawns: 1, maxTotal: time.Second,
		},
		{
			name: "the run gets only what the compile left", timeoutMS: 400, compileMS: 60_000,
			steps: []step{{d: 250 * time.Millisecond}, {d: 0}}, status: "timeout", spawns: 2, maxTotal: 800 * time.Millisecond,
		},
		{
			name: "a compile that used the whole budget runs nothing", timeoutMS: 50, compileMS: 60_000,
			steps: []step{{d: 120 * time.Millisecond, deaf: true}}, status: "timeout", spawns: 1, maxTotal: time.Second,
		},
		{
			name: "compile and run inside the budget", timeoutMS: 2_000, compileMS: 60_000,
			steps: []step{{d: 10 * time.Millisecond}, {d: 10 * time.Millisecond}}, status: "ok", spawns: 2, maxTotal: time.Second,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost()
			f := &fakeSpawn{kills: installFakeKills(t, h), steps: tc.steps}
			req := &Request{
				Compile: []string{"cc", "{dir}/main.c"}, Argv: []string{"{dir}/main"},
				TimeoutMS: tc.timeoutMS, CompileTimeoutMS: tc.compileMS,
			}
			start := time.Now()
			res := h.serveRequest(req, f.spawn, strings.NewReader(""), io.Discard, io.Discard)
			total := time.Since(start)
			if res.Status != tc.status {
				t.Fatalf("status %q, want %q (%+v)", res.Status, tc.status, res)
			}
			if len(f.spawned) != tc.spawns {
				t.Fatalf("spawned %v, want %d steps", f.spawned, tc.spawns)
			}
			if total > tc.maxTotal {
				t.Fatalf("call took %v, over %v", total, tc.maxTotal)
			}
			if tc.status == "timeout" && total < time.Duration(min(tc.timeoutMS, tc.compileMS))*time.Millisecond {
				t.Fatalf("call ended after %v, before its budget", total)
			}
		})
	}
}

func TestPrepareDirHostileFiles(t *testing.T) {
	h := newHost()
	h.workRoot = t.TempDir()
	outside := t.TempDir()
	tests := []struct {
		name  string
		files []string
		links map[string]string
		code  string // "" : accepted
	}{
		{name: "nested folders", files: []string{"main.py", "a/b/c/d.txt", "a/b/e.txt"}},
		{name: "same path twice", files: []string{"x.txt", "x.txt"}, code: CodeInvalid},
		{name: "file then a file below it", files: []string{"a", "a/b"}, code: CodeInvalid},
		{name: "file below then the folder as a file", files: []string{"a/b", "a"}, code: CodeInvalid},
		{name: "through a link", files: []string{"node_modules/x.js"}, links: map[string]string{"node_modules": outside}, code: CodeInvalid},
		{name: "over a link", files: []string{"node_modules"}, links: map[string]string{"node_modules": outside}, code: CodeInvalid},
		{name: "dot dot", files: []string{"../x"}, code: CodeInvalid},
		{name: "absolute", files: []string{"/etc/x"}, code: CodeInvalid},
		{name: "long name", files: []string{strings.Repeat("n", 300)}, code: CodeInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := &Request{Links: tc.links, UID: os.Getuid(), GID: os.Getgid()}
			for _, p := range tc.files {
				req.Files = append(req.Files, File{Path: p, Content: []byte("x")})
			}
			dir, err := h.prepareDir(req)
			if dir != "" {
				defer os.RemoveAll(dir)
			}
			if got := codeOf(err); got != tc.code {
				t.Fatalf("prepareDir(%q): err %v, code %q, want %q", tc.files, err, got, tc.code)
			}
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("a file landed outside the work folder: %v", ents)
			}
			if err == nil {
				for _, p := range tc.files {
					if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != "x" {
						t.Fatalf("file %s: %q %v", p, b, err)
					}
				}
			}
		})
	}
}

func codeOf(err error) string {
	if err == nil {
		return ""
	}
	if c := setupCode(err); c != "" {
		return c
	}
	return "other: " + err.Error()
}

// A run that its watcher kills returns only after the kill has finished:
// a killAll still looping when the next run starts would kill that run's
// program (seen as a SIGKILL 4 ms into the call after a memory bomb).
func TestRunWaitsForItsWatcherKill(t *testing.T) {
	h := newHost()
	var finished atomic.Bool
	h.kill = func(int) {
		time.Sleep(80 * time.Millisecond) // killAll still sweeping
		finished.Store(true)
	}
	spawn := func(cmd *exec.Cmd, _ io.Reader, _, _ io.Writer, onStart func(int)) (syscall.WaitStatus, error) {
		onStart(4242)
		time.Sleep(30 * time.Millisecond) // the program dies before the sweep ends
		return syscall.WaitStatus(syscall.SIGKILL), nil
	}
	res := h.runOne(&Request{TimeoutMS: 1}, []string{"prog"}, spawn, strings.NewReader(""), io.Discard, io.Discard)
	if !finished.Load() {
		t.Fatal("runOne returned while its watcher's kill was still running")
	}
	if res.Status != "timeout" {
		t.Fatalf("status %q, want timeout", res.Status)
	}
}

// The result splits the call's time into compile_ms and run_ms, and
// duration_ms is their sum, for a separate compile step and for a run step
// that compiles inline (one JVM) and says so on fd 3.
func TestCompileAndRunTimesAreSplit(t *testing.T) {
	tests := []struct {
		name    string
		inline  bool
		compile time.Duration // the compile step's (or phase's) length
		run     time.Duration
		marker  bool // inline: the step writes its byte after the compile
		exit    int
		status  sandbox.Status
	}{
		{name: "separate compile then run", compile: 60 * time.Millisecond, run: 30 * time.Millisecond, status: "ok"},
		{name: "separate compile fails", compile: 40 * time.Millisecond, exit: 1, status: "compile_error"},
		{name: "inline compile then run", inline: true, compile: 60 * time.Millisecond, run: 30 * time.Millisecond, marker: true, status: "ok"},
		{name: "inline compile fails: no byte", inline: true, compile: 40 * time.Millisecond, exit: 1, status: "compile_error"},
		{name: "inline run fails after the byte", inline: true, compile: 40 * time.Millisecond, run: 20 * time.Millisecond, marker: true, exit: 1, status: "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newHost()
			installFakeKills(t, h)
			// The phases' real lengths: on a loaded machine a sleep lasts
			// longer than asked, and the guest must report what really
			// passed, in the right phase.
			var compiled, ran time.Duration
			sleep := func(d time.Duration, into *time.Duration) {
				start := time.Now()
				time.Sleep(d)
				*into += time.Since(start)
			}
			spawn := func(cmd *exec.Cmd, _ io.Reader, _, _ io.Writer, onStart func(int)) (syscall.WaitStatus, error) {
				onStart(4242)
				isCompile := cmd.Args[0] == "cc"
				switch {
				case isCompile:
					sleep(tc.compile, &compiled)
					return syscall.WaitStatus(tc.exit << 8), nil
				case tc.inline:
					if len(cmd.ExtraFiles) != 1 {
						t.Errorf("inline compile: fd 3 not passed (%v)", cmd.ExtraFiles)
						return 0, nil
					}
					sleep(tc.compile, &compiled)
					if tc.marker {
						if _, err := cmd.ExtraFiles[0].Write([]byte{1}); err != nil {
							t.Errorf("writing the marker: %v", err)
						}
					}
					sleep(tc.run, &ran)
					return syscall.WaitStatus(tc.exit << 8), nil
				}
				sleep(tc.run, &ran)
				return 0, nil
			}
			req := &Request{Argv: []string{"{dir}/main"}, TimeoutMS: 10_000, InlineCompile: tc.inline}
			if !tc.inline {
				req.Compile = []string{"cc", "{dir}/main.c"}
			}
			res := h.serveRequest(req, spawn, strings.NewReader(""), io.Discard, io.Discard)
			if res.Status != tc.status {
				t.Fatalf("status %q, want %q (%+v)", res.Status, tc.status, res)
			}
			if res.DurationMS != res.CompileMS+res.RunMS {
				t.Fatalf("duration %d != compile %d + run %d", res.DurationMS, res.CompileMS, res.RunMS)
			}
			// Each figure covers its phase's real length and at most 150 ms
			// of the guest's own work around it (starting, waiting).
			near := func(got int64, want time.Duration) bool {
				return got >= want.Milliseconds() && got <= want.Milliseconds()+150
			}
			wantRun := ran
			if tc.status == "compile_error" {
				wantRun = 0
			}
			if !near(res.CompileMS, compiled) || !near(res.RunMS, wantRun) {
				t.Fatalf("compile %d ms run %d ms, want about %v and %v (asked %v and %v)", res.CompileMS, res.RunMS, compiled, wantRun, tc.compile, tc.run)
			}
		})
	}
}

// An inline compile (one JVM) is held to the compile cap too: a run step
// that has not said "compiled" on fd 3 when the cap passes is killed.
func TestInlineCompileHasTheCompileCap(t *testing.T) {
	h := newHost()
	f := &fakeSpawn{kills: installFakeKills(t, h), steps: []step{{d: 0}}}
	req := &Request{Argv: []string{"java", "{dir}"}, InlineCompile: true, TimeoutMS: 10_000, CompileTimeoutMS: 100}
	start := time.Now()
	res := h.serveRequest(req, f.spawn, strings.NewReader(""), io.Discard, io.Discard)
	took := time.Since(start)
	if res.Status != "timeout" || took > 3*time.Second {
		t.Fatalf("status %q after %v, want timeout at the compile cap (%+v)", res.Status, took, res)
	}
	if res.CompileMS < 100 || res.RunMS != 0 {
		t.Fatalf("compile %d ms, run %d ms", res.CompileMS, res.RunMS)
	}
}
