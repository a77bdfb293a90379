package guest

// Background processes: programs a session starts that outlive the call,
// such as a dev server, a watcher or a terminal. Pid 1 owns their table,
// so they live in the sandbox's memory and nowhere else (a checkpoint of
// the sandbox keeps them).
//
// Each process leads a session of its own (setsid), which is what keeps
// a run's kill away from it: a run's kill ends every process but pid 1
// and those in a running background process's session. A user process
// cannot join another session, so nothing a run starts can hide there;
// what a background process starts in a session of its own (a daemon's
// setsid) is not part of it. When a process's leader ends, the rest of
// its session ends too, so its output ends with it.
//
// Wire format (frame types 0x40-0x4f):
//
//	host -> guest  0x40  ProcCall as JSON
//	guest -> host  0x41  ProcReply as JSON, the answer to the call of its ID
//	               0x42  ProcInfo as JSON of a process that has just ended
//
// Output is pulled: a "read" call asks for what follows an offset and
// waits (at most WaitMS) for it, so a slow or gone client costs the guest
// nothing but the buffer, which is bounded per process.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Frame types of background processes.
const (
	FrameProcCall  byte = 0x40
	FrameProcReply byte = 0x41
	FrameProcExit  byte = 0x42
)

// Limits of the process table.
const (
	// MaxRunningProcs is how many background processes may run at once.
	MaxRunningProcs = 16
	// maxKeptProcs bounds the table: ended processes stay (for their
	// output and exit status) until newer ones push the oldest out.
	maxKeptProcs = 64
	// ProcOutputBytes bounds one process's kept output (both streams);
	// the oldest chunks go first and a reader is told how much it missed.
	ProcOutputBytes = 2 << 20
	// ProcStdinBytes bounds the stdin queued for a process that has not
	// read it yet; a write that does not fit is refused whole.
	ProcStdinBytes = 1 << 20
	// MaxProcRead bounds the output one read returns.
	MaxProcRead = 256 << 10
	// MaxProcWait bounds how long a read waits for output.
	MaxProcWait = 25 * time.Second
	// chunkOverhead is what a kept chunk costs beside its bytes, counted
	// against ProcOutputBytes so a program printing one byte at a time
	// cannot grow the table past its bound.
	chunkOverhead = 64
)

// Codes of a ProcReply's failure, which the host maps to its errors.
const (
	ProcCodeNotFound   = "process_not_found"
	ProcCodeLimit      = "process_limit"
	ProcCodeNotRunning = "process_not_running"
	ProcCodeNoStdin    = "process_stdin_closed"
	ProcCodeStdinFull  = "process_stdin_full"
	ProcCodeNotPTY     = "process_not_pty"
	ProcCodeStart      = "process_start_failed"
	ProcCodeInvalid    = CodeInvalid
)

// Process states.
const (
	ProcRunning = "running"
	ProcExited  = "exited"
)

// Output stream names of a chunk.
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamPTY    = "pty"
)

// WinSize is a terminal's size in characters.
type WinSize struct {
	Cols uint16 `json:"cols"`
	Rows uint16 `json:"rows"`
}

