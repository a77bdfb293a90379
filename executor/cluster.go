package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxapi/sandboxapi/executor/fence"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// Cluster mode: the store handle acts for a node (store.ForNode), every
// session row names the node that owns it, and a session may move to
// another node (package cluster claims it, then calls Adopt there). The
// rule that keeps a home image from being mounted by two nodes: a node
// touches a session's host resources only while its row names the node,
// and lets go of them (kill, unmount, forget; no store write) as soon as
// it learns that it may not own it any more: a state write answering
// store.ErrNotOwner, or Fence when its lease is lost. A dead node's
// sandboxes and mounts are removed by its fence process (fence.go).

// Re-exported for callers and tests of this package.
var (
	ErrSessionLost  = sandbox.ErrSessionLost
	ErrSessionMoved = sandbox.ErrSessionMoved
)

// Has reports whether this executor serves session id now (running or
// hibernated, in memory). Safe for concurrent use.
func (n *Node) Has(id string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.s.lookup(id) != nil
}

// Capacity is how many sandboxes this executor may run at once
// (executor.max_sandboxes).
func (n *Node) Capacity() int { return n.cfg.MaxSandboxes }

// Free is how many more sandboxes this executor could start now.
func (n *Node) Free() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, live := n.s.counts()
	return max(0, n.cfg.MaxSandboxes-live)
}

// HoldUntil tells the dead man's switch (cluster mode) until when this
// node may use its sessions: called by the node after each registration
// or renewal of its lease. If t passes without a newer HoldUntil (the
// node process is stopped, frozen or paused, or too slow to fence
// itself), the fence process kills this node's sandboxes and unmounts its
// homes as if the node had died. The fence counts the time left on its
// own monotonic clock. A node that fences itself (Fence) disarms it. No
// effect on a single node. Called before Start (the node registers
// first), it arms the fence that Start launches.
func (n *Node) HoldUntil(t time.Time) {
	n.mu.Lock()
	n.hold = t // for a fence that starts later (the node registers first)
	f := n.fence
	n.mu.Unlock()
	if f != nil {
		f.HoldUntil(t)
	}
}

// fenceSwitch is the dead man's switch, nil on a single node or before
// Start.
func (n *Node) fenceSwitch() *fence.Switch {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.fence
}

// holdPassed reports whether the deadline of the last HoldUntil has
// passed: the fence process may have killed this node's sandboxes and
// unmounted its homes, and the node's lease may be another's by now. A
// sandbox found dead then was fenced, not lost; no home may be mounted.
func (n *Node) holdPassed() bool {
	f := n.fenceSwitch()
	return f != nil && f.HoldPassed()
}

