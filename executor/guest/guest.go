// Package guest is the small program that runs inside every sandbox. The host
// bind-mounts it read-only at /opt/sandboxapi/bin/guest. It is PID 1 of the
// sandbox ("init"), where it reaps orphans and serves run requests from the
// host on its own stdio (the agent, agent.go); and it is what `runsc exec`
// starts for the file modes, for kills, and for runs in sandboxes without
// an agent channel ("run"). It never trusts anything but its own stdin.
//
// Wire format of "run" on stdin: a decimal length, a newline, that many
// bytes of JSON (a Request), then the bytes that become the program's stdin.
// The header is read exactly (no read-ahead), so the child inherits the rest
// of stdin as is.
//
// Because the guest writes files from inside the sandbox, the host never
// writes by path into a session's home and cannot be tricked by symlinks.
package guest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"golang.org/x/sys/unix"
)

// MaxHeader bounds the JSON header (code and files travel in it).
const MaxHeader = 64 << 20

// File is one file the guest writes before running.
type File struct {
	Path    string `json:"path"`
	Content []byte `json:"content"`
	Mode    uint32 `json:"mode,omitempty"`
}

// Request tells the guest what to do.
type Request struct {
	// Files are written into a fresh private folder (its path is given to
	// Argv as {dir}); relative paths only.
	Files []File   `json:"files,omitempty"`
	Argv  []string `json:"argv"`
	// Compile runs first; if it fails, its output goes to stderr and the
	// result's status is compile_error.
	// CompileTimeoutMS caps the compile step (or an inline compile, until
	// its byte on fd 3); the step also ends when the call's TimeoutMS is
	// used up (0: TimeoutMS alone bounds it).
	Compile          []string `json:"compile,omitempty"`
	CompileTimeoutMS int64    `json:"compile_timeout_ms,omitempty"`
	// InlineCompile says that the run step compiles the code itself (one
	// process for compile and run, e.g. one JVM): it gets a pipe as fd 3
	// and writes a byte to it, then closes it, once the compile has
	// succeeded and before any of the user's code runs. A run that ends
	// without that byte failed to compile: its status is compile_error.
	// The byte also splits the step's time into compile_ms and run_ms.
	InlineCompile bool     `json:"inline_compile,omitempty"`
	Env           []string `json:"env,omitempty"`
	Cwd           string   `json:"cwd,omitempty"`
	// UID and GID run the program when the guest itself runs as root.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// TimeoutMS is the whole call's budget, compile step included: the
	// program (and everything it started) is killed once it is used up.
	// Zero or less means DefaultTimeoutMS, never "no deadline".
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// MemoryBytes kills the program when the sandbox uses more than this.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// MaxProcs caps the user's processes and threads (RLIMIT_NPROC). The
	// host cgroup's pids limit counts the sandbox kernel's own threads, so a
	// fork bomb must be stopped inside, before it reaches that limit.
	MaxProcs uint64 `json:"max_procs,omitempty"`
	// Keep leaves the folder in place for a following call (compile, then run)
	// and names it; an empty Keep removes the folder afterwards.
	Keep string `json:"keep,omitempty"`
	// Links are symlinks made in the work folder (name -> target), e.g.
	// node_modules -> /home/sandbox/node_modules, so module resolution that
	// walks up from the code's folder (ES modules, esbuild) finds packages.
	Links map[string]string `json:"links,omitempty"`
	// Reuse runs in the folder a previous call kept under this name.
	Reuse string `json:"reuse,omitempty"`
}

// Result is written as JSON to fd 3 when the program has ended.
type Result struct {
	ExitCode int            `json:"exit_code"`
	Signal   string         `json:"signal,omitempty"`
	Status   sandbox.Status `json:"status"` // ok, error, timeout, oom, compile_error, start_error
	// DurationMS is the whole call's time in the sandbox: CompileMS (the
	// compile step, 0 when there is none) plus RunMS (the program).
	DurationMS int64  `json:"duration_ms"`
	CompileMS  int64  `json:"compile_ms,omitempty"`
	RunMS      int64  `json:"run_ms"`
	Error      string `json:"error,omitempty"`
	// Code classifies a start_error caused by the request itself (its
	// files clash or do not fit): CodeInvalid or CodeTooLarge; empty for
	// the guest's own failures.
	Code string `json:"code,omitempty"`
}

