// Package sandbox holds the types the API and the executor share: session
// and execution shapes, statuses and errors. It does no I/O.
package sandbox

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// Errors callers tell apart with errors.Is.
var (
	ErrNotFound        = errors.New("session not found")
	ErrBadState        = errors.New("session is not in a usable state")
	ErrCapacity        = errors.New("no sandbox capacity left")
	ErrInvalid         = errors.New("invalid request")
	ErrLost            = errors.New("sandbox was lost")
	ErrNotStarted      = errors.New("executor not started")
	ErrUnknownLanguage = errors.New("unknown language")
	// ErrUnsupportedVersion: the language has no such version here; the
	// error's text lists the versions present.
	ErrUnsupportedVersion = errors.New("unsupported version")
	ErrTooLarge           = errors.New("too large")
	ErrNoNetwork          = errors.New("network access is not available on this server")
	// ErrNoStorage: the host's disk budget for homes (executor.max_disk)
	// cannot hold another home; nothing was made.
	ErrNoStorage = errors.New("insufficient storage for another session home")
	// ErrSessionLost: the session's node died and its home image cannot be
	// found where this node looks (homes not shared between nodes); the
	// session has been ended.
	ErrSessionLost = errors.New("session was lost with its node")
	// ErrSessionMoved: another node has taken the session over while this
	// one served it; this node has let go of it, and the call may be
	// retried (it reaches the new owner).
	ErrSessionMoved = errors.New("session moved to another node")
	// ErrKernelUnsupported: a kernel session ("kernel": true) was asked
	// for a language that has no kernel (python3 alone has one).
	ErrKernelUnsupported = errors.New("kernel sessions are available for python3 only")
	// ErrNoKernel: a kernel call on a session made without "kernel": true.
	ErrNoKernel = errors.New("the session has no kernel (create it with \"kernel\": true)")
	// ErrNetworkNotAttached: a running session's sandbox was started
	// without network, so network cannot be enabled while it runs; it can
	// while the session is hibernated (the resume attaches it).
	ErrNetworkNotAttached = errors.New("the session's sandbox runs without network: hibernate the session, then change its network (the next call resumes it with the new network)")
)

// Status is how an execution ended, as the guest reports it and clients
// see it. It is not the stored execution's state (ExecState).
type Status string

// Statuses of an execution.
const (
	StatusOK           Status = "ok"
	StatusError        Status = "error" // the program exited non-zero or was signalled
	StatusTimeout      Status = "timeout"
	StatusOOM          Status = "oom"
	StatusOutputLimit  Status = "output_limit"
	StatusCompileError Status = "compile_error"
	// StatusStartError: the guest could not start the program; it stays
	// between guest and executor and never reaches a client.
	StatusStartError Status = "start_error"
	// StatusFailed: the call failed without a result (an error answered
	// the client); recorded in the store and in metrics only.
	StatusFailed Status = "failed"
)

// KillReason is why a run was stopped before it ended by itself. The zero
// value means it was not stopped.
type KillReason string

// Kill reasons.
const (
	KillNone        KillReason = ""
	KillTimeout     KillReason = "timeout"      // the call's deadline passed
	KillOOM         KillReason = "oom"          // the run went over its memory limit
	KillOutputLimit KillReason = "output_limit" // the run printed more than the cap
	KillCancelled   KillReason = "cancelled"    // the caller went away
)

// Status is the execution status a run stopped for k reports; "" for
// KillNone and KillCancelled, which report none.
func (k KillReason) Status() Status {
	switch k {
	case KillTimeout:
		return StatusTimeout
	case KillOOM:
		return StatusOOM
	case KillOutputLimit:
		return StatusOutputLimit
	}
	return ""
}

// ExecState is the stored state of an execution record, kept apart from
// its Status: running while the call is in flight, then done or failed.
type ExecState string

// Execution record states.
const (
	ExecRunning ExecState = "running"
	ExecDone    ExecState = "done"
	ExecFailed  ExecState = "failed"
)

