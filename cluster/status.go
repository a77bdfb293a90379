package cluster

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// State is a node's standing as the cluster sees it.
type State string

// Node states.
const (
	StateAlive    State = "alive"    // holds its lease, takes new sessions
	StateDraining State = "draining" // holds its lease, hands its sessions over
	StateExpired  State = "expired"  // its lease ran out: its sessions may be claimed
)

// StateOf is n's state at now.
func StateOf(n store.NodeRow, now time.Time) State {
	switch {
	case !n.Alive(now):
		return StateExpired
	case n.Draining:
		return StateDraining
	}
	return StateAlive
}

// Alive counts the nodes that hold a lease at now (draining ones too).
func Alive(nodes []store.NodeRow, now time.Time) int {
	k := 0
	for _, n := range nodes {
		if n.Alive(now) {
			k++
		}
	}
	return k
}

// WriteStatus writes one line per node: its name, state, epoch, free and
// total capacity, how long its lease still runs (or since when it ran
// out), and its URL.
func WriteStatus(w io.Writer, nodes []store.NodeRow, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATE\tEPOCH\tFREE\tLEASE\tSTARTED\tURL")
	for _, n := range nodes {
		lease := "ends in " + n.LeaseUntil.Sub(now).Round(100*time.Millisecond).String()
		if !n.Alive(now) {
			lease = "ran out " + now.Sub(n.LeaseUntil).Round(time.Second).String() + " ago"
			if n.LeaseUntil.Unix() <= 0 {
				lease = "given up"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%s\t%s\t%s\n", n.Name, StateOf(n, now), n.Epoch, n.Free, n.Capacity, lease,
			n.StartedAt.UTC().Format(time.RFC3339), n.URL)
	}
	return tw.Flush()
}

// NodesAlive counts the nodes holding a lease now, as the store says
// (for the nodes-alive gauge, read at scrape time); false when the store
// does not answer within two seconds.
func (n *Node) NodesAlive() (int, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	nodes, err := n.st.Nodes(ctx)
	if err != nil {
		return 0, false
	}
	return Alive(nodes, n.now()), true
}
