package sandbox

import (
	"errors"
	"time"
)

// Errors of background processes (POST /v1/sessions/{id}/processes and
// the routes under it).
var (
	ErrProcessNotFound = errors.New("process not found")
	// ErrProcessLimit: the session runs as many background processes as
	// it may; one must end before another starts.
	ErrProcessLimit      = errors.New("too many background processes")
	ErrProcessNotRunning = errors.New("the process has ended")
	// ErrProcessNoStdin: the process was started without stdin, or its
	// stdin was closed.
	ErrProcessNoStdin = errors.New("the process's stdin is not open")
	// ErrProcessStdinFull: the process has not read what was written
	// before; nothing of this write was taken.
	ErrProcessStdinFull = errors.New("the process's stdin buffer is full")
	ErrProcessNotPTY    = errors.New("the process has no terminal")
	// ErrProcessStart: the program could not be started (not found, not
	// executable, a bad working folder).
	ErrProcessStart = errors.New("the process could not be started")
	// ErrNoProcessChannel: the session's sandbox has no agent channel
	// (this server adopted it after a restart), and processes are served
	// only through it. Hibernating the session and running a call starts
	// a sandbox with one.
	ErrNoProcessChannel = errors.New("the session's sandbox has no process channel (adopted after a server restart); hibernate the session and call it again")
)

// Process states.
const (
	ProcessRunning = "running"
	ProcessExited  = "exited"
)

// Output streams of a process: stdout and stderr, or pty for a process
// with a terminal (both go to it).
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamPTY    = "pty"
)

// Limits of a process request.
const (
	MaxProcessArgs   = 1024
	MaxProcessTagLen = 64
	MaxTermSize      = 1000 // cols and rows
)

// TermSize is a terminal's size in characters.
type TermSize struct {
	Cols, Rows int
}

// ProcessSpec is a background process to start in a session.
type ProcessSpec struct {
	Cmd  string
	Args []string
	Env  map[string]string
	// Cwd is the working folder (absolute); empty is the home.
	Cwd   string
	Stdin bool      // a stdin the caller writes; otherwise /dev/null
	PTY   *TermSize // run it on a terminal of this size
	Tag   string
	// Timeout kills the process once it has run that long; 0 is the
	// session's idle TTL. It may not exceed the longest idle TTL.
	Timeout time.Duration
	// MemoryBytes is the memory the sandbox may use while it runs (the
	// plan's; 0 is the executor's limit, and nothing goes above it).
	MemoryBytes int64
}

// Process is one background process of a session.
type Process struct {
	PID       int
	Tag       string
	Cmd       string
	Args      []string
	PTY       bool
	Stdin     bool // open for writing
	State     string
	ExitCode  *int // once exited
	Signal    string
	TimedOut  bool
	OOMKilled bool // killed because the sandbox went over its memory limit
	StartedAt time.Time
	EndedAt   time.Time
	// OutputBytes is the offset after its last output byte.
	OutputBytes int64
}

// ProcessEvent is one event of a process's output stream: a chunk of
// output, a gap (Dropped bytes no longer kept), or the end (Exit).
type ProcessEvent struct {
	Stream  string // with Data
	Offset  int64  // of Data, or where the gap ends
	Data    []byte
	Dropped int64
	Exit    *Process
}

// MaxStdinWrite bounds one write to a process's stdin, and the stdin a
// process may have queued and not yet read.
const MaxStdinWrite = 1 << 20
