package wire

import (
	"strconv"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// StartProcessRequest is the body of POST /v1/sessions/{id}/processes: a
// program (found on the session's PATH) and its arguments, not a shell
// line; run "bash" with "-c" for one.
type StartProcessRequest struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	// Cwd is an absolute folder; empty is the home.
	Cwd string `json:"cwd,omitempty"`
	// Stdin opens a stdin the caller writes (POST .../stdin); without it
	// the process reads an empty one. A PTY process always has one.
	Stdin bool      `json:"stdin,omitempty"`
	PTY   *TermSize `json:"pty,omitempty"`
	Tag   string    `json:"tag,omitempty"`
	// Timeout in seconds kills the process once it has run that long;
	// none is the session's idle TTL, the most is the longest idle TTL.
	Timeout *float64 `json:"timeout,omitempty"`
}

// TermSize is a terminal's size: the pty of a start request and the body
// of POST .../processes/{pid}/resize.
type TermSize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// SignalRequest is the body of POST .../processes/{pid}/signal.
type SignalRequest struct {
	Signal string `json:"signal"`
}

// Process is one background process of a session (the reply of start and
// GET .../processes/{pid}, and the data of the output stream's exit event).
type Process struct {
	// ID is the process's id in its session (its pid, as a string).
	ID        string     `json:"id"`
	PID       int        `json:"pid"`
	Tag       string     `json:"tag,omitempty"`
	Cmd       string     `json:"cmd"`
	Args      []string   `json:"args"`
	PTY       bool       `json:"pty"`
	Stdin     bool       `json:"stdin"`
	State     string     `json:"state"`
	ExitCode  *int       `json:"exit_code,omitempty"`
	Signal    string     `json:"signal,omitempty"`
	TimedOut  bool       `json:"timed_out,omitempty"`
	OOMKilled bool       `json:"oom_killed,omitempty"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// OutputBytes is the offset after the last byte the process printed.
	OutputBytes int64 `json:"output_bytes"`
}

// ProcessOf is the reply shape of an executor's process.
func ProcessOf(p sandbox.Process) Process {
	args := p.Args
	if args == nil {
		args = []string{}
	}
	j := Process{ID: strconv.Itoa(p.PID), PID: p.PID, Tag: p.Tag, Cmd: p.Cmd, Args: args, PTY: p.PTY, Stdin: p.Stdin, State: p.State,
		ExitCode: p.ExitCode, Signal: p.Signal, TimedOut: p.TimedOut, OOMKilled: p.OOMKilled, StartedAt: p.StartedAt.UTC(), OutputBytes: p.OutputBytes}
	if !p.EndedAt.IsZero() {
		t := p.EndedAt.UTC()
		j.EndedAt = &t
	}
	return j
}

// ProcessList is the reply of GET /v1/sessions/{id}/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// StdinReply is the reply of POST .../processes/{pid}/stdin.
type StdinReply struct {
	Written int `json:"written"`
}

// ProcessOutputChunk is the data of an output stream's stdout, stderr and
// pty events: the bytes (as text) and their offset in the output.
type ProcessOutputChunk struct {
	Data   string `json:"data"`
	Offset int64  `json:"offset"`
}

// ProcessOutputGap is the data of an output stream's dropped event: that
// many bytes before Offset are no longer kept.
type ProcessOutputGap struct {
	Dropped int64 `json:"dropped"`
	Offset  int64 `json:"offset"`
}