// DefaultTimeoutMS is the deadline of a request that names none: a run
// without a deadline is never armed, whatever the host sent.
const DefaultTimeoutMS = 30_000

// timeoutOf is the deadline a run gets for a TimeoutMS of ms.
func (h *host) timeoutOf(ms int64) time.Duration {
	if ms <= 0 {
		return h.defaultTimeout
	}
	return time.Duration(ms) * time.Millisecond
}

// ProtocolVersion changes whenever the host-guest wire format does; the
// executor refuses a guest binary of another version (a stale build).
const ProtocolVersion = "13" // 8: inline_compile, compile_ms and run_ms; 9: file streams on the agent channel; 10: background processes; 11: kernel frames; 12: FrameHello, the channel outlives its host (checkpoint and restore); 13: stat, mkdir, move, remove, deep list, watches (fsops.go, fswatch.go)

// Main dispatches on the first argument: "init", "version", "kill", "run",
// or a file mode ("put", "get", "list", "fsop").
func Main(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "guest: usage: guest init|kill|run")
		return 2
	}
	switch args[1] {
	case "init":
		return agentInit()
	case "version":
		fmt.Println(ProtocolVersion)
		return 0
	case "kill":
		// kill(-1) reaches every process this user may signal except the
		// caller and pid 1.
		if err := killAll(); err != nil {
			fmt.Fprintln(os.Stderr, "guest: kill:", err)
			return 1
		}
		return 0
	case "run":
		return run()
	case "put", "get", "list", "fsop":
		return fileMode(args[1])
	}
	fmt.Fprintln(os.Stderr, "guest: unknown mode", args[1])
	return 2
}

// killAll sends SIGKILL to every process the caller may signal (all but
// itself and pid 1) until none is left: one pass can miss children a fork
// bomb creates while the pass runs.
//
// Background processes' sessions are spared: pid 1 lists them in
// spareFile, which a guest that `runsc exec` started reads here.
func killAll() error {
	if spare := sparedFromFile(spareFile); spare != nil {
		return killAllBut(func(pass func(func(int) bool)) { pass(spare) })
	}
	return killEvery()
}

// killEvery is killAll with nothing to spare: kill(-1) until none is left.
func killEvery() error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		err := syscall.Kill(-1, syscall.SIGKILL)
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errors.New("processes still alive after 3s of SIGKILL")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// ReadRequest reads the length-prefixed header from r without reading past it.
func ReadRequest(r io.Reader) (*Request, error) {
	var n int
	buf := make([]byte, 1)
	digits := 0
	for {
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("reading header length: %w", err)
		}
		if buf[0] == '\n' {
			break
		}
		if buf[0] < '0' || buf[0] > '9' || digits >= 9 {
			return nil, errors.New("reading header length: malformed")
		}
		n = n*10 + int(buf[0]-'0')
		digits++
	}
	if digits == 0 || n > MaxHeader {
		return nil, fmt.Errorf("reading header: bad length %d", n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	var req Request
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("decoding header: %w", err)
	}
	return &req, nil
}

// Encode frames req for the guest's stdin.
func Encode(req *Request) ([]byte, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b)+12)
	out = strconv.AppendInt(out, int64(len(b)), 10)
	out = append(out, '\n')
	return append(out, b...), nil
}

// WorkRoot holds the private per-call folders. In a sandbox it is a tmpfs
// of its own (mode 0711, root's): the user can fill /tmp, not this.
const WorkRoot = "/tmp/.sbx"

func run() int {
	// fd 3 is the host's result pipe: the program must not inherit it (what
	// it wrote there would be read as the result).
	syscall.CloseOnExec(3)
	res := runRequest()
	out := os.NewFile(3, "result")
	if out != nil {
		_ = json.NewEncoder(out).Encode(res)
		_ = out.Close()
	}
	if res.Status == sandbox.StatusStartError {
		fmt.Fprintln(os.Stderr, "sandbox:", res.Error)
		return 125
	}
	return 0
}

func runRequest() Result {
	req, err := ReadRequest(os.Stdin)
	if err != nil {
		return Result{Status: sandbox.StatusStartError, Error: err.Error()}
	}
	return newHost().serveRequest(req, execSpawn, os.Stdin, os.Stdout, os.Stderr)
}

