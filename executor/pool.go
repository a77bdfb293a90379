package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
)

// warmSandbox is a started sandbox with a fresh home that has run nothing.
type warmSandbox struct {
	id string
	// gen is the pool's gen when it was prepared: one prepared before a
	// drop may have been killed by the fence process.
	gen int
}

// Pool is the executor's warm pool: started sandboxes on fresh homes that
// have run nothing, which new sessions and stateless calls take. It owns
// the pool's channel and generation and reaches the session service only
// through poolSessions. Get it from Executor.Pool; it is safe for
// concurrent use.
type Pool struct {
	s      poolSessions
	agents *agent.Transport // sandboxes' agent channels
	boxes  *launcher        // sandbox paths and starts
	cfg    Config
	rt     *Runtimes
	log    *slog.Logger
	disk   *DiskBudget // the homes' budget: a warm home counts

	warm chan warmSandbox // started sandboxes that have run nothing
	// slots holds one token per warm sandbox that exists: made or being
	// made by the filler, and not yet taken. Its capacity is warm's, so
	// the pool never holds more sandboxes than warm_pool says.
	slots chan struct{}
	mu    sync.Mutex
	gen   int            // under mu: warm sandboxes of an older gen are stale (drop)
	bg    sync.WaitGroup // removals of stale warm sandboxes
}

// poolSessions is what Pool needs of the session service: where a home
// lives, and a sandbox's start, run and end.
type poolSessions interface {
	guestRun(ctx context.Context, id string, greq *guest.Request, stdin []byte, onOutput func(string, []byte)) (Result, error)
}

func newPool(s poolSessions, agents *agent.Transport, boxes *launcher, cfg Config, rt *Runtimes, log *slog.Logger, disk *DiskBudget) *Pool {
	n := max(cfg.WarmPool, 0)
	return &Pool{s: s, agents: agents, boxes: boxes, cfg: cfg, rt: rt, log: log, disk: disk, warm: make(chan warmSandbox, n), slots: make(chan struct{}, n)}
}

// Pool returns the executor's warm pool.
func (e *Executor) Pool() *Pool { return e.pool }

// take hands out a warm sandbox, if one is ready. Each is handed out
// once: it leaves the channel for good. One older than the last drop is
// destroyed instead.
func (p *Pool) take() (warmSandbox, bool) {
	for {
		select {
		case ws := <-p.warm:
			<-p.slots // the filler may make the next one
			p.mu.Lock()
			stale := ws.gen != p.gen
			p.mu.Unlock()
			if !stale {
				return ws, true
			}
			p.discard(ws)
		default:
			return warmSandbox{}, false
		}
	}
}

// fill keeps the warm pool full until stop is closed. It makes a sandbox
// only when there is a slot for it, so the sandboxes waiting and the one
// being made are at most warm_pool together: after a take, the pool is
// one short until the filler's next sandbox is ready. (It used to make
// one beyond a full pool and hold it until a take, which cost every
// server a sandbox, with its memory, that the operator had not asked
// for.)
func (p *Pool) fill(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case p.slots <- struct{}{}:
		}
		ws, err := p.prepare()
		if err == nil {
			p.warmUp(ws.id)
		}
		if err != nil {
			<-p.slots
			if errors.Is(err, ErrNoStorage) {
				// The homes' disk budget is spent: sessions come first.
				p.log.Debug("warm pool waits for disk budget")
			} else {
				p.log.Error("preparing warm sandbox", "err", err)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Second):
			}
			continue
		}
		// warm has room for every slot; only a sandbox put back by hand
		// (a test) can fill it first.
		select {
		case p.warm <- ws:
		case <-stop:
			if err := p.destroy(context.Background(), ws.id); err != nil {
				p.log.Error("removing a warm sandbox at stop", "sandbox", ws.id, "err", err)
			}
			return
		}
	}
}

