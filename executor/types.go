package executor

import "github.com/sandboxapi/sandboxapi/internal/sandbox"

// The executor speaks the shared types of package sandbox.
type (
	SessionSpec = sandbox.SessionSpec
	Session     = sandbox.Session
	State       = sandbox.State
	ExecRequest = sandbox.ExecRequest
	Result      = sandbox.Result
	Status      = sandbox.Status
)

// Re-exported for callers and tests of this package.
var (
	ErrNotFound           = sandbox.ErrNotFound
	ErrBadState           = sandbox.ErrBadState
	ErrCapacity           = sandbox.ErrCapacity
	ErrInvalid            = sandbox.ErrInvalid
	ErrLost               = sandbox.ErrLost
	ErrNotStarted         = sandbox.ErrNotStarted
	ErrUnknownLanguage    = sandbox.ErrUnknownLanguage
	ErrUnsupportedVersion = sandbox.ErrUnsupportedVersion
	ErrNoStorage          = sandbox.ErrNoStorage
)

// ForkSpec asks for a copy of a session.
type ForkSpec = sandbox.ForkSpec

const (
	StateCreating = sandbox.StateCreating
	StateRunning  = sandbox.StateRunning
	StateEnding   = sandbox.StateEnding
	StateEnded    = sandbox.StateEnded
	StateFailed   = sandbox.StateFailed
	// StateHibernated: no sandbox, home image kept; the next call resumes.
	StateHibernated = sandbox.StateHibernated
	// StateHibernating and StateResuming are only ever stored: the
	// executor writes them before a hibernation or a resume, never holds
	// them.
	StateHibernating = sandbox.StateHibernating
	StateResuming    = sandbox.StateResuming

	StatusOK           = sandbox.StatusOK
	StatusError        = sandbox.StatusError
	StatusTimeout      = sandbox.StatusTimeout
	StatusOOM          = sandbox.StatusOOM
	StatusOutputLimit  = sandbox.StatusOutputLimit
	StatusCompileError = sandbox.StatusCompileError
)
