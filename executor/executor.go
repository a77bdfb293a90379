// Package executor runs code in gVisor (runsc) sandboxes: one long-lived
// sandbox per session, each execute a fresh process in it through the
// in-sandbox guest. It knows nothing of HTTP.
package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/fence"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// Config is what the executor needs; the CLI fills it from the root config.
type Config struct {
	Runsc          string
	Platform       string
	Rootfs         string // folder holding the rootfs tree
	VersionsFile   string // versions.json written by the rootfs build
	DataDir        string
	GuestBinary    string // host path of sandboxapi-guest
	MaxSandboxes   int
	HomeBytes      int64
	MemoryBytes    int64
	Pids           int64
	CPUs           float64
	TmpBytes       int64
	CreateTimeout  time.Duration
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	CompileTimeout time.Duration
	MaxOutputBytes int64
	MaxFileBytes   int64 // files API upload and download limit; 0: 64 MiB
	DefaultIdleTTL time.Duration
	MaxIdleTTL     time.Duration
	ReapInterval   time.Duration
	// WarmPool is how many started, never-used sandboxes wait for new
	// sessions and stateless calls.
	WarmPool int
	// HibernateAfter hibernates a session idle this long (its sandbox,
	// network and mount go; its home stays); 0 never does.
	HibernateAfter time.Duration
	// MaxDisk caps the sum of all homes' sizes (sessions, hibernated or
	// not, and warm sandboxes); 0 is no cap.
	MaxDisk int64
	// HomesDir holds the home images (<HomesDir>/<id>/home.img); every
	// other per-session file stays under DataDir/sessions. Empty: that
	// same folder. In a cluster, storage every node shares.
	HomesDir string
	// FenceArgv runs the dead man's switch (`sandboxapi fence`) in cluster
	// mode; the fence flags are appended. Nil: this binary's own fence
	// command. Tests set it to re-run the test binary.
	FenceArgv []string
}

// Executor owns every sandbox under its data dir. Create it with New, then
// Start; it is safe for concurrent use.
type Executor struct {
	cfg   Config
	rt    *Runtimes
	runsc *host.Runsc
	store *store.Store
	log   *slog.Logger
	net   Network

	mu       sync.Mutex
	sessions map[string]*session
	// moved holds the sessions this executor let go of because another
	// node owns them, or may (Fence), by id: a call still in flight on one
	// answers ErrSessionMoved and writes nothing to the store, and an
	// Adopt of the same id waits until that object is idle.
	moved map[string]*session
	// tidying: sessions whose leftovers a Fence is still removing.
	tidying map[string]chan struct{}
	// mounting: sessions whose home a resume is mounting (beginMount).
	mounting map[string]*mountOp
	live     int   // sandboxes counted against MaxSandboxes
	disk     int64 // bytes of homes counted against MaxDisk
	started  bool
	fences   int // how many times every session was let go of (Fence)

	adoptMu sync.Mutex    // one Adopt at a time
	fence   *fence.Switch // the dead man's switch (cluster mode), nil else
	hold    time.Time     // under mu: the last HoldUntil

	// regain: live sessions adopted with their sandbox at start, which
	// regainLive gives an agent channel again.
	regain []*session

	runscIDOnce sync.Once
	runscID     string // runscBuild

	agents *agent.Transport // the sandboxes' guest agent channels, and runs over them

	// createFault, when set (tests only), runs after each step of
	// CreateSession; an error or panic from it fails creation there.
	createFault func(step createStep, id string) error
	// memTimed, when set (tests and benchmarks only), gets the time of
	// each runsc checkpoint ("checkpoint") and restore ("restore").
	memTimed func(op string, d time.Duration)

	// execFileOps counts file calls that took the `runsc exec` path (tests
	// check that the channel carried theirs).
	execFileOps atomic.Int64

	warm    chan warmSandbox // started sandboxes that have run nothing
	warmGen int              // under mu: warm sandboxes of an older gen are stale (dropWarm)
	stop    chan struct{}
	wg      sync.WaitGroup // reaper and pool filler
	bg      sync.WaitGroup // teardowns of stateless sandboxes

	files   *Files     // the files role
	procs   *Processes // the background processes role
	kernels *Kernels   // the kernel role
}