// ProcStart is what a "start" call starts.
type ProcStart struct {
	Argv     []string `json:"argv"`
	Env      []string `json:"env,omitempty"`
	Cwd      string   `json:"cwd"`
	UID      int      `json:"uid"`
	GID      int      `json:"gid"`
	MaxProcs uint64   `json:"max_procs,omitempty"`
	// Stdin opens a pipe the host writes with "stdin" calls; without it
	// the process reads /dev/null. A PTY process always has its terminal.
	Stdin bool     `json:"stdin,omitempty"`
	PTY   *WinSize `json:"pty,omitempty"`
	Tag   string   `json:"tag,omitempty"`
	// TimeoutMS kills the process once it has run that long; 0 never.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// MemoryBytes is the sandbox's memory limit: while background
	// processes run, the one using the most memory is killed when the
	// sandbox goes over it (before the host's limit kills the sandbox).
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// ProcCall is one call of the host on the process table.
type ProcCall struct {
	ID uint64 `json:"id"`
	// Op is start, list, get, read, stdin, signal or resize.
	Op     string     `json:"op"`
	Start  *ProcStart `json:"start,omitempty"`
	PID    int        `json:"pid,omitempty"`
	Data   []byte     `json:"data,omitempty"`   // stdin
	EOF    bool       `json:"eof,omitempty"`    // stdin: close it after Data
	Signal int        `json:"signal,omitempty"` // signal
	Size   *WinSize   `json:"size,omitempty"`   // resize
	From   int64      `json:"from,omitempty"`   // read: the output offset to start at
	WaitMS int64      `json:"wait_ms,omitempty"`
}

// ProcInfo describes one process of the table.
type ProcInfo struct {
	PID       int       `json:"pid"`
	Tag       string    `json:"tag,omitempty"`
	Argv      []string  `json:"argv"`
	PTY       bool      `json:"pty,omitempty"`
	Stdin     bool      `json:"stdin,omitempty"` // open for writing
	State     string    `json:"state"`
	ExitCode  *int      `json:"exit_code,omitempty"`
	Signal    string    `json:"signal,omitempty"`
	TimedOut  bool      `json:"timed_out,omitempty"`
	OOMKilled bool      `json:"oom_killed,omitempty"`
	StartedAt time.Time `json:"started_at"`
	EndedAt   time.Time `json:"ended_at,omitzero"`
	// OutputBytes is the offset after the last output byte (all the
	// process printed, kept or not).
	OutputBytes int64 `json:"output_bytes"`
}

// ProcChunk is a piece of a process's output at its offset.
type ProcChunk struct {
	Stream string `json:"stream"`
	Offset int64  `json:"offset"`
	Data   []byte `json:"data"`
}

// ProcOutput is a read's answer.
type ProcOutput struct {
	Chunks []ProcChunk `json:"chunks,omitempty"`
	// Next is the offset the following read starts at.
	Next int64 `json:"next"`
	// Dropped is how many bytes before the first chunk were asked for but
	// no longer kept.
	Dropped int64 `json:"dropped,omitempty"`
	// Done: the process has ended and nothing follows Next.
	Done bool      `json:"done,omitempty"`
	Proc *ProcInfo `json:"proc,omitempty"` // with Done: how it ended
}

// ProcReply answers the ProcCall of the same ID.
type ProcReply struct {
	ID      uint64      `json:"id"`
	Error   string      `json:"error,omitempty"`
	Code    string      `json:"code,omitempty"`
	Proc    *ProcInfo   `json:"proc,omitempty"`
	Procs   []ProcInfo  `json:"procs,omitempty"`
	Output  *ProcOutput `json:"output,omitempty"`
	Written int         `json:"written,omitempty"`
}

// procError is a call's failure with its code.
type procError struct{ code, msg string }

func (e *procError) Error() string { return e.msg }

func procErrf(code, format string, args ...any) error {
	return &procError{code: code, msg: fmt.Sprintf(format, args...)}
}

// procTable is pid 1's table of background processes. Its zero value is
// not usable (newProcTable); it is safe for concurrent use.
type procTable struct {
	// startCmd starts a command and returns the channel of its exit
	// status (pid 1's reaper; tests wait themselves).
	startCmd func(*exec.Cmd) (<-chan syscall.WaitStatus, error)
	onExit   func(ProcInfo) // told of every process that ends
	// spareFile, if set, is rewritten with the sessions to spare whenever
	// they change, for kills by guests that `runsc exec` started.
	spareFile string

	// mu guards the table; it is also held across a start's fork and a
	// kill's pass, so a kill never sees a new process before it is spared.
	mu       sync.Mutex
	procs    map[int]*proc
	order    []int // pids in start order
	memLimit int64 // the latest start's MemoryBytes
	watching bool  // the memory watch runs
}

func newProcTable(startCmd func(*exec.Cmd) (<-chan syscall.WaitStatus, error), onExit func(ProcInfo), spareFile string) *procTable {
	return &procTable{startCmd: startCmd, onExit: onExit, spareFile: spareFile, procs: map[int]*proc{}}
}

// proc is one background process; its fields after mu are guarded by it.
type proc struct {
	pid   int
	tag   string
	argv  []string
	pty   *os.File   // the terminal's master side, nil without one
	outs  []*os.File // the read ends of its output, closed at its end
	start time.Time

	mu       sync.Mutex
	out      outLog
	changed  chan struct{} // closed and replaced on new output and at the end
	exited   bool
	ws       syscall.WaitStatus
	timedOut bool
	oom      bool
	ended    time.Time
	stdin    *stdinQueue // nil: no stdin to write
}

func (p *proc) info() ProcInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.infoLocked()
}