// Adopt serves session id, whose row names this node (claimed from
// another node, or this node's own after a Fence) but which this executor
// does not hold: it is registered hibernated from its row, and its next
// call resumes it from its image under homes_dir. A session already held
// is returned as it is. A session whose image is not there, or that was
// caught in creation or in its end, is ended in the store ("sandbox
// lost") and answers ErrSessionLost; a row another node owns answers
// ErrSessionMoved, an ended or unknown one ErrNotFound.
func (n *Node) Adopt(ctx context.Context, id string) (Session, error) {
	if err := n.waitLetGo(ctx, id); err != nil {
		return Session{}, err
	}
	n.adoptMu.Lock()
	defer n.adoptMu.Unlock()
	n.mu.Lock()
	if s := n.s.lookup(id); s != nil {
		snap := s.snapshot()
		n.mu.Unlock()
		return snap, nil
	}
	started, _ := n.s.counts()
	gen := n.fences
	n.mu.Unlock()
	if !started {
		return Session{}, ErrNotStarted
	}
	r, err := n.store.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("adopting session %s: %w", id, err)
	}
	if r.Node != n.store.Node() {
		return Session{}, fmt.Errorf("adopting session %s (owner %q): %w", id, r.Node, ErrSessionMoved)
	}
	if r.State == StateEnded {
		return Session{}, ErrNotFound
	}
	rt, err := n.rt.LookupVersion(r.Language, r.Version)
	if err != nil {
		return Session{}, fmt.Errorf("adopting session %s: %w", id, err)
	}
	h := n.boxes.home(id)
	fi, ierr := os.Stat(h.Image())
	if ierr != nil && !errors.Is(ierr, fs.ErrNotExist) {
		// Shared storage that does not answer is not a lost session.
		return Session{}, fmt.Errorf("adopting session %s: %w", id, ierr)
	}
	if !sandbox.HomeStates.Has(r.State) {
		ierr = fmt.Errorf("state %s", r.State) // caught in creation or in its end
	}
	if ierr != nil {
		if err := n.store.SetSessionState(ctx, id, StateEnded, "sandbox lost", true); errors.Is(err, store.ErrNotOwner) {
			return Session{}, fmt.Errorf("adopting session %s: %w", id, ErrSessionMoved)
		} else if err != nil {
			return Session{}, fmt.Errorf("ending lost session %s: %w", id, err)
		}
		n.log.WarnContext(ctx, "session lost: no home image to adopt", "session", id, "state", r.State, "image", h.Image(), "err", ierr)
		return Session{}, fmt.Errorf("adopting session %s: %w", id, ErrSessionLost)
	}
	size := r.DiskBytes
	if size <= 0 {
		size = fi.Size()
	}
	now := time.Now()
	s := newSession(r.ID, r.KeyID, rt, r.IdleTTL, r.CreatedAt, storedNetwork(r.Network))
	s.state, s.parent, s.diskBytes = StateHibernated, r.ParentID, size
	s.kernel, s.kernelUsed = r.Kernel, r.Kernel // its kernel is lost: the next cell says so
	s.hibernatedAt, s.lastUsed = now, now
	size += s.servedHibernatedLive(r, h)
	if r.State == StateHibernated {
		// Cleanly hibernated (or handed over): its idle clock goes on.
		s.hibernatedAt, s.lastUsed = r.HibernatedAt, r.LastUsedAt
	} else if err := n.store.SetSessionHibernated(ctx, id, now, now); errors.Is(err, store.ErrNotOwner) {
		return Session{}, fmt.Errorf("adopting session %s: %w", id, ErrSessionMoved)
	} else if err != nil {
		return Session{}, fmt.Errorf("adopting session %s: %w", id, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fences != gen {
		// Fenced meanwhile: the row may be another node's soon.
		return Session{}, fmt.Errorf("adopting session %s: %w", id, ErrSessionMoved)
	}
	n.s.admit(s, size)
	delete(n.moved, id)
	n.log.InfoContext(ctx, "session adopted from its row", "session", id, "state", r.State)
	return s.snapshot(), nil
}

// EndOrphan ends session id, whose row names this node (the cluster's
// sweep has just claimed it from a node that is gone, idle past its TTL):
// it is taken in from its row (Adopt), then ended at once as the reaper
// ends an idle session, with reason: the row ends, its plan slot is freed
// and its home, image included, removed. It does not wait for the idle
// clock of the adopted session (Adopt restarts it for a row that was
// running). A session whose image is gone, or that was caught in creation
// or in its end, is ended "sandbox lost" by Adopt and whatever is left of
// its home removed; EndOrphan then answers nil as well. A row another
// node owns answers ErrSessionMoved, an ended or unknown one ErrNotFound.
func (n *Node) EndOrphan(ctx context.Context, id, reason string) error {
	if _, err := n.Adopt(ctx, id); errors.Is(err, ErrSessionLost) {
		// The row is ended, and names this node: nobody mounts its image.
		if err := host.DropHome(ctx, n.boxes.home(id)); err != nil {
			return fmt.Errorf("ending orphaned session %s: %w", id, err)
		}
		n.log.InfoContext(ctx, "session reaped", "session", id, "reason", "sandbox lost")
		return nil
	} else if err != nil {
		return fmt.Errorf("ending orphaned session %s: %w", id, err)
	}
	n.mu.Lock()
	s := n.s.lookup(id)
	n.mu.Unlock()
	if s == nil {
		return fmt.Errorf("ending orphaned session %s: %w", id, ErrNotFound)
	}
	if err := n.s.endSessionOf(ctx, s, reason); err != nil {
		return fmt.Errorf("ending orphaned session %s: %w", id, err)
	}
	n.log.InfoContext(ctx, "session reaped", "session", id, "reason", reason)
	return nil
}

// waitLetGo waits, within ctx, until the object of session id that this
// executor let go of last (if any) is idle: no call holds or waits for
// it, and no hibernation, resume, fork or end of it runs. What is left
// of such work acts by the session's id (its sandbox, its mount, its row,
// a call's "sandbox lost"): it must be over before a new object of the
// same id is served. A ctx that ends first answers ErrSessionMoved (try
// again).
func (n *Node) waitLetGo(ctx context.Context, id string) error {
	for {
		n.mu.Lock()
		old := n.moved[id]
		busy := old != nil && old.busy > 0
		n.mu.Unlock()
		if old == nil {
			return nil
		}
		if !busy && old.life.TryLock() {
			old.life.Unlock()
			n.mu.Lock()
			idle := old.busy == 0
			n.mu.Unlock()
			if idle {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("adopting session %s: the session let go of is still busy: %w", id, ErrSessionMoved)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Fence lets go of every session at once, for a node whose lease is lost
// (another node may own its sessions soon): their sandboxes are killed,
// their homes unmounted, their networks released and the sessions
// forgotten, WITHOUT a store write. Their rows still name this node: after
// the node has registered again, their next call adopts them (Adopt); or
// another node claims them once the lease has run out. A call in flight
// on one answers ErrSessionMoved; a resume that is mounting a home is
// stopped waiting for its image and waited for, and its mount undone,
// before Fence returns. Warm sandboxes and stateless calls hold nothing
// another node could take and are left alone (unless the node's hold had
// passed: its fence process may have killed the warm ones, which go). A
// Fence that worked disarms the fence process (HoldUntil). Safe for
// concurrent use; a kill or unmount that has not worked when ctx ends is
// an error.
func (n *Node) Fence(ctx context.Context) error {
	start := time.Now()
	// Past the hold, the fence process may have killed every sandbox
	// under this node's root: the warm ones too, which go (the pool
	// fills again).
	if n.holdPassed() {
		n.pool.drop()
	}
	n.mu.Lock()
	n.fences++
	victims := n.s.served()
	for _, s := range victims {
		n.letGo(s)
	}
	// Mounts in progress (a resume inside mountHome) may complete after
	// killHomes has looked: they are waited for, then looked at again.
	var mounting []*mountOp
	for _, s := range victims {
		if op := n.mounting[s.id]; op != nil {
			op.cancel() // no more waiting for the image to be free
			mounting = append(mounting, op)
		}
	}
	n.mu.Unlock()
	kctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		kctx, cancel = context.WithTimeout(ctx, clearBudget)
		defer cancel()
	}
	err := n.killHomes(kctx, victims)
	if len(mounting) > 0 {
		var werr error
		for _, op := range mounting {
			select {
			case <-op.done:
			case <-kctx.Done():
				werr = fmt.Errorf("a mount in progress did not finish: %w", kctx.Err())
			}
			if werr != nil {
				break
			}
		}
		err = errors.Join(werr, n.killHomes(kctx, victims))
	}
	if err == nil {
		// Let go of everything itself: the fence process need not.
		n.HoldUntil(time.Time{})
	}
	n.log.WarnContext(ctx, "fenced: every session let go of", "sessions", len(victims), "ms", time.Since(start).Milliseconds(), "err", err)
	// The rest (runsc state, networks, node-local files) is not urgent:
	// it goes on after Fence returns; a resume here waits for it.
	if len(victims) > 0 {
		done := make(chan struct{})
		n.mu.Lock()
		for _, s := range victims {
			n.tidying[s.id] = done
		}
		n.mu.Unlock()
		n.bg.Add(1)
		go func() {
			defer n.bg.Done()
			tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := n.tidy(tctx, victims); err != nil {
				n.log.Error("tidying after a fence", "err", err)
			}
			n.mu.Lock()
			for _, s := range victims {
				if n.tidying[s.id] == done {
					delete(n.tidying, s.id)
				}
			}
			n.mu.Unlock()
			close(done)
		}()
	}
	return err
}

// letGo forgets s: it leaves the session table (into moved), and its
// sandbox and home stop counting. Idempotent; mu is held.
func (n *Node) letGo(s *session) {
	if s.gone {
		return
	}
	s.gone = true
	n.s.forget(s)
	n.moved[s.id] = s
}

// mountOp is a mount of a session's home in progress (a resume).
type mountOp struct {
	// done is closed once the mount serves or has been undone.
	done chan struct{}
	// cancel ends the mount's wait for its image to be free (Fence).
	cancel context.CancelFunc
}

// beginMount records that s's home is about to be mounted (a resume),
// so that a Fence cuts its wait for the image short, waits for the mount
// and looks again. ctx is the resume's: the returned context is ended by
// such a Fence. Nothing is recorded, and ErrSessionMoved returned, when s
// was let go of already. endMount(s.id, op) ends it, after whatever the
// mount left has been undone or the session serves.
func (n *Node) beginMount(ctx context.Context, s *session) (context.Context, *mountOp, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.gone {
		return nil, nil, fmt.Errorf("session %s: %w", s.id, ErrSessionMoved)
	}
	mctx, cancel := context.WithCancel(ctx)
	op := &mountOp{done: make(chan struct{}), cancel: cancel}
	n.mounting[s.id] = op
	return mctx, op, nil
}

// endMount ends the mount in progress op of session id (beginMount).
// Idempotent.
func (n *Node) endMount(id string, op *mountOp) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mounting[id] == op {
		delete(n.mounting, id)
	}
	op.cancel()
	select {
	case <-op.done:
	default:
		close(op.done)
	}
}

// fenceGen is how many times every session was let go of so far: work
// that makes a session keeps it only if no Fence came meanwhile.
func (n *Node) fenceGen() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.fences
}

// goneErr is the answer of a call that finds s gone: ErrSessionMoved
// only when another node owns the session now or may soon, ErrNotFound
// otherwise. A session that ended here (a concurrent delete, the end
// after a lost sandbox), any gone session on a single node (no other node
// can own it), and one whose row is ended or missing are not found. A
// session let go of whose row names another node, or still this node's
// (fenced: the next call adopts it again, or another node claims it), has
// moved; so has one whose row cannot be read (try again).
func (n *Node) goneErr(ctx context.Context, s *session) error {
	n.mu.Lock()
	ended := s.ended
	n.mu.Unlock()
	if ended || n.store.Node() == "" {
		return fmt.Errorf("session %s: %w", s.id, ErrNotFound)
	}
	r, err := n.store.GetSession(context.WithoutCancel(ctx), s.id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("session %s: %w", s.id, ErrNotFound)
	case err != nil:
		n.log.WarnContext(ctx, "reading the row of a session let go of", "session", s.id, "err", err)
	case sandbox.DoneStates.Has(r.State) || !r.EndedAt.IsZero():
		return fmt.Errorf("session %s: %w", s.id, ErrNotFound)
	}
	return fmt.Errorf("session %s: %w", s.id, ErrSessionMoved)
}

// isGone reports whether s was let go of.
func (n *Node) isGone(s *session) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return s.gone
}

// notOwner turns a store write that found s owned by another node
// (store.ErrNotOwner) into ErrSessionMoved, after letting go of s: its
// sandbox is killed, its home unmounted, its node-local files removed;
// its image and row are the new owner's. Any other error is returned as
// it is. The caller may hold s.life.
func (n *Node) notOwner(ctx context.Context, s *session, err error) error {
	if !errors.Is(err, store.ErrNotOwner) {
		return err
	}
	n.mu.Lock()
	n.letGo(s)
	n.mu.Unlock()
	if cerr := n.clearHost(context.WithoutCancel(ctx), []*session{s}); cerr != nil {
		n.log.ErrorContext(ctx, "letting go of a session another node took", "session", s.id, "err", cerr)
	}
	n.log.WarnContext(ctx, "session moved to another node: let go of", "session", s.id, "err", err)
	return fmt.Errorf("session %s: %w", s.id, ErrSessionMoved)
}

// clearBudget bounds how long clearHost tries to kill and unmount when
// the caller's context has no deadline.
const clearBudget = 5 * time.Second

// clearHost removes what the sessions ss (let go of) hold on this host:
// their sandbox processes and home mounts (killHomes), then their runsc
// state, networks and node-local files (tidy). Images and store rows are
// not touched.
func (n *Node) clearHost(ctx context.Context, ss []*session) error {
	if len(ss) == 0 {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, clearBudget)
		defer cancel()
	}
	return errors.Join(n.killHomes(ctx, ss), n.tidy(ctx, ss))
}

