package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// upkeep is the session service's care of what lives between calls: at
// Start it reconciles the store with what a previous process left on the
// host (reconcile), until Stop it ends and hibernates idle sessions
// (reapLoop), and at Stop it removes the sandboxes no session holds
// (removeOrphanSandboxes). It reaches the session table only through
// upkeepSessions, under the session service's lock (mu), and lets go of a
// session another node claimed meanwhile through the cluster role. Made
// by New; safe for concurrent use.
type upkeep struct {
	s      upkeepSessions
	agents *agent.Transport // sandboxes' agent channels
	boxes  *launcher        // sandbox paths and starts
	node   *Node            // lets go of a session another node claimed (reconcile)
	dur    *Durable         // hibernates a session idle past hibernate_after
	cfg    Config
	log    *slog.Logger
	store  *store.Store
	rt     *Runtimes
	runsc  *host.Runsc
	nets   *Networks   // reconciles the provider's namespaces with the live sessions
	mu     *sync.Mutex // the session service's lock
}

// upkeepSessions is what upkeep needs of the session service.
type upkeepSessions interface {
	// lookup, served and admit read and change the session table (see
	// nodeSessions): mu held.
	lookup(id string) *session
	served() []*session
	admit(s *session, disk int64)

	// processesActive is called with mu held (it takes only the agents'
	// lock).
	processesActive(id string, now time.Time) bool
	endSessionOf(ctx context.Context, s *session, reason string) error
}

// newUpkeep makes e's upkeep, after e's options and its cluster role.
func newUpkeep(e *Executor) *upkeep {
	return &upkeep{s: e, agents: e.agents, boxes: e.boxes, node: e.node, dur: e.dur, cfg: e.cfg, log: e.log, store: e.store, rt: e.rt, runsc: e.runsc, nets: e.nets, mu: &e.mu}
}

// removeOrphanSandboxes ends, at Stop, every sandbox under the runsc root
// that no session holds, with its home. Start's reconcile removes the
// orphans it sees, but a sandbox whose create a killed predecessor had
// under way can appear after that: the runsc create outlives the server.
// Sandbox and gofer processes of no listed sandbox (a start killed part
// way) are killed. It reports how many sandboxes are left (sessions that
// could not hibernate keep theirs).
func (u *upkeep) removeOrphanSandboxes(ctx context.Context) (left int, err error) {
	cs, err := u.runsc.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing sandboxes at stop: %w", err)
	}
	var errs []error
	keep := map[string]bool{}
	for _, c := range cs {
		u.mu.Lock()
		s := u.s.lookup(c.ID)
		held := s != nil && s.hasSandbox
		u.mu.Unlock()
		if held {
			keep[c.ID] = true
			left++
			continue
		}
		u.log.WarnContext(ctx, "removing orphan sandbox at stop", "sandbox", c.ID)
		if err := u.agents.Destroy(ctx, c.ID); err != nil {
			errs = append(errs, fmt.Errorf("removing orphan sandbox %s: %w", c.ID, err))
			left++
			continue
		}
		if s == nil {
			if _, err := os.Stat(u.boxes.dir(c.ID)); err == nil {
				if err := u.dropOrphanHome(ctx, c.ID); err != nil {
					errs = append(errs, fmt.Errorf("removing orphan home %s: %w", c.ID, err))
				}
			}
		}
	}
	// A sandbox whose start was cut short can run with no state for runsc
	// to list: its processes go too.
	if hit := host.KillStraySandboxes(u.runsc.Root, keep); len(hit) > 0 {
		u.log.WarnContext(ctx, "killed stray sandbox processes at stop", "sandboxes", len(hit))
		host.ReapCgroups(u.boxes.cgroupNames(hit))
		for id := range hit {
			u.mu.Lock()
			known := u.s.lookup(id) != nil
			u.mu.Unlock()
			if _, err := os.Stat(u.boxes.dir(id)); err == nil && !known {
				if err := u.dropOrphanHome(ctx, id); err != nil {
					errs = append(errs, fmt.Errorf("removing orphan home %s: %w", id, err))
				}
			}
		}
	}
	return left, errors.Join(errs...)
}