// Option gives New a part the executor works with besides its config.
type Option func(*Executor)

// WithNetwork gives the executor its network provider (egress); without
// one, sessions that ask for network are refused.
func WithNetwork(n Network) Option { return func(e *Executor) { e.net = n } }

// New checks cfg and prepares an executor with opts; it starts nothing.
func New(cfg Config, rt *Runtimes, st *store.Store, log *slog.Logger, opts ...Option) (*Executor, error) {
	if cfg.Rootfs == "" {
		return nil, errors.New("executor: no rootfs configured (run `sandboxapi rootfs build`)")
	}
	if _, err := os.Stat(filepath.Join(cfg.Rootfs, "bin", "sh")); err != nil {
		return nil, fmt.Errorf("executor: rootfs %s is not usable: %w", cfg.Rootfs, err)
	}
	bin, err := exec.LookPath(cfg.Runsc)
	if err != nil {
		return nil, fmt.Errorf("executor: runsc not found (%s): %w", cfg.Runsc, err)
	}
	if cfg.GuestBinary == "" {
		cfg.GuestBinary = findGuest()
	}
	if _, err := os.Stat(cfg.GuestBinary); err != nil {
		return nil, fmt.Errorf("executor: guest binary %q: %w", cfg.GuestBinary, err)
	}
	// The guest is static: run it here to learn its protocol version.
	out, err := exec.Command(cfg.GuestBinary, "version").Output()
	if v := strings.TrimSpace(string(out)); err != nil || v != guest.ProtocolVersion {
		return nil, fmt.Errorf("executor: guest binary %s speaks protocol %q, this server %q: rebuild it (scripts/setup.sh)", cfg.GuestBinary, v, guest.ProtocolVersion)
	}
	if cfg.ReapInterval <= 0 {
		cfg.ReapInterval = 5 * time.Second
	}
	if cfg.CompileTimeout <= 0 {
		cfg.CompileTimeout = 60 * time.Second
	}
	if cfg.CreateTimeout <= 0 {
		cfg.CreateTimeout = 30 * time.Second
	}
	if cfg.HomesDir != "" {
		abs, err := filepath.Abs(cfg.HomesDir)
		if err != nil {
			return nil, fmt.Errorf("executor: homes dir %q: %w", cfg.HomesDir, err)
		}
		cfg.HomesDir = abs
	}
	e := &Executor{
		cfg:      cfg,
		rt:       rt,
		runsc:    &host.Runsc{Bin: bin, Root: filepath.Join(cfg.DataDir, "runsc"), Platform: cfg.Platform},
		store:    st,
		log:      log,
		sessions: map[string]*session{},
		moved:    map[string]*session{},
		tidying:  map[string]chan struct{}{},
		mounting: map[string]*mountOp{},
		warm:     make(chan warmSandbox, max(cfg.WarmPool, 0)),
		stop:     make(chan struct{}),
	}
	e.agents = agent.NewTransport(e.runsc, log, cfg.MaxOutputBytes)
	e.files = &Files{s: e, cfg: cfg, log: log, runsc: e.runsc, agents: e.agents, execOps: &e.execFileOps}
	e.procs = &Processes{s: e, cfg: cfg, log: log}
	e.kernels = &Kernels{s: e, agents: e.agents, cfg: cfg, log: log}
	for _, o := range opts {
		o(e)
	}
	return e, nil
}

// home returns where session (or warm sandbox) id's home lives.
func (e *Executor) home(id string) host.Home {
	return host.Home{Dir: e.dir(id), ImgDir: filepath.Join(e.homesDir(), id)}
}

