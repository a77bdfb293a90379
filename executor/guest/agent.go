package guest

// The agent: pid 1 of a sandbox serves run requests itself, so an execute
// costs one process start inside the sandbox instead of a `runsc exec`
// (a host process, a gofer round trip and a second process start).
//
// The channel is the sandbox's own stdio, which runsc hands to pid 1: the
// host writes frames to its stdin and reads frames from its stdout. No
// process in the sandbox but pid 1 holds either end: children get fresh
// pipes, and /proc/1/fd is closed to the unprivileged user. When the host
// goes away (EOF), pid 1 goes on as a plain init that reads its stdin
// again now and then: a restored checkpoint hands it a new channel, on
// which the host asks for a hello (FrameHello). Until then the host falls
// back to `runsc exec` for sandboxes it did not start itself.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"golang.org/x/sys/unix"
)

// Frame types. Host to guest: FrameRun (an AgentRequest), FrameKill.
// Guest to host: FrameStdout, FrameStderr, FrameResult (a Result). File
// streams have frames of their own (filestream.go).
const (
	FrameRun    byte = 'R'
	FrameKill   byte = 'K'
	FrameStdout byte = 'O'
	FrameStderr byte = 'E'
	FrameResult byte = 'X'
	// FrameHello (host to guest; its payload a nonce) asks for the hello
	// line again, with the nonce after the version: the host's first
	// request on a channel it gave a restored sandbox (checkpoint.go),
	// whose pid 1 wrote its first hello on a channel long gone.
	FrameHello byte = 0x60
)

// AgentHello is the line pid 1 writes on its stdout before any frame, with
// ProtocolVersion after it; whatever precedes it is not the agent's.
const AgentHello = "SANDBOXAPI-AGENT "

// MaxAgentFrame bounds one agent frame (a run request carries code, files
// and stdin, base64 in JSON).
const MaxAgentFrame = MaxHeader + MaxHeader/2

// AgentRequest is one run: the request and the program's whole stdin.
type AgentRequest struct {
	// Seq numbers the run; a FrameKill carries the number of the run it
	// is for and is ignored when another run (or none) is current.
	Seq     uint64  `json:"seq"` // from 1
	Request Request `json:"request"`
	Stdin   []byte  `json:"stdin,omitempty"`
}

// WriteFrame writes one frame: a type byte, a big-endian length, the payload.
func WriteFrame(w io.Writer, typ byte, payload []byte) error {
	var h [5]byte
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:], uint32(len(payload)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// ReadFrame reads one frame of at most max payload bytes.
func ReadFrame(r io.Reader, max int) (byte, []byte, error) {
	return readFrameInto(r, max, nil)
}

// ReadFrameInto is ReadFrame with the payload's buffer from alloc (when
// it returns one large enough) instead of a fresh one.
func ReadFrameInto(r io.Reader, max int, alloc func(typ byte, n int) []byte) (byte, []byte, error) {
	return readFrameInto(r, max, alloc)
}

func readFrameInto(r io.Reader, max int, alloc func(typ byte, n int) []byte) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if int64(n) > int64(max) {
		return 0, nil, fmt.Errorf("frame of %d bytes over the %d limit", n, max)
	}
	var p []byte
	if alloc != nil {
		if b := alloc(h[0], int(n)); cap(b) >= int(n) {
			p = b[:n]
		}
	}
	if p == nil {
		p = make([]byte, n)
	}
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, fmt.Errorf("reading frame: %w", err)
	}
	return h[0], p, nil
}

// helloNonce is the nonce of a FrameHello as the hello line carries it:
// at most 64 bytes of letters and digits, anything else dropped.
func helloNonce(p []byte) string {
	var b []byte
	for _, c := range p {
		if len(b) == 64 {
			break
		}
		if c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			b = append(b, c)
		}
	}
	return string(b)
}

// reaper is pid 1's only wait loop: it reaps every child and hands the
// status of the ones a run started to that run, so orphans are reaped
// without a run's own wait ever losing its child.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan syscall.WaitStatus
}

func newReaper() *reaper {
	r := &reaper{waiting: map[int]chan syscall.WaitStatus{}}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, syscall.SIGCHLD)
	go func() {
		for {
			r.reapAll()
			select {
			case <-ch:
			case <-time.After(time.Second): // a missed signal costs a second at most
			}
		}
	}()
	return r
}

func (r *reaper) reapAll() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return
		}
		r.mu.Lock()
		if ch, ok := r.waiting[pid]; ok {
			ch <- ws
			delete(r.waiting, pid)
		}
		r.mu.Unlock()
	}
}

