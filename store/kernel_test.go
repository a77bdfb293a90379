package store

import (
	"context"
	"testing"
	"time"
)

// A session's kernel flag is kept (migration 13): a restart adopts it as
// a kernel session.
func TestSessionKernelFlag(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		t.Parallel()
		ctx := context.Background()
		st := open(t)
		at := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
		for _, r := range []SessionRow{
			{ID: "with", Kernel: true},
			{ID: "without"},
		} {
			r.KeyID, r.Language, r.State, r.Network, r.IdleTTL, r.CreatedAt, r.LastUsedAt = "k", "python3", "running", "{}", time.Minute, at, at
			if err := st.InsertSession(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		for id, want := range map[string]bool{"with": true, "without": false} {
			got, err := open(t).GetSession(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if got.Kernel != want {
				t.Fatalf("session %s: kernel %v, want %v", id, got.Kernel, want)
			}
		}
		rows, err := st.RecentSessions(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		kernels := 0
		for _, r := range rows {
			if r.Kernel {
				kernels++
			}
		}
		if len(rows) != 2 || kernels != 1 {
			t.Fatalf("listed %d sessions, %d with a kernel", len(rows), kernels)
		}
	})
}