func (p *proc) infoLocked() ProcInfo {
	i := ProcInfo{PID: p.pid, Tag: p.tag, Argv: p.argv, PTY: p.pty != nil, Stdin: p.stdin != nil && !p.stdin.isClosed(),
		State: ProcRunning, StartedAt: p.start, OutputBytes: p.out.end}
	if p.exited {
		i.State, i.EndedAt, i.TimedOut, i.OOMKilled, i.Stdin = ProcExited, p.ended, p.timedOut, p.oom, false
		code := p.ws.ExitStatus()
		if p.ws.Signaled() {
			i.Signal = unix.SignalName(p.ws.Signal())
			code = 128 + int(p.ws.Signal())
		}
		i.ExitCode = &code
	}
	return i
}

// wake tells readers something changed; the caller holds p.mu.
func (p *proc) wake() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *proc) write(stream string, b []byte) {
	p.mu.Lock()
	p.out.add(stream, b)
	p.wake()
	p.mu.Unlock()
}

// outLog keeps a process's latest output, at most max bytes (overhead
// included), in order across its streams. Offsets count every byte the
// process printed, so a reader can resume where it stopped.
type outLog struct {
	chunks    []ProcChunk
	base, end int64 // offsets of the first kept byte and after the last
	size      int
	max       int
}

func (l *outLog) add(stream string, b []byte) {
	if len(b) == 0 {
		return
	}
	if l.max == 0 {
		l.max = ProcOutputBytes
	}
	l.chunks = append(l.chunks, ProcChunk{Stream: stream, Offset: l.end, Data: bytes.Clone(b)})
	l.end += int64(len(b))
	l.size += len(b) + chunkOverhead
	for l.size > l.max && len(l.chunks) > 1 {
		l.size -= len(l.chunks[0].Data) + chunkOverhead
		l.chunks[0] = ProcChunk{} // the array keeps the slot, not the bytes
		l.chunks = l.chunks[1:]
		l.base = l.chunks[0].Offset
	}
}

// read returns up to max bytes from offset from: the chunks, the offset
// after them, and how many bytes from from were no longer kept.
func (l *outLog) read(from int64, max int) ([]ProcChunk, int64, int64) {
	var dropped int64
	if from < l.base {
		dropped, from = l.base-from, l.base
	}
	if from > l.end {
		from = l.end
	}
	i := sort.Search(len(l.chunks), func(i int) bool {
		c := l.chunks[i]
		return c.Offset+int64(len(c.Data)) > from
	})
	var out []ProcChunk
	n := 0
	for ; i < len(l.chunks) && n < max; i++ {
		c := l.chunks[i]
		d := c.Data[from-c.Offset:]
		if len(d) > max-n {
			d = d[:max-n]
		}
		out = append(out, ProcChunk{Stream: c.Stream, Offset: from, Data: d})
		n += len(d)
		from += int64(len(d))
	}
	return out, from, dropped
}

// stdinQueue feeds a process's stdin from a bounded queue, so a write
// call never waits for a process that does not read.
type stdinQueue struct {
	mu      sync.Mutex
	buf     []byte
	eof     bool // close once buf is written
	closed  bool // no more writes accepted
	more    chan struct{}
	w       *os.File
	eofByte []byte // written at EOF instead of closing (a terminal's ^D)
}

func newStdinQueue(w *os.File, eofByte []byte) *stdinQueue {
	q := &stdinQueue{w: w, more: make(chan struct{}, 1), eofByte: eofByte}
	go q.pump()
	return q
}

