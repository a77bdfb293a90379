//go:build race

package mirror

// raceEnabled: the race detector inflates allocations, so the bounded
// allocation tests only log under it.
const raceEnabled = true
