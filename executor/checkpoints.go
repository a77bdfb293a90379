package executor

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/store"
)

// checkpoints is the live-state role of the session service
// (checkpoint.go): a live session's memory saved by runsc checkpoint into
// an image beside its home, brought back by runsc restore, copied into a
// fork, and the agent channel given back to live sessions adopted at a
// restart. It owns what only it uses (which runsc build wrote an image) and reaches the session service through
// ckptSessions and Durable's hibernate and resume. The session fields it
// reads and writes (live, ckpt, memLost, liveStored, hasSandbox, gone)
// are under mu, the session table's lock. It is made by New and safe for
// concurrent use.
type checkpoints struct {
	s      ckptSessions
	agents *agent.Transport // sandboxes' agent channels
	boxes  *launcher        // sandbox paths and starts
	mu     *sync.Mutex      // the session table's lock (Executor.mu)
	runsc  *host.Runsc
	store  *store.Store
	log    *slog.Logger
	disk   *DiskBudget // an image counts against max_disk
	// hibernate and resume are Durable's: a live session adopted at
	// start is regained by a checkpoint and a restore at once.
	hibernate func(ctx context.Context, s *session, reason string) error
	resume    func(ctx context.Context, s *session) (time.Duration, error)

	// memTimed, when set (tests and benchmarks only), gets the time of
	// each runsc checkpoint ("checkpoint") and restore ("restore").
	memTimed func(op string, d time.Duration)

	runscIDOnce sync.Once
	runscID     string // runscBuild
}

// ckptSessions is what checkpoints needs of the session service.
type ckptSessions interface {
	fault(step createStep, id string) error
}