func (q *stdinQueue) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// put queues b (all of it or none) and, with eof, closes the stream after it.
func (q *stdinQueue) put(b []byte, eof bool) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, procErrf(ProcCodeNoStdin, "the process's stdin is closed")
	}
	if len(q.buf)+len(b) > ProcStdinBytes {
		return 0, procErrf(ProcCodeStdinFull, "the process has not read the %d bytes of stdin already queued; retry later", len(q.buf))
	}
	q.buf = append(q.buf, b...)
	if eof {
		q.eof, q.closed = true, q.eofByte == nil
		if q.eofByte != nil {
			q.buf = append(q.buf, q.eofByte...)
			q.eof = false
		}
	}
	select {
	case q.more <- struct{}{}:
	default:
	}
	return len(b), nil
}

// stop ends the queue: the process is gone.
func (q *stdinQueue) stop() {
	q.mu.Lock()
	q.closed, q.eof, q.buf = true, true, nil
	q.mu.Unlock()
	select {
	case q.more <- struct{}{}:
	default:
	}
}

func (q *stdinQueue) pump() {
	for range q.more {
		for {
			q.mu.Lock()
			b, eof := q.buf, q.eof
			q.buf = nil
			q.mu.Unlock()
			if len(b) > 0 {
				if _, err := q.w.Write(b); err != nil {
					q.stop()
					eof = true
				}
			}
			if eof {
				if q.eofByte == nil {
					q.w.Close()
				}
				return
			}
			if len(b) == 0 {
				break
			}
		}
	}
}

// running is the number of processes that have not ended; callers hold t.mu.
func (t *procTable) runningLocked() int {
	n := 0
	for _, p := range t.procs {
		p.mu.Lock()
		if !p.exited {
			n++
		}
		p.mu.Unlock()
	}
	return n
}

// spared reports whether sid is the session of a process that has not
// ended; callers hold t.mu.
func (t *procTable) sparedLocked(sid int) bool {
	p, ok := t.procs[sid]
	if !ok {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.exited
}

// killRun ends every process but pid 1, the caller and the background
// processes' sessions: a run's kill.
func (t *procTable) killRun() error {
	t.mu.Lock()
	spare := false
	for pid := range t.procs {
		spare = spare || t.sparedLocked(pid)
	}
	if !spare {
		// Nothing to spare: kill(-1), as before there were background
		// processes (the lock keeps a start out until it is done).
		defer t.mu.Unlock()
		return killEvery()
	}
	t.mu.Unlock()
	return killAllBut(func(pass func(spare func(sid int) bool)) {
		t.mu.Lock()
		defer t.mu.Unlock()
		pass(t.sparedLocked)
	})
}

// writeSpareLocked records the sessions to spare for guests that `runsc
// exec` starts (the kill and run modes); callers hold t.mu.
func (t *procTable) writeSpareLocked() {
	if t.spareFile == "" {
		return
	}
	var b strings.Builder
	for pid := range t.procs {
		if t.sparedLocked(pid) {
			fmt.Fprintln(&b, pid)
		}
	}
	tmp := t.spareFile + ".tmp"
	if os.WriteFile(tmp, []byte(b.String()), 0o600) == nil {
		_ = os.Rename(tmp, t.spareFile)
	}
}

// sparedFromFile reads the sessions a guest that is not pid 1 must spare.
func sparedFromFile(path string) func(int) bool {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	keep := map[int]bool{}
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil && n > 1 {
			keep[n] = true
		}
	}
	if len(keep) == 0 {
		return nil
	}
	return func(sid int) bool { return keep[sid] }
}

// spareFile is where pid 1 lists the sessions of its running background
// processes: in the staging tmpfs, root's and closed to the user.
const spareFile = WorkRoot + "/.procs"

