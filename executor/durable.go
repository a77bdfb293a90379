package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/store"
)

// Durable sessions. A session is its home image, its store row and its
// install manifest (in the home); its sandbox is a cache. Hibernation
// takes the sandbox, network and mount away and keeps the rest; a resume
// mounts the same image into a new sandbox. Every transition writes the
// store first, so that a crash at any point leaves on the next start a
// session that is either whole (served hibernated) or cleanly ended:
//
//	hibernate: row hibernating -> sandbox, network, mount go -> row hibernated
//	resume:    row resuming -> mount, network, sandbox -> row running
//	fork:      child row creating -> copy of the image -> child row hibernated
//
// Hibernating and resuming are store-only states (sandbox.State.StoreOnly):
// in memory the session goes from running to hibernated and back in one
// move. reconcile (executor.go) serves rows in sandbox.HomeStates
// (running, hibernating, hibernated, resuming) as hibernated when their
// image exists (adopting a running sandbox as before), and ends the rest.

// The fault-hook steps of hibernate, resume and fork (tests only).
const (
	stepHibernateStore   createStep = "hibernate_store"   // row moved to hibernating
	stepHibernateSandbox createStep = "hibernate_sandbox" // sandbox and network gone
	stepResumeStore      createStep = "resume_store"      // row moved to resuming
	stepResumeMounting   createStep = "resume_mounting"   // about to mount the home (a slow mountHome)
	stepResumeMount      createStep = "resume_mount"      // home mounted
	stepResumeRunsc      createStep = "resume_runsc"      // sandbox started
	stepRunLost          createStep = "run_lost"          // a run got no result: lost() is about to decide
	stepForkInsert       createStep = "fork_insert"       // child row, state creating
	stepForkCopy         createStep = "fork_copy"         // child image written
)

// HibernateSession hibernates owner's session at once: it waits for a call
// in progress, then releases the sandbox, network and mount. A session
// that is already hibernated is left as it is.
func (d *Durable) HibernateSession(ctx context.Context, owner, id string) (Session, error) {
	s, ok := d.s.holdSession(owner, id)
	if !ok {
		return Session{}, ErrNotFound
	}
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		d.mu.Lock()
		s.busy--
		d.mu.Unlock()
		return Session{}, ctx.Err()
	}
	err := d.hibernate(context.WithoutCancel(ctx), s, "requested")
	d.mu.Lock()
	s.busy--
	snap := s.snapshot()
	d.mu.Unlock()
	<-s.lock
	return snap, err
}

