package store

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// batchWriter queues rows off its callers' paths and writes them in one
// transaction every interval, as soon as batch rows are queued, and on
// close. With maxQueued 0 nothing is dropped while the store answers: a
// caller that fills a batch writes it itself. With maxQueued > 0 Record
// never touches the database, and rows beyond maxQueued waiting for a slow
// store are dropped and counted in the log.
//
// A write that fails because the store cannot be reached (ErrUnavailable)
// keeps its rows, ahead of those queued since, and the writer retries
// them every interval until the store is back; meanwhile callers never
// write themselves, and rows beyond outageQueued (maxQueued when set) are
// dropped, oldest first, and counted in the log. A write that fails for
// another reason drops its rows with an error line. Safe for concurrent
// use.
type batchWriter[T any] struct {
	write     func(context.Context, []T) error
	what      string // for log lines
	log       *slog.Logger
	batch     int
	maxQueued int

	mu      sync.Mutex
	buf     []T
	dropped int64
	closed  bool
	// outage is set while the last write found the store unavailable:
	// rows wait in buf for the next tick.
	outage bool

	flushMu sync.Mutex // one write at a time, in the order rows were queued
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

// newBatchWriter starts the writer. ctx carries values only: it runs until
// close.
func newBatchWriter[T any](ctx context.Context, what string, write func(context.Context, []T) error, interval time.Duration, batch, maxQueued int, log *slog.Logger) *batchWriter[T] {
	w := &batchWriter[T]{write: write, what: what, log: log, batch: batch, maxQueued: maxQueued,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.loop(context.WithoutCancel(ctx), interval)
	return w
}

// outageQueued bounds the rows a writer without maxQueued holds while the
// store is unavailable (a row is about a hundred bytes).
const outageQueued = 1 << 17

// limit is how many rows may wait in buf; 0 is no bound. Called with mu.
func (w *batchWriter[T]) limit() int {
	if w.maxQueued == 0 && w.outage {
		return outageQueued
	}
	return w.maxQueued
}

func (w *batchWriter[T]) record(r T) {
	w.mu.Lock()
	if limit := w.limit(); w.closed || (limit > 0 && len(w.buf) >= limit) {
		w.dropped++
		w.mu.Unlock()
		return
	}
	w.buf = append(w.buf, r)
	full := len(w.buf) >= w.batch
	writeHere := full && w.maxQueued == 0 && !w.outage
	w.mu.Unlock()
	switch {
	case !full:
	case writeHere:
		w.flush(context.Background())
	default:
		select {
		case w.kick <- struct{}{}:
		default: // a write is already due
		}
	}
}

func (w *batchWriter[T]) flush(ctx context.Context) {
	w.flushMu.Lock()
	defer w.flushMu.Unlock()
	w.mu.Lock()
	rows, dropped := w.buf, w.dropped
	w.buf, w.dropped = nil, 0
	wasOutage := w.outage
	w.mu.Unlock()
	if dropped > 0 {
		w.log.Error(w.what+" dropped: store too slow or unavailable, or writer closed", "rows", dropped)
	}
	if len(rows) == 0 {
		return
	}
	// In batches, so that what an outage held back goes in transactions
	// of the usual size.
	for len(rows) > 0 {
		n := min(len(rows), w.batch)
		err := w.write(ctx, rows[:n])
		switch {
		case err == nil:
			rows = rows[n:]
			continue
		case errors.Is(err, ErrUnavailable):
			w.keep(rows, wasOutage, err)
			return
		default:
			w.log.Error("writing "+w.what, "rows", n, "err", err)
			rows = rows[n:]
		}
	}
	if wasOutage {
		w.mu.Lock()
		w.outage = false
		w.mu.Unlock()
		w.log.Info("store available again: "+w.what+" written", "what", w.what)
	}
}

// keep puts rows, which the store could not take, back ahead of those
// queued since, within the writer's bound (the oldest go first).
func (w *batchWriter[T]) keep(rows []T, wasOutage bool, err error) {
	w.mu.Lock()
	w.outage = true
	all := append(rows, w.buf...)
	over := 0
	if limit := w.limit(); limit > 0 && len(all) > limit {
		over = len(all) - limit
		all = all[over:]
		w.dropped += int64(over)
	}
	w.buf = all
	held := len(all)
	w.mu.Unlock()
	if !wasOutage {
		w.log.Warn("store unavailable: keeping "+w.what+" to write when it is back", "rows", held, "err", err)
	}
}

func (w *batchWriter[T]) loop(ctx context.Context, interval time.Duration) {
	defer close(w.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.flush(ctx)
		case <-w.kick:
			w.flush(ctx)
		case <-w.stop:
			w.mu.Lock()
			w.closed = true
			w.mu.Unlock()
			w.flush(ctx)
			// What the store could not take at close is lost: say how much.
			w.mu.Lock()
			lost := len(w.buf) + int(w.dropped)
			w.buf, w.dropped = nil, 0
			w.mu.Unlock()
			if lost > 0 {
				w.log.Error(w.what+" dropped: store unavailable when the writer closed", "rows", lost)
			}
			return
		}
	}
}

// close writes what is queued and stops the writer; rows recorded after it
// are dropped. Calling it again does nothing.
func (w *batchWriter[T]) close() {
	w.once.Do(func() {
		close(w.stop)
		<-w.done
	})
}
