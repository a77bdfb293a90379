package guest

// Kernel cells: in a kernel session every execute is a cell of one
// long-lived IPython kernel. The guest starts the kernel bridge
// (kernel_bridge.py, embedded here and run with `python3 -c`, so nothing
// is written for it) as the sandbox user, feeds it cells and relays what
// they produce as frames: stream text as FrameStdout/FrameStderr, rich
// outputs as FrameKernelDisplay, the end as FrameKernelDone. The guest
// keeps the cell's deadline and the memory limit itself: past the
// deadline it interrupts the cell (the bridge replaces a kernel that
// ignores the interrupt); over the memory limit it kills the kernel,
// which the bridge replaces.

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"golang.org/x/sys/unix"
)

// Kernel frame types, in the range 0x50-0x5f less the bytes taken before
// it ('R' 0x52, 'W' 0x57, 'X' 0x58). Host to guest:
// FrameKernelExec (a KernelRequest), FrameKernelInterrupt (the cell's Seq
// in decimal), FrameKernelRestart (a KernelRequest without code). Guest to
// host: FrameKernelDisplay (a KernelDisplay), FrameKernelDone (a
// KernelResult), which ends a cell or a restart; a cell's stream output
// comes as FrameStdout and FrameStderr.
const (
	FrameKernelExec      byte = 0x50
	FrameKernelInterrupt byte = 0x51
	FrameKernelRestart   byte = 0x53
	FrameKernelDisplay   byte = 0x54
	FrameKernelDone      byte = 0x55
)

//go:embed kernel_bridge.py
var kernelBridge string

// KernelRequest is one cell (or, without code, a restart). The start
// fields (Env, Cwd, UID, GID, MaxProcs) apply when it starts a kernel.
type KernelRequest struct {
	Seq         uint64   `json:"seq"`
	Code        string   `json:"code"`
	TimeoutMS   int64    `json:"timeout_ms,omitempty"`
	MemoryBytes int64    `json:"memory_bytes,omitempty"`
	Env         []string `json:"env,omitempty"`
	Cwd         string   `json:"cwd,omitempty"`
	UID         int      `json:"uid"`
	GID         int      `json:"gid"`
	MaxProcs    uint64   `json:"max_procs,omitempty"`
	// MaxMessageBytes caps one output message of the kernel (a stream
	// chunk, a MIME bundle); the bridge cuts what is bigger.
	MaxMessageBytes int64 `json:"max_message_bytes,omitempty"`
}

// KernelDisplay is one rich output of a cell: its Jupyter message type
// (display_data or execute_result) and its MIME bundle.
type KernelDisplay struct {
	Type string         `json:"type"`
	Data map[string]any `json:"data"`
}

// KernelError is the exception a cell raised.
type KernelError struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	Traceback []string `json:"traceback"`
}

// KernelResult ends a cell or a restart.
type KernelResult struct {
	Status     sandbox.Status `json:"status"` // ok, error, timeout, oom, output_limit, start_error
	Error      *KernelError   `json:"error,omitempty"`
	DurationMS int64          `json:"duration_ms"`
	// Started: this call started a kernel (none ran, or the last one was
	// lost with its bridge); Restarted: the kernel was found dead and
	// replaced, before or during the cell. Either way earlier variables
	// are gone if there were any.
	Started   bool `json:"started,omitempty"`
	Restarted bool `json:"restarted,omitempty"`
	// Died: the kernel died during the cell (Restarted is set too).
	Died bool `json:"died,omitempty"`
	// Truncated: the bridge cut an output message to its cap.
	Truncated bool   `json:"truncated,omitempty"`
	Message   string `json:"message,omitempty"` // why a start failed
}

// bridgeMsg is one line of the bridge's output.
type bridgeMsg struct {
	T         string         `json:"t"`
	PID       int            `json:"pid"`
	Name      string         `json:"name"`
	Text      string         `json:"text"`
	Type      string         `json:"type"`
	Data      map[string]any `json:"data"`
	Value     string         `json:"value"`
	Traceback []string       `json:"traceback"`
	Restarted bool           `json:"restarted"`
	Died      bool           `json:"died"`
	Truncated bool           `json:"truncated"`
	// OutputLimit: one stream message was over the cap, and the bridge
	// interrupted the cell.
	OutputLimit bool `json:"output_limit"`
}