// spawnFunc starts cmd with the given stdio, calls onStart with its pid,
// and returns its wait status once it and everything it left have ended.
type spawnFunc func(cmd *exec.Cmd, stdin io.Reader, stdout, stderr io.Writer, onStart func(pid int)) (syscall.WaitStatus, error)

// execSpawn is the spawn of a guest that `runsc exec` started: the guest
// is the program's parent and waits for it itself.
func execSpawn(cmd *exec.Cmd, stdin io.Reader, stdout, stderr io.Writer, onStart func(pid int)) (syscall.WaitStatus, error) {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	onStart(cmd.Process.Pid)
	_ = cmd.Wait()
	// Whatever the program left behind dies with it: nothing outlives the
	// call, and nothing keeps the host's output pipes open.
	_ = killAll()
	if cmd.ProcessState == nil {
		return 0, errors.New("program state unknown")
	}
	return cmd.ProcessState.Sys().(syscall.WaitStatus), nil
}

// serveRequest prepares the work folder, compiles if asked and runs the
// program, spawning each step with spawn.
func (h *host) serveRequest(req *Request, spawn spawnFunc, stdin io.Reader, stdout, stderr io.Writer) Result {
	dir, err := h.prepareDir(req)
	if err != nil {
		return Result{Status: sandbox.StatusStartError, Error: err.Error(), Code: setupCode(err)}
	}
	if req.Keep == "" && dir != "" {
		// Nothing of the call is left to hold the folder: its processes
		// are dead once the run returns.
		defer removeWork(dir)
	}
	if len(req.Argv) == 0 {
		return Result{Status: sandbox.StatusOK}
	}
	// One budget for the call: the compile step gets at most its own cap
	// and at most the call's timeout, and the run step what is left, so
	// compile and run together never outlast TimeoutMS.
	budget := h.timeoutOf(req.TimeoutMS)
	start := time.Now()
	var compiled time.Duration
	if len(req.Compile) > 0 {
		out := &limitedBuffer{max: 256 << 10}
		creq := *req
		creq.TimeoutMS = h.compileBudget(req).Milliseconds()
		creq.Cwd = strings.ReplaceAll(req.Cwd, "{dir}", dir)
		if dir != "" {
			// The compiler's temporary files (gcc's, go build's) go to
			// the staging area too: a /tmp the user filled must not stop
			// every later compile.
			creq.Env = withEnv(req.Env, "TMPDIR", dir)
		}
		creq.InlineCompile = false
		res := h.runOne(&creq, expand(req.Compile, dir), spawn, strings.NewReader(""), out, out)
		compiled = time.Since(start)
		if res.Status != sandbox.StatusOK {
			_, _ = stderr.Write(out.bytes())
			if res.Status == sandbox.StatusError {
				res.Status = sandbox.StatusCompileError
			}
			res.CompileMS, res.RunMS, res.DurationMS = CeilMS(compiled), 0, CeilMS(compiled)
			return res
		}
	}
	left := budget - time.Since(start)
	if left <= 0 {
		// The compile used the whole budget: the program never starts.
		ms := CeilMS(time.Since(start))
		return Result{Status: sandbox.StatusTimeout, ExitCode: 137, Signal: "SIGKILL", CompileMS: ms, DurationMS: ms}
	}
	rreq := *req
	rreq.TimeoutMS = CeilMS(left)
	rreq.Cwd = strings.ReplaceAll(req.Cwd, "{dir}", dir)
	res := h.runOne(&rreq, expand(req.Argv, dir), spawn, stdin, stdout, stderr)
	if res.Status != sandbox.StatusStartError {
		res.CompileMS += CeilMS(compiled)
		res.DurationMS = res.CompileMS + res.RunMS
	}
	return res
}

// withEnv is env with key set to value, replacing any earlier setting.
func withEnv(env []string, key, value string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+value)
}

// compileBudget is the compile step's deadline: the smaller of its own
// cap (when set) and the call's whole budget.
func (h *host) compileBudget(req *Request) time.Duration {
	b := h.timeoutOf(req.TimeoutMS)
	if req.CompileTimeoutMS > 0 {
		b = min(b, time.Duration(req.CompileTimeoutMS)*time.Millisecond)
	}
	return b
}

