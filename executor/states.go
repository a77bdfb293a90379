package executor

import "github.com/sandboxapi/sandboxapi/internal/transition"

// sessionStates is the whole session lifecycle: creating -> running ->
// ending -> ended, with failed reachable from any live state and left
// only through ending. A running session may hibernate (its sandbox goes,
// its home stays) and a hibernated one resume, as often as it likes.
func sessionStates() transition.Table[State] {
	return transition.Table[State]{
		StateCreating:   {StateRunning, StateFailed},
		StateRunning:    {StateEnding, StateFailed, StateHibernated},
		StateHibernated: {StateRunning, StateEnding, StateFailed},
		StateEnding:     {StateEnded, StateFailed},
		StateFailed:     {StateEnding},
	}
}

// canMove reports whether from -> to is allowed.
func canMove(from, to State) bool { return sessionStates().Allowed(from, to) }

// move changes s's state through the lifecycle table; the caller holds
// e.mu (or owns s alone). A move the table refuses is a bug: it is logged,
// the state is kept, and move returns false.
func (e *Executor) move(s *session, to State) bool {
	if err := sessionStates().Move(&s.state, to); err != nil {
		e.log.Error("changing session state", "session", s.id, "err", err)
		return false
	}
	return true
}
