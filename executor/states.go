package executor

// allowedTransitions is the whole session lifecycle: creating -> running
// -> ending -> ended, with failed reachable from any live state and left
// only through ending. A running session may hibernate (its sandbox goes,
// its home stays) and a hibernated one resume, as often as it likes.
var allowedTransitions = map[State][]State{
	StateCreating:   {StateRunning, StateFailed},
	StateRunning:    {StateEnding, StateFailed, StateHibernated},
	StateHibernated: {StateRunning, StateEnding, StateFailed},
	StateEnding:     {StateEnded, StateFailed},
	StateFailed:     {StateEnding},
}

// canMove reports whether from -> to is allowed.
func canMove(from, to State) bool {
	for _, s := range allowedTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}