// CeilMS is d in whole milliseconds, rounded up: a positive duration never
// becomes 0 (which would mean the default deadline).
func CeilMS(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// setupCode tells a work-folder failure the caller caused (clashing or
// oversize files) from the guest's own.
func setupCode(err error) string {
	switch {
	case errors.Is(err, errBadFiles), errors.Is(err, syscall.EEXIST), errors.Is(err, syscall.ENOTDIR),
		errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ELOOP):
		return CodeInvalid
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EFBIG):
		return CodeTooLarge
	}
	return ""
}

// errBadFiles marks a request whose file or link names the guest refuses.
var errBadFiles = errors.New("bad file list")

func expand(argv []string, dir string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, "{dir}", dir)
	}
	return out
}

// limitedBuffer keeps the first max bytes written to it; both output
// streams of a compile may write at once.
type limitedBuffer struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - len(l.b); room > 0 {
		l.b = append(l.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (l *limitedBuffer) bytes() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b
}

// runOne runs argv as the user with the request's limits and reaps
// everything it leaves behind.
func (h *host) runOne(req *Request, argv []string, spawn spawnFunc, stdin io.Reader, stdout, stderr io.Writer) Result {
	if req.MemoryBytes > 0 {
		// The memory of a program just killed over the limit (the call
		// before) is given back by the sandbox kernel a little later: a
		// run started at once would be seen over the limit and killed as
		// out of memory before its first line.
		waitMemoryBelow(req.MemoryBytes, memReleaseWait)
	}
	cmd := exec.Command(lookPath(argv[0], req.Env), argv[1:]...)
	cmd.Env = req.Env
	cmd.Dir = req.Cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Getuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(req.UID), Gid: uint32(req.GID), Groups: []uint32{}}
	}
	if req.MaxProcs > 0 {
		// Inherited by the program; root (the guest) is not bound by it.
		lim := &unix.Rlimit{Cur: req.MaxProcs, Max: req.MaxProcs}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, lim); err != nil {
			return Result{Status: sandbox.StatusStartError, Error: "limiting processes: " + err.Error()}
		}
	}
	var marker *compileMarker
	if req.InlineCompile {
		m, err := newCompileMarker(cmd, req.UID, req.GID)
		if err != nil {
			return Result{Status: sandbox.StatusStartError, Error: "creating compile marker: " + err.Error()}
		}
		marker = m
	}
	start := time.Now()
	var reason atomic.Value
	done := make(chan struct{})
	// The run ends only once its watcher has: a kill the watcher began
	// (killAll loops until no process is left) must not outlive the run
	// and reach the next run's program.
	var watching sync.WaitGroup
	ws, err := spawn(cmd, stdin, stdout, stderr, func(pid int) {
		watching.Add(1)
		go func() {
			defer watching.Done()
			h.watch(req, pid, &reason, done)
		}()
		if marker != nil && req.CompileTimeoutMS > 0 {
			// The compile step's own cap holds for a compile inside the run.
			watching.Add(1)
			go func() {
				defer watching.Done()
				t := time.NewTimer(h.compileBudget(req))
				defer t.Stop()
				select {
				case <-marker.seen:
				case <-done:
				case <-t.C:
					reason.Store(sandbox.KillTimeout)
					h.kill(pid)
				}
			}()
		}
	})
	close(done)
	watching.Wait()
	took := time.Since(start)
	var compiledAt time.Time
	if marker != nil {
		compiledAt = marker.wait()
	}
	if err != nil {
		fmt.Fprintln(stderr, "sandbox: starting program:", err)
		return Result{Status: sandbox.StatusError, ExitCode: 127, Error: "starting program: " + err.Error()}
	}
	res := Result{DurationMS: CeilMS(took), RunMS: CeilMS(took), Status: sandbox.StatusOK}
	if marker != nil && !compiledAt.IsZero() {
		c := compiledAt.Sub(start)
		res.CompileMS, res.RunMS = CeilMS(c), CeilMS(took-c)
	}
	switch {
	case ws.Signaled():
		res.Signal = unix.SignalName(ws.Signal())
		res.ExitCode = 128 + int(ws.Signal())
		res.Status = sandbox.StatusError
	case ws.ExitStatus() != 0:
		res.ExitCode = ws.ExitStatus()
		res.Status = sandbox.StatusError
	}
	if r, ok := reason.Load().(sandbox.KillReason); ok {
		res.Status = r.Status()
	}
	if marker != nil && compiledAt.IsZero() {
		// The user's code never ran: whatever ended the step, it ended
		// during the compile.
		res.CompileMS, res.RunMS = res.DurationMS, 0
		if res.Status == sandbox.StatusError {
			res.Status = sandbox.StatusCompileError
		}
	}
	return res
}