// reconcile adopts sessions whose sandbox survived, serves the other
// sessions whose home image is there as hibernated, ends the rest, and
// removes sandboxes, homes and cgroups that belong to no session.
func (u *upkeep) reconcile(ctx context.Context) ([]*session, error) {
	var regain []*session // live sessions adopted with their sandbox
	rows, err := u.store.SessionsInStates(ctx, sandbox.AllStates.Without(sandbox.EndedStates)...)
	if err != nil {
		return nil, err
	}
	if n := host.WaitOrphanCommands(ctx, u.runsc.Root, u.cfg.CreateTimeout); n > 0 {
		u.log.WarnContext(ctx, "killed runsc commands left by the previous process", "count", n)
	}
	containers, err := u.runsc.List(ctx)
	if err != nil {
		return nil, err
	}
	runningC := map[string]bool{}
	// own: every sandbox of this executor (its runsc root, its node-local
	// homes, its install jobs). Only their stale cgroups are removed:
	// other servers on the host (other nodes of a cluster) have theirs.
	own := map[string]bool{}
	for _, c := range containers {
		runningC[c.ID] = c.Status == host.ContainerRunning
		own[c.ID] = true
	}
	for _, id := range u.runsc.SandboxIDs() {
		own[id] = true
	}
	keep := map[string]bool{}     // sessions adopted with their sandbox
	keepHome := map[string]bool{} // sessions kept: adopted or hibernated
	var hibernated []*session
	var ended []host.Home // sessions of this node ended here
	var unserved []string // sessions whose image could not be read: not served, not ended
	for _, r := range rows {
		h := u.boxes.home(r.ID)
		dir := h.Dir
		// A fork that crashed may have left its source frozen.
		host.ThawHome(dir)
		rt, lerr := u.rt.LookupVersion(r.Language, r.Version)
		if errors.Is(lerr, ErrUnsupportedVersion) {
			// Kept, hibernated: its calls say why it cannot run.
			u.log.WarnContext(ctx, "session's runtime version is no longer installed", "session", r.ID, "language", r.Language, "version", r.Version, "err", lerr)
			rt, lerr = unavailableRuntime(r.Language, r.Version, lerr), nil
		}
		att := loadAttachment(dir)
		size := r.DiskBytes
		if size <= 0 {
			if fi, err := os.Stat(h.Image()); err == nil {
				size = fi.Size()
			}
		}
		// A sandbox with network attached is adopted whatever its row
		// asks now (a change may have disabled it: the proxy refuses all);
		// one without is adopted only if its row asks for none.
		// A kernel session's sandbox is adopted only when its row says it
		// is live: its kernel needs the agent channel, which died with the
		// server, and only a live session gets one back (regainLive).
		// Otherwise it resumes with a fresh kernel (and says so).
		if r.State == StateRunning && runningC[r.ID] && host.Mounted(host.HomeMount(dir)) && lerr == nil && rt.unavailable == nil && (att != nil || !storedNetwork(r.Network).Enabled) && (!r.Kernel || r.Live) {
			s := newSession(r.ID, r.KeyID, rt, r.IdleTTL, r.CreatedAt, storedNetwork(r.Network))
			// The guest's kernel goes on: the caller relies on it.
			s.kernel, s.kernelUsed = r.Kernel, r.Kernel
			s.state, s.hasSandbox, s.parent, s.diskBytes, s.hibernatedAt = StateRunning, true, r.ParentID, size, r.HibernatedAt
			if att != nil {
				s.netEnv, s.netAttached = att.Env, true
			}
			s.lastUsed = time.Now() // the idle clock restarts with the server
			u.mu.Lock()
			u.s.admit(s, size) // with its sandbox
			u.mu.Unlock()
			keep[r.ID] = true
			keepHome[r.ID] = true
			if r.Live {
				// Its memory is the session's: nothing is killed (a call
				// the crash interrupted ends at its own deadline, in the
				// guest), and a checkpoint and restore gives it an agent
				// channel again once the executor has started (regainLive).
				s.live, s.liveStored = true, true
				tidyCheckpoints(h, store.Checkpoint{}, r.ID)
				if r.Checkpoint.Path != "" {
					// Restored, then the server died before the row forgot
					// the image: the running sandbox is newer.
					if err := u.store.SetSessionCheckpoint(ctx, r.ID, true, store.Checkpoint{}); err != nil {
						return nil, err
					}
				}
				regain = append(regain, s)
				u.log.InfoContext(ctx, "live session adopted", "session", r.ID)
				continue
			}
			// A call the crash interrupted may still run its program; it
			// is recorded failed below, so stop it before new calls come.
			kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if _, err := u.runsc.Run(kctx, "", "exec", "--user", "0:0", "--cap", "CAP_KILL", r.ID, host.GuestBin, "kill"); err != nil {
				u.log.WarnContext(ctx, "killing leftover user processes", "session", r.ID, "err", err)
			}
			cancel()
			u.log.InfoContext(ctx, "session adopted", "session", r.ID)
			continue
		}
		if sandbox.HomeStates.Has(r.State) {
			_, serr := os.Stat(h.Image())
			if serr != nil && !errors.Is(serr, fs.ErrNotExist) {
				// Shared storage that does not answer is not a lost
				// session (as in Adopt): its row and image are left as
				// they are, and its next call adopts it.
				keepHome[r.ID] = true
				unserved = append(unserved, r.ID)
				u.log.ErrorContext(ctx, "home image unreadable on restart: session left to adopt on its next call", "session", r.ID, "image", h.Image(), "err", serr)
				continue
			}
			if serr == nil && lerr == nil {
				s := newSession(r.ID, r.KeyID, rt, r.IdleTTL, r.CreatedAt, storedNetwork(r.Network))
				s.state, s.parent, s.diskBytes = StateHibernated, r.ParentID, size
				// Its kernel, if any, is lost: the next cell says so.
				s.kernel, s.kernelUsed = r.Kernel, r.Kernel
				s.hibernatedAt, s.lastUsed = time.Now(), time.Now()
				size += s.servedHibernatedLive(r, h)
				if r.State == StateHibernated {
					// Cleanly hibernated: its idle clock goes on.
					s.hibernatedAt, s.lastUsed = r.HibernatedAt, r.LastUsedAt
				}
				u.mu.Lock()
				u.s.admit(s, size)
				u.mu.Unlock()
				keepHome[r.ID] = true
				if r.State != StateHibernated {
					hibernated = append(hibernated, s)
				}
				continue
			}
		}
		if err := u.store.SetSessionState(ctx, r.ID, StateEnded, "lost on restart", true); errors.Is(err, store.ErrNotOwner) {
			continue // claimed by another node meanwhile: its image is its own
		} else if err != nil {
			return nil, err
		}
		ended = append(ended, h)
		u.log.WarnContext(ctx, "session ended on restart", "session", r.ID, "state", r.State)
	}
	for _, c := range containers {
		if !keep[c.ID] {
			if err := u.agents.Destroy(ctx, c.ID); err != nil {
				u.log.ErrorContext(ctx, "removing orphan sandbox", "sandbox", c.ID, "err", err)
			}
		}
	}
	// A node-local folder is a home this node made (makeHome makes it
	// before the image): those of no kept session go, with their image
	// unless the session lives on elsewhere.
	ents, err := os.ReadDir(u.boxes.sessionsDir())
	if err != nil {
		return nil, fmt.Errorf("reading sessions folder: %w", err)
	}
	for _, ent := range ents {
		own[ent.Name()] = true
		if !keepHome[ent.Name()] {
			if err := u.dropOrphanHome(ctx, ent.Name()); err != nil {
				u.log.ErrorContext(ctx, "removing orphan home", "session", ent.Name(), "err", err)
			}
		}
	}
	// The images of sessions ended above that had no node-local folder
	// (adopted from another node, never resumed here).
	for _, h := range ended {
		if h.Apart() {
			if err := os.RemoveAll(h.ImgDir); err != nil {
				u.log.ErrorContext(ctx, "removing home image of an ended session", "dir", h.ImgDir, "err", err)
			}
		}
	}
	// Install jobs are never adopted (an install is all or nothing): the
	// bundles a crash left go with their sandboxes.
	if ents, err := os.ReadDir(u.boxes.jobsDir()); err == nil {
		for _, ent := range ents {
			own[ent.Name()] = true
			if err := os.RemoveAll(filepath.Join(u.boxes.jobsDir(), ent.Name())); err != nil {
				u.log.ErrorContext(ctx, "removing orphan install job", "job", ent.Name(), "err", err)
			}
		}
	}
	if net := u.nets.Network(); net != nil {
		live := make([]string, 0, len(keep))
		for id := range keep {
			live = append(live, id)
		}
		if err := net.Reconcile(ctx, live); err != nil {
			return nil, fmt.Errorf("reconciling networks: %w", err)
		}
	}
	if hit := host.KillStraySandboxes(u.runsc.Root, keep); len(hit) > 0 {
		u.log.WarnContext(ctx, "killed stray sandbox processes", "count", len(hit))
	}
	host.RemoveStaleCgroups(u.boxes.cgroupNames(own), u.boxes.cgroupNames(keep))
	// The sandboxes (and stray processes) of sessions now hibernated are
	// gone (above): their homes come off the host, and their rows say
	// hibernated. (A row hibernated already had its home unmounted before
	// it said so.)
	for _, id := range unserved {
		if err := host.UnmountHome(u.boxes.dir(id)); err != nil {
			u.log.ErrorContext(ctx, "unmounting home of a session not served", "session", id, "err", err)
		}
	}
	for _, s := range hibernated {
		if err := host.UnmountHome(u.boxes.dir(s.id)); err != nil {
			u.log.ErrorContext(ctx, "unmounting home of a hibernated session", "session", s.id, "err", err)
		}
		if err := u.store.SetSessionHibernated(ctx, s.id, s.hibernatedAt, s.lastUsed); errors.Is(err, store.ErrNotOwner) {
			u.mu.Lock()
			u.node.letGo(s) // claimed by another node meanwhile
			u.mu.Unlock()
			continue
		} else if err != nil {
			return nil, err
		}
		u.log.InfoContext(ctx, "session served hibernated", "session", s.id)
	}
	if n, err := u.store.FailRunningExecutions(ctx, "interrupted"); err != nil {
		return nil, err
	} else if n > 0 {
		u.log.WarnContext(ctx, "executions interrupted by restart", "count", n)
	}
	return regain, nil
}

