package store

import (
	"context"
	"log/slog"
	"time"
)

// usageBatch is how many queued rows make the recording caller write them.
const usageBatch = 1024

// UsageWriter batches usage rows off the request path and writes them every
// interval (and on Close). While the store answers nothing is dropped: when
// a batch is full, the request that filled it writes it. While it cannot
// be reached (ErrUnavailable), rows wait (up to outageQueued, then the
// oldest are dropped and counted in the log) and are written when it is
// back; requests never wait for it. A batch whose commit was cut off may
// have been written already: after an outage a few rows may count twice,
// never silently vanish. Safe for concurrent use.
type UsageWriter struct{ b *batchWriter[UsageRow] }

// NewUsageWriter starts a writer flushing every interval.
func NewUsageWriter(st *Store, interval time.Duration, log *slog.Logger) *UsageWriter {
	return &UsageWriter{newBatchWriter(context.Background(), "usage", st.InsertUsage, interval, usageBatch, 0, log)}
}

// Record queues one row.
func (w *UsageWriter) Record(r UsageRow) { w.b.record(r) }

// Flush writes what is queued.
func (w *UsageWriter) Flush(ctx context.Context) { w.b.flush(ctx) }

// Close flushes and stops the writer.
func (w *UsageWriter) Close() { w.b.close() }