// compileMarker is the pipe on which a run step with an inline compile
// says that its compile succeeded (see Request.InlineCompile).
type compileMarker struct {
	r, w *os.File
	at   chan time.Time
	seen chan struct{} // closed once the byte came or the pipe closed
}

// newCompileMarker hands the write end to cmd as fd 3 and starts reading.
// The pipe is the user's: a program (a JVM) can write to an inherited
// descriptor only by opening /proc/self/fd/3, which checks the owner.
func newCompileMarker(cmd *exec.Cmd, uid, gid int) (*compileMarker, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	if os.Getuid() == 0 {
		if err := w.Chown(uid, gid); err != nil {
			r.Close()
			w.Close()
			return nil, err
		}
	}
	m := &compileMarker{r: r, w: w, at: make(chan time.Time, 1), seen: make(chan struct{})}
	cmd.ExtraFiles = []*os.File{w}
	go func() {
		var b [1]byte
		n, _ := r.Read(b[:])
		if n > 0 {
			m.at <- time.Now()
		}
		close(m.at)
		close(m.seen)
	}()
	return m, nil
}

// wait returns when the compile succeeded, or the zero time when the step
// ended without saying so; the step and everything it started has ended.
func (m *compileMarker) wait() time.Time {
	m.w.Close() // the reader sees EOF once no process holds the pipe
	at := <-m.at
	m.r.Close()
	return at
}

// watch kills the program's process group, then every process of the user,
// when the call runs out of time or the sandbox out of memory.
func (h *host) watch(req *Request, pid int, reason *atomic.Value, done <-chan struct{}) {
	// Every run has a deadline: a TimeoutMS of 0 means the default.
	t := time.NewTimer(h.timeoutOf(req.TimeoutMS))
	defer t.Stop()
	deadline := t.C
	// Memory is looked at often only when it is near the limit: every
	// wake-up of this loop costs the sandbox kernel real CPU (at a steady
	// 5 ms it took a third of a CPU from the program).
	tick := time.NewTimer(5 * time.Millisecond)
	defer tick.Stop()
	kill := func(why sandbox.KillReason) {
		reason.Store(why)
		h.kill(pid)
	}
	for {
		select {
		case <-done:
			return
		case <-deadline:
			kill(sandbox.KillTimeout)
			return
		case <-tick.C:
			if req.MemoryBytes <= 0 {
				continue
			}
			used, over := memCheck(req.MemoryBytes)
			if over {
				kill(sandbox.KillOOM)
				return
			}
			tick.Reset(nextMemCheck(used, req.MemoryBytes))
		}
	}
}

// memReleaseWait bounds how long a run waits for memory still held by
// the sandbox kernel to come back under the limit before it starts.
const memReleaseWait = 2 * time.Second

// waitMemoryBelow waits, at most max, until the sandbox's memory use is
// not over limit.
func waitMemoryBelow(limit int64, max time.Duration) {
	end := time.Now().Add(max)
	for {
		if _, over := memCheck(limit); !over || time.Now().After(end) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killRun kills a run's process group, then every process of the user.
func killRun(pid int) {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = killAll()
}

// nextMemCheck is the wait before the next look at memory: long while use
// is far below the limit (no program allocates the distance to the host's
// limit in that time), short near it.
func nextMemCheck(used, limit int64) time.Duration {
	switch {
	case used < limit/4:
		return 100 * time.Millisecond
	case used < limit/2:
		return 25 * time.Millisecond
	default:
		return 5 * time.Millisecond
	}
}

// memCheck returns the sandbox's memory use (an upper bound) and whether
// it is over limit. sysinfo is cheap and its used figure (page cache
// included) is an upper bound; only when that is over the limit is
// /proc/meminfo read (about 1.5 ms in gVisor) for the exact figure.
func memCheck(limit int64) (int64, bool) {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		unit := int64(max(si.Unit, 1))
		if used := (int64(si.Totalram) - int64(si.Freeram)) * unit; used <= limit {
			return used, false
		}
	}
	used := memUsed()
	return used, used > limit
}

// memUsed reads the sandbox's memory use as the sandbox kernel reports it.
func memUsed() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var total, avail int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "MemTotal:":
			total = v
		case "MemAvailable:":
			avail = v
		}
	}
	return (total - avail) << 10
}

