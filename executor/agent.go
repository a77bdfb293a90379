package executor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// agentConn is the host end of a sandbox's agent channel: the sandbox's
// stdin and stdout pipes, which runsc hands to pid 1 (the guest). A run
// through it starts one process inside the sandbox and nothing on the
// host; `runsc exec` stays the fallback for sandboxes without a channel
// (adopted after a restart) and for a channel that broke.
type agentConn struct {
	w  *os.File
	r  *os.File
	br *bufio.Reader

	wmu    sync.Mutex // frame writes (a kill may come during a run, file frames any time)
	mu     sync.Mutex // one run at a time
	seq    uint64     // the last run's number; guarded by mu
	closed chan struct{}
	once   sync.Once

	helloOnce sync.Once
	helloErr  error

	// The reader (readLoop) hands frames to the current run's sink and to
	// the file streams.
	sinkMu sync.Mutex
	sink   *runSink
	failed error // why the reader stopped; guarded by sinkMu

	streams streamTable
	procs   procCalls // background process calls (procs.go)
}

// errAgentChannel marks a failure of the agent channel itself.
var errAgentChannel = errors.New("guest agent channel failed")

// runSink receives the frames of the run in progress.
type runSink struct {
	stdout, stderr io.Writer
	done           chan agentOutcome // gets the result or the channel's failure
	display        func([]byte)      // a kernel cell's rich outputs (kernel.go); nil: dropped
}

// agentPipeBytes is the capacity asked for the channel's pipes.
const agentPipeBytes = 1 << 20

// agentPipes are both ends of a channel before the sandbox starts: the
// sandbox side goes to runsc, the host side stays here.
type agentPipes struct {
	sbxIn, sbxOut   *os.File // given to runsc run as the sandbox's stdin and stdout
	hostIn, hostOut *os.File // the host writes hostIn and reads hostOut
}

func newAgentPipes() (*agentPipes, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating agent pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("creating agent pipe: %w", err)
	}
	// Bigger pipes than the 64 KiB default: a file chunk (1 MiB) then
	// crosses in one write instead of several wake-ups of the other side.
	// A smaller pipe only costs speed.
	// Through SyscallConn: Fd would put the pipe in blocking mode, and the
	// hello's read deadline would no longer work.
	for _, f := range []*os.File{inW, outR} {
		if rc, err := f.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, agentPipeBytes) })
		}
	}
	return &agentPipes{sbxIn: inR, sbxOut: outW, hostIn: inW, hostOut: outR}, nil
}

// closeSandboxSide drops the host's copies of the sandbox's ends once runsc
// has handed them over (or failed).
func (p *agentPipes) closeSandboxSide() {
	p.sbxIn.Close()
	p.sbxOut.Close()
}

func (p *agentPipes) closeAll() {
	p.closeSandboxSide()
	p.hostIn.Close()
	p.hostOut.Close()
}

// conn makes the host end of the channel. The guest's hello is read on
// first use (see ready), not here: a sandbox start does not wait for it.
func (p *agentPipes) conn() *agentConn {
	return &agentConn{w: p.hostIn, r: p.hostOut, br: bufio.NewReaderSize(p.hostOut, 64<<10), closed: make(chan struct{})}
}

// ready waits (once) for the guest's hello line and checks its protocol;
// lines before it are not the agent's and are skipped. Then the reader
// starts: from here on it alone reads the channel.
func (a *agentConn) ready(timeout time.Duration) error {
	a.helloOnce.Do(func() {
		a.helloErr = a.readHello(timeout)
		if a.helloErr == nil {
			go a.readLoop()
		}
	})
	return a.helloErr
}

// readLoop reads the guest's frames for as long as the channel lives and
// hands each to its run or stream; a run's output is written to its sink
// here, in order. When the channel fails, the run in progress and every
// stream get the error.
func (a *agentConn) readLoop() {
	for {
		// Output chunks, results and file data are small; a listing's
		// result is the largest frame the guest sends.
		typ, p, err := guest.ReadFrameInto(a.br, maxGuestFrame, chunkBuffer)
		if err != nil {
			a.fail(err)
			return
		}
		switch typ {
		case guest.FrameStdout, guest.FrameStderr, guest.FrameResult, guest.FrameKernelDisplay, guest.FrameKernelDone:
			a.sinkMu.Lock()
			sink := a.sink
			if typ == guest.FrameResult || typ == guest.FrameKernelDone {
				a.sink = nil
			}
			a.sinkMu.Unlock()
			if sink == nil {
				continue // nothing runs: not believed
			}
			switch typ {
			case guest.FrameStdout:
				_, _ = sink.stdout.Write(p)
			case guest.FrameStderr:
				_, _ = sink.stderr.Write(p)
			case guest.FrameKernelDisplay:
				if sink.display != nil {
					sink.display(p)
				}
			default:
				sink.done <- agentOutcome{raw: p}
			}
		case guest.FrameProcReply, guest.FrameProcExit:
			if err := a.procs.deliver(typ, p); err != nil {
				a.fail(err)
				a.close()
				return
			}
		case guest.FrameFileResult, guest.FrameFileChunk, guest.FrameFileAbort, guest.FrameFileCredit:
			if err := a.streams.deliver(typ, p); err != nil {
				// A guest that breaks the stream protocol is not trusted
				// with the channel any more.
				a.fail(err)
				a.close()
				return
			}
		}
	}
}

