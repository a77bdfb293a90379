package executor

import "github.com/sandboxapi/sandboxapi/internal/sandbox"

// The session lifecycle is package sandbox's (sandbox.State, its
// transitions table and sandbox.CheckHeld): the executor holds a session's
// state in memory and writes it to the store; the store-only states
// (hibernating, resuming) it writes but never holds.

// canMove reports whether a session held in memory may move from -> to.
func canMove(from, to State) bool { return sandbox.CheckHeld(from, to) == nil }

// move is the one change of a held session's state: through the
// lifecycle table, the caller holding e.mu (or owning s alone). A move
// the table refuses is a bug: it is logged, the state is kept, and move
// returns false.
func (e *Executor) move(s *session, to State) bool {
	if err := sandbox.CheckHeld(s.state, to); err != nil {
		e.log.Error("changing session state", "session", s.id, "err", err)
		return false
	}
	s.state = to
	return true
}