// hibernate releases s's sandbox, network and home mount and records the
// session hibernated. The caller keeps executes away (holds s.lock, or is
// Stop). A hibernated session is fine; any other state is ErrBadState.
func (d *Durable) hibernate(ctx context.Context, s *session, reason string) error {
	s.life.Lock()
	defer s.life.Unlock()
	d.mu.Lock()
	st, had, lastUsed, gone, live := s.state, s.hasSandbox, s.lastUsed, s.gone, s.live
	d.mu.Unlock()
	if gone {
		return d.node.goneErr(ctx, s)
	}
	if st == StateHibernated {
		return nil
	}
	if st != StateRunning {
		return fmt.Errorf("%w: %s", ErrBadState, st)
	}
	start := time.Now()
	if err := d.store.SetSessionState(ctx, s.id, StateHibernating, "", false); err != nil {
		return d.node.notOwner(ctx, s, err)
	}
	if err := d.s.fault(stepHibernateStore, s.id); err != nil {
		return err
	}
	// Let go of meanwhile (Fence): what the session held here is the
	// Fence's to remove, and its row is not ours to write. (An Adopt of
	// the same id waits until this is over: waitLetGo.)
	moved := func() error {
		if d.node.isGone(s) {
			return fmt.Errorf("session %s: %w", s.id, ErrSessionMoved)
		}
		return nil
	}
	if err := moved(); err != nil {
		return err
	}
	// A sandbox that holds memory is saved first (checkpoint.go); one
	// that cannot be is hibernated as any other, and says why.
	var ck store.Checkpoint
	memLost := ""
	if had && live {
		var err error
		if ck, err = d.ckpts.saveMemory(ctx, s, false); err != nil {
			memLost = lostSaveFailed
			if errors.Is(err, ErrNoStorage) {
				memLost = lostNoDisk
			}
			d.log.WarnContext(ctx, "saving session memory failed: hibernating on its files", "session", s.id, "err", err)
			if err := d.store.SetSessionCheckpoint(ctx, s.id, false, store.Checkpoint{}); err != nil {
				return d.node.notOwner(ctx, s, err)
			}
		}
	}
	var errs []error
	if had {
		if err := d.agents.Destroy(ctx, s.id); err != nil {
			errs = append(errs, err)
		}
		if d.nets.NetworkAvailable() && d.nets.networkHeld(s) {
			if err := d.nets.Network().Detach(ctx, s.id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := d.s.fault(stepHibernateSandbox, s.id); err != nil {
		return err
	}
	if err := moved(); err != nil {
		return err
	}
	// The sandbox is gone whatever failed above: the session is
	// hibernated from here on (a resume starts from a clean slate).
	d.s.sandboxGone(s)
	// A mount that will not go stays (never lazily: the same image must
	// not be mounted twice); the next resume uses it.
	if err := host.UnmountHome(d.boxes.dir(s.id)); err != nil {
		errs = append(errs, err)
	} else if err := host.WaitImageFree(ctx, d.boxes.home(s.id).Image(), d.boxes.home(s.id).Mount(), 2*time.Second); err != nil {
		// The kernel frees the loop device a moment after the unmount:
		// a hibernated session holds none, and a node taking it over
		// (after a drain) finds its image free.
		errs = append(errs, err)
	}
	if err := moved(); err != nil {
		return err
	}
	now := time.Now()
	if err := d.store.SetSessionHibernated(ctx, s.id, now, lastUsed); errors.Is(err, store.ErrNotOwner) {
		return d.node.notOwner(ctx, s, err)
	} else if err != nil {
		errs = append(errs, err)
	}
	d.mu.Lock()
	d.s.move(s, StateHibernated)
	s.hibernatedAt, s.netEnv, s.netAttached = now, nil, false
	if had && live {
		s.ckpt, s.memLost, s.live = ck, memLost, ck.Path != ""
		s.liveStored = s.live // SetSessionCheckpoint wrote it
	}
	d.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		d.log.WarnContext(ctx, "hibernating session", "session", s.id, "err", err)
	}
	d.log.InfoContext(ctx, "session hibernated", "session", s.id, "reason", reason, "ms", time.Since(start).Milliseconds())
	return nil
}

// resume starts a sandbox on a hibernated session's home, with its network
// re-attached under the same request. The caller holds s.lock, so
// concurrent calls resume once: the others find it running. What a failed
// resume took is given back and the session stays hibernated. The resume
// is not cancelled with the caller: the calls waiting behind it want it.
func (d *Durable) resume(ctx context.Context, s *session) (took time.Duration, err error) {
	s.life.Lock()
	defer s.life.Unlock()
	d.mu.Lock()
	st, hibAt, lastUsed, gone := s.state, s.hibernatedAt, s.lastUsed, s.gone
	d.mu.Unlock()
	if gone {
		return 0, d.node.goneErr(ctx, s)
	}
	if st == StateRunning {
		return 0, nil
	}
	if s.runtime.unavailable != nil {
		// Its version left the runtimes file: the session and its home
		// stay (a rootfs with the version back serves it again).
		return 0, fmt.Errorf("session %s: %w", s.id, s.runtime.unavailable)
	}
	if st != StateHibernated {
		return 0, fmt.Errorf("%w: %s", ErrBadState, st)
	}
	if d.node.holdPassed() {
		// The node has not renewed its lease in time (it was stopped):
		// its fence may have fired, and the node fences at once.
		return 0, fmt.Errorf("session %s: lease not held: %w", s.id, ErrSessionMoved)
	}
	start := time.Now()
	d.node.waitTidy(ctx, s.id) // adopted again right after a Fence
	cu := newCleanup(d.log)
	defer func() {
		if v := recover(); v != nil {
			perr := &PanicError{Value: v, Stack: debug.Stack()}
			d.log.ErrorContext(ctx, "resuming session panicked", "panic", v, "stack", string(perr.Stack))
			err = fmt.Errorf("resuming session: %w", perr)
		}
	}()
	defer cu.Clean()
	if err := d.s.reserve(); err != nil {
		return 0, err
	}
	cu.Add("capacity slot", func(context.Context) error { d.s.release(); return nil })
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.CreateTimeout)
	defer cancel()
	id, dir := s.id, d.boxes.dir(s.id)
	if err := d.store.SetSessionState(ctx, id, StateResuming, "", false); err != nil {
		return 0, d.node.notOwner(ctx, s, err)
	}
	cu.Add("store row", func(ctx context.Context) error {
		if d.node.isGone(s) {
			return nil // let go of (Fence): the row is not ours to write
		}
		return d.store.SetSessionHibernated(ctx, id, hibAt, lastUsed)
	})
	if err := d.s.fault(stepResumeStore, id); err != nil {
		return 0, err
	}
	// A Fence that comes while the home is being mounted waits until the
	// mount has been undone (or serves, where the Fence finds it).
	mctx, mount, err := d.node.beginMount(ctx, s)
	if err != nil {
		return 0, err
	}
	cu.Add("mount in progress", func(context.Context) error { d.node.endMount(id, mount); return nil })
	cu.Add("home mount", func(context.Context) error { return host.UnmountHome(dir) })
	if err := d.s.fault(stepResumeMounting, id); err != nil {
		return 0, err
	}
	tMount := time.Now()
	// The wait for the image (a loop device of this host still on it) is
	// cut short by a Fence; the mount itself is not (a mount killed
	// half-way may leave a loop device).
	if !host.Mounted(host.HomeMount(dir)) {
		if err := host.WaitImageFree(mctx, d.boxes.home(id).Image(), d.boxes.home(id).Mount(), host.ImageBusyWait); err != nil {
			if d.node.isGone(s) {
				return 0, fmt.Errorf("session %s: %w", id, ErrSessionMoved)
			}
			return 0, fmt.Errorf("mounting home: %w", err)
		}
	}
	if d.node.isGone(s) {
		return 0, fmt.Errorf("session %s: %w", id, ErrSessionMoved)
	}
	if err := host.MountHome(ctx, d.boxes.home(id)); err != nil {
		return 0, fmt.Errorf("mounting home: %w", err)
	}
	if d.node.isGone(s) {
		// Fenced while it mounted: the image may be another node's soon.
		return 0, fmt.Errorf("session %s: %w", id, ErrSessionMoved)
	}
	if err := d.s.fault(stepResumeMount, id); err != nil {
		return 0, err
	}
	mountTook := time.Since(tMount)
	netns := ""
	var netEnv []string
	tNet := time.Now()
	if s.network.Enabled {
		if !d.nets.NetworkAvailable() {
			return 0, ErrNoNetwork
		}
		cu.Add("network", func(ctx context.Context) error { return d.nets.Network().Detach(ctx, id) })
		att, err := d.nets.attach(ctx, id, dir, s.network)
		if err != nil {
			return 0, err
		}
		netns, netEnv = att.NetnsPath, att.Env
	}
	netTook := time.Since(tNet)
	tSandbox := time.Now()
	bundle, err := d.boxes.writeBundle(id, dir, netns)
	if err != nil {
		return 0, err
	}
	if d.node.isGone(s) {
		return 0, fmt.Errorf("session %s: %w", id, ErrSessionMoved)
	}
	cu.Add("sandbox", func(ctx context.Context) error { return d.agents.Destroy(ctx, id) })
	// Memory first (checkpoint.go): a restore that cannot be done leaves
	// no sandbox, and the session starts on its files.
	mem := d.ckpts.restoreMemory(ctx, s, bundle, netns != "")
	if mem == nil || !mem.Restored {
		if err := d.boxes.runSandbox(ctx, id, bundle, netns != ""); err != nil {
			return 0, err
		}
	}
	sandboxTook := time.Since(tSandbox)
	if err := d.s.fault(stepResumeRunsc, id); err != nil {
		return 0, err
	}
	if err := d.store.SetSessionState(ctx, id, StateRunning, "", false); err != nil {
		return 0, d.node.notOwner(ctx, s, err)
	}
	d.mu.Lock()
	if s.gone {
		d.mu.Unlock()
		return 0, fmt.Errorf("session %s: %w", id, ErrSessionMoved)
	}
	d.s.move(s, StateRunning)
	s.hasSandbox, s.netEnv, s.netAttached = true, netEnv, netns != ""
	s.memory, s.memLost = mem, ""
	d.mu.Unlock()
	cu.Release()
	d.node.endMount(id, mount)
	if mem != nil {
		// The image has served (or cannot): it goes, and the row says
		// whether the session still holds memory.
		if err := d.ckpts.dropCheckpoint(ctx, s, mem.Restored); err != nil {
			d.log.WarnContext(ctx, "removing the checkpoint of a resumed session", "session", id, "err", err)
		}
	}
	took = time.Since(start)
	d.log.InfoContext(ctx, "session resumed", "session", id, "ms", took.Milliseconds(), "mount_ms", mountTook.Milliseconds(),
		"network_ms", netTook.Milliseconds(), "sandbox_ms", sandboxTook.Milliseconds())
	return took, nil
}

// ForkSession copies owner's session id into a new hibernated session of
// the same owner: its home is a copy of the source's at this moment (taken
// with the source's file system frozen, without copying unused blocks),
// language and network as in spec or else the source's. The child starts
// on its first call. The caller has counted it against the plan.
func (d *Durable) ForkSession(ctx context.Context, id string, spec ForkSpec) (_ Session, err error) {
	src, ok := d.s.holdSession(spec.Owner, id)
	if !ok {
		return Session{}, ErrNotFound
	}
	defer func() {
		d.mu.Lock()
		src.busy--
		d.mu.Unlock()
	}()
	// A fork keeps its source's version unless it asks for a language.
	lang, version := spec.Language, spec.Version
	if lang == "" {
		lang = src.runtime.Name
		if version == "" {
			version = src.runtime.Series
		}
	}
	rt, err := d.rt.LookupVersion(lang, version)
	if err != nil {
		return Session{}, err
	}
	d.mu.Lock()
	network := src.network // changed under d.mu (UpdateSessionNetwork)
	d.mu.Unlock()
	if spec.Network != nil {
		network = *spec.Network
	}
	if network.Enabled && !d.nets.NetworkAvailable() {
		return Session{}, ErrNoNetwork
	}
	// No execute runs in the source while its image is copied.
	select {
	case src.lock <- struct{}{}:
	case <-ctx.Done():
		return Session{}, ctx.Err()
	}
	defer func() { <-src.lock }()
	src.life.Lock()
	defer src.life.Unlock()
	d.mu.Lock()
	st, gone := src.state, src.gone
	d.mu.Unlock()
	if gone {
		return Session{}, d.node.goneErr(ctx, src)
	}
	if st != StateRunning && st != StateHibernated {
		return Session{}, fmt.Errorf("%w: %s", ErrBadState, st)
	}

	cu := newCleanup(d.log)
	defer func() {
		if v := recover(); v != nil {
			perr := &PanicError{Value: v, Stack: debug.Stack()}
			d.log.ErrorContext(ctx, "forking session panicked", "panic", v, "stack", string(perr.Stack))
			err = fmt.Errorf("forking session: %w", perr)
		}
	}()
	defer cu.Clean()
	if !d.s.isStarted() {
		return Session{}, ErrNotStarted
	}
	gen := d.node.fenceGen()
	size := src.diskBytes
	if err := d.disk.reserve(size); err != nil {
		return Session{}, err
	}
	cu.Add("disk reservation", func(context.Context) error { d.disk.release(size); return nil })
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.CreateTimeout)
	defer cancel()
	start := time.Now()
	childID := newID("sess_")
	h := d.boxes.home(childID)
	row := store.SessionRow{ID: childID, KeyID: spec.Owner, Language: rt.Name, Version: rt.Series, State: StateCreating, Network: string(network.JSON()),
		IdleTTL: src.idleTTL, CreatedAt: start, LastUsedAt: start, DiskBytes: size, ParentID: id, Kernel: src.kernel && rt.Name == kernelLanguage}
	if err := d.store.InsertSession(ctx, row); err != nil {
		return Session{}, err
	}
	cu.Add("store row", func(ctx context.Context) error {
		return d.store.SetSessionState(ctx, childID, StateFailed, "fork failed", true)
	})
	if err := d.s.fault(stepForkInsert, childID); err != nil {
		return Session{}, err
	}
	cu.Add("home", func(ctx context.Context) error { return host.DropHome(ctx, h) })
	// The node-local folder first, then the image's (see makeHome).
	if err := os.MkdirAll(h.Mount(), 0o700); err != nil {
		return Session{}, fmt.Errorf("creating home folder: %w", err)
	}
	if err := os.MkdirAll(h.ImgDir, 0o700); err != nil {
		return Session{}, fmt.Errorf("creating home image folder: %w", err)
	}
	// Memory before files: the checkpoint pauses the source for its
	// length, and no execute runs in it until the copy is done.
	ck, memLost, releaseCk := d.ckpts.forkMemory(ctx, src, childID)
	cu.Add("checkpoint disk", func(context.Context) error { releaseCk(); return nil })
	srcMnt := host.HomeMount(d.boxes.dir(id))
	frozen := false
	if host.Mounted(srcMnt) {
		// Freezing flushes what the sandbox wrote and holds new writes
		// (none should come: no execute runs) until the copy is done.
		if err := host.FreezeHome(srcMnt); err != nil {
			return Session{}, fmt.Errorf("freezing source home: %w", err)
		}
		frozen = true
	}
	err = host.CopyImage(ctx, d.boxes.home(id).Image(), h.Image())
	if err != nil {
		err = fmt.Errorf("copying home: %w", err)
	} else {
		err = d.s.fault(stepForkCopy, childID) // frozen still, if it was
	}
	if frozen {
		host.ThawHome(d.boxes.dir(id))
	}
	if err != nil {
		return Session{}, err
	}
	now := time.Now()
	if err := d.store.SetSessionHibernated(ctx, childID, now, now); errors.Is(err, store.ErrNotOwner) {
		return Session{}, fmt.Errorf("session %s: %w", childID, ErrSessionMoved)
	} else if err != nil {
		return Session{}, err
	}
	child := newSession(childID, spec.Owner, rt, src.idleTTL, start, network)
	child.state, child.hibernatedAt, child.lastUsed, child.parent, child.diskBytes = StateHibernated, now, now, id, size
	// A kernel session's child has a kernel too; it starts fresh (the
	// parent's variables are not copied), which its first cell reports.
	child.kernel = row.Kernel
	d.mu.Lock()
	child.kernelUsed = row.Kernel && src.kernelUsed
	d.mu.Unlock()
	child.live, child.ckpt, child.memLost = ck.Path != "", ck, memLost
	child.liveStored = child.live
	snap, err := d.s.addSession(child, gen)
	if err != nil {
		return Session{}, err
	}
	cu.Release()
	d.log.InfoContext(ctx, "session forked", "session", childID, "from", id, "ms", time.Since(start).Milliseconds())
	return snap, nil
}

func (e *Executor) isStarted() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started
}

// SessionCounts reports how many sessions run and how many hibernate.
func (e *Executor) SessionCounts() (running, hibernated int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.sessions {
		switch s.state {
		case StateHibernated:
			hibernated++
		case StateRunning:
			running++
		}
	}
	return running, hibernated
}
