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
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
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
	net   Network // WithNetwork's provider, until New hands it to nets

	mu       sync.Mutex
	sessions map[string]*session
	live     int // sandboxes counted against MaxSandboxes
	started  bool

	agents *agent.Transport // the sandboxes' guest agent channels, and runs over them
	boxes  *launcher        // sandbox paths and starts

	// createFault, when set (tests only), runs after each step of
	// CreateSession; an error or panic from it fails creation there.
	createFault func(step createStep, id string) error

	// execFileOps counts file calls that took the `runsc exec` path (tests
	// check that the channel carried theirs).
	execFileOps atomic.Int64

	stop chan struct{}
	wg   sync.WaitGroup // reaper and pool filler
	bg   sync.WaitGroup // teardowns of stateless sandboxes

	files *Files     // the files role
	procs *Processes // the background processes role
	node  *Node      // the cluster role; it shares mu
	keep  *upkeep    // restart recovery, the idle reaper, orphans at stop

	pool    *Pool        // the warm pool
	disk    *DiskBudget  // bytes of homes and checkpoints counted against MaxDisk
	ckpts   *checkpoints // live sessions' memory
	dur     *Durable     // hibernation, resume, fork
	kernels *Kernels     // the kernel role
	nets    *Networks    // the network role
	jobs    *Jobs        // one-off programs in sandboxes of their own
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
		stop:     make(chan struct{}),
	}
	e.agents = agent.NewTransport(e.runsc, log, cfg.MaxOutputBytes)
	e.boxes = &launcher{cfg: cfg, runsc: e.runsc, store: st, agents: e.agents, log: log}
	e.files = &Files{s: e, cfg: cfg, log: log, runsc: e.runsc, agents: e.agents, execOps: &e.execFileOps}
	e.procs = &Processes{s: e, cfg: cfg, log: log}
	e.disk = &DiskBudget{max: cfg.MaxDisk, homes: func() []host.Home {
		e.mu.Lock()
		ids := make([]string, 0, len(e.sessions))
		for id := range e.sessions {
			ids = append(ids, id)
		}
		e.mu.Unlock()
		hs := make([]host.Home, len(ids))
		for i, id := range ids {
			hs[i] = e.boxes.home(id)
		}
		return hs
	}}
	e.pool = newPool(e, e.agents, e.boxes, cfg, rt, log, e.disk)
	e.ckpts = &checkpoints{s: e, agents: e.agents, boxes: e.boxes, mu: &e.mu, runsc: e.runsc, store: st, log: log, disk: e.disk}
	e.jobs = &Jobs{s: e, boxes: e.boxes, agents: e.agents, runsc: e.runsc, cfg: cfg, log: log, mu: &e.mu, wg: &e.wg}
	e.kernels = &Kernels{s: e, agents: e.agents, cfg: cfg, log: log}
	for _, o := range opts {
		o(e)
	}
	e.nets = &Networks{s: e, net: e.net, rootfs: cfg.Rootfs, mu: &e.mu, store: st, log: log}
	e.node = newNode(e)
	e.nets.node = e.node
	e.dur = &Durable{s: e, agents: e.agents, boxes: e.boxes, mu: &e.mu, cfg: cfg, rt: rt, store: st, log: log, nets: e.nets, disk: e.disk, ckpts: e.ckpts, node: e.node}
	e.ckpts.hibernate, e.ckpts.resume = e.dur.hibernate, e.dur.resume
	e.keep = newUpkeep(e)
	return e, nil
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

// Start installs the guest, reconciles with whatever a previous process left
// behind, and starts the reaper and the spare-home filler.
func (e *Executor) Start(ctx context.Context) error {
	for _, d := range []string{e.boxes.sessionsDir(), e.boxes.homesDir(), e.boxes.guestDir(), e.runsc.Root} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	if err := os.Chmod(e.boxes.guestDir(), 0o755); err != nil {
		return fmt.Errorf("opening guest folder: %w", err)
	}
	if err := installFile(e.cfg.GuestBinary, filepath.Join(e.boxes.guestDir(), "guest")); err != nil {
		return fmt.Errorf("installing guest: %w", err)
	}
	// The dead man's switch is armed before any sandbox starts (and
	// waits for the fence of this node's previous process to finish).
	if e.store.Node() != "" {
		if err := e.node.startFence(); err != nil {
			return err
		}
	}
	regain, err := e.keep.reconcile(ctx)
	if err != nil {
		_ = e.node.stopFence()
		return fmt.Errorf("reconciling: %w", err)
	}
	e.mu.Lock()
	e.started = true
	e.mu.Unlock()
	if len(regain) > 0 {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.ckpts.regainLive(regain, e.stop)
		}()
	}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		e.keep.reapLoop(e.stop)
	}()
	if e.cfg.WarmPool > 0 {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.pool.fill(e.stop)
		}()
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
	errs = append(errs, e.pool.drain(ctx)...)
	e.bg.Wait()
	e.node.bg.Wait()
	if e.store.Node() != "" {
		if err := e.node.releaseSessions(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if left, err := e.keep.removeOrphanSandboxes(ctx); err != nil {
		errs = append(errs, err)
	} else if left == 0 {
		if err := e.runsc.UnmountNullNetns(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := e.node.stopFence(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
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
			err := e.dur.hibernate(ctx, s, "server stopped")
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