// bridge is a running kernel bridge.
type bridge struct {
	pid    int
	stdin  io.WriteCloser
	msgs   chan bridgeMsg // closed when its stdout ends
	gone   chan struct{}  // closed when the bridge process has ended
	kernel int            // the kernel's pid, from its latest ready line
	stderr *limitedBuffer
}

// kernelState is the agent's kernel: at most one bridge, one cell at a
// time. The zero value has no kernel.
type kernelState struct {
	mu sync.Mutex // held for a whole cell or restart
	br *bridge

	imu       sync.Mutex
	current   uint64        // Seq of the cell running
	interrupt chan struct{} // closed by the host's FrameKernelInterrupt
}

// defaultKernelMessage caps a bridge message when the host names no cap.
const defaultKernelMessage = 1 << 20

// kernelStartTimeout bounds a kernel's start (an IPython start in gVisor
// takes seconds on a loaded host).
const kernelStartTimeout = 120 * time.Second

// kernelFrame handles one kernel frame from the host.
func (a *agent) kernelFrame(typ byte, p []byte) {
	k := &a.kern
	switch typ {
	case FrameKernelInterrupt:
		seq, err := strconv.ParseUint(string(p), 10, 64)
		k.imu.Lock()
		if err == nil && seq == k.current && k.interrupt != nil {
			close(k.interrupt)
			k.interrupt = nil
		}
		k.imu.Unlock()
	case FrameKernelExec, FrameKernelRestart:
		var req KernelRequest
		if err := json.Unmarshal(p, &req); err != nil {
			a.kernelDone(KernelResult{Status: sandbox.StatusStartError, Message: "decoding kernel request: " + err.Error()})
			return
		}
		if !k.mu.TryLock() {
			a.kernelDone(KernelResult{Status: sandbox.StatusStartError, Message: "a cell is in progress"})
			return
		}
		intr := make(chan struct{})
		k.imu.Lock()
		k.current, k.interrupt = req.Seq, intr
		k.imu.Unlock()
		go func() {
			var res KernelResult
			if typ == FrameKernelRestart {
				res = a.kernelRestart(&req)
			} else {
				res = a.kernelCell(&req, intr)
			}
			k.imu.Lock()
			k.current, k.interrupt = 0, nil
			k.imu.Unlock()
			// Free before the reply goes out: the host sends the next
			// cell as soon as it has this one's.
			k.mu.Unlock()
			a.kernelDone(res)
		}()
	}
}

func (a *agent) kernelDone(res KernelResult) {
	b, _ := json.Marshal(res)
	a.send(FrameKernelDone, b)
}

// kernelRestart ends the kernel (and its bridge) and starts a fresh one.
func (a *agent) kernelRestart(req *KernelRequest) KernelResult {
	start := time.Now()
	a.kern.stop()
	if err := a.kernelStart(req); err != nil {
		return KernelResult{Status: sandbox.StatusStartError, Message: err.Error()}
	}
	return KernelResult{Status: sandbox.StatusOK, Started: true, DurationMS: CeilMS(time.Since(start))}
}

// stop kills the bridge and its kernel (which runs in a session of its
// own) and waits for the bridge.
func (k *kernelState) stop() {
	br := k.br
	k.br = nil
	if br == nil {
		return
	}
	if br.kernel > 0 {
		_ = syscall.Kill(-br.kernel, syscall.SIGKILL)
		_ = syscall.Kill(br.kernel, syscall.SIGKILL)
	}
	_ = syscall.Kill(-br.pid, syscall.SIGKILL)
	br.stdin.Close()
	select {
	case <-br.gone:
	case <-time.After(5 * time.Second):
	}
	for range br.msgs { // drained: the reader ends
	}
}

// alive reports whether the bridge is still there (its output open).
func (br *bridge) alive() bool {
	select {
	case <-br.gone:
		return false
	default:
		return true
	}
}

