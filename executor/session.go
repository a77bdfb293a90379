package executor

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// session is the executor's live record; fields after mu-guarded ones are
// guarded by Executor.mu.
type session struct {
	id        string
	owner     string
	runtime   *Runtime
	idleTTL   time.Duration
	createdAt time.Time
	network   sandbox.NetworkRequest
	parent    string        // forked from
	diskBytes int64         // home image size, counted against max_disk
	lock      chan struct{} // one execute (or file op) at a time
	// life serialises what changes the session's sandbox: resume,
	// hibernate, fork's copy and the end. An execute holds lock, not life.
	life sync.Mutex

	state        State
	lastUsed     time.Time
	hibernatedAt time.Time
	busy         int
	live         bool // the sandbox holds memory (a kernel or background processes): hibernation checkpoints it
	hasSandbox   bool // a sandbox is counted in Executor.live for it
	// gone: let go of (another node owns it, or may: letGo) or ended
	// (endSessionOf); nothing of this executor may touch its home, row
	// or counts again.
	gone bool
	// ended: gone because it ended here, not because it moved: a call
	// that finds it so answers ErrNotFound (goneErr).
	ended  bool
	job    string   // the install job sandbox that has its home mounted, if any
	netEnv []string // proxy variables when the session has network
	// netAttached: the sandbox runs in a network namespace of the
	// session's (its network request may have been disabled since).
	netAttached bool
	// resumes counts the resumes done; resumeTook is the latest's time.
	// waiters are the calls waiting for the lock, told of a resume when
	// it is done (each waited for it).
	resumes    uint64
	resumeTook time.Duration
	waiters    map[*resumeWaiter]struct{}

	// kernel: executes are cells of one kernel (kernel.go). kernelUsed:
	// the caller relies on the kernel's state (a cell ran in it), so a
	// fresh kernel is reported (kernel_restarted).
	kernel     bool
	kernelUsed bool
	// liveStored is live as the store's row has it: a call that turned
	// live on (a kernel or process started) is persisted when the call
	// ends (persistLive), so that a restart after a kill of the server
	// knows the sandbox it adopts holds memory.
	liveStored bool
	// ckpt is the checkpoint a hibernated session's memory waits in
	// (zero: none); memLost says why a live session hibernated without
	// one (its next resume reports it).
	ckpt    store.Checkpoint
	memLost string
	// memory is the outcome of the latest resume that had memory to bring
	// back: reported on the calls that waited for it and in the view.
	memory *sandbox.MemoryOutcome
}

// resumeWaiter is one call waiting for a session's lock: the context
// whose resume note a resume done meanwhile is reported to.
type resumeWaiter struct{ ctx context.Context }

func newSession(id, owner string, rt *Runtime, ttl time.Duration, created time.Time, network sandbox.NetworkRequest) *session {
	return &session{id: id, owner: owner, runtime: rt, idleTTL: ttl, createdAt: created,
		network: network, lock: make(chan struct{}, 1), lastUsed: created}
}

func (s *session) snapshot() Session {
	return Session{ID: s.id, Owner: s.owner, Language: s.runtime.Name, Version: s.runtime.Version, State: s.state, IdleTTL: s.idleTTL,
		Network: s.network, CreatedAt: s.createdAt, LastUsedAt: s.lastUsed, HibernatedAt: s.hibernatedAt,
		ForkedFrom: s.parent, DiskBytes: s.diskBytes, Kernel: s.kernel, Live: s.live, CheckpointBytes: s.ckpt.Bytes, Memory: copyOutcome(s.memory)}
}

func copyOutcome(m *sandbox.MemoryOutcome) *sandbox.MemoryOutcome {
	if m == nil {
		return nil
	}
	c := *m
	return &c
}

// createStep names a step of session creation, for the fault hook.
type createStep string

// The steps of CreateSession, in order. Each may take something on the
// host that a failure later on must give back.
const (
	stepCapacity      createStep = "capacity"       // a slot under max_sandboxes
	stepHome          createStep = "home"           // home image: file, loop device, mount (or a warm sandbox)
	stepStoreInsert   createStep = "store_insert"   // the session's row, state creating
	stepNetwork       createStep = "network"        // netns, veth, nft chain, address slot, proxy listeners
	stepNetworkRecord createStep = "network_record" // network.json and resolv.conf beside the bundle
	stepBundle        createStep = "bundle"         // bundle folder and config.json
	stepRunsc         createStep = "runsc_run"      // the sandbox, its cgroups and its agent channel
	stepStoreRunning  createStep = "store_running"  // the row moved to running

	// A stateless call's one step: its capacity slot is taken and a
	// sandbox is being found (warm) or started (cold).
	stepStatelessSandbox createStep = "stateless_sandbox"
)

// fault is the test seam of CreateSession: it runs after each step has
// done its work, and an error (or a panic) it returns fails creation
// there. Nil outside tests.
func (e *Executor) fault(step createStep, id string) error {
	if e.createFault == nil {
		return nil
	}
	return e.createFault(step, id)
}

