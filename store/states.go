package store

import (
	"regexp"
	"strings"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Session states in SQL. Every state a statement names is rendered here
// from package sandbox's State and its named sets, never written into the
// statement's text (TestNoStateLiteralsInSQL looks).

// plainState is what a state must look like to be quoted into SQL.
var plainState = regexp.MustCompile(`^[a-z][a-z_]*$`)

// quoteState renders st as an SQL string literal: 'st'. States are
// constants of package sandbox; one that is not a plain word is a bug
// and panics (at package start, for the statements built then).
func quoteState(st sandbox.State) string {
	if !plainState.MatchString(string(st)) {
		panic("store: session state " + string(st) + " cannot be quoted into SQL")
	}
	return "'" + string(st) + "'"
}

// stateList renders set as a list of SQL literals: 'a','b'.
func stateList(set sandbox.StateSet) string {
	if len(set) == 0 {
		panic("store: empty set of session states")
	}
	q := make([]string, len(set))
	for i, st := range set {
		q[i] = quoteState(st)
	}
	return strings.Join(q, ",")
}

// stateIn renders "col IN ('a','b')": col holds a state of set.
func stateIn(col string, set sandbox.StateSet) string {
	return col + " IN (" + stateList(set) + ")"
}

// stateNotIn renders "col NOT IN ('a','b')": col holds no state of set.
func stateNotIn(col string, set sandbox.StateSet) string {
	return col + " NOT IN (" + stateList(set) + ")"
}