// kernelStart starts the bridge as the user and waits for its kernel.
func (a *agent) kernelStart(req *KernelRequest) error {
	limit := req.MaxMessageBytes
	if limit <= 0 {
		limit = defaultKernelMessage
	}
	cmd := exec.Command(lookPath("python3", req.Env), "-u", "-c", kernelBridge, strconv.FormatInt(limit, 10))
	cmd.Env = req.Env
	cmd.Dir = req.Cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Getuid() == 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(req.UID), Gid: uint32(req.GID), Groups: []uint32{}}
	}
	if req.MaxProcs > 0 {
		lim := &unix.Rlimit{Cur: req.MaxProcs, Max: req.MaxProcs}
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, lim); err != nil {
			return fmt.Errorf("limiting processes: %w", err)
		}
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	// A pipe of our own for stderr: with a plain Writer, os/exec would
	// close its read end only in Wait, which the reaper makes us skip.
	errR, errW, err := os.Pipe()
	if err != nil {
		return err
	}
	errBuf := &limitedBuffer{max: 8 << 10}
	cmd.Stderr = errW
	exited, err := a.reaper.start(cmd)
	errW.Close()
	if err != nil {
		errR.Close()
		stdin.Close()
		stdout.Close()
		return fmt.Errorf("starting the kernel bridge: %w", err)
	}
	go func() {
		defer errR.Close()
		_, _ = io.Copy(errBuf, errR)
	}()
	br := &bridge{pid: cmd.Process.Pid, stdin: stdin, msgs: make(chan bridgeMsg, 64), gone: make(chan struct{}), stderr: errBuf}
	go func() {
		<-exited
		close(br.gone)
	}()
	go func() {
		readBridge(stdout, br.msgs, int(limit)*2+64<<10)
		stdout.Close() // os/exec closes it only in Wait
	}()
	a.kern.br = br
	t := time.NewTimer(kernelStartTimeout)
	defer t.Stop()
	for {
		select {
		case m, ok := <-br.msgs:
			if !ok {
				a.kern.stop()
				return fmt.Errorf("the kernel did not start: %s", lastLine(errBuf.bytes()))
			}
			if m.T == "ready" {
				br.kernel = userPID(m.PID, req.UID)
				return nil
			}
		case <-t.C:
			a.kern.stop()
			return errors.New("the kernel did not start in time")
		}
	}
}

// userPID is pid when it names a process of uid other than pid 1, else
// 0. The bridge is the user's (its code can write its output), and the
// guest signals the pid it names as root: a pid of root's (pid 1, a
// `runsc exec` of the host's) must never be one.
func userPID(pid, uid int) int {
	return userPIDIn("/proc", pid, uid)
}

func userPIDIn(proc string, pid, uid int) int {
	if pid <= 1 {
		return 0
	}
	fi, err := os.Stat(proc + "/" + strconv.Itoa(pid))
	if err != nil {
		return 0
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != uid {
		return 0
	}
	return pid
}

// lastLine is the last non-empty line of b (a Python traceback's last
// line says what failed).
func lastLine(b []byte) string {
	s := string(b)
	for len(s) > 0 {
		i := len(s) - 1
		for i >= 0 && s[i] != '\n' {
			i--
		}
		if line := s[i+1:]; len(line) > 0 {
			return line
		}
		s = s[:max(i, 0)]
	}
	return "no output"
}

// readBridge decodes the bridge's lines onto msgs and closes it at EOF.
// A line over max (the bridge caps its messages, so only a broken bridge
// writes one) is skipped.
func readBridge(r io.Reader, msgs chan<- bridgeMsg, max int) {
	defer close(msgs)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br, max)
		if len(line) > 0 {
			var m bridgeMsg
			if json.Unmarshal(line, &m) == nil {
				msgs <- m
			}
		}
		if err != nil {
			_, _ = io.Copy(io.Discard, r)
			return
		}
	}
}

// readLine reads one line of at most max bytes; a longer one is read to
// its end and returned empty.
func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	over := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !over {
			if len(line)+len(chunk) > max {
				over, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if over {
			return nil, err
		}
		return line, err
	}
}

