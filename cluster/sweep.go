package cluster

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// A session is taken over by another node only when a client calls it.
// The sessions of a node that died and never comes back (or that a
// draining node handed over) which no client calls again would otherwise
// hold their key's plan slots and their home images forever: only their
// owner's reaper ended them. So every serving node sweeps now and then:
// an orphan idle past its TTL is claimed by one node (ClaimSession) and
// ended there as the reaper ends an idle session. An orphan still within
// its TTL is left for the next call to take over where it lands.

// sweepBatch bounds the orphans one sweep ends.
const sweepBatch = 32

// orphanReason is the end reason of a swept session.
const orphanReason = "idle (owner node gone)"

// endOrphanBudget bounds the end of one swept session.
const endOrphanBudget = time.Minute

// sweepLoop sweeps about once per lease, at a random moment from lease/2
// to 3/2 lease after the last sweep so that the nodes do not all sweep
// at the same instant, until Stop.
func (n *Node) sweepLoop() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		t := time.NewTimer(n.lease/2 + rand.N(n.lease))
		select {
		case <-n.stop:
			t.Stop()
			return
		case <-t.C:
		}
		n.sweep(ctx)
	}
}

// sweeping reports whether the node may sweep: it holds its lease by its
// own clock and does not drain (a draining node takes nothing over).
func (n *Node) sweeping() bool { return !n.isDraining() && n.serving() }

// sweep claims and ends up to sweepBatch orphaned sessions idle past
// their TTL (store.OrphanedIdleSessions), and returns how many it ended.
// A session another node claimed first is skipped. Nothing is done while
// the node is not serving or drains.
func (n *Node) sweep(ctx context.Context) int {
	if !n.sweeping() {
		return 0
	}
	rows, err := n.st.OrphanedIdleSessions(ctx, n.now(), sweepBatch)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("cluster sweep: listing orphaned idle sessions", "err", err)
		}
		return 0
	}
	ended := 0
	for _, r := range rows {
		if ctx.Err() != nil || !n.sweeping() {
			break
		}
		prev, ok, err := n.st.ClaimSession(ctx, r.ID, n.now())
		switch {
		case errors.Is(err, store.ErrNotFound):
			continue
		case err != nil:
			if ctx.Err() == nil {
				n.log.Warn("cluster sweep: claiming an orphaned session", "session", r.ID, "err", err)
			}
			continue
		case !ok || prev == n.s.Node:
			// Another node claimed it first (or it is ours, and ours to reap).
			continue
		}
		n.log.Info("cluster sweep: orphaned idle session claimed to end it", "session", r.ID, "from_node", prev,
			"last_used_at", r.LastUsedAt, "idle_ttl", r.IdleTTL.String())
		if n.obs != nil {
			n.obs.ClusterTakeover("swept")
		}
		ectx, cancel := context.WithTimeout(ctx, endOrphanBudget)
		err = n.ex.EndOrphan(ectx, r.ID, orphanReason)
		cancel()
		switch {
		case err == nil, errors.Is(err, sandbox.ErrSessionLost):
			ended++
		case errors.Is(err, sandbox.ErrNotFound):
			// Ended meanwhile.
		default:
			// The row names this node now, and no longer counts as an
			// orphan: if the executor took it in, its reaper ends it;
			// otherwise the next call adopts it here, or the node's next
			// start reconciles it.
			n.log.Warn("cluster sweep: ending an orphaned session", "session", r.ID, "err", err)
		}
	}
	if ended > 0 {
		n.log.Info("cluster sweep: orphaned idle sessions ended", "count", ended)
	}
	return ended
}
