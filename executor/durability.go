package executor

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/store"
)

// Durable is the session service's durability role (api.Lifecycle):
// hibernation, resume and fork of sessions (durable.go), with their
// memory through the checkpoints role. It reaches the session table only
// through durSessions; the session fields it reads and writes are under
// mu, the session table's lock. Get it from Executor.Durable; it is safe
// for concurrent use.
type Durable struct {
	s      durSessions
	agents *agent.Transport // sandboxes' agent channels
	boxes  *launcher        // sandbox paths and starts
	mu     *sync.Mutex      // the session table's lock (Executor.mu)
	cfg    Config
	rt     *Runtimes
	store  *store.Store
	log    *slog.Logger
	nets   *Networks // attaches networks; without a provider, sessions with network are refused
	disk   *DiskBudget
	ckpts  *checkpoints
	node   *Node // the cluster role: ownership checks, mounts, fences
}

// durSessions is what Durable needs of the session service: the session
// table, the capacity count, the cluster's ownership checks, and a
// sandbox's home, bundle, network and start.
type durSessions interface {
	// holdSession marks owner's session id busy (release: s.busy-- under
	// mu); false when there is none.
	holdSession(owner, id string) (*session, bool)
	// addSession puts s in the table unless a Fence came since gen.
	addSession(s *session, gen int) (Session, error)
	// sandboxGone stops counting s's sandbox (if s still has one).
	sandboxGone(s *session)
	move(s *session, to State) bool
	isStarted() bool
	reserve() error
	release()

	fault(step createStep, id string) error
}

// Durable returns the executor's durability role.
func (e *Executor) Durable() *Durable { return e.dur }

// holdSession marks owner's session id busy: the reaper leaves it alone
// until the caller takes busy back (under e.mu).
func (e *Executor) holdSession(owner, id string) (*session, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sessions[id]
	if !ok || s.owner != owner {
		return nil, false
	}
	s.busy++
	return s, true
}

// addSession puts s, a session made here (a fork), in the session table,
// unless a Fence came since gen (fenceGen): the session may be another
// node's soon, and ErrSessionMoved.
func (e *Executor) addSession(s *session, gen int) (Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.node.fencedSince(gen) {
		return Session{}, fmt.Errorf("session %s: %w", s.id, ErrSessionMoved)
	}
	e.sessions[s.id] = s
	return s.snapshot(), nil
}

// sandboxGone records that s's sandbox is gone: it stops counting against
// MaxSandboxes. A session let go of meanwhile (Fence) counts no more.
func (e *Executor) sandboxGone(s *session) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.hasSandbox {
		s.hasSandbox = false
		e.live--
	}
}