func (t *procTable) start(s *ProcStart) (ProcInfo, error) {
	if len(s.Argv) == 0 || s.Argv[0] == "" {
		return ProcInfo{}, procErrf(ProcCodeInvalid, "no command")
	}
	if !filepath.IsAbs(s.Cwd) {
		return ProcInfo{}, procErrf(ProcCodeInvalid, "cwd must be an absolute path")
	}
	if s.PTY != nil && (s.PTY.Cols == 0 || s.PTY.Rows == 0) {
		return ProcInfo{}, procErrf(ProcCodeInvalid, "a terminal needs cols and rows above 0")
	}
	cmd := exec.Command(lookPath(s.Argv[0], s.Env), s.Argv[1:]...)
	cmd.Args[0] = s.Argv[0]
	cmd.Env, cmd.Dir = s.Env, s.Cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if os.Getuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(s.UID), Gid: uint32(s.GID), Groups: []uint32{}}
	}
	p := &proc{tag: s.Tag, argv: s.Argv, changed: make(chan struct{}), start: time.Now()}
	var closeAfter []*os.File // the child's ends, closed once it has them
	var readers []func()
	cleanup := func() {
		for _, f := range closeAfter {
			f.Close()
		}
	}
	if s.PTY != nil {
		master, slave, err := openPTY(s.UID, s.GID, *s.PTY)
		if err != nil {
			return ProcInfo{}, fmt.Errorf("opening a terminal: %w", err)
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
		cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, 0
		closeAfter = append(closeAfter, slave)
		p.pty = master
		p.stdin = nil
		readers = append(readers, func() { p.readFrom(master, StreamPTY) })
	} else {
		outR, outW, err := os.Pipe()
		if err != nil {
			return ProcInfo{}, err
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			outR.Close()
			outW.Close()
			return ProcInfo{}, err
		}
		cmd.Stdout, cmd.Stderr = outW, errW
		closeAfter = append(closeAfter, outW, errW)
		p.outs = []*os.File{outR, errR}
		readers = append(readers, func() { p.readFrom(outR, StreamStdout) }, func() { p.readFrom(errR, StreamStderr) })
		if s.Stdin {
			inR, inW, err := os.Pipe()
			if err != nil {
				cleanup()
				outR.Close()
				errR.Close()
				return ProcInfo{}, err
			}
			cmd.Stdin = inR
			closeAfter = append(closeAfter, inR)
			p.stdin = newStdinQueue(inW, nil)
		}
	}

	t.mu.Lock()
	if t.runningLocked() >= MaxRunningProcs {
		t.mu.Unlock()
		cleanup()
		p.closeAll()
		return ProcInfo{}, procErrf(ProcCodeLimit, "%d background processes are running, the most a session may have; stop one first", MaxRunningProcs)
	}
	if s.MaxProcs > 0 {
		// As a run: inherited by the program; root (pid 1) is not bound by it.
		lim := &unix.Rlimit{Cur: s.MaxProcs, Max: s.MaxProcs}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, lim); err != nil {
			t.mu.Unlock()
			cleanup()
			p.closeAll()
			return ProcInfo{}, fmt.Errorf("limiting processes: %w", err)
		}
	}
	exited, err := t.startCmd(cmd)
	cleanup()
	if err != nil {
		t.mu.Unlock()
		p.closeAll()
		return ProcInfo{}, procErrf(ProcCodeStart, "starting %s: %v", s.Argv[0], err)
	}
	p.pid = cmd.Process.Pid
	if p.pty != nil {
		p.stdin = newStdinQueue(p.pty, []byte{4}) // ^D: the terminal's end of input
	}
	t.evictLocked()
	t.procs[p.pid] = p
	t.order = append(t.order, p.pid)
	t.writeSpareLocked()
	if s.MemoryBytes > 0 {
		t.memLimit = s.MemoryBytes
		if !t.watching {
			t.watching = true
			go t.watchMemory()
		}
	}
	t.mu.Unlock()

	var wg sync.WaitGroup
	for _, r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r()
		}()
	}
	go t.await(p, exited, &wg, time.Duration(s.TimeoutMS)*time.Millisecond)
	return p.info(), nil
}

// closeAll closes the host's ends of a process that did not start.
func (p *proc) closeAll() {
	if p.pty != nil {
		p.pty.Close()
	}
	for _, f := range p.outs {
		f.Close()
	}
	if p.stdin != nil {
		p.stdin.stop() // its pump closes the pipe and ends
	}
}

