package sandbox

import (
	"errors"
	"regexp"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/transition"
)

// TestStateTransitions checks every pair of states against the lifecycle
// as written out here, move by move: a move added to or dropped from the
// table fails it.
func TestStateTransitions(t *testing.T) {
	t.Parallel()
	const (
		c  = StateCreating
		r  = StateRunning
		hg = StateHibernating
		h  = StateHibernated
		rs = StateResuming
		eg = StateEnding
		e  = StateEnded
		f  = StateFailed
	)
	allowed := map[State]StateSet{
		c:  {r, h, f, e},
		r:  {hg, eg, f, e},
		hg: {h, eg, f, e},
		h:  {rs, eg, f, e},
		rs: {r, h, eg, f, e},
		eg: {e, f},
		f:  {eg, e},
		e:  {},
	}
	if len(allowed) != len(AllStates) {
		t.Fatalf("the test lists %d states, AllStates %d", len(allowed), len(AllStates))
	}
	probe := append(AllStates.Without(nil), "", "paused") // a copy: AllStates is never appended to
	for _, from := range probe {
		for _, to := range probe {
			want := allowed[from].Has(to)
			if got := from.CanMove(to); got != want {
				t.Errorf("%q -> %q: CanMove = %v, want %v", from, to, got, want)
			}
		}
	}
}

// TestHeldTransitions checks every pair of states for a session held in
// memory, which never holds a store-only state: the moves the executor
// makes, and those it must not.
func TestHeldTransitions(t *testing.T) {
	t.Parallel()
	const (
		c  = StateCreating
		r  = StateRunning
		hg = StateHibernating
		h  = StateHibernated
		rs = StateResuming
		eg = StateEnding
		e  = StateEnded
		f  = StateFailed
	)
	allowed := map[State]StateSet{
		c:  {r, h, f, e},
		r:  {h, eg, f, e}, // hibernate: through hibernating in the store
		h:  {r, eg, f, e}, // resume: through resuming in the store
		eg: {e, f},
		f:  {eg, e},
	}
	for _, from := range AllStates {
		for _, to := range AllStates {
			want := allowed[from].Has(to)
			err := CheckHeld(from, to)
			if (err == nil) != want {
				t.Errorf("%s -> %s held: err %v, want allowed %v", from, to, err, want)
			}
			if err != nil && !errors.Is(err, transition.ErrNotAllowed) {
				t.Errorf("%s -> %s held: %v does not wrap ErrNotAllowed", from, to, err)
			}
		}
	}
}

// TestStateSets checks the named sets against what they say: every state
// is known and spelled as the store can quote it, sets hold no strangers
// or duplicates, and the sets that split the lifecycle do split it.
func TestStateSets(t *testing.T) {
	t.Parallel()
	word := regexp.MustCompile(`^[a-z][a-z_]*$`)
	sets := map[string]StateSet{"AllStates": AllStates, "SlotStates": SlotStates, "HomeStates": HomeStates,
		"DoneStates": DoneStates, "EndedStates": EndedStates}
	for name, set := range sets {
		seen := map[State]bool{}
		for _, s := range set {
			if !s.Known() || !word.MatchString(string(s)) || seen[s] {
				t.Errorf("%s: %q unknown, not a plain word, or repeated", name, s)
			}
			seen[s] = true
		}
	}
	for _, s := range AllStates {
		// A slot is held exactly until the end begins.
		if got, want := SlotStates.Has(s), !DoneStates.Has(s) && s != StateEnding; got != want {
			t.Errorf("SlotStates.Has(%s) = %v, want %v", s, got, want)
		}
		if HomeStates.Has(s) && !SlotStates.Has(s) {
			t.Errorf("%s has a whole home but holds no slot", s)
		}
		if s.StoreOnly() && !HomeStates.Has(s) {
			t.Errorf("store-only %s is not served from its home after a crash", s)
		}
		// Only ended is final.
		if final := len(transitions[s]) == 0; final != (s == StateEnded) {
			t.Errorf("%s final = %v", s, final)
		}
	}
	if State("").Known() || State("paused").Known() {
		t.Error("an unknown state is Known")
	}
}