// findGuest looks for sandboxapi-guest beside the running binary, then on PATH.
func findGuest() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "sandboxapi-guest")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("sandboxapi-guest"); err == nil {
		return p
	}
	return "sandboxapi-guest"
}

// Runtimes returns the language table.
func (e *Executor) Runtimes() *Runtimes { return e.rt }

func (e *Executor) sessionsDir() string { return filepath.Join(e.cfg.DataDir, "sessions") }

// homesDir is where the home images are (executor.homes_dir).
func (e *Executor) homesDir() string {
	if e.cfg.HomesDir == "" {
		return e.sessionsDir()
	}
	return e.cfg.HomesDir
}
func (e *Executor) guestDir() string { return filepath.Join(e.cfg.DataDir, "guest") }

// Start installs the guest, reconciles with whatever a previous process left
// behind, and starts the reaper and the spare-home filler.
func (e *Executor) Start(ctx context.Context) error {
	for _, d := range []string{e.sessionsDir(), e.homesDir(), e.guestDir(), e.runsc.Root} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	if err := os.Chmod(e.guestDir(), 0o755); err != nil {
		return fmt.Errorf("opening guest folder: %w", err)
	}
	if err := installFile(e.cfg.GuestBinary, filepath.Join(e.guestDir(), "guest")); err != nil {
		return fmt.Errorf("installing guest: %w", err)
	}
	// The dead man's switch is armed before any sandbox starts (and
	// waits for the fence of this node's previous process to finish).
	if e.store.Node() != "" {
		if err := e.startFence(); err != nil {
			return err
		}
	}
	if err := e.reconcile(ctx); err != nil {
		if e.fence != nil {
			_ = e.fence.Stop()
		}
		return fmt.Errorf("reconciling: %w", err)
	}
	e.mu.Lock()
	e.started = true
	regain := e.regain
	e.regain = nil
	e.mu.Unlock()
	if len(regain) > 0 {
		e.wg.Add(1)
		go e.regainLive(regain)
	}
	e.wg.Add(1)
	go e.reapLoop()
	if e.cfg.WarmPool > 0 {
		e.wg.Add(1)
		go e.fillWarm()
	}
	return nil
}