// killHomes is the urgent part of letting go: fast and for all sessions
// ss at once, SIGKILL to their sandboxes' processes (and their install
// jobs') and the unmount of their homes, retried until none is left or
// ctx ends; then it waits for their images to settle (settleImage). ctx
// must have a deadline.
func (n *Node) killHomes(ctx context.Context, ss []*session) error {
	ids := make(map[string]bool, len(ss))
	n.mu.Lock()
	for _, s := range ss {
		ids[s.id] = true
		if s.job != "" {
			ids[s.job] = true // an install job on its home
		}
	}
	n.mu.Unlock()
	for id := range ids {
		n.agents.Drop(id) // calls in flight fail now
	}
	for _, s := range ss {
		host.ThawHome(n.boxes.dir(s.id)) // a fork's freeze would hold the unmount
	}
	for {
		procs := host.KillSandboxProcesses(n.runsc.Root, ids)
		var left []error
		for _, s := range ss {
			mnt := host.HomeMount(n.boxes.dir(s.id))
			if !host.Mounted(mnt) {
				continue
			}
			if err := unix.Unmount(mnt, 0); err != nil && !errors.Is(err, unix.EINVAL) {
				left = append(left, fmt.Errorf("unmounting %s: %w", mnt, err))
			}
		}
		if procs == 0 && len(left) == 0 {
			break
		}
		if ctx.Err() != nil {
			if procs > 0 {
				left = append(left, fmt.Errorf("%d sandbox processes still alive", procs))
			}
			return errors.Join(left...)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Unmounted; the image is whole once its loop device has let go.
	deadline, _ := ctx.Deadline()
	var errs []error
	for _, s := range ss {
		if err := host.SettleImage(n.boxes.home(s.id).Image(), n.boxes.home(s.id).Mount(), deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// tidy removes what dead sandboxes of the sessions ss left: runsc state
// and cgroups, networks, node-local files; a few at a time (runsc is
// heavy on a small host).
func (n *Node) tidy(ctx context.Context, ss []*session) error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for _, s := range ss {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var serrs []error
			if err := n.runsc.Destroy(ctx, s.id); err != nil {
				serrs = append(serrs, err)
			}
			if n.nets.NetworkAvailable() && n.nets.networkHeld(s) {
				if err := n.nets.Network().Detach(ctx, s.id); err != nil {
					serrs = append(serrs, err)
				}
			}
			if !host.Mounted(host.HomeMount(n.boxes.dir(s.id))) {
				if err := host.DropLocal(n.boxes.home(s.id)); err != nil {
					serrs = append(serrs, err)
				}
			}
			mu.Lock()
			errs = append(errs, serrs...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitTidy waits until the tidying after a Fence of session id is done,
// so that a resume here (adopted again) does not race it.
func (n *Node) waitTidy(ctx context.Context, id string) {
	n.mu.Lock()
	done := n.tidying[id]
	n.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// releaseSessions hands this node's sessions over to the cluster at the
// end of Stop (cluster mode): whatever a session still holds on the host
// goes first, then every row this node owns becomes unowned, claimable at
// once by another node.
func (n *Node) releaseSessions(ctx context.Context) error {
	n.mu.Lock()
	n.fences++
	left := n.s.served()
	for _, s := range left {
		n.letGo(s)
	}
	n.mu.Unlock()
	var errs []error
	if err := n.clearHost(ctx, left); err != nil {
		// Handed over even so: the node is going, and its rows would be
		// claimable as soon as its lease is expired anyway.
		errs = append(errs, err)
	}
	ids, err := n.store.ReleaseSessions(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	n.log.InfoContext(ctx, "sessions handed over", "count", len(ids), "err", errors.Join(errs...))
	return errors.Join(errs...)
}
