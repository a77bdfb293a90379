package executor

import (
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

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
		{StateRunning, StateHibernated, true},
		{StateHibernated, StateRunning, true},
		{StateHibernated, StateEnding, true},
		{StateHibernated, StateCreating, false},
		{StateCreating, StateHibernated, true},  // a fork's copy is made hibernated
		{StateRunning, StateHibernating, false}, // store-only states are never held
		{StateHibernated, StateResuming, false},
		{StateHibernating, StateHibernated, false},
		{StateResuming, StateRunning, false},
		{StateHibernated, StateHibernated, false},
		{StateRunning, StateEnded, true}, // a row the node cannot serve is ended
		{StateEnding, StateHibernated, false},
		{StateFailed, StateHibernated, false},
	}
	for _, tc := range cases {
		if got := canMove(tc.from, tc.to); got != tc.ok {
			t.Errorf("%s -> %s: got %v, want %v", tc.from, tc.to, got, tc.ok)
		}
	}
}

// TestNoSessionStateLiterals reads the executor's source and fails on a
// session state written out as a quoted string outside comments: the
// executor names states by sandbox.State only (the store-only ones
// included), so that no second spelling can drift from the type.
func TestNoSessionStateLiterals(t *testing.T) {
	t.Parallel()
	states := map[string]bool{}
	for _, s := range sandbox.AllStates {
		states[string(s)] = true
	}
	for _, l := range testenv.QuotedWords(t, states, 10) {
		if strings.Contains(l.Text, "containerStatus = ") {
			continue // runsc's OCI statuses, another type (runsc.go)
		}
		t.Errorf("%s:%d: session state %q written out: use sandbox.State (%s)", l.File, l.Line, l.Word, l.Text)
	}
}
