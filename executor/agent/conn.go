// Package agent is the host end of the sandboxes' guest agent channels:
// the channel itself (Conn: runs, kernel cells, file streams and process
// calls framed over the sandbox's stdin and stdout), the channels of a
// runsc root by sandbox (Transport), and the `runsc exec` fallback for a
// sandbox without a working channel. It knows no session: the session
// service classifies what a run without a result means (NoResultError).
package agent

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxapi/sandboxapi/executor/guest"
)

// Conn is the host end of a sandbox's agent channel: the sandbox's
// stdin and stdout pipes, which runsc hands to pid 1 (the guest). A run
// through it starts one process inside the sandbox and nothing on the
// host; `runsc exec` stays the fallback for sandboxes without a channel
// (adopted after a restart) and for a channel that broke. Make one with
// Pipes.Conn; it is safe for concurrent use.
type Conn struct {
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

// ErrChannel marks a failure of the agent channel itself.
var ErrChannel = errors.New("guest agent channel failed")

// runSink receives the frames of the run in progress.
type runSink struct {
	stdout, stderr io.Writer
	done           chan outcome // gets the result or the channel's failure
	display        func([]byte) // a kernel cell's rich outputs (kernel.go); nil: dropped
}

// pipeBytes is the capacity asked for the channel's pipes.
const pipeBytes = 1 << 20

// Pipes are both ends of a channel before the sandbox starts: the
// sandbox side goes to runsc, the host side stays here.
type Pipes struct {
	SandboxIn, SandboxOut *os.File // given to runsc run as the sandbox's stdin and stdout
	hostIn, hostOut       *os.File // the host writes hostIn and reads hostOut
}

// NewPipes makes the pipes of a new channel.
func NewPipes() (*Pipes, error) {
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
			_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeBytes) })
		}
	}
	return &Pipes{SandboxIn: inR, SandboxOut: outW, hostIn: inW, hostOut: outR}, nil
}

// CloseSandboxSide drops the host's copies of the sandbox's ends once runsc
// has handed them over (or failed).
func (p *Pipes) CloseSandboxSide() {
	p.SandboxIn.Close()
	p.SandboxOut.Close()
}

// CloseAll closes both ends.
func (p *Pipes) CloseAll() {
	p.CloseSandboxSide()
	p.hostIn.Close()
	p.hostOut.Close()
}

// Conn makes the host end of the channel. The guest's hello is read on
// first use (see Ready), not here: a sandbox start does not wait for it.
func (p *Pipes) Conn() *Conn {
	return &Conn{w: p.hostIn, r: p.hostOut, br: bufio.NewReaderSize(p.hostOut, 64<<10), closed: make(chan struct{})}
}

// Ready waits (once) for the guest's hello line and checks its protocol;
// lines before it are not the agent's and are skipped. Then the reader
// starts: from here on it alone reads the channel.
func (a *Conn) Ready(timeout time.Duration) error {
	a.helloOnce.Do(func() {
		a.helloErr = a.readHello(timeout)
		if a.helloErr == nil {
			go a.readLoop()
		}
	})
	return a.helloErr
}

// Greet is Ready for a channel handed to a restored sandbox: its guest
// said hello long ago, so it is asked again (FrameHello) and its answer
// must carry the nonce, which no line written before the restore can.
func (a *Conn) Greet(timeout time.Duration) error {
	a.helloOnce.Do(func() {
		var n [12]byte
		_, _ = rand.Read(n[:])
		nonce := hex.EncodeToString(n[:])
		if err := a.Send(guest.FrameHello, []byte(nonce)); err != nil {
			a.helloErr = fmt.Errorf("greeting the restored guest: %w", err)
			return
		}
		a.helloErr = a.readHelloWith(timeout, guest.ProtocolVersion+" "+nonce)
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
func (a *Conn) readLoop() {
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
				sink.done <- outcome{raw: p}
			}
		case guest.FrameProcReply, guest.FrameProcExit:
			if err := a.procs.deliver(typ, p); err != nil {
				a.fail(err)
				a.Close()
				return
			}
		case guest.FrameFileResult, guest.FrameFileChunk, guest.FrameFileAbort, guest.FrameFileCredit:
			if err := a.streams.deliver(typ, p); err != nil {
				// A guest that breaks the stream protocol is not trusted
				// with the channel any more.
				a.fail(err)
				a.Close()
				return
			}
		}
	}
}

// fail records why the channel stopped and tells the run in progress and
// every stream.
func (a *Conn) fail(err error) {
	a.sinkMu.Lock()
	if a.failed == nil {
		a.failed = fmt.Errorf("%w: %w", ErrChannel, err)
	}
	sink := a.sink
	a.sink = nil
	ferr := a.failed
	a.sinkMu.Unlock()
	if sink != nil {
		sink.done <- outcome{err: ferr}
	}
	a.streams.failAll(ferr)
	a.procs.failAll(ferr)
	a.Close()
}

// setSink makes sink the receiver of the next run's frames; false if the
// channel has already failed.
func (a *Conn) setSink(sink *runSink) bool {
	a.sinkMu.Lock()
	defer a.sinkMu.Unlock()
	if a.failed != nil {
		return false
	}
	a.sink = sink
	return true
}

func (a *Conn) readHello(timeout time.Duration) error {
	return a.readHelloWith(timeout, guest.ProtocolVersion)
}

// readHelloWith reads lines until the hello whose text after AgentHello
// is want.
func (a *Conn) readHelloWith(timeout time.Duration, want string) error {
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

// Send writes one frame to the guest.
func (a *Conn) Send(typ byte, p []byte) error {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	return guest.WriteFrame(a.w, typ, p)
}

// Close ends the channel; a run blocked on it returns an error.
func (a *Conn) Close() {
	a.once.Do(func() {
		close(a.closed)
		a.w.Close()
		a.r.Close()
	})
}

// Broken reports whether the channel has ended.
func (a *Conn) Broken() bool {
	select {
	case <-a.closed:
		return true
	default:
		return false
	}
}

// maxGuestFrame bounds a frame from the guest: it sends output in 32 KiB
// chunks, file data in guest.FileChunk ones, and a listing of at most
// the executor's MaxListEntries names of at most 255 bytes in one result.
const maxGuestFrame = 16 << 20

// outcome is what the reader saw at the end of a run.
type outcome struct {
	raw []byte
	err error
}
