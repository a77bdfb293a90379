package sandbox

import (
	"fmt"

	"github.com/sandboxapi/sandboxapi/internal/transition"
)

// State is a session's lifecycle state: the one spelling of it for the
// executor (which holds it in memory), the store (which saves it as this
// very string) and the store's SQL (whose state lists are rendered from
// the sets below). The zero value is no state; it is in no set and may
// move nowhere.
type State string

// Session states. The strings are what the store keeps: changing one
// needs a migration of stored rows.
const (
	StateCreating State = "creating"
	StateRunning  State = "running"
	StateEnding   State = "ending"
	StateEnded    State = "ended"
	StateFailed   State = "failed"
	// StateHibernated: the session has no sandbox; its home image, record
	// and manifest are kept, and the next call resumes it.
	StateHibernated State = "hibernated"
	// StateHibernating and StateResuming are only ever stored (StoreOnly):
	// the record of a hibernation or a resume in progress, written before
	// its first step so that a crash at any point leaves a row the next
	// start can read. The executor never holds them and clients never see
	// them from it: in memory a session goes from running to hibernated
	// and back in one move.
	StateHibernating State = "hibernating"
	StateResuming    State = "resuming"
)

// StateSet is a set of states named for what its members share. A set is
// read only; it is safe for concurrent use.
type StateSet []State

// Has reports whether st is in the set.
func (ss StateSet) Has(st State) bool {
	for _, s := range ss {
		if s == st {
			return true
		}
	}
	return false
}

// Without returns the states of ss that are not in drop, in ss's order.
func (ss StateSet) Without(drop StateSet) StateSet {
	out := make(StateSet, 0, len(ss))
	for _, s := range ss {
		if !drop.Has(s) {
			out = append(out, s)
		}
	}
	return out
}

// The named sets of states. The store's SQL state lists are rendered from
// them (store/states.go), so a state added here is counted there.
var (
	// AllStates is every session state.
	AllStates = StateSet{StateCreating, StateRunning, StateHibernating, StateHibernated, StateResuming,
		StateEnding, StateEnded, StateFailed}
	// SlotStates are the states in which a session holds one of its
	// key's plan slots: from its creation until it starts to end,
	// hibernated or not. Ending, ended and failed sessions hold none.
	SlotStates = StateSet{StateCreating, StateRunning, StateHibernating, StateHibernated, StateResuming}
	// HomeStates are the states of a session whose home image is whole
	// and that no end has begun: a node that starts again, or takes the
	// session over, serves it hibernated when it finds the image.
	HomeStates = StateSet{StateRunning, StateHibernating, StateHibernated, StateResuming}
	// DoneStates are the states in which a session serves no call and
	// counts for nothing: ended, or failed (its sandbox was lost; only its
	// end is left to do).
	DoneStates = StateSet{StateEnded, StateFailed}
	// EndedStates is the final state alone: a session that is gone.
	EndedStates = StateSet{StateEnded}
)

// transitions is the session lifecycle as the store records it: for each
// state, the states it may move to. StateEnded is final. Besides the
// steps of the lifecycle, any state but ended may move to ended directly:
// a node ends the rows it cannot serve (no home image after a restart or
// a takeover) whatever state they were left in.
//
//	create:    creating -> running | failed
//	fork:      creating -> hibernated (the copy of the image is its home)
//	hibernate: running -> hibernating -> hibernated
//	resume:    hibernated -> resuming -> running, or back to hibernated
//	end:       any live state -> ending -> ended
//	lost:      a live state -> failed -> ending -> ended
var transitions = transition.Table[State]{
	StateCreating:    {StateRunning, StateHibernated, StateFailed, StateEnded},
	StateRunning:     {StateHibernating, StateEnding, StateFailed, StateEnded},
	StateHibernating: {StateHibernated, StateEnding, StateFailed, StateEnded},
	StateHibernated:  {StateResuming, StateEnding, StateFailed, StateEnded},
	StateResuming:    {StateRunning, StateHibernated, StateEnding, StateFailed, StateEnded},
	StateEnding:      {StateEnded, StateFailed},
	StateFailed:      {StateEnding, StateEnded},
}

// CanMove reports whether the lifecycle allows a session's stored state
// to move from s to to.
func (s State) CanMove(to State) bool { return transitions.Allowed(s, to) }

// Known reports whether s is one of AllStates.
func (s State) Known() bool { return AllStates.Has(s) }

// StoreOnly reports whether s is a state only the store holds
// (hibernating, resuming): a step in progress, never a state of a
// session in memory.
func (s State) StoreOnly() bool { return s == StateHibernating || s == StateResuming }

// CheckHeld returns nil when a session held in memory may move from ->
// to, else an error wrapping transition.ErrNotAllowed. Memory skips the
// store-only states: a held move is a move of the lifecycle between two
// states that are not store-only, or two moves through one store-only
// state (running -> hibernating -> hibernated is running -> hibernated).
// A move to the state it is in is no move.
func CheckHeld(from, to State) error {
	if from != to && !from.StoreOnly() && !to.StoreOnly() {
		if from.CanMove(to) {
			return nil
		}
		for _, mid := range transitions[from] {
			if mid.StoreOnly() && mid.CanMove(to) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %q -> %q (held in memory)", transition.ErrNotAllowed, from, to)
}