// CreateSession starts a sandbox for a new session. Whatever creation
// takes (capacity slot, home, store row, network, sandbox) is given back if
// it fails at any step, also when a step or an undo panics: the panic is
// returned as a *PanicError.
func (e *Executor) CreateSession(ctx context.Context, spec SessionSpec) (_ Session, err error) {
	rt, err := e.rt.LookupVersion(spec.Language, spec.Version)
	if err != nil {
		return Session{}, err
	}
	if spec.Kernel && rt.Name != kernelLanguage {
		return Session{}, ErrKernelUnsupported
	}
	ttl := spec.IdleTTL
	if ttl == 0 {
		ttl = e.cfg.DefaultIdleTTL
	}
	if ttl < time.Second || ttl > e.cfg.MaxIdleTTL {
		return Session{}, fmt.Errorf("%w: idle_ttl must be between 1s and %s", ErrInvalid, e.cfg.MaxIdleTTL)
	}
	network := spec.Network
	withNet := network.Enabled
	// Refused before anything is taken: a server without egress has no
	// network layer to attach (or to detach) with.
	if withNet && !e.nets.NetworkAvailable() {
		return Session{}, ErrNoNetwork
	}

	// The undo stack runs in reverse unless the session comes up; a panic
	// runs it too (deferred), then becomes this call's error.
	cu := newCleanup(e.log)
	defer func() {
		if v := recover(); v != nil {
			perr := &PanicError{Value: v, Stack: debug.Stack()}
			e.log.ErrorContext(ctx, "creating session panicked", "panic", v, "stack", string(perr.Stack))
			err = fmt.Errorf("creating session: %w", perr)
		}
	}()
	defer cu.Clean()

	gen := e.node.fenceGen()
	if err := e.reserve(); err != nil {
		return Session{}, err
	}
	cu.Add("capacity slot", func(context.Context) error { e.release(); return nil })
	if err := e.fault(stepCapacity, ""); err != nil {
		return Session{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.CreateTimeout)
	defer cancel()

	// A warm sandbox (started, never used) makes the session at once; a
	// session with network needs its namespace from the start, so it is
	// always made cold, and so is one whose home has another size.
	size := spec.DiskBytes
	if size <= 0 {
		size = e.cfg.HomeBytes
	}
	var id string
	warm := false
	if !withNet && size == e.cfg.HomeBytes {
		if ws, ok := e.pool.take(); ok {
			id, warm = ws.id, true
		}
	}
	if warm {
		// The warm home's disk reservation becomes the session's.
		cu.Add("warm sandbox", func(ctx context.Context) error { return e.pool.destroy(ctx, id) })
	} else {
		if err := e.disk.reserve(size); err != nil {
			return Session{}, err
		}
		cu.Add("disk reservation", func(context.Context) error { e.disk.release(size); return nil })
		id = newID("sess_")
		h := e.boxes.home(id)
		cu.Add("home", func(ctx context.Context) error { return host.DropHome(ctx, h) })
		if err := host.MakeHome(ctx, h, size); err != nil {
			return Session{}, fmt.Errorf("preparing home: %w", err)
		}
	}
	dir := e.boxes.dir(id)
	if err := e.fault(stepHome, id); err != nil {
		return Session{}, err
	}

	now := time.Now()
	s := newSession(id, spec.Owner, rt, ttl, now, network)
	s.state = StateCreating
	s.diskBytes = size
	s.kernel = spec.Kernel
	row := store.SessionRow{ID: id, KeyID: spec.Owner, Language: rt.Name, Version: rt.Series, State: StateCreating, Network: string(network.JSON()), IdleTTL: ttl, CreatedAt: now, LastUsedAt: now, DiskBytes: size,
		Kernel: spec.Kernel}
	if err := e.store.InsertSession(ctx, row); err != nil {
		return Session{}, err
	}
	cu.Add("store row", func(ctx context.Context) error {
		return e.store.SetSessionState(ctx, id, StateFailed, "create failed", true)
	})
	if err := e.fault(stepStoreInsert, id); err != nil {
		return Session{}, err
	}
	netns := ""
	if withNet {
		cu.Add("network", func(ctx context.Context) error { return e.nets.Network().Detach(ctx, id) })
		att, err := e.nets.attach(ctx, id, dir, network)
		if err != nil {
			return Session{}, err
		}
		netns, s.netEnv, s.netAttached = att.NetnsPath, att.Env, true
	}
	if !warm {
		bundle, err := e.boxes.writeBundle(id, dir, netns)
		if err != nil {
			return Session{}, err
		}
		if err := e.fault(stepBundle, id); err != nil {
			return Session{}, err
		}
		// Before the run: a failed `runsc run` may leave a half-made
		// container, and destroy is fine with none.
		cu.Add("sandbox", func(ctx context.Context) error { return e.agents.Destroy(ctx, id) })
		if err := e.boxes.runSandbox(ctx, id, bundle, netns != ""); err != nil {
			return Session{}, err
		}
		if err := e.fault(stepRunsc, id); err != nil {
			return Session{}, err
		}
	}
	if err := e.store.SetSessionState(ctx, id, StateRunning, "", false); errors.Is(err, store.ErrNotOwner) {
		return Session{}, fmt.Errorf("session %s: %w", id, ErrSessionMoved)
	} else if err != nil {
		return Session{}, err
	}
	if err := e.fault(stepStoreRunning, id); err != nil {
		return Session{}, err
	}
	e.move(s, StateRunning)
	s.hasSandbox = true
	e.mu.Lock()
	if e.node.fencedSince(gen) {
		// Fenced meanwhile: a new session is not kept past a lost lease.
		e.mu.Unlock()
		return Session{}, fmt.Errorf("session %s: %w", id, ErrSessionMoved)
	}
	e.sessions[id] = s
	e.mu.Unlock()
	cu.Release()
	e.log.InfoContext(ctx, "session created", "session", id, "language", rt.Name, "owner", spec.Owner, "warm", warm, "ms", time.Since(now).Milliseconds())
	return s.snapshot(), nil
}

// reserve counts one sandbox against the host-wide ceiling.
func (e *Executor) reserve() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started {
		return ErrNotStarted
	}
	if e.live >= e.cfg.MaxSandboxes {
		return ErrCapacity
	}
	e.live++
	return nil
}