func (p *proc) readFrom(f *os.File, stream string) {
	buf := make([]byte, 32<<10)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.write(stream, buf[:n])
		}
		if err != nil {
			// EOF, or for a terminal's master EIO once no process holds
			// its other side: the end of the output either way.
			return
		}
	}
}

// outputGrace bounds the wait for a process's output after its session
// was killed: a descendant that left the session may still hold a pipe.
const outputGrace = 2 * time.Second

// await waits for the process's end (or kills it at its timeout), ends
// the rest of its session, waits for its output, and then marks it ended.
func (t *procTable) await(p *proc, exited <-chan syscall.WaitStatus, readers *sync.WaitGroup, timeout time.Duration) {
	var deadline <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		deadline = tm.C
	}
	var ws syscall.WaitStatus
	select {
	case ws = <-exited:
	case <-deadline:
		p.mu.Lock()
		p.timedOut = true
		p.mu.Unlock()
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		ws = <-exited
	}
	_ = killSession(p.pid)
	done := make(chan struct{})
	go func() {
		readers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(outputGrace):
	}
	if p.pty != nil {
		p.pty.Close()
	}
	for _, f := range p.outs {
		f.Close()
	}
	if p.stdin != nil {
		p.stdin.stop()
	}
	t.mu.Lock()
	p.mu.Lock()
	p.exited, p.ws, p.ended = true, ws, time.Now()
	p.wake()
	info := p.infoLocked()
	p.mu.Unlock()
	t.writeSpareLocked()
	t.mu.Unlock()
	if t.onExit != nil {
		t.onExit(info)
	}
}

// evictLocked drops the oldest ended processes while the table is full.
func (t *procTable) evictLocked() {
	for len(t.order) >= maxKeptProcs {
		dropped := false
		for i, pid := range t.order {
			if p := t.procs[pid]; p != nil {
				p.mu.Lock()
				ended := p.exited
				p.mu.Unlock()
				if !ended {
					continue
				}
			}
			delete(t.procs, pid)
			t.order = append(t.order[:i:i], t.order[i+1:]...)
			dropped = true
			break
		}
		if !dropped {
			return
		}
	}
}

func (t *procTable) get(pid int) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p, ok := t.procs[pid]
	if !ok {
		return nil, procErrf(ProcCodeNotFound, "no process %d", pid)
	}
	return p, nil
}

func (t *procTable) list() []ProcInfo {
	t.mu.Lock()
	ps := make([]*proc, 0, len(t.order))
	for _, pid := range t.order {
		ps = append(ps, t.procs[pid])
	}
	t.mu.Unlock()
	out := make([]ProcInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.info())
	}
	return out
}

// read waits up to wait for output after from (or the end) and returns it.
func (t *procTable) read(pid int, from int64, wait time.Duration) (*ProcOutput, error) {
	p, err := t.get(pid)
	if err != nil {
		return nil, err
	}
	wait = min(max(wait, 0), MaxProcWait)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		p.mu.Lock()
		chunks, next, dropped := p.out.read(from, MaxProcRead)
		if len(chunks) > 0 || dropped > 0 || p.exited {
			o := &ProcOutput{Chunks: chunks, Next: next, Dropped: dropped, Done: p.exited && next == p.out.end}
			if o.Done {
				i := p.infoLocked()
				o.Proc = &i
			}
			p.mu.Unlock()
			return o, nil
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-timer.C:
			return &ProcOutput{Next: next}, nil
		}
	}
}

func (t *procTable) stdin(pid int, data []byte, eof bool) (int, error) {
	p, err := t.get(pid)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	q, exited := p.stdin, p.exited
	p.mu.Unlock()
	if exited {
		return 0, procErrf(ProcCodeNotRunning, "process %d has ended", pid)
	}
	if q == nil {
		return 0, procErrf(ProcCodeNoStdin, "process %d was started without stdin", pid)
	}
	return q.put(data, eof)
}