// SessionSpec asks for a new session.
type SessionSpec struct {
	Language string
	// Version picks the language's version ("22": the newest 22.x
	// present; empty: the default); the session keeps it.
	Version string
	IdleTTL time.Duration // 0: the default
	Owner   string        // key id; sessions are visible only to their owner
	Network NetworkRequest
	// DiskBytes is the size of the session's home (its disk limit); 0:
	// the executor's default.
	DiskBytes int64
	// Kernel: every execute runs as a cell of one long-lived kernel
	// (python3 only; ErrKernelUnsupported otherwise).
	Kernel bool
}

// ForkSpec asks for a copy of a session. Empty fields keep the source's.
type ForkSpec struct {
	Owner    string
	Language string
	// Version applies with Language (empty: the source's version when the
	// language is the source's, else the default).
	Version string
	Network *NetworkRequest // nil: the source's
}

// Session is a snapshot of one session.
type Session struct {
	ID       string
	Owner    string
	Language string
	// Version is the exact version the session runs ("22.23.5").
	Version    string
	State      State
	IdleTTL    time.Duration
	Network    NetworkRequest
	CreatedAt  time.Time
	LastUsedAt time.Time
	// HibernatedAt is when the session was last hibernated (zero while it
	// runs and never hibernated).
	HibernatedAt time.Time
	ForkedFrom   string // the source session of a fork
	DiskBytes    int64  // size of the home image (its disk limit)
	Kernel       bool   // executes run as cells of one kernel
	// Live: the session's sandbox holds memory (a kernel or background
	// processes), which hibernation keeps in a checkpoint.
	Live bool
	// CheckpointBytes is the size of the checkpoint a hibernated session's
	// memory waits in (0: none).
	CheckpointBytes int64
	// Memory is the outcome of the session's latest resume that had
	// memory to bring back (nil: none yet).
	Memory *MemoryOutcome
}

// ExpiresAt is when the session is reaped if it stays idle.
func (s Session) ExpiresAt() time.Time { return s.LastUsedAt.Add(s.IdleTTL) }

// File is a file placed beside the code of a stateless execute.
type File struct {
	Path    string
	Content []byte
}

// ExecRequest is one execute call.
type ExecRequest struct {
	Language string // stateless execute only
	Version  string // stateless execute only; empty: the default
	Code     string
	Stdin    []byte
	Timeout  time.Duration // 0: the default
	// MemoryBytes is the memory limit of this call: 0 is the executor's
	// default, and values above the executor's configured memory are
	// capped to it.
	MemoryBytes int64
	Env         map[string]string
	Files       []File // stateless execute only
	// OnOutput, if set, receives output chunks ("stdout" or "stderr") as the
	// program writes them; calls are serialised.
	OnOutput func(stream string, p []byte)
	// OnDisplay, if set, receives each rich output of a kernel cell as it
	// comes (serialised with OnOutput); the result lists them all too.
	OnDisplay func(CellResult)
}

// CellResult is one rich output of a kernel cell: a Jupyter MIME bundle.
// The API reports it as is (wire.CellResult).
type CellResult struct {
	// Type is execute_result (the value of the cell's last expression)
	// or display_data (display(), a plot).
	Type         string `json:"type"`
	IsMainResult bool   `json:"is_main_result"`
	// Data maps a MIME type to its value: text/plain, text/html,
	// text/markdown, image/svg+xml (strings), image/png (base64 string),
	// application/json (a JSON value).
	Data map[string]any `json:"data"`
}

// CellError is the exception a kernel cell raised (wire.CellError).
type CellError struct {
	Name  string `json:"name"`
	Value string `json:"value"`
	// Traceback is the formatted traceback, one entry a frame, ANSI
	// colour codes removed.
	Traceback []string `json:"traceback"`
}

