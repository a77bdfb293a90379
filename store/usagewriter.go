package store

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// UsageWriter batches usage rows off the request path and writes them every
// interval (and on Close). Record never blocks: when the buffer is full the
// row is written synchronously instead of dropped. Safe for concurrent use.
type UsageWriter struct {
	st       *Store
	log      *slog.Logger
	mu       sync.Mutex
	buf      []UsageRow
	stop     chan struct{}
	done     chan struct{}
	interval time.Duration
}

// NewUsageWriter starts a writer flushing every interval.
func NewUsageWriter(st *Store, interval time.Duration, log *slog.Logger) *UsageWriter {
	w := &UsageWriter{st: st, log: log, stop: make(chan struct{}), done: make(chan struct{}), interval: interval}
	go w.loop()
	return w
}

// Record queues one row.
func (w *UsageWriter) Record(r UsageRow) {
	w.mu.Lock()
	w.buf = append(w.buf, r)
	full := len(w.buf) >= 1024
	w.mu.Unlock()
	if full {
		w.Flush(context.Background())
	}
}

// Flush writes what is queued.
func (w *UsageWriter) Flush(ctx context.Context) {
	w.mu.Lock()
	rows := w.buf
	w.buf = nil
	w.mu.Unlock()
	if len(rows) == 0 {
		return
	}
	if err := w.st.InsertUsage(ctx, rows); err != nil {
		w.log.Error("writing usage", "rows", len(rows), "err", err)
	}
}

func (w *UsageWriter) loop() {
	defer close(w.done)
	t := time.NewTicker(w.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			w.Flush(context.Background())
		case <-w.stop:
			w.Flush(context.Background())
			return
		}
	}
}

// Close flushes and stops the writer.
func (w *UsageWriter) Close() {
	close(w.stop)
	<-w.done
}