func (t *procTable) signal(pid, sig int) error {
	if sig <= 0 || sig >= 65 {
		return procErrf(ProcCodeInvalid, "bad signal %d", sig)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// Under the table's lock: the process cannot be reaped (and its pid
	// reused) between the check and the kill.
	p, ok := t.procs[pid]
	if !ok {
		return procErrf(ProcCodeNotFound, "no process %d", pid)
	}
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	if exited {
		return procErrf(ProcCodeNotRunning, "process %d has ended", pid)
	}
	if err := syscall.Kill(pid, syscall.Signal(sig)); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %d: %w", pid, err)
	}
	return nil
}

func (t *procTable) resize(pid int, ws WinSize) error {
	if ws.Cols == 0 || ws.Rows == 0 {
		return procErrf(ProcCodeInvalid, "cols and rows must be above 0")
	}
	p, err := t.get(pid)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pty == nil {
		return procErrf(ProcCodeNotPTY, "process %d has no terminal", pid)
	}
	if p.exited {
		return procErrf(ProcCodeNotRunning, "process %d has ended", pid)
	}
	return setWinSize(p.pty, ws)
}

// serveCall runs one call and returns its reply.
func (t *procTable) serveCall(c *ProcCall) (r ProcReply) {
	r.ID = c.ID
	var err error
	switch c.Op {
	case "start":
		if c.Start == nil {
			err = procErrf(ProcCodeInvalid, "start without a process")
			break
		}
		var i ProcInfo
		if i, err = t.start(c.Start); err == nil {
			r.Proc = &i
		}
	case "list":
		r.Procs = t.list()
	case "get":
		var p *proc
		if p, err = t.get(c.PID); err == nil {
			i := p.info()
			r.Proc = &i
		}
	case "read":
		r.Output, err = t.read(c.PID, c.From, time.Duration(c.WaitMS)*time.Millisecond)
	case "stdin":
		r.Written, err = t.stdin(c.PID, c.Data, c.EOF)
	case "signal":
		err = t.signal(c.PID, c.Signal)
	case "resize":
		if c.Size == nil {
			err = procErrf(ProcCodeInvalid, "resize without a size")
			break
		}
		err = t.resize(c.PID, *c.Size)
	default:
		err = procErrf(ProcCodeInvalid, "unknown process call %q", c.Op)
	}
	if err != nil {
		r.Error = err.Error()
		var pe *procError
		if errors.As(err, &pe) {
			r.Code = pe.code
		}
	}
	return r
}

// procStat is what a kill needs of a process: its pid, session and state.
type procStat struct {
	pid, sid int
	zombie   bool
}

// listProcs reads every process's session from /proc.
func listProcs() ([]procStat, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []procStat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		if st, ok := parseStat(pid, b); ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// parseStat reads the state and session of /proc/<pid>/stat: "pid (comm)
// state ppid pgrp session ..."; comm may hold spaces and parentheses, so
// the fields are counted after the last ')'.
func parseStat(pid int, b []byte) (procStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 {
		return procStat{}, false
	}
	sid, err := strconv.Atoi(f[3])
	if err != nil {
		return procStat{}, false
	}
	return procStat{pid: pid, sid: sid, zombie: f[0] == "Z" || f[0] == "X"}, true
}

// killAllBut sends SIGKILL to every process but the caller, pid 1 and
// those of a spared session, pass after pass (a fork bomb makes new ones
// meanwhile) until none is left. lock runs each pass under whatever keeps
// the spared set still, handing it the set.
func killAllBut(lock func(pass func(spare func(sid int) bool))) error {
	self := os.Getpid()
	deadline := time.Now().Add(3 * time.Second)
	for {
		var left int
		var err error
		lock(func(spare func(sid int) bool) {
			var ps []procStat
			ps, err = listProcs()
			for _, p := range ps {
				if p.pid == self || p.pid == 1 || p.zombie || (spare != nil && spare(p.sid)) {
					continue
				}
				if syscall.Kill(p.pid, syscall.SIGKILL) == nil {
					left++
				}
			}
		})
		if err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("processes still alive after 3s of SIGKILL")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// killSession ends every process of session sid.
func killSession(sid int) error {
	return killAllBut(func(pass func(spare func(int) bool)) {
		pass(func(s int) bool { return s != sid })
	})
}

// openPTY opens a terminal pair through /dev/ptmx; the other side belongs
// to uid and gid.
func openPTY(uid, gid int, size WinSize) (master, slave *os.File, err error) {
	// Non-blocking, so the runtime's poller serves it and a Close ends a
	// read that waits (a descendant that left the session may hold the
	// other side for ever).
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	master = os.NewFile(uintptr(mfd), "/dev/ptmx")
	fail := func(err error) (*os.File, *os.File, error) {
		master.Close()
		return nil, nil, err
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		return fail(fmt.Errorf("unlocking: %w", err))
	}
	n, err := unix.IoctlGetInt(mfd, unix.TIOCGPTN)
	if err != nil {
		return fail(fmt.Errorf("numbering: %w", err))
	}
	name := "/dev/pts/" + strconv.Itoa(n)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	slave = os.NewFile(uintptr(sfd), name)
	if os.Getuid() == 0 {
		if err := unix.Fchown(sfd, uid, gid); err != nil {
			slave.Close()
			return fail(fmt.Errorf("handing the terminal to the user: %w", err))
		}
	}
	if err := setWinSize(master, size); err != nil {
		slave.Close()
		return fail(err)
	}
	return master, slave, nil
}

func setWinSize(f *os.File, ws WinSize) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: ws.Rows, Col: ws.Cols})
	})
	if err != nil {
		return err
	}
	if ioErr != nil {
		return fmt.Errorf("setting the terminal size: %w", ioErr)
	}
	return nil
}

