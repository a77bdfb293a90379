package executor

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/fence"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/store"
)

// Node is the session service's cluster role (cluster.Executor): it takes
// sessions in from their rows (Adopt, EndOrphan), lets go of them when
// another node owns them or may (Fence, a write answering
// store.ErrNotOwner, the hand-over at Stop), keeps the dead man's switch
// (HoldUntil) and answers a call on a session let go of (goneErr). On a
// single node it has nothing to do: its sessions never move. It reaches
// the session table only through nodeSessions. Get it from
// Executor.Node; it is safe for concurrent use.
//
// Its records (the sessions let go of, mounts in progress, tidying after
// a Fence, the fence count and the hold) are guarded by mu, the session
// service's lock, which it shares: letting go of a session changes the
// session table and these records in one step, and the session paths
// check both at once (a session made or adopted is kept only if no Fence
// came meanwhile; a mount begins only on a session not let go of).
type Node struct {
	s      nodeSessions
	agents *agent.Transport // sandboxes' agent channels
	boxes  *launcher        // sandbox paths and starts
	cfg    Config
	log    *slog.Logger
	store  *store.Store
	rt     *Runtimes
	runsc  *host.Runsc
	nets   *Networks // whether a session holds a network, and its provider
	pool   *Pool     // its warm sandboxes go at a Fence past the hold

	// mu is the session service's lock (see Node).
	mu *sync.Mutex
	// moved holds the sessions let go of because another node owns them,
	// or may (Fence), by id: a call still in flight on one answers
	// ErrSessionMoved and writes nothing to the store, and an Adopt of the
	// same id waits until that object is idle.
	moved map[string]*session
	// tidying: sessions whose leftovers a Fence is still removing.
	tidying map[string]chan struct{}
	// mounting: sessions whose home a resume is mounting (beginMount).
	mounting map[string]*mountOp
	fences   int           // how many times every session was let go of (Fence)
	fence    *fence.Switch // the dead man's switch (cluster mode), nil else
	hold     time.Time     // the last HoldUntil

	adoptMu sync.Mutex     // one Adopt at a time
	bg      sync.WaitGroup // tidying after a Fence
}

// nodeSessions is what Node needs of the session service. The first
// methods read and change the session table: their caller holds the
// session service's lock (Node.mu).
type nodeSessions interface {
	// lookup is the table's session id, nil if none. mu held.
	lookup(id string) *session
	// served is every session of the table. mu held.
	served() []*session
	// admit puts s in the table and counts its sandbox, if it has one,
	// and disk bytes of home. mu held.
	admit(s *session, disk int64)
	// forget takes s out of the table (if it is there): its sandbox and
	// home stop counting. mu held.
	forget(s *session)
	// counts says whether the service has started, and how many
	// sandboxes it runs (counted against max_sandboxes). mu held.
	counts() (started bool, live int)

	endSessionOf(ctx context.Context, s *session, reason string) error
}

// newNode makes e's cluster role, after e's network role (it takes
// it).
func newNode(e *Executor) *Node {
	return &Node{
		s: e, agents: e.agents, boxes: e.boxes, cfg: e.cfg, log: e.log, store: e.store, rt: e.rt, runsc: e.runsc, nets: e.nets, pool: e.pool,
		mu:       &e.mu,
		moved:    map[string]*session{},
		tidying:  map[string]chan struct{}{},
		mounting: map[string]*mountOp{},
	}
}

// Node returns the executor's cluster role.
func (e *Executor) Node() *Node { return e.node }

func (e *Executor) lookup(id string) *session { return e.sessions[id] }

func (e *Executor) served() []*session {
	ss := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		ss = append(ss, s)
	}
	return ss
}

func (e *Executor) admit(s *session, disk int64) {
	e.sessions[s.id] = s
	if s.hasSandbox {
		e.live++
	}
	e.disk.add(disk)
}

func (e *Executor) forget(s *session) {
	if e.sessions[s.id] == s {
		delete(e.sessions, s.id)
	}
	if s.hasSandbox {
		s.hasSandbox = false
		e.live--
	}
	e.disk.release(s.diskBytes + s.ckpt.Bytes)
}

func (e *Executor) counts() (started bool, live int) { return e.started, e.live }

// fencedSince reports whether a Fence (or the hand-over at Stop) came
// after fenceGen answered gen. mu held.
func (n *Node) fencedSince(gen int) bool { return n.fences != gen }

// wasMoved reports whether an object of session id was let go of and no
// Adopt took the id in again since. mu held.
func (n *Node) wasMoved(id string) bool { return n.moved[id] != nil }

// stopFence ends the fence process quietly, if there is one.
func (n *Node) stopFence() error {
	if f := n.fenceSwitch(); f != nil {
		return f.Stop()
	}
	return nil
}
