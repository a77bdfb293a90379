package cluster

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// placement counts the creates this node sent to another node since that
// node's last renewal, so that a burst of creates does not all go to the
// one node whose reported Free is the highest.
type placement struct {
	renewedAt time.Time
	n         int
}

// pick chooses the node a new session goes to: the alive, non-draining
// node with the most free capacity, this node on a tie. Nodes that
// refused this node lately, and with require_tls nodes with an http URL,
// are left out. It reports false
// when that is this node (or the store cannot say).
func (n *Node) pick(ctx context.Context) (store.NodeRow, bool) {
	nodes, err := n.st.Nodes(ctx)
	if err != nil {
		n.log.Warn("cluster: listing nodes for a placement", "err", err)
		return store.NodeRow{}, false
	}
	now := n.now()
	self := n.s.Node
	best, bestFree := store.NodeRow{Name: self}, -1<<31
	if !n.isDraining() && n.serving() {
		bestFree = n.ex.Free()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, nd := range nodes {
		if nd.Name == self || !nd.Alive(now) || nd.Draining || nd.URL == "" || now.Before(n.refused[nd.Name]) ||
			(n.s.RequireTLS && !isHTTPS(nd.URL)) {
			continue
		}
		free := nd.Free
		if p, ok := n.placed[nd.Name]; ok && p.renewedAt.Equal(nd.RenewedAt) {
			free -= p.n
		}
		if free > bestFree {
			best, bestFree = nd, free
		}
	}
	if best.Name == self {
		return store.NodeRow{}, false
	}
	if p, ok := n.placed[best.Name]; ok && p.renewedAt.Equal(best.RenewedAt) {
		n.placed[best.Name] = placement{best.RenewedAt, p.n + 1}
	} else {
		n.placed[best.Name] = placement{best.RenewedAt, 1}
	}
	return best, true
}

// refusedFor is how long no create is placed on a node that refused this
// node's signature, or whose TLS certificate did not verify.
const refusedFor = time.Minute

// refusedBy records that node name refused this node's signature, or
// presented a TLS certificate this node does not trust.
func (n *Node) refusedBy(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	for k, until := range n.refused {
		if !now.Before(until) {
			delete(n.refused, k)
		}
	}
	n.refused[name] = now.Add(refusedFor)
}

// errNotServing: this node holds no lease it can prove, so it may not
// claim sessions.
var errNotServing = errors.New("cluster: this node holds no lease")

// claim moves session id to this node when its owner can no longer use it.
func (n *Node) claim(ctx context.Context, id string) (bool, error) {
	if !n.waitServing(ctx) {
		return false, errNotServing
	}
	prev, ok, err := n.st.ClaimSession(ctx, id, n.now())
	if err != nil || !ok || prev == n.s.Node {
		return ok, err
	}
	from := "expired"
	if prev == "" {
		from = "handover"
	}
	n.log.Info("cluster: session taken over", "session", id, "from_node", prev, "reason", from)
	if n.obs != nil {
		n.obs.ClusterTakeover(from)
	}
	return true, nil
}

// waitServing waits (up to one lease) while the node registers again
// after losing its lease, and reports whether it holds one.
func (n *Node) waitServing(ctx context.Context) bool {
	deadline := n.now().Add(n.lease)
	for !n.serving() {
		if !n.now().Before(deadline) || !sleep(ctx, 25*time.Millisecond) {
			return false
		}
	}
	return true
}

// waitHandOver waits (up to handOverWait) until the draining node owner
// no longer owns session id, or its lease ran out; false when it did not
// happen in time.
func (n *Node) waitHandOver(ctx context.Context, id, owner string) bool {
	deadline := n.now().Add(handOverWait)
	for n.now().Before(deadline) {
		if !sleep(ctx, 100*time.Millisecond) {
			return false
		}
		o, err := n.st.OwnerOf(ctx, id)
		if err != nil || o.Owner.Name != owner || !o.Owner.Alive(n.now()) {
			return true
		}
	}
	return false
}

// ListSessions returns owner's live sessions on every node: local (the
// executor's own list, which is current for the sessions it serves) and,
// from the store, those it does not have. A store error returns local.
func (n *Node) ListSessions(ctx context.Context, owner string, local []sandbox.Session) []sandbox.Session {
	rows, err := n.st.LiveSessionsOfKey(ctx, owner)
	if err != nil {
		n.log.Warn("cluster: listing sessions on every node", "err", err)
		return local
	}
	have := make(map[string]bool, len(local))
	for _, s := range local {
		have[s.ID] = true
	}
	out := append([]sandbox.Session(nil), local...)
	for _, r := range rows {
		if have[r.ID] {
			continue
		}
		nw, _ := sandbox.ParseNetworkRequest([]byte(r.Network))
		out = append(out, sandbox.Session{ID: r.ID, Owner: r.KeyID, Language: r.Language, State: r.State,
			IdleTTL: r.IdleTTL, Network: nw, CreatedAt: r.CreatedAt, LastUsedAt: r.LastUsedAt, HibernatedAt: r.HibernatedAt,
			ForkedFrom: r.ParentID, DiskBytes: r.DiskBytes})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}
