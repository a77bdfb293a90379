package store

import (
	"context"
	"log/slog"
	"time"
)

// usageBatch is how many queued rows make the recording caller write them.
const usageBatch = 1024

// UsageWriter batches usage rows off the request path and writes them every
// interval (and on Close). Nothing is dropped: when a batch is full, the
// request that filled it writes it. Safe for concurrent use.
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