// start starts cmd and returns a channel that gets its exit status. The
// lock spans the start, so a child that exits at once is still claimed.
func (r *reaper) start(cmd *exec.Cmd) (<-chan syscall.WaitStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	r.waiting[cmd.Process.Pid] = ch
	return ch, nil
}

// agentInit is pid 1 with the agent on its stdio. It never returns: if pid
// 1 ended, the sandbox would end with it.
func agentInit() int {
	// Caught, not ignored: an ignored signal stays ignored across exec, and
	// the user's programs must get the default dispositions.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	go func() {
		for range sigs {
		}
	}()
	// Not dumpable: /proc/1 stays root's even while a file stream's thread
	// acts as the user (filestream.go), so the user cannot reach pid 1's
	// descriptors (the host channel) through /proc/1/task/*/fd.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// Before anything is served: what an upload cut short by a kill of
	// the sandbox (or of the server) left in the home goes, whichever way
	// the home came here (resume, restart, adoption, a fork's copy).
	h := newHost()
	_, _ = h.sweepHome(time.Now().Add(sweepBudget))
	r := newReaper()
	a := &agent{out: bufio.NewWriterSize(os.Stdout, 64<<10), reaper: r, host: h}
	a.procs = newProcTable(r.start, a.procExited, spareFile)
	// A run's kill spares the background processes (procs.go).
	h.kill = func(pid int) {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = a.procs.killRun()
	}
	if _, err := fmt.Fprintf(os.Stdout, "%s%s\n", AgentHello, ProtocolVersion); err != nil {
		select {} // no host: a plain init (the reaper goes on)
	}
	// When the host goes (EOF: the server was stopped or killed), stdin is
	// read again and again: a sandbox checkpointed now and restored later
	// reads the restored sandbox's new stdin here, and the new host asks
	// for a hello (FrameHello). Reading (not writing a hello) is what
	// waits: a checkpoint that catches pid 1 inside a read restarts that
	// read on the new channel too, so every path meets there.
	for {
		a.serve(os.Stdin)
		time.Sleep(reconnectPoll)
		a.wmu.Lock()
		a.out = bufio.NewWriterSize(os.Stdout, 64<<10) // a failed bufio.Writer stays failed
		a.wmu.Unlock()
	}
}

// reconnectPoll is how often pid 1 reads a dead channel's stdin again
// (each read ends at once with EOF until a restore gives it a new one).
const reconnectPoll = 50 * time.Millisecond

// sweepBudget bounds the sweep of stale staging files at the guest's
// start, well inside the host's wait for the hello (10 s).
const sweepBudget = 3 * time.Second

type agent struct {
	host   *host
	wmu    sync.Mutex
	out    *bufio.Writer
	reaper *reaper

	files fileStreams
	procs *procTable  // background processes (procs.go)
	kern  kernelState // kernel.go

	mu      sync.Mutex
	running bool
	current uint64         // Seq of the running request
	kills   sync.WaitGroup // kills of the current run in flight
}

// send writes one frame and flushes; errors mean the host is gone, and the
// run goes on to its end regardless.
func (a *agent) send(typ byte, p []byte) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if WriteFrame(a.out, typ, p) == nil {
		_ = a.out.Flush()
	}
}

// serve reads the host's frames until the channel fails. Then the host
// is gone (the server was killed or restarted): streams it had open will
// never be fed or read again, and stop, an upload's staging file removed.
func (a *agent) serve(in io.Reader) {
	defer a.files.abortAll()
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		typ, p, err := readFrameInto(br, MaxAgentFrame, uploadBuffer)
		if err != nil {
			return
		}
		switch typ {
		case FrameRun:
			var ar AgentRequest
			if err := json.Unmarshal(p, &ar); err != nil {
				a.result(Result{Status: sandbox.StatusStartError, Error: "decoding request: " + err.Error()})
				continue
			}
			a.mu.Lock()
			busy := a.running
			if !busy {
				a.running, a.current = true, ar.Seq
			}
			a.mu.Unlock()
			if busy {
				a.result(Result{Status: sandbox.StatusStartError, Error: "a run is in progress"})
				continue
			}
			go a.run(&ar)
		case FrameProcCall:
			a.procCall(p)
		case FrameFileOpen:
			a.fileOpen(p)
		case FrameFileData:
			a.fileData(p)
		case FrameFileCancel:
			a.fileCancel(p)
		case FrameFileWindow:
			a.fileWindow(p)
		case FrameKernelExec, FrameKernelInterrupt, FrameKernelRestart:
			a.kernelFrame(typ, p)
		case FrameHello:
			a.wmu.Lock()
			a.out = bufio.NewWriterSize(os.Stdout, 64<<10)
			if _, err := fmt.Fprintf(a.out, "%s%s %s\n", AgentHello, ProtocolVersion, helloNonce(p)); err == nil {
				_ = a.out.Flush()
			}
			a.wmu.Unlock()
		case FrameKill:
			seq, err := strconv.ParseUint(string(p), 10, 64)
			a.mu.Lock()
			if err == nil && a.running && seq == a.current {
				// The run waits for this kill before it reports.
				a.kills.Add(1)
				go func() {
					defer a.kills.Done()
					_ = a.killRun()
				}()
			}
			a.mu.Unlock()
		}
	}
}