func (e *Executor) release() {
	e.mu.Lock()
	e.live--
	e.mu.Unlock()
}

// GetSession returns a session if owner owns it.
func (e *Executor) GetSession(ctx context.Context, owner, id string) (Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sessions[id]
	if !ok || s.owner != owner {
		return Session{}, ErrNotFound
	}
	return s.snapshot(), nil
}

// ListSessions returns owner's live sessions, oldest first.
func (e *Executor) ListSessions(ctx context.Context, owner string) []Session {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := []Session{}
	for _, s := range e.sessions {
		if s.owner == owner {
			out = append(out, s.snapshot())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// CountSessions returns how many live sessions owner has.
func (e *Executor) CountSessions(owner string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, s := range e.sessions {
		if s.owner == owner {
			n++
		}
	}
	return n
}

// DeleteSession ends owner's session and frees its sandbox, cgroups, mounts
// and home.
func (e *Executor) DeleteSession(ctx context.Context, owner, id string) error {
	e.mu.Lock()
	s, ok := e.sessions[id]
	e.mu.Unlock()
	if !ok || s.owner != owner {
		return ErrNotFound
	}
	return e.endSession(ctx, id, "deleted")
}

// endSession tears a session down, running or hibernated; only one caller
// wins, the others get ErrNotFound. It waits for a resume, hibernation or
// fork of the session in progress (not for a running execute, which it
// ends).
func (e *Executor) endSession(ctx context.Context, id, reason string) error {
	e.mu.Lock()
	s, ok := e.sessions[id]
	e.mu.Unlock()
	if !ok {
		return ErrNotFound
	}
	return e.endSessionOf(ctx, s, reason)
}

// endSessionOf is endSession of the object s: a session let go of
// (Fence, another node took it) answers ErrSessionMoved, even if its id
// has been adopted again since; one that ended meanwhile (a concurrent
// end) answers ErrNotFound (goneErr).
func (e *Executor) endSessionOf(ctx context.Context, s *session, reason string) error {
	id := s.id
	s.life.Lock()
	defer s.life.Unlock()
	e.mu.Lock()
	if s.gone {
		e.mu.Unlock()
		return e.node.goneErr(ctx, s)
	}
	if !canMove(s.state, StateEnding) {
		e.mu.Unlock()
		return ErrNotFound
	}
	e.move(s, StateEnding)
	hadSandbox := s.hasSandbox
	e.mu.Unlock()
	if err := e.store.SetSessionState(ctx, id, StateEnding, reason, false); errors.Is(err, store.ErrNotOwner) {
		// Its image is the new owner's: only what is on this host goes.
		return e.node.notOwner(ctx, s, err)
	}

	var errs []error
	if hadSandbox {
		if err := e.agents.Destroy(ctx, id); err != nil {
			errs = append(errs, err)
		}
		if e.nets.NetworkAvailable() && e.nets.networkHeld(s) {
			if err := e.nets.Network().Detach(ctx, id); err != nil {
				errs = append(errs, err)
			}
		}
	}
	host.ThawHome(e.boxes.dir(id))
	if err := host.DropHome(ctx, e.boxes.home(id)); err != nil {
		errs = append(errs, err)
	}
	e.mu.Lock()
	if e.sessions[id] == s {
		delete(e.sessions, id)
	}
	if hadSandbox && s.hasSandbox {
		s.hasSandbox = false
		e.live--
	}
	gone := s.gone
	s.gone = true
	if !gone {
		s.ended = true
	}
	e.mu.Unlock()
	if !gone {
		e.disk.release(s.diskBytes + s.ckpt.Bytes) // the image went with the home's folder
	}
	if err := e.store.SetSessionState(ctx, id, StateEnded, reason, true); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		e.log.ErrorContext(ctx, "ending session", "session", id, "err", err)
		return fmt.Errorf("ending session %s: %w", id, err)
	}
	e.log.InfoContext(ctx, "session ended", "session", id, "reason", reason)
	return nil
}
