// Package transition is the one check of a lifecycle's state changes: a
// table of allowed moves for a typed state, used by the executor's
// sessions and the mirror's artifacts. It does no I/O.
package transition

import (
	"errors"
	"fmt"
)

// ErrNotAllowed is wrapped by every refused move.
var ErrNotAllowed = errors.New("state change not allowed")

// Table lists, for each state, the states it may move to; a state absent
// from it is final. A Table is read only; it is safe for concurrent use.
type Table[S ~string] map[S][]S

// Allowed reports whether from -> to is in the table.
func (t Table[S]) Allowed(from, to S) bool {
	for _, s := range t[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Check returns nil when from -> to is allowed, else an error wrapping
// ErrNotAllowed that names both states.
func (t Table[S]) Check(from, to S) error {
	if t.Allowed(from, to) {
		return nil
	}
	return fmt.Errorf("%w: %q -> %q", ErrNotAllowed, from, to)
}

// Move sets *state to to when the table allows it; otherwise *state is
// left as it was and the error wraps ErrNotAllowed. The caller holds
// whatever lock guards *state.
func (t Table[S]) Move(state *S, to S) error {
	if err := t.Check(*state, to); err != nil {
		return err
	}
	*state = to
	return nil
}