// prepareDir makes a fresh private folder (or reuses a kept one) and writes
// the request's files into it, owned by the program's user.
func (h *host) prepareDir(req *Request) (string, error) {
	if req.Reuse != "" {
		if !validName(req.Reuse) {
			return "", fmt.Errorf("bad folder name %q", req.Reuse)
		}
		return filepath.Join(h.workRoot, req.Reuse), nil
	}
	if len(req.Files) == 0 && req.Keep == "" {
		return "", nil
	}
	if err := os.MkdirAll(h.workRoot, 0o711); err != nil {
		return "", fmt.Errorf("creating %s: %w", h.workRoot, err)
	}
	var dir string
	if req.Keep != "" {
		if !validName(req.Keep) {
			return "", fmt.Errorf("bad folder name %q", req.Keep)
		}
		dir = filepath.Join(h.workRoot, req.Keep)
		if err := os.Mkdir(dir, 0o700); err != nil {
			return "", fmt.Errorf("creating %s: %w", dir, err)
		}
	} else {
		d, err := os.MkdirTemp(h.workRoot, "x")
		if err != nil {
			return "", fmt.Errorf("creating work folder: %w", err)
		}
		dir = d
	}
	created := []string{dir}
	for name, target := range req.Links {
		if name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." || !filepath.IsAbs(target) {
			return "", fmt.Errorf("%w: link %q -> %q", errBadFiles, name, target)
		}
		l := filepath.Join(dir, name)
		if err := os.Symlink(target, l); err != nil {
			return "", fmt.Errorf("linking %s: %w", name, err)
		}
		created = append(created, l)
	}
	for _, f := range req.Files {
		if f.Path == "" || filepath.IsAbs(f.Path) || strings.Contains(f.Path, "\x00") || !filepath.IsLocal(f.Path) {
			return "", fmt.Errorf("%w: file name %q", errBadFiles, f.Path)
		}
		p := filepath.Join(dir, f.Path)
		for _, sub := range parents(f.Path) {
			d := filepath.Join(dir, sub)
			if err := os.Mkdir(d, 0o755); err == nil {
				created = append(created, d)
			} else if !errors.Is(err, os.ErrExist) {
				return "", fmt.Errorf("creating folder for %s: %w", f.Path, err)
			} else if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
				// A link (node_modules) or a file of the request: writing
				// through it would leave the work folder.
				return "", fmt.Errorf("%w: %s is not a folder of this request", errBadFiles, sub)
			}
		}
		mode := os.FileMode(f.Mode).Perm()
		if mode == 0 {
			mode = 0o644
		}
		fh, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
		if err != nil {
			return "", fmt.Errorf("creating %s: %w", f.Path, err)
		}
		created = append(created, p)
		_, err = fh.Write(f.Content)
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", fmt.Errorf("writing %s: %w", f.Path, err)
		}
	}
	if os.Getuid() == 0 {
		// Deepest first: once the folder is the user's (mode 0700), root
		// without CAP_DAC_OVERRIDE can no longer look inside it.
		for i := len(created) - 1; i >= 0; i-- {
			if err := os.Lchown(created[i], req.UID, req.GID); err != nil {
				return "", fmt.Errorf("handing work folder to the user: %w", err)
			}
		}
	}
	return dir, nil
}

// parents are the folders above the relative path p, outermost first.
func parents(p string) []string {
	var out []string
	for sub := filepath.Dir(p); sub != "." && sub != "/"; sub = filepath.Dir(sub) {
		out = append([]string{sub}, out...)
	}
	return out
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// lookPath finds a bare command name on the PATH of env (its last PATH,
// as the program sees it), not the guest's own: a language's version puts
// its folders first. A name with a slash, or one found nowhere, comes back
// as it is (exec then says what is wrong).
func lookPath(name string, env []string) string {
	if name == "" || strings.Contains(name, "/") {
		return name
	}
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue // a relative folder would depend on the working folder
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return name
}
