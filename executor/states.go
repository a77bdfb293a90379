package executor

import "fmt"

var allowedTransitions = map[State][]State{
	StateCreating: {StateRunning, StateFailed},
	StateRunning:  {StateEnding, StateFailed},
	StateEnding:   {StateEnded, StateFailed},
	StateFailed:   {StateEnding},
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

func transitionError(id string, from, to State) error {
	return fmt.Errorf("session %s: %w: %s -> %s", id, ErrBadState, from, to)
}