// Stop hibernates every session (they live on in their homes and the
// store, and the next Start serves them), ends every spare, then waits for
// background work. In cluster mode it then hands the sessions over
// (store.ReleaseSessions: any node may claim them at once) and ends the
// fence process quietly.
func (e *Executor) Stop(ctx context.Context) error {
	e.mu.Lock()
	if !e.started {
		e.mu.Unlock()
		return nil
	}
	e.started = false
	close(e.stop)
	ids := make([]string, 0, len(e.sessions))
	for id := range e.sessions {
		ids = append(ids, id)
	}
	e.mu.Unlock()
	e.wg.Wait()
	errs := e.hibernateAll(ctx, ids)
	for {
		select {
		case ws := <-e.warm:
			if err := e.destroySandbox(ctx, ws.id); err != nil {
				errs = append(errs, err)
			}
			continue
		default:
		}
		break
	}
	e.bg.Wait()
	if e.store.Node() != "" {
		if err := e.releaseSessions(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if left, err := e.removeOrphanSandboxes(ctx); err != nil {
		errs = append(errs, err)
	} else if left == 0 {
		if err := e.runsc.UnmountNullNetns(); err != nil {
			errs = append(errs, err)
		}
	}
	if e.fence != nil {
		if err := e.fence.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeOrphanSandboxes ends, at Stop, every sandbox under the runsc root
// that no session holds, with its home. Start's reconcile removes the
// orphans it sees, but a sandbox whose create a killed predecessor had
// under way can appear after that: the runsc create outlives the server.
// Sandbox and gofer processes of no listed sandbox (a start killed part
// way) are killed. It reports how many sandboxes are left (sessions that
// could not hibernate keep theirs).
func (e *Executor) removeOrphanSandboxes(ctx context.Context) (left int, err error) {
	cs, err := e.runsc.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing sandboxes at stop: %w", err)
	}
	var errs []error
	keep := map[string]bool{}
	for _, c := range cs {
		e.mu.Lock()
		s := e.sessions[c.ID]
		held := s != nil && s.hasSandbox
		e.mu.Unlock()
		if held {
			keep[c.ID] = true
			left++
			continue
		}
		e.log.WarnContext(ctx, "removing orphan sandbox at stop", "sandbox", c.ID)
		if err := e.agents.Destroy(ctx, c.ID); err != nil {
			errs = append(errs, fmt.Errorf("removing orphan sandbox %s: %w", c.ID, err))
			left++
			continue
		}
		if s == nil {
			if _, err := os.Stat(e.dir(c.ID)); err == nil {
				if err := e.dropOrphanHome(ctx, c.ID); err != nil {
					errs = append(errs, fmt.Errorf("removing orphan home %s: %w", c.ID, err))
				}
			}
		}
	}
	// A sandbox whose start was cut short can run with no state for runsc
	// to list: its processes go too.
	if hit := host.KillStraySandboxes(e.runsc.Root, keep); len(hit) > 0 {
		e.log.WarnContext(ctx, "killed stray sandbox processes at stop", "sandboxes", len(hit))
		host.ReapCgroups(e.cgroupNames(hit))
		for id := range hit {
			e.mu.Lock()
			_, known := e.sessions[id]
			e.mu.Unlock()
			if _, err := os.Stat(e.dir(id)); err == nil && !known {
				if err := e.dropOrphanHome(ctx, id); err != nil {
					errs = append(errs, fmt.Errorf("removing orphan home %s: %w", id, err))
				}
			}
		}
	}
	return left, errors.Join(errs...)
}

// hibernateAll hibernates the sessions ids in parallel (at most four at a
// time). A call still running past the caller's grace is ended with its
// sandbox: Stop runs after the HTTP server's grace period.
func (e *Executor) hibernateAll(ctx context.Context, ids []string) []error {
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for _, id := range ids {
		e.mu.Lock()
		s, ok := e.sessions[id]
		e.mu.Unlock()
		if !ok {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			locked := false
			select {
			case s.lock <- struct{}{}:
				locked = true
			case <-time.After(2 * time.Second):
			case <-ctx.Done():
			}
			err := e.hibernate(ctx, s, "server stopped")
			if locked {
				<-s.lock
			}
			if err != nil && !errors.Is(err, ErrBadState) && !errors.Is(err, ErrSessionMoved) && !errors.Is(err, ErrNotFound) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errs
}

// installFile copies src to dst atomically with mode 0755.
func installFile(src, dst string) error {
	// The same bytes are left in place: a running sandbox has this file
	// (the guest) open through its mount, and replacing it invalidates
	// the sandbox's view of it, after which runsc cannot checkpoint that
	// sandbox ("invalidated dentries can't be saved"): an adopted live
	// session would lose its memory at its first hibernation.
	if same, err := sameContent(src, dst); err == nil && same {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// sameContent says whether files a and b hold the same bytes.
func sameContent(a, b string) (bool, error) {
	sum := func(p string) (int64, []byte, error) {
		f, err := os.Open(p)
		if err != nil {
			return 0, nil, err
		}
		defer f.Close()
		h := sha256.New()
		n, err := io.Copy(h, f)
		return n, h.Sum(nil), err
	}
	na, ha, err := sum(a)
	if err != nil {
		return false, err
	}
	nb, hb, err := sum(b)
	if err != nil {
		return false, err
	}
	return na == nb && bytes.Equal(ha, hb), nil
}

// reconcile adopts sessions whose sandbox survived, serves the other
// sessions whose home image is there as hibernated, ends the rest, and
// removes sandboxes, homes and cgroups that belong to no session.
func (e *Executor) reconcile(ctx context.Context) error {
	rows, err := e.store.SessionsInStates(ctx, sandbox.AllStates.Without(sandbox.EndedStates)...)
	if err != nil {
		return err
	}
	if n := host.WaitOrphanCommands(ctx, e.runsc.Root, e.cfg.CreateTimeout); n > 0 {
		e.log.WarnContext(ctx, "killed runsc commands left by the previous process", "count", n)
	}
	containers, err := e.runsc.List(ctx)
	if err != nil {
		return err
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
	for _, id := range e.runsc.SandboxIDs() {
		own[id] = true
	}
	keep := map[string]bool{}     // sessions adopted with their sandbox
	keepHome := map[string]bool{} // sessions kept: adopted or hibernated
	var hibernated []*session
	var ended []host.Home // sessions of this node ended here
	var unserved []string // sessions whose image could not be read: not served, not ended
	for _, r := range rows {
		h := e.home(r.ID)
		dir := h.Dir
		// A fork that crashed may have left its source frozen.
		host.ThawHome(dir)
		rt, lerr := e.rt.LookupVersion(r.Language, r.Version)
		if errors.Is(lerr, ErrUnsupportedVersion) {
			// Kept, hibernated: its calls say why it cannot run.
			e.log.WarnContext(ctx, "session's runtime version is no longer installed", "session", r.ID, "language", r.Language, "version", r.Version, "err", lerr)
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
			e.sessions[r.ID] = s
			e.live++
			e.disk += size
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
					if err := e.store.SetSessionCheckpoint(ctx, r.ID, true, store.Checkpoint{}); err != nil {
						return err
					}
				}
				e.regain = append(e.regain, s)
				e.log.InfoContext(ctx, "live session adopted", "session", r.ID)
				continue
			}
			// A call the crash interrupted may still run its program; it
			// is recorded failed below, so stop it before new calls come.
			kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if _, err := e.runsc.Run(kctx, "", "exec", "--user", "0:0", "--cap", "CAP_KILL", r.ID, host.GuestBin, "kill"); err != nil {
				e.log.WarnContext(ctx, "killing leftover user processes", "session", r.ID, "err", err)
			}
			cancel()
			e.log.InfoContext(ctx, "session adopted", "session", r.ID)
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
				e.log.ErrorContext(ctx, "home image unreadable on restart: session left to adopt on its next call", "session", r.ID, "image", h.Image(), "err", serr)
				continue
			}
			if serr == nil && lerr == nil {
				s := newSession(r.ID, r.KeyID, rt, r.IdleTTL, r.CreatedAt, storedNetwork(r.Network))
				s.state, s.parent, s.diskBytes = StateHibernated, r.ParentID, size
				// Its kernel, if any, is lost: the next cell says so.
				s.kernel, s.kernelUsed = r.Kernel, r.Kernel
				s.hibernatedAt, s.lastUsed = time.Now(), time.Now()
				e.disk += s.servedHibernatedLive(r, h)
				if r.State == StateHibernated {
					// Cleanly hibernated: its idle clock goes on.
					s.hibernatedAt, s.lastUsed = r.HibernatedAt, r.LastUsedAt
				}
				e.sessions[r.ID] = s
				e.disk += size
				keepHome[r.ID] = true
				if r.State != StateHibernated {
					hibernated = append(hibernated, s)
				}
				continue
			}
		}
		if err := e.store.SetSessionState(ctx, r.ID, StateEnded, "lost on restart", true); errors.Is(err, store.ErrNotOwner) {
			continue // claimed by another node meanwhile: its image is its own
		} else if err != nil {
			return err
		}
		ended = append(ended, h)
		e.log.WarnContext(ctx, "session ended on restart", "session", r.ID, "state", r.State)
	}
	for _, c := range containers {
		if !keep[c.ID] {
			if err := e.agents.Destroy(ctx, c.ID); err != nil {
				e.log.ErrorContext(ctx, "removing orphan sandbox", "sandbox", c.ID, "err", err)
			}
		}
	}
	// A node-local folder is a home this node made (makeHome makes it
	// before the image): those of no kept session go, with their image
	// unless the session lives on elsewhere.
	ents, err := os.ReadDir(e.sessionsDir())
	if err != nil {
		return fmt.Errorf("reading sessions folder: %w", err)
	}
	for _, ent := range ents {
		own[ent.Name()] = true
		if !keepHome[ent.Name()] {
			if err := e.dropOrphanHome(ctx, ent.Name()); err != nil {
				e.log.ErrorContext(ctx, "removing orphan home", "session", ent.Name(), "err", err)
			}
		}
	}
	// The images of sessions ended above that had no node-local folder
	// (adopted from another node, never resumed here).
	for _, h := range ended {
		if h.Apart() {
			if err := os.RemoveAll(h.ImgDir); err != nil {
				e.log.ErrorContext(ctx, "removing home image of an ended session", "dir", h.ImgDir, "err", err)
			}
		}
	}
	// Install jobs are never adopted (an install is all or nothing): the
	// bundles a crash left go with their sandboxes.
	if ents, err := os.ReadDir(e.jobsDir()); err == nil {
		for _, ent := range ents {
			own[ent.Name()] = true
			if err := os.RemoveAll(filepath.Join(e.jobsDir(), ent.Name())); err != nil {
				e.log.ErrorContext(ctx, "removing orphan install job", "job", ent.Name(), "err", err)
			}
		}
	}
	if e.net != nil {
		live := make([]string, 0, len(keep))
		for id := range keep {
			live = append(live, id)
		}
		if err := e.net.Reconcile(ctx, live); err != nil {
			return fmt.Errorf("reconciling networks: %w", err)
		}
	}
	if hit := host.KillStraySandboxes(e.runsc.Root, keep); len(hit) > 0 {
		e.log.WarnContext(ctx, "killed stray sandbox processes", "count", len(hit))
	}
	host.RemoveStaleCgroups(e.cgroupNames(own), e.cgroupNames(keep))
	// The sandboxes (and stray processes) of sessions now hibernated are
	// gone (above): their homes come off the host, and their rows say
	// hibernated. (A row hibernated already had its home unmounted before
	// it said so.)
	for _, id := range unserved {
		if err := host.UnmountHome(e.dir(id)); err != nil {
			e.log.ErrorContext(ctx, "unmounting home of a session not served", "session", id, "err", err)
		}
	}
	for _, s := range hibernated {
		if err := host.UnmountHome(e.dir(s.id)); err != nil {
			e.log.ErrorContext(ctx, "unmounting home of a hibernated session", "session", s.id, "err", err)
		}
		if err := e.store.SetSessionHibernated(ctx, s.id, s.hibernatedAt, s.lastUsed); errors.Is(err, store.ErrNotOwner) {
			e.mu.Lock()
			e.letGo(s) // claimed by another node meanwhile
			e.mu.Unlock()
			continue
		} else if err != nil {
			return err
		}
		e.log.InfoContext(ctx, "session served hibernated", "session", s.id)
	}
	if n, err := e.store.FailRunningExecutions(ctx, "interrupted"); err != nil {
		return err
	} else if n > 0 {
		e.log.WarnContext(ctx, "executions interrupted by restart", "count", n)
	}
	return nil
}

// dropOrphanHome removes the home of id, which no session of this node
// keeps: its mount and node-local folder always, its image unless the
// session lives on under another node (or unowned, handed over), whose
// image it is now.
func (e *Executor) dropOrphanHome(ctx context.Context, id string) error {
	h := e.home(id)
	r, err := e.store.GetSession(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return err // unsure whose it is: kept for the next start
	case r.State != StateEnded && r.Node != e.store.Node():
		if err := host.UnmountHome(h.Dir); err != nil {
			return err
		}
		e.log.InfoContext(ctx, "home left to the session's node", "session", id, "node", r.Node)
		return host.DropLocal(h)
	}
	return host.DropHome(ctx, h)
}

// cgroupName is the cgroup (under /sandboxapi) of sandbox id: the id
// itself on a single node; on a cluster node the id after the node's name,
// because nodes sharing a host may each hold a sandbox of one session (the
// new owner's, and the stale one a dead node left and removes when it
// starts again), and a removal must never reach the other's cgroup.
func (e *Executor) cgroupName(id string) string {
	if n := e.store.Node(); n != "" {
		return n + "." + id
	}
	return id
}

// cgroupNames maps a set of sandbox ids to their cgroup names.
func (e *Executor) cgroupNames(ids map[string]bool) map[string]bool {
	out := make(map[string]bool, len(ids))
	for id, v := range ids {
		out[e.cgroupName(id)] = v
	}
	return out
}

func (e *Executor) reapLoop() {
	defer e.wg.Done()
	t := time.NewTicker(e.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-e.stop:
			return
		case <-t.C:
			e.reapIdle()
		}
	}
}

// reapIdle ends sessions idle past their TTL, running or hibernated, and
// hibernates running ones idle past hibernate_after. A busy session is not
// idle.
func (e *Executor) reapIdle() {
	now := time.Now()
	var idle, sleepy []*session
	e.mu.Lock()
	for _, s := range e.sessions {
		if s.busy != 0 || (s.state != StateRunning && s.state != StateHibernated) {
			continue
		}
		if s.state == StateRunning && e.processesActive(s.id, now) {
			// A background process runs (until its own timeout at most):
			// the session is in use, and stays unhibernated.
			continue
		}
		switch {
		case now.Sub(s.lastUsed) > s.idleTTL:
			idle = append(idle, s)
		case s.state == StateRunning && e.cfg.HibernateAfter > 0 && now.Sub(s.lastUsed) > e.cfg.HibernateAfter:
			sleepy = append(sleepy, s)
		}
	}
	e.mu.Unlock()
	for _, s := range sleepy {
		select {
		case s.lock <- struct{}{}:
		default:
			continue // a call has just come
		}
		e.mu.Lock()
		still := s.busy == 0 && time.Since(s.lastUsed) > e.cfg.HibernateAfter
		e.mu.Unlock()
		if !still {
			<-s.lock
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := e.hibernate(ctx, s, "idle"); err != nil && !errors.Is(err, ErrBadState) && !errors.Is(err, ErrSessionMoved) && !errors.Is(err, ErrNotFound) {
			e.log.Error("hibernating idle session", "session", s.id, "err", err)
		}
		cancel()
		<-s.lock
	}
	for _, s := range idle {
		id := s.id
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		// This object, not whatever holds its id by then (adopted again
		// after a Fence).
		if err := e.endSessionOf(ctx, s, "idle_ttl"); errors.Is(err, ErrSessionMoved) {
			e.log.Info("idle session moved to another node", "session", id)
		} else if err != nil && !errors.Is(err, ErrNotFound) {
			e.log.Error("reaping idle session", "session", id, "err", err)
		} else {
			e.log.Info("session reaped", "session", id, "reason", "idle_ttl")
		}
		cancel()
	}
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns prefix plus 26 random characters: a fixed length, so no id
// is a prefix of another (runsc matches container ids by prefix).
func newID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + idEncoding.EncodeToString(b[:])
}

// ValidID reports whether s has the shape of an id made by newID.
func ValidID(prefix, s string) bool {
	if !strings.HasPrefix(s, prefix) || len(s) != len(prefix)+26 {
		return false
	}
	for _, c := range s[len(prefix):] {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}
