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
func (e *Executor) Has(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.sessions[id]
	return ok
}

// Capacity is how many sandboxes this executor may run at once
// (executor.max_sandboxes).
func (e *Executor) Capacity() int { return e.cfg.MaxSandboxes }

// Free is how many more sandboxes this executor could start now.
func (e *Executor) Free() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return max(0, e.cfg.MaxSandboxes-e.live)
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
func (e *Executor) HoldUntil(t time.Time) {
	e.mu.Lock()
	e.hold = t // for a fence that starts later (the node registers first)
	f := e.fence
	e.mu.Unlock()
	if f != nil {
		f.HoldUntil(t)
	}
}

// fenceSwitch is the dead man's switch, nil on a single node or before
// Start.
func (e *Executor) fenceSwitch() *fence.Switch {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fence
}

// holdPassed reports whether the deadline of the last HoldUntil has
// passed: the fence process may have killed this node's sandboxes and
// unmounted its homes, and the node's lease may be another's by now. A
// sandbox found dead then was fenced, not lost; no home may be mounted.
func (e *Executor) holdPassed() bool {
	f := e.fenceSwitch()
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
func (e *Executor) Adopt(ctx context.Context, id string) (Session, error) {
	if err := e.waitLetGo(ctx, id); err != nil {
		return Session{}, err
	}
	e.adoptMu.Lock()
	defer e.adoptMu.Unlock()
	e.mu.Lock()
	if s, ok := e.sessions[id]; ok {
		snap := s.snapshot()
		e.mu.Unlock()
		return snap, nil
	}
	started, gen := e.started, e.fences
	e.mu.Unlock()
	if !started {
		return Session{}, ErrNotStarted
	}
	r, err := e.store.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return Session{}, ErrNotFound
	}
	if err != nil {
		return Session{}, fmt.Errorf("adopting session %s: %w", id, err)
	}
	if r.Node != e.store.Node() {
		return Session{}, fmt.Errorf("adopting session %s (owner %q): %w", id, r.Node, ErrSessionMoved)
	}
	if r.State == StateEnded {
		return Session{}, ErrNotFound
	}
	rt, err := e.rt.LookupVersion(r.Language, r.Version)
	if err != nil {
		return Session{}, fmt.Errorf("adopting session %s: %w", id, err)
	}
	h := e.home(id)
	fi, ierr := os.Stat(h.Image())
	if ierr != nil && !errors.Is(ierr, fs.ErrNotExist) {
		// Shared storage that does not answer is not a lost session.
		return Session{}, fmt.Errorf("adopting session %s: %w", id, ierr)
	}
	if !sandbox.HomeStates.Has(r.State) {
		ierr = fmt.Errorf("state %s", r.State) // caught in creation or in its end
	}
	if ierr != nil {
		if err := e.store.SetSessionState(ctx, id, StateEnded, "sandbox lost", true); errors.Is(err, store.ErrNotOwner) {
			return Session{}, fmt.Errorf("adopting session %s: %w", id, ErrSessionMoved)
		} else if err != nil {
			return Session{}, fmt.Errorf("ending lost session %s: %w", id, err)
		}
		e.log.WarnContext(ctx, "session lost: no home image to adopt", "session", id, "state", r.State, "image", h.Image(), "err", ierr)
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
	} else if err := e.store.SetSessionHibernated(ctx, id, now, now); errors.Is(err, store.ErrNotOwner) {
		return Session{}, fmt.Errorf("adopting session %s: %w", id, ErrSessionMoved)
	} else if err != nil {
		return Session{}, fmt.Errorf("adopting session %s: %w", id, err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fences != gen {
		// Fenced meanwhile: the row may be another node's soon.
		return Session{}, fmt.Errorf("adopting session %s: %w", id, ErrSessionMoved)
	}
	e.sessions[id] = s
	delete(e.moved, id)
	e.disk += size
	e.log.InfoContext(ctx, "session adopted from its row", "session", id, "state", r.State)
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
func (e *Executor) EndOrphan(ctx context.Context, id, reason string) error {
	if _, err := e.Adopt(ctx, id); errors.Is(err, ErrSessionLost) {
		// The row is ended, and names this node: nobody mounts its image.
		if err := host.DropHome(ctx, e.home(id)); err != nil {
			return fmt.Errorf("ending orphaned session %s: %w", id, err)
		}
		e.log.InfoContext(ctx, "session reaped", "session", id, "reason", "sandbox lost")
		return nil
	} else if err != nil {
		return fmt.Errorf("ending orphaned session %s: %w", id, err)
	}
	e.mu.Lock()
	s, ok := e.sessions[id]
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("ending orphaned session %s: %w", id, ErrNotFound)
	}
	if err := e.endSessionOf(ctx, s, reason); err != nil {
		return fmt.Errorf("ending orphaned session %s: %w", id, err)
	}
	e.log.InfoContext(ctx, "session reaped", "session", id, "reason", reason)
	return nil
}

// waitLetGo waits, within ctx, until the object of session id that this
// executor let go of last (if any) is idle: no call holds or waits for
// it, and no hibernation, resume, fork or end of it runs. What is left
// of such work acts by the session's id (its sandbox, its mount, its row,
// a call's "sandbox lost"): it must be over before a new object of the
// same id is served. A ctx that ends first answers ErrSessionMoved (try
// again).
func (e *Executor) waitLetGo(ctx context.Context, id string) error {
	for {
		e.mu.Lock()
		old := e.moved[id]
		busy := old != nil && old.busy > 0
		e.mu.Unlock()
		if old == nil {
			return nil
		}
		if !busy && old.life.TryLock() {
			old.life.Unlock()
			e.mu.Lock()
			idle := old.busy == 0
			e.mu.Unlock()
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
func (e *Executor) Fence(ctx context.Context) error {
	start := time.Now()
	// Past the hold, the fence process may have killed every sandbox
	// under this node's root: the warm ones too, which go (the pool
	// fills again).
	if e.holdPassed() {
		e.dropWarm()
	}
	e.mu.Lock()
	e.fences++
	victims := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		victims = append(victims, s)
	}
	for _, s := range victims {
		e.letGo(s)
	}
	// Mounts in progress (a resume inside mountHome) may complete after
	// killHomes has looked: they are waited for, then looked at again.
	var mounting []*mountOp
	for _, s := range victims {
		if op := e.mounting[s.id]; op != nil {
			op.cancel() // no more waiting for the image to be free
			mounting = append(mounting, op)
		}
	}
	e.mu.Unlock()
	kctx := ctx
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		kctx, cancel = context.WithTimeout(ctx, clearBudget)
		defer cancel()
	}
	err := e.killHomes(kctx, victims)
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
		err = errors.Join(werr, e.killHomes(kctx, victims))
	}
	if err == nil {
		// Let go of everything itself: the fence process need not.
		e.HoldUntil(time.Time{})
	}
	e.log.WarnContext(ctx, "fenced: every session let go of", "sessions", len(victims), "ms", time.Since(start).Milliseconds(), "err", err)
	// The rest (runsc state, networks, node-local files) is not urgent:
	// it goes on after Fence returns; a resume here waits for it.
	if len(victims) > 0 {
		done := make(chan struct{})
		e.mu.Lock()
		for _, s := range victims {
			e.tidying[s.id] = done
		}
		e.mu.Unlock()
		e.bg.Add(1)
		go func() {
			defer e.bg.Done()
			tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := e.tidy(tctx, victims); err != nil {
				e.log.Error("tidying after a fence", "err", err)
			}
			e.mu.Lock()
			for _, s := range victims {
				if e.tidying[s.id] == done {
					delete(e.tidying, s.id)
				}
			}
			e.mu.Unlock()
			close(done)
		}()
	}
	return err
}

// dropWarm empties the warm pool, and makes every warm sandbox prepared
// so far stale (one may still be on its way in): they are destroyed in
// the background, and the pool fills again.
func (e *Executor) dropWarm() {
	e.mu.Lock()
	e.warmGen++
	e.mu.Unlock()
	for {
		select {
		case ws := <-e.warm:
			e.discardWarm(ws)
		default:
			return
		}
	}
}

// discardWarm destroys warm sandbox ws in the background.
func (e *Executor) discardWarm(ws warmSandbox) {
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := e.destroySandbox(ctx, ws.id); err != nil {
			e.log.Error("dropping a stale warm sandbox", "sandbox", ws.id, "err", err)
		}
	}()
}

// letGo forgets s: it leaves the session table (into moved), and its
// sandbox and home stop counting. Idempotent; e.mu is held.
func (e *Executor) letGo(s *session) {
	if s.gone {
		return
	}
	s.gone = true
	if e.sessions[s.id] == s {
		delete(e.sessions, s.id)
	}
	e.moved[s.id] = s
	if s.hasSandbox {
		s.hasSandbox = false
		e.live--
	}
	e.disk -= s.diskBytes + s.ckpt.Bytes
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
func (e *Executor) beginMount(ctx context.Context, s *session) (context.Context, *mountOp, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.gone {
		return nil, nil, fmt.Errorf("session %s: %w", s.id, ErrSessionMoved)
	}
	mctx, cancel := context.WithCancel(ctx)
	op := &mountOp{done: make(chan struct{}), cancel: cancel}
	e.mounting[s.id] = op
	return mctx, op, nil
}

// endMount ends the mount in progress op of session id (beginMount).
// Idempotent.
func (e *Executor) endMount(id string, op *mountOp) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mounting[id] == op {
		delete(e.mounting, id)
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
func (e *Executor) fenceGen() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.fences
}

// goneErr is the answer of a call that finds s gone: ErrSessionMoved
// only when another node owns the session now or may soon, ErrNotFound
// otherwise. A session that ended here (a concurrent delete, the end
// after a lost sandbox), any gone session on a single node (no other node
// can own it), and one whose row is ended or missing are not found. A
// session let go of whose row names another node, or still this node's
// (fenced: the next call adopts it again, or another node claims it), has
// moved; so has one whose row cannot be read (try again).
func (e *Executor) goneErr(ctx context.Context, s *session) error {
	e.mu.Lock()
	ended := s.ended
	e.mu.Unlock()
	if ended || e.store.Node() == "" {
		return fmt.Errorf("session %s: %w", s.id, ErrNotFound)
	}
	r, err := e.store.GetSession(context.WithoutCancel(ctx), s.id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("session %s: %w", s.id, ErrNotFound)
	case err != nil:
		e.log.WarnContext(ctx, "reading the row of a session let go of", "session", s.id, "err", err)
	case sandbox.DoneStates.Has(r.State) || !r.EndedAt.IsZero():
		return fmt.Errorf("session %s: %w", s.id, ErrNotFound)
	}
	return fmt.Errorf("session %s: %w", s.id, ErrSessionMoved)
}

// isGone reports whether s was let go of.
func (e *Executor) isGone(s *session) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return s.gone
}

// notOwner turns a store write that found s owned by another node
// (store.ErrNotOwner) into ErrSessionMoved, after letting go of s: its
// sandbox is killed, its home unmounted, its node-local files removed;
// its image and row are the new owner's. Any other error is returned as
// it is. The caller may hold s.life.
func (e *Executor) notOwner(ctx context.Context, s *session, err error) error {
	if !errors.Is(err, store.ErrNotOwner) {
		return err
	}
	e.mu.Lock()
	e.letGo(s)
	e.mu.Unlock()
	if cerr := e.clearHost(context.WithoutCancel(ctx), []*session{s}); cerr != nil {
		e.log.ErrorContext(ctx, "letting go of a session another node took", "session", s.id, "err", cerr)
	}
	e.log.WarnContext(ctx, "session moved to another node: let go of", "session", s.id, "err", err)
	return fmt.Errorf("session %s: %w", s.id, ErrSessionMoved)
}

// clearBudget bounds how long clearHost tries to kill and unmount when
// the caller's context has no deadline.
const clearBudget = 5 * time.Second

// clearHost removes what the sessions ss (let go of) hold on this host:
// their sandbox processes and home mounts (killHomes), then their runsc
// state, networks and node-local files (tidy). Images and store rows are
// not touched.
func (e *Executor) clearHost(ctx context.Context, ss []*session) error {
	if len(ss) == 0 {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, clearBudget)
		defer cancel()
	}
	return errors.Join(e.killHomes(ctx, ss), e.tidy(ctx, ss))
}

