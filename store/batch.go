package store

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// batchWriter queues rows off its callers' paths and writes them in one
// transaction every interval, as soon as batch rows are queued, and on
// close. With maxQueued 0 nothing is ever dropped: a caller that fills a
// batch writes it itself. With maxQueued > 0 Record never touches the
// database, and rows beyond maxQueued waiting for a slow store are dropped
// and counted in the log. Safe for concurrent use.
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

func (w *batchWriter[T]) record(r T) {
	w.mu.Lock()
	if w.closed || (w.maxQueued > 0 && len(w.buf) >= w.maxQueued) {
		w.dropped++
		w.mu.Unlock()
		return
	}
	w.buf = append(w.buf, r)
	full := len(w.buf) >= w.batch
	w.mu.Unlock()
	switch {
	case !full:
	case w.maxQueued == 0:
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
	w.mu.Unlock()
	if dropped > 0 {
		w.log.Error(w.what+" dropped: store too slow or writer closed", "rows", dropped)
	}
	if len(rows) == 0 {
		return
	}
	if err := w.write(ctx, rows); err != nil {
		w.log.Error("writing "+w.what, "rows", len(rows), "err", err)
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