// fail records why the channel stopped and tells the run in progress and
// every stream.
func (a *agentConn) fail(err error) {
	a.sinkMu.Lock()
	if a.failed == nil {
		a.failed = fmt.Errorf("%w: %w", errAgentChannel, err)
	}
	sink := a.sink
	a.sink = nil
	ferr := a.failed
	a.sinkMu.Unlock()
	if sink != nil {
		sink.done <- agentOutcome{err: ferr}
	}
	a.streams.failAll(ferr)
	a.procs.failAll(ferr)
	a.close()
}

// setSink makes sink the receiver of the next run's frames; false if the
// channel has already failed.
func (a *agentConn) setSink(sink *runSink) bool {
	a.sinkMu.Lock()
	defer a.sinkMu.Unlock()
	if a.failed != nil {
		return false
	}
	a.sink = sink
	return true
}

func (a *agentConn) readHello(timeout time.Duration) error {
	return a.readHelloWith(timeout, guest.ProtocolVersion)
}

// readHelloWith reads lines until the hello whose text after AgentHello
// is want.
func (a *agentConn) readHelloWith(timeout time.Duration, want string) error {
	_ = a.r.SetReadDeadline(time.Now().Add(timeout))
	defer a.r.SetReadDeadline(time.Time{})
	for skipped := 0; skipped < 64<<10; {
		line, err := a.br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("waiting for the guest agent: %w", err)
		}
		if v, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), guest.AgentHello); ok {
			if v == want {
				return nil
			}
			if want != guest.ProtocolVersion {
				continue // an older hello, before the one asked for
			}
			return fmt.Errorf("guest agent speaks protocol %q, this server %q", v, guest.ProtocolVersion)
		}
		skipped += len(line)
	}
	return errors.New("waiting for the guest agent: no hello")
}

func (a *agentConn) send(typ byte, p []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return guest.WriteFrame(a.w, typ, p)
}

// close ends the channel; a run blocked on it returns an error.
func (a *agentConn) close() {
	a.once.Do(func() {
		close(a.closed)
		a.w.Close()
		a.r.Close()
	})
}

func (a *agentConn) broken() bool {
	select {
	case <-a.closed:
		return true
	default:
		return false
	}
}

// maxGuestFrame bounds a frame from the guest: it sends output in 32 KiB
// chunks, file data in guest.FileChunk ones, and a listing of at most
// MaxListEntries names of at most 255 bytes in one result.
const maxGuestFrame = 16 << 20

// agentOutcome is what the reader saw at the end of a run.
type agentOutcome struct {
	raw []byte
	err error
}

// agentFor returns the sandbox's channel, if it has a working one.
func (e *Executor) agentFor(id string) *agentConn {
	e.agentsMu.Lock()
	defer e.agentsMu.Unlock()
	a := e.agents[id]
	if a == nil || a.broken() {
		return nil
	}
	return a
}

func (e *Executor) setAgent(id string, a *agentConn) {
	e.agentsMu.Lock()
	defer e.agentsMu.Unlock()
	if old := e.agents[id]; old != nil {
		old.close()
	}
	e.agents[id] = a
}

// dropAgent closes and forgets a sandbox's channel.
func (e *Executor) dropAgent(id string) {
	e.agentsMu.Lock()
	a := e.agents[id]
	delete(e.agents, id)
	e.agentsMu.Unlock()
	if a != nil {
		a.close()
	}
}

// destroy removes a sandbox and its channel.
func (e *Executor) destroy(ctx context.Context, id string) error {
	e.dropAgent(id)
	return e.runsc.Destroy(ctx, id)
}

// agentRun runs one guest request through the sandbox's agent. The kill,
// deadline and output-cap rules are those of the exec path.
func (e *Executor) agentRun(ctx context.Context, id string, a *agentConn, greq *guest.Request, stdin []byte, onOutput func(string, []byte)) (Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.ready(10 * time.Second); err != nil {
		e.dropAgent(id)
		e.log.WarnContext(ctx, "guest agent unavailable, using runsc exec", "sandbox", id, "err", err)
		return e.execRun(ctx, id, greq, stdin, onOutput)
	}
	a.seq++
	seq := a.seq
	payload, err := json.Marshal(guest.AgentRequest{Seq: seq, Request: *greq, Stdin: stdin})
	if err != nil {
		return Result{}, fmt.Errorf("encoding guest request: %w", err)
	}
	// A kill names its run: the guest ignores one that arrives after the
	// run has ended, so it cannot reach the next run's processes.
	k := &killer{}
	k.do = func(sandbox.KillReason) {
		if a.send(guest.FrameKill, []byte(strconv.FormatUint(seq, 10))) != nil {
			e.execKill(ctx, id)
		}
	}
	stdout, stderr := e.captures(onOutput, k)

	done := make(chan agentOutcome, 1)
	if !a.setSink(&runSink{stdout: stdout, stderr: stderr, done: done}) {
		e.dropAgent(id)
		return e.execRun(ctx, id, greq, stdin, onOutput)
	}
	start := time.Now()
	if err := a.send(guest.FrameRun, payload); err != nil {
		// The channel is gone (the sandbox may be too): the exec path
		// runs it or finds the sandbox lost.
		e.dropAgent(id)
		e.log.WarnContext(ctx, "guest agent unusable, using runsc exec", "sandbox", id, "err", err)
		return e.execRun(ctx, id, greq, stdin, onOutput)
	}
	out := awaitRun(ctx, done, k, runBudget(greq), func() {
		// The agent does not answer: the exec path's kill, then give up on
		// the channel (which ends the reader and fails the run).
		e.execKill(ctx, id)
		e.dropAgent(id)
	})
	k.seal()
	if out.err != nil {
		e.dropAgent(id)
	}
	return e.finishRun(ctx, id, out.raw, stdout, stderr, start, k.reason(), out.err)
}
