package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// TestE2BSandboxes: a record survives a reopen (another process, another
// node), its end moves, and it goes with its session's end (prune) or a
// delete; an unknown id is ErrNotFound.
func TestE2BSandboxes(t *testing.T) {
	eachBackend(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		st := open(t)
		now := time.UnixMilli(time.Now().UnixMilli()).UTC()
		for _, id := range []string{"s1", "s2"} {
			if err := st.InsertSession(ctx, SessionRow{ID: id, KeyID: "k", Language: "python3", State: sandbox.StateRunning, Network: "{}",
				IdleTTL: time.Minute, CreatedAt: now, LastUsedAt: now}); err != nil {
				t.Fatal(err)
			}
			if err := st.InsertE2BSandbox(ctx, E2BSandbox{ID: id, Template: "base", Metadata: `{"a":"b"}`, SealedEnv: "env",
				TokenHash: "h-" + id, SealedToken: "t", SealedKey: "k", EndAt: now.Add(time.Minute), CreatedAt: now}); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.InsertE2BSandbox(ctx, E2BSandbox{ID: "s1", Template: "base", TokenHash: "x", EndAt: now, CreatedAt: now}); err == nil {
			t.Fatal("a second record for s1 was stored")
		}
		again := open(t)
		r, err := again.E2BSandbox(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		want := E2BSandbox{ID: "s1", Template: "base", Metadata: `{"a":"b"}`, SealedEnv: "env", TokenHash: "h-s1", SealedToken: "t", SealedKey: "k",
			EndAt: now.Add(time.Minute), CreatedAt: now}
		if r != want {
			t.Fatalf("record = %+v, want %+v", r, want)
		}
		if _, err := again.E2BSandbox(ctx, "nope"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown id: err = %v, want ErrNotFound", err)
		}
		if err := again.SetE2BEndAt(ctx, "s1", now.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := again.SetE2BEndAt(ctx, "nope", now); !errors.Is(err, ErrNotFound) {
			t.Fatalf("SetE2BEndAt(unknown) = %v, want ErrNotFound", err)
		}
		m, err := st.E2BSandboxes(ctx, []string{"s1", "s2", "nope"})
		if err != nil {
			t.Fatal(err)
		}
		if len(m) != 2 || !m["s1"].EndAt.Equal(now.Add(time.Hour)) {
			t.Fatalf("records = %+v", m)
		}
		// s2's session ends: prune takes its record, and only its.
		if err := st.SetSessionState(ctx, "s2", sandbox.StateEnded, "deleted", true); err != nil {
			t.Fatal(err)
		}
		if n, err := st.PruneE2BSandboxes(ctx); err != nil || n != 1 {
			t.Fatalf("prune = %d, %v; want 1", n, err)
		}
		if _, err := st.E2BSandbox(ctx, "s2"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("s2 after prune: %v", err)
		}
		if err := st.DeleteE2BSandbox(ctx, "s1"); err != nil {
			t.Fatal(err)
		}
		if _, err := st.E2BSandbox(ctx, "s1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("s1 after delete: %v", err)
		}
	})
}