// kernelCell runs one cell, starting a kernel first if none runs.
func (a *agent) kernelCell(req *KernelRequest, intr <-chan struct{}) KernelResult {
	k := &a.kern
	start := time.Now()
	var res KernelResult
	if k.br == nil || !k.br.alive() {
		k.stop()
		if err := a.kernelStart(req); err != nil {
			return KernelResult{Status: sandbox.StatusStartError, Message: err.Error()}
		}
		res.Started = true
	}
	br := k.br
	cell, _ := json.Marshal(map[string]string{"op": "execute", "code": req.Code})
	if _, err := br.stdin.Write(append(cell, '\n')); err != nil {
		k.stop()
		return KernelResult{Status: sandbox.StatusStartError, Message: "sending the cell: " + err.Error()}
	}
	deadline := time.NewTimer(cellTimeout(req.TimeoutMS))
	defer deadline.Stop()
	tick := time.NewTimer(5 * time.Millisecond)
	defer tick.Stop()
	var why sandbox.KillReason
	interrupt := func(reason sandbox.KillReason) {
		if why == sandbox.KillNone {
			why = reason
			_, _ = br.stdin.Write([]byte("{\"op\":\"interrupt\"}\n"))
		}
	}
	for {
		select {
		case m, ok := <-br.msgs:
			if !ok {
				// The bridge itself is gone, and its kernel with it.
				k.stop()
				res.Restarted, res.Died = true, true
				res.Status = deadStatus(why)
				res.Error = deadKernelError()
				res.DurationMS = CeilMS(time.Since(start))
				return res
			}
			switch m.T {
			case "stream":
				typ := FrameStdout
				if m.Name == "stderr" {
					typ = FrameStderr
				}
				a.send(typ, []byte(m.Text))
			case "display":
				b, _ := json.Marshal(KernelDisplay{Type: m.Type, Data: m.Data})
				a.send(FrameKernelDisplay, b)
			case "error":
				res.Error = &KernelError{Name: m.Name, Value: m.Value, Traceback: m.Traceback}
			case "ready":
				br.kernel = userPID(m.PID, req.UID)
			case "done":
				res.DurationMS = CeilMS(time.Since(start))
				res.Truncated = m.Truncated
				res.Restarted = res.Restarted || m.Restarted || m.Died
				res.Died = m.Died
				switch {
				case m.Died:
					res.Status = deadStatus(why)
					if res.Error == nil {
						res.Error = deadKernelError()
					}
				case why != sandbox.KillNone && why.Status() != "":
					res.Status = why.Status()
				case m.OutputLimit:
					res.Status = sandbox.StatusOutputLimit
				case res.Error != nil:
					res.Status = sandbox.StatusError
				default:
					res.Status = sandbox.StatusOK
				}
				return res
			}
		case <-intr:
			intr = nil
			interrupt(sandbox.KillCancelled)
		case <-deadline.C:
			interrupt(sandbox.KillTimeout)
		case <-tick.C:
			if req.MemoryBytes <= 0 {
				tick.Reset(time.Second)
				continue
			}
			used, over := memCheck(req.MemoryBytes)
			if over && br.kernel > 0 {
				// Over the limit: the kernel goes (the bridge sees it die
				// and starts a fresh one), never the whole sandbox.
				if why == sandbox.KillNone || why == sandbox.KillTimeout {
					why = sandbox.KillOOM
				}
				_ = syscall.Kill(br.kernel, syscall.SIGKILL)
				tick.Reset(100 * time.Millisecond)
				continue
			}
			tick.Reset(nextMemCheck(used, req.MemoryBytes))
		}
	}
}

// cellTimeout is a cell's deadline: ms, or DefaultTimeoutMS for none.
func cellTimeout(ms int64) time.Duration {
	if ms <= 0 {
		ms = DefaultTimeoutMS
	}
	return time.Duration(ms) * time.Millisecond
}

// deadStatus is the status of a cell during which the kernel was lost:
// oom when the guest killed it for memory, timeout when it ignored the
// interrupt at its deadline (the bridge replaced it), else error.
func deadStatus(why sandbox.KillReason) sandbox.Status {
	switch why {
	case sandbox.KillOOM:
		return sandbox.StatusOOM
	case sandbox.KillTimeout:
		return sandbox.StatusTimeout
	}
	return sandbox.StatusError
}

func deadKernelError() *KernelError {
	return &KernelError{Name: "KernelDied", Value: "the kernel was lost while running this cell and was restarted: earlier variables are gone",
		Traceback: []string{}}
}