// killHomes is the urgent part of letting go: fast and for all sessions
// ss at once, SIGKILL to their sandboxes' processes (and their install
// jobs') and the unmount of their homes, retried until none is left or
// ctx ends; then it waits for their images to settle (settleImage). ctx
// must have a deadline.
func (e *Executor) killHomes(ctx context.Context, ss []*session) error {
	ids := make(map[string]bool, len(ss))
	e.mu.Lock()
	for _, s := range ss {
		ids[s.id] = true
		if s.job != "" {
			ids[s.job] = true // an install job on its home
		}
	}
	e.mu.Unlock()
	for id := range ids {
		e.agents.Drop(id) // calls in flight fail now
	}
	for _, s := range ss {
		host.ThawHome(e.dir(s.id)) // a fork's freeze would hold the unmount
	}
	for {
		procs := host.KillSandboxProcesses(e.runsc.Root, ids)
		var left []error
		for _, s := range ss {
			mnt := host.HomeMount(e.dir(s.id))
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
		if err := host.SettleImage(e.home(s.id).Image(), deadline); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// tidy removes what dead sandboxes of the sessions ss left: runsc state
// and cgroups, networks, node-local files; a few at a time (runsc is
// heavy on a small host).
func (e *Executor) tidy(ctx context.Context, ss []*session) error {
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
			if err := e.runsc.Destroy(ctx, s.id); err != nil {
				serrs = append(serrs, err)
			}
			if e.net != nil && e.networkHeld(s) {
				if err := e.net.Detach(ctx, s.id); err != nil {
					serrs = append(serrs, err)
				}
			}
			if !host.Mounted(host.HomeMount(e.dir(s.id))) {
				if err := host.DropLocal(e.home(s.id)); err != nil {
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
func (e *Executor) waitTidy(ctx context.Context, id string) {
	e.mu.Lock()
	done := e.tidying[id]
	e.mu.Unlock()
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
func (e *Executor) releaseSessions(ctx context.Context) error {
	e.mu.Lock()
	e.fences++
	left := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		left = append(left, s)
	}
	for _, s := range left {
		e.letGo(s)
	}
	e.mu.Unlock()
	var errs []error
	if err := e.clearHost(ctx, left); err != nil {
		// Handed over even so: the node is going, and its rows would be
		// claimable as soon as its lease is expired anyway.
		errs = append(errs, err)
	}
	ids, err := e.store.ReleaseSessions(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	e.log.InfoContext(ctx, "sessions handed over", "count", len(ids), "err", errors.Join(errs...))
	return errors.Join(errs...)
}