// prepare makes a home and starts a sandbox on it.
func (p *Pool) prepare() (warmSandbox, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.CreateTimeout)
	defer cancel()
	id := newID("sess_")
	h := p.boxes.home(id)
	p.mu.Lock()
	gen := p.gen
	p.mu.Unlock()
	// A warm home counts against max_disk like any other; it becomes the
	// reservation of the session that takes it.
	if err := p.disk.reserve(p.cfg.HomeBytes); err != nil {
		return warmSandbox{}, err
	}
	if err := host.MakeHome(ctx, h, p.cfg.HomeBytes); err != nil {
		_ = host.DropHome(context.Background(), h)
		p.disk.release(p.cfg.HomeBytes)
		return warmSandbox{}, fmt.Errorf("preparing home: %w", err)
	}
	if err := p.boxes.startSandbox(ctx, id, h.Dir, ""); err != nil {
		if derr := p.destroy(context.Background(), id); derr != nil {
			p.log.Error("removing a warm sandbox that failed to start", "sandbox", id, "err", derr)
		}
		return warmSandbox{}, err
	}
	return warmSandbox{id: id, gen: gen}, nil
}

// warmUp starts the interpreters once: each default version's warm-up
// command of the runtimes file. A fresh sandbox's kernel has none of the
// rootfs's files cached: its first python3 start takes about twice as
// long as later ones, its first node start about 200 ms more. It runs them in a pool sandbox before anyone has it, as the
// sandbox user in /, so a caller's first run finds the files cached. It
// writes nothing (the sandbox stays fresh) and every process it started
// is gone when it returns; a failure only costs the speed-up.
func (p *Pool) warmUp(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.s.guestRun(ctx, id, &guest.Request{
		Argv: []string{"/bin/sh", "-c", p.rt.WarmUp()}, Env: []string{"PATH=" + basePath, "HOME=" + host.HomeDir, "LANG=C.UTF-8"},
		Cwd: "/", UID: host.SandboxUID, GID: host.SandboxUID, TimeoutMS: 10_000, MaxProcs: uint64(p.cfg.Pids),
	}, nil, nil)
	if err != nil || res.Status != StatusOK {
		p.log.Warn("warming up a pool sandbox", "sandbox", id, "status", res.Status, "err", err)
	}
}

// destroy removes a warm sandbox that belongs to no session, and its
// home, and gives back its disk reservation.
func (p *Pool) destroy(ctx context.Context, id string) error {
	defer p.disk.release(p.cfg.HomeBytes)
	var errs []error
	if err := p.agents.Destroy(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := host.DropHome(ctx, p.boxes.home(id)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// drop empties the warm pool, and makes every warm sandbox prepared so
// far stale (one may still be on its way in): they are destroyed in the
// background, and the pool fills again.
func (p *Pool) drop() {
	p.mu.Lock()
	p.gen++
	p.mu.Unlock()
	for {
		select {
		case ws := <-p.warm:
			<-p.slots
			p.discard(ws)
		default:
			return
		}
	}
}

// discard destroys warm sandbox ws in the background.
func (p *Pool) discard(ws warmSandbox) {
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := p.destroy(ctx, ws.id); err != nil {
			p.log.Error("dropping a stale warm sandbox", "sandbox", ws.id, "err", err)
		}
	}()
}

// drain destroys every warm sandbox that waits and waits for the stale
// ones' removal (Stop, once the filler has stopped).
func (p *Pool) drain(ctx context.Context) []error {
	var errs []error
	for {
		select {
		case ws := <-p.warm:
			<-p.slots
			if err := p.destroy(ctx, ws.id); err != nil {
				errs = append(errs, err)
			}
			continue
		default:
		}
		break
	}
	p.bg.Wait()
	return errs
}

// Ready reports how many warm sandboxes wait (for metrics and tests).
func (p *Pool) Ready() int { return len(p.warm) }

// settled reports whether the pool is full: its filler waits for a slot,
// so nothing of the pool opens or closes files until a sandbox is taken
// (for tests).
func (p *Pool) settled() bool { return len(p.warm) == cap(p.warm) }
