package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
)

// warmSandbox is a started sandbox with a fresh home that has run nothing.
type warmSandbox struct {
	id string
	// gen is the executor's warmGen when it was prepared: one prepared
	// before a dropWarm may have been killed by the fence process.
	gen int
}

// takeWarm hands out a warm sandbox, if one is ready. Each is handed out
// once: it leaves the channel for good. One older than the last dropWarm
// is destroyed instead.
func (e *Executor) takeWarm() (warmSandbox, bool) {
	for {
		select {
		case ws := <-e.warm:
			e.mu.Lock()
			stale := ws.gen != e.warmGen
			e.mu.Unlock()
			if !stale {
				return ws, true
			}
			e.discardWarm(ws)
		default:
			return warmSandbox{}, false
		}
	}
}

// fillWarm keeps the warm pool full. One more sandbox than the pool holds
// may be waiting to go in.
func (e *Executor) fillWarm() {
	defer e.wg.Done()
	for {
		select {
		case <-e.stop:
			return
		default:
		}
		ws, err := e.prepareWarm()
		if err == nil {
			e.warmUp(ws.id)
		}
		if err != nil {
			if errors.Is(err, ErrNoStorage) {
				// The homes' disk budget is spent: sessions come first.
				e.log.Debug("warm pool waits for disk budget")
			} else {
				e.log.Error("preparing warm sandbox", "err", err)
			}
			select {
			case <-e.stop:
				return
			case <-time.After(5 * time.Second):
			}
			continue
		}
		select {
		case e.warm <- ws:
		case <-e.stop:
			if err := e.destroySandbox(context.Background(), ws.id); err != nil {
				e.log.Error("removing a warm sandbox at stop", "sandbox", ws.id, "err", err)
			}
			return
		}
	}
}

// prepareWarm makes a home and starts a sandbox on it.
func (e *Executor) prepareWarm() (warmSandbox, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.CreateTimeout)
	defer cancel()
	id := newID("sess_")
	h := e.home(id)
	e.mu.Lock()
	gen := e.warmGen
	e.mu.Unlock()
	// A warm home counts against max_disk like any other; it becomes the
	// reservation of the session that takes it.
	if err := e.reserveDisk(e.cfg.HomeBytes); err != nil {
		return warmSandbox{}, err
	}
	if err := host.MakeHome(ctx, h, e.cfg.HomeBytes); err != nil {
		_ = host.DropHome(context.Background(), h)
		e.releaseDisk(e.cfg.HomeBytes)
		return warmSandbox{}, fmt.Errorf("preparing home: %w", err)
	}
	if err := e.startSandbox(ctx, id, h.Dir, ""); err != nil {
		if derr := e.destroySandbox(context.Background(), id); derr != nil {
			e.log.Error("removing a warm sandbox that failed to start", "sandbox", id, "err", derr)
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
func (e *Executor) warmUp(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.guestRun(ctx, id, &guest.Request{
		Argv: []string{"/bin/sh", "-c", e.rt.WarmUp()}, Env: []string{"PATH=" + basePath, "HOME=" + host.HomeDir, "LANG=C.UTF-8"},
		Cwd: "/", UID: host.SandboxUID, GID: host.SandboxUID, TimeoutMS: 10_000, MaxProcs: uint64(e.cfg.Pids),
	}, nil, nil)
	if err != nil || res.Status != StatusOK {
		e.log.Warn("warming up a pool sandbox", "sandbox", id, "status", res.Status, "err", err)
	}
}

// destroySandbox removes a warm sandbox that belongs to no session, and
// its home, and gives back its disk reservation.
func (e *Executor) destroySandbox(ctx context.Context, id string) error {
	defer e.releaseDisk(e.cfg.HomeBytes)
	var errs []error
	if err := e.agents.Destroy(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := host.DropHome(ctx, e.home(id)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// WarmReady reports how many warm sandboxes wait (for metrics and tests).
func (e *Executor) WarmReady() int { return len(e.warm) }