// dropOrphanHome removes the home of id, which no session of this node
// keeps: its mount and node-local folder always, its image unless the
// session lives on under another node (or unowned, handed over), whose
// image it is now.
func (u *upkeep) dropOrphanHome(ctx context.Context, id string) error {
	h := u.boxes.home(id)
	r, err := u.store.GetSession(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return err // unsure whose it is: kept for the next start
	case r.State != StateEnded && r.Node != u.store.Node():
		if err := host.UnmountHome(h.Dir); err != nil {
			return err
		}
		u.log.InfoContext(ctx, "home left to the session's node", "session", id, "node", r.Node)
		return host.DropLocal(h)
	}
	return host.DropHome(ctx, h)
}

// reapLoop reaps idle sessions (reapIdle) every reap interval until stop
// is closed.
func (u *upkeep) reapLoop(stop <-chan struct{}) {
	t := time.NewTicker(u.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			u.reapIdle()
		}
	}
}

// reapIdle ends sessions idle past their TTL, running or hibernated, and
// hibernates running ones idle past hibernate_after. A busy session is not
// idle.
func (u *upkeep) reapIdle() {
	now := time.Now()
	var idle, sleepy []*session
	u.mu.Lock()
	for _, s := range u.s.served() {
		if s.busy != 0 || (s.state != StateRunning && s.state != StateHibernated) {
			continue
		}
		if s.state == StateRunning && u.s.processesActive(s.id, now) {
			// A background process runs (until its own timeout at most):
			// the session is in use, and stays unhibernated.
			continue
		}
		switch {
		case now.Sub(s.lastUsed) > s.idleTTL:
			idle = append(idle, s)
		case s.state == StateRunning && u.cfg.HibernateAfter > 0 && now.Sub(s.lastUsed) > u.cfg.HibernateAfter:
			sleepy = append(sleepy, s)
		}
	}
	u.mu.Unlock()
	for _, s := range sleepy {
		select {
		case s.lock <- struct{}{}:
		default:
			continue // a call has just come
		}
		u.mu.Lock()
		still := s.busy == 0 && time.Since(s.lastUsed) > u.cfg.HibernateAfter
		u.mu.Unlock()
		if !still {
			<-s.lock
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := u.dur.hibernate(ctx, s, "idle"); err != nil && !errors.Is(err, ErrBadState) && !errors.Is(err, ErrSessionMoved) && !errors.Is(err, ErrNotFound) {
			u.log.Error("hibernating idle session", "session", s.id, "err", err)
		}
		cancel()
		<-s.lock
	}
	for _, s := range idle {
		id := s.id
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		// This object, not whatever holds its id by then (adopted again
		// after a Fence).
		if err := u.s.endSessionOf(ctx, s, "idle_ttl"); errors.Is(err, ErrSessionMoved) {
			u.log.Info("idle session moved to another node", "session", id)
		} else if err != nil && !errors.Is(err, ErrNotFound) {
			u.log.Error("reaping idle session", "session", id, "err", err)
		} else {
			u.log.Info("session reaped", "session", id, "reason", "idle_ttl")
		}
		cancel()
	}
}
