package executor

import "testing"

func TestSessionTransitions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		from, to State
		ok       bool
	}{
		{StateCreating, StateRunning, true},
		{StateCreating, StateFailed, true},
		{StateCreating, StateEnding, false},
		{StateRunning, StateEnding, true},
		{StateRunning, StateFailed, true},
		{StateRunning, StateCreating, false},
		{StateEnding, StateEnded, true},
		{StateEnding, StateRunning, false},
		{StateFailed, StateEnding, true},
		{StateFailed, StateRunning, false},
		{StateEnded, StateRunning, false},
		{StateEnded, StateEnding, false},
	}
	for _, tc := range cases {
		if got := canMove(tc.from, tc.to); got != tc.ok {
			t.Errorf("%s -> %s: got %v, want %v", tc.from, tc.to, got, tc.ok)
		}
	}
}