// watchMemory runs while background processes do: when the sandbox uses
// more than the limit, it kills the one (with its session) that uses the
// most memory, unless the other processes (a run) use more: the run's own
// watch kills it then. Without this the host's limit would end the whole
// sandbox. Like a run's watch, it looks often only near the limit.
func (t *procTable) watchMemory() {
	wait := 5 * time.Millisecond
	for {
		time.Sleep(wait)
		t.mu.Lock()
		limit, running := t.memLimit, false
		for pid := range t.procs {
			running = running || t.sparedLocked(pid)
		}
		if !running {
			t.watching = false
			t.mu.Unlock()
			return
		}
		t.mu.Unlock()
		used, over := memCheck(limit)
		wait = nextMemCheck(used, limit)
		if over {
			t.killLargest()
			wait = 50 * time.Millisecond // the kill takes effect
		}
	}
}

// oomSettle is how long after a memory victim was reaped the watch waits
// before it picks another: the sandbox kernel gives its pages back after
// the process is gone.
const oomSettle = 500 * time.Millisecond

// killLargest kills the running background process whose session holds
// the most resident memory, if it holds more than the rest of the user's
// processes together.
func (t *procTable) killLargest() {
	ps, err := listProcs()
	if err != nil {
		return
	}
	self := os.Getpid()
	t.mu.Lock()
	defer t.mu.Unlock()
	// One victim at a time: until the last one has been reaped and its
	// memory had oomSettle to go back, the sandbox still looks over the
	// limit, and the largest of the processes left (a quiet sleep, when
	// the hog is already a zombie) would be killed for nothing.
	for _, p := range t.procs {
		p.mu.Lock()
		pending := p.oom && (!p.exited || time.Since(p.ended) < oomSettle)
		p.mu.Unlock()
		if pending {
			return
		}
	}
	bySession := map[int]int64{}
	var others int64
	for _, p := range ps {
		if p.pid == self || p.pid == 1 || p.zombie {
			continue
		}
		rss := residentBytes(p.pid)
		if t.sparedLocked(p.sid) {
			bySession[p.sid] += rss
		} else {
			others += rss
		}
	}
	victim, most := 0, int64(0)
	for sid, rss := range bySession {
		if rss > most {
			victim, most = sid, rss
		}
	}
	if victim == 0 || most <= others {
		return
	}
	p := t.procs[victim]
	p.mu.Lock()
	p.oom = true
	p.mu.Unlock()
	_ = syscall.Kill(victim, syscall.SIGKILL)
}

// residentBytes is a process's resident memory (/proc/<pid>/statm).
func residentBytes(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}