// Result is the outcome of one execute. The API reports it as
// wire.ExecuteResult.
type Result struct {
	ExecutionID string
	Stdout      string
	Stderr      string
	ExitCode    int
	Signal      string
	Status      Status
	// DurationMS is CompileMS plus RunMS: the call's time in the sandbox.
	DurationMS int64
	// CompileMS is the compile step's time (0 for interpreted languages);
	// RunMS is the program's.
	CompileMS int64
	RunMS     int64
	Truncated bool
	// ResumedMS is set when this call first resumed the hibernated
	// session: how long the resume took.
	ResumedMS int64
	// Results are a kernel cell's rich outputs, in order; Error its
	// exception. KernelRestarted: the kernel was lost (it died, or the
	// sandbox was replaced without its memory) since the last reply, and
	// a fresh one ran this cell: earlier variables are gone.
	Results         []CellResult
	Error           *CellError
	KernelRestarted bool
	// Memory is set when the resume this call waited for had memory to
	// bring back (the session hibernated into a checkpoint, or tried to):
	// whether it did, and why not.
	Memory *MemoryOutcome
}

// MemoryOutcome says whether a resume brought a session's memory back (a
// runsc restore of its checkpoint) or started it on its files alone, and
// why.
type MemoryOutcome struct {
	Restored bool
	// Reason is why the memory was lost (empty when restored): the
	// checkpoint could not be written, was missing, unreadable, from
	// another runsc, or its restore failed.
	Reason string
}

// Runtime describes one language for clients: Version is its default
// version, Versions all of them (newest first).
type Runtime struct {
	Language string           `json:"language"`
	Aliases  []string         `json:"aliases"`
	Version  string           `json:"version"`
	Compiled bool             `json:"compiled"`
	Versions []RuntimeVersion `json:"versions"`
}

// RuntimeVersion is one version of a language: the exact version, the
// series it is listed under in the runtimes file, whether it is the
// default and its upstream end of life (YYYY-MM-DD, empty: none
// announced).
type RuntimeVersion struct {
	Version string `json:"version"`
	Series  string `json:"series"`
	Default bool   `json:"default"`
	EOL     string `json:"eol,omitempty"`
}

// ResumeReport is what one call learns, while it runs, of a hibernated
// session's resume it waits for: that it waits (Pending) and, once the
// resume is done, how long it took (Took). The caller puts one in the
// call's context (WithResumeReport) and reads it; the executor fills it
// (NoteResumePending, NoteResume). It is data, not a hook: nothing runs
// when it changes. The zero value is an empty report; safe for concurrent
// use.
type ResumeReport struct {
	pending atomic.Bool
	took    atomic.Int64 // nanoseconds; 0: no resume noted
}

// Pending reports whether the call found the session hibernated and
// waits for its resume (done by it or by another call).
func (r *ResumeReport) Pending() bool { return r.pending.Load() }

// Took is how long the resume the call waited for took (0: none noted).
func (r *ResumeReport) Took() time.Duration { return time.Duration(r.took.Load()) }

type resumeReportKey struct{}

// WithResumeReport returns a context whose calls report a resume they
// wait for in r.
func WithResumeReport(ctx context.Context, r *ResumeReport) context.Context {
	return context.WithValue(ctx, resumeReportKey{}, r)
}

func resumeReport(ctx context.Context) *ResumeReport {
	r, _ := ctx.Value(resumeReportKey{}).(*ResumeReport)
	return r
}

// NoteResume notes, in the context's report if any, that the call's wait
// for a resume is over and that the resume took d (once, before any
// output). A d of 0 (the session was running after all) notes nothing.
func NoteResume(ctx context.Context, d time.Duration) {
	if r := resumeReport(ctx); r != nil && d > 0 {
		r.took.Store(int64(d))
	}
}

// NoteResumePending notes, in the context's report if any, that the call
// found the session hibernated and waits for its resume; NoteResume
// follows when the resume is done, unless it fails.
func NoteResumePending(ctx context.Context) {
	if r := resumeReport(ctx); r != nil {
		r.pending.Store(true)
	}
}