func (a *agent) result(res Result) {
	b, _ := json.Marshal(res)
	a.send(FrameResult, b)
}

// run serves one request; the agent is free again before the result goes
// out, so the host may send the next request as soon as it has it.
func (a *agent) run(ar *AgentRequest) {
	res := a.runSafely(ar)
	// No more kills for this run (its processes are gone); one in flight
	// ends before the result goes out.
	a.mu.Lock()
	a.current = 0
	a.mu.Unlock()
	a.kills.Wait()
	a.mu.Lock()
	a.running = false
	a.mu.Unlock()
	a.result(res)
}

func (a *agent) runSafely(ar *AgentRequest) (res Result) {
	defer func() {
		if v := recover(); v != nil {
			res = Result{Status: sandbox.StatusStartError, Error: fmt.Sprint("agent: ", v)}
		}
	}()
	return a.host.serveRequest(&ar.Request, a.spawn, bytes.NewReader(ar.Stdin), a.stream(FrameStdout), a.stream(FrameStderr))
}

// stream is an output that becomes frames.
type stream func([]byte) (int, error)

func (s stream) Write(p []byte) (int, error) { return s(p) }

func (a *agent) stream(typ byte) io.Writer {
	return stream(func(p []byte) (int, error) {
		a.send(typ, p)
		return len(p), nil
	})
}

// spawn runs cmd with stdin bytes and copies its output to stdout and
// stderr through pipes of its own, and returns once the program and every
// holder of its output pipes have ended.
func (a *agent) spawn(cmd *exec.Cmd, stdin io.Reader, stdout, stderr io.Writer, onStart func(pid int)) (syscall.WaitStatus, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return 0, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return 0, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		outR.Close()
		outW.Close()
		return 0, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	exited, err := a.reaper.start(cmd)
	inR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		errR.Close()
		return 0, err
	}
	onStart(cmd.Process.Pid)
	go func() {
		_, _ = io.Copy(inW, stdin)
		inW.Close()
	}()
	var copies sync.WaitGroup
	copies.Add(2)
	for _, c := range []struct {
		r *os.File
		w io.Writer
	}{{outR, stdout}, {errR, stderr}} {
		go func() {
			defer copies.Done()
			defer c.r.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := c.r.Read(buf)
				if n > 0 {
					_, _ = c.w.Write(buf[:n])
				}
				if err != nil {
					return
				}
			}
		}()
	}
	ws := <-exited
	// Whatever the program left behind dies with it, which also closes the
	// last writers of its output pipes.
	_ = a.killRun()
	copies.Wait()
	return ws, nil
}

// killRun ends a run's processes: every process but pid 1 and the
// background processes (an agent in a test has no table: all but itself).
func (a *agent) killRun() error {
	if a.procs == nil {
		return killAll()
	}
	return a.procs.killRun()
}

// procCall serves one call on the process table in a goroutine of its
// own: a read may wait for output, and nothing may hold up the channel.
func (a *agent) procCall(p []byte) {
	var c ProcCall
	if err := json.Unmarshal(p, &c); err != nil {
		b, _ := json.Marshal(ProcReply{ID: c.ID, Code: ProcCodeInvalid, Error: "decoding process call: " + err.Error()})
		a.send(FrameProcReply, b)
		return
	}
	go func() {
		var r ProcReply
		func() {
			defer func() {
				if v := recover(); v != nil {
					r = ProcReply{ID: c.ID, Error: fmt.Sprint("agent: ", v)}
				}
			}()
			if a.procs == nil {
				r = ProcReply{ID: c.ID, Error: "no process table"}
				return
			}
			r = a.procs.serveCall(&c)
		}()
		b, _ := json.Marshal(r)
		a.send(FrameProcReply, b)
	}()
}

// procExited tells the host that a background process ended.
func (a *agent) procExited(i ProcInfo) {
	b, _ := json.Marshal(i)
	a.send(FrameProcExit, b)
}
