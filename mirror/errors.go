package mirror

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrNotFound means no artifact matches the request.
	ErrNotFound = errors.New("mirror: not found")
	// ErrNotAdmitted means the artifact is known but refused, quarantined
	// or removed; Lookup returns it together with the artifact's reasons.
	ErrNotAdmitted = errors.New("mirror: not admitted")
	// ErrOSVUnavailable means the OSV database is missing or unreadable:
	// nothing is admitted until one is imported.
	ErrOSVUnavailable = errors.New("mirror: osv database unavailable")
	// ErrBadSpec means a package spec ("name==1.0", "name@1.0") is malformed.
	ErrBadSpec = errors.New("mirror: bad package spec")
	// ErrUpstream means the upstream index or registry failed.
	ErrUpstream = errors.New("mirror: upstream failed")
	// ErrTransition means a status change is not allowed.
	ErrTransition = errors.New("mirror: status change not allowed")
)

// UnknownManagerError is returned for an ecosystem (manager) name the
// mirror does not hold; its message names the ones it does. It is also an
// ErrBadSpec.
type UnknownManagerError struct{ Name string }

// KnownManagers names the ecosystems the mirror holds, with the other
// names it takes for them.
const KnownManagers = "pip (also pypi, python) or npm (also node)"

func (e *UnknownManagerError) Error() string {
	name := e.Name
	if len(name) > 64 {
		name = name[:64] + "..."
	}
	return fmt.Sprintf("unknown ecosystem %q: the mirror holds %s", name, KnownManagers)
}

// Is lets errors.Is(err, ErrBadSpec) hold.
func (e *UnknownManagerError) Is(target error) bool { return target == ErrBadSpec }

// RefusedError is returned when an artifact is refused at admission. Reasons
// are meant for operators; Advisories holds matched OSV ids, if any.
type RefusedError struct {
	Filename   string
	Reasons    []string
	Advisories []string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("refusing %s: %s", e.Filename, strings.Join(e.Reasons, "; "))
}

// Is lets errors.Is(err, ErrNotAdmitted) hold for refusals.
func (e *RefusedError) Is(target error) bool { return target == ErrNotAdmitted }

// archiveError is a safety or consistency problem found in an archive; it
// becomes a refusal reason.
type archiveError struct{ msg string }

func (e *archiveError) Error() string { return e.msg }

func refusef(format string, args ...any) error {
	return &archiveError{msg: fmt.Sprintf(format, args...)}
}

// IsArchiveProblem reports whether err is a refusal-worthy archive problem
// (as opposed to an I/O failure).
func IsArchiveProblem(err error) bool {
	var ae *archiveError
	return errors.As(err, &ae)
}
