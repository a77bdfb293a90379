package store

import (
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// TestNoStateLiteralsInSQL reads the store's source and fails on any
// session or execution state written out as a quoted literal ('ended' in
// SQL, "ended" in Go): every state a statement names must come from
// package sandbox (stateIn, stateNotIn, quoteState or an argument), so
// that the type is the one spelling.
func TestNoStateLiteralsInSQL(t *testing.T) {
	t.Parallel()
	states := map[string]bool{}
	for _, s := range sandbox.AllStates {
		states[string(s)] = true
	}
	for _, s := range []sandbox.ExecState{sandbox.ExecRunning, sandbox.ExecDone, sandbox.ExecFailed} {
		states[string(s)] = true
	}
	for _, l := range testenv.QuotedWords(t, states, 10) {
		t.Errorf("%s:%d: state %q written out: use package sandbox's State (%s)", l.File, l.Line, l.Word, l.Text)
	}
}

// TestStateSQL pins the rendered lists: their text is part of migration
// 10 (the slot trigger) and of every stored row's meaning.
func TestStateSQL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, got, want string
	}{
		{"slot states", stateIn("s.state", sandbox.SlotStates), `s.state IN ('creating','running','hibernating','hibernated','resuming')`},
		{"not slot states", stateNotIn("NEW.state", sandbox.SlotStates), `NEW.state NOT IN ('creating','running','hibernating','hibernated','resuming')`},
		{"not done", stateNotIn("state", sandbox.DoneStates), `state NOT IN ('ended','failed')`},
		{"not ended", stateNotIn("state", sandbox.EndedStates), `state NOT IN ('ended')`},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, tc.got, tc.want)
		}
	}
}

// TestQuoteStateRefusesHostile: a state that is not a plain word never
// reaches SQL text (it panics; states are constants, so this is a bug
// caught at start).
func TestQuoteStateRefusesHostile(t *testing.T) {
	t.Parallel()
	for _, s := range []sandbox.State{"", "x'", "ended'); DROP TABLE sessions; --", "Running", "run ning", "a\x00", "ended\n", "'ended'", "é", "_x", "1x", `x\`} {
		t.Run(string(s), func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("quoteState(%q) did not panic", s)
				}
			}()
			quoteState(s)
		})
	}
	defer func() {
		if recover() == nil {
			t.Error("stateList of an empty set did not panic")
		}
	}()
	stateList(nil)
}

// FuzzQuoteState: whatever quoteState accepts comes out as one SQL string
// literal with no quote, backslash or control character inside.
func FuzzQuoteState(f *testing.F) {
	for _, s := range append(sandbox.AllStates, "x'", "", "a b") {
		f.Add(string(s))
	}
	f.Fuzz(func(t *testing.T, s string) {
		var out string
		func() {
			defer func() { _ = recover() }()
			out = quoteState(sandbox.State(s))
		}()
		if out == "" {
			return
		}
		inner := strings.TrimSuffix(strings.TrimPrefix(out, "'"), "'")
		if out != "'"+s+"'" || strings.ContainsAny(inner, "'\"\\;- \t\r\n\x00") {
			t.Fatalf("quoteState(%q) = %q", s, out)
		}
	})
}
