package console

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

type fakeDisk map[string][2]int64

func (d fakeDisk) HomeUsage(id string) (int64, int64, bool) {
	u, ok := d[id]
	return u[0], u[1], ok
}

// TestStoreSessions reads the console's views from a real SQLite store:
// key names joined in, the network request decoded, disk shown for live
// sessions only, usage summed over routes per key and day.
func TestStoreSessions(t *testing.T) {
	ctx := t.Context()
	st, now := storeWithKey(t, "PRO")
	for _, r := range []store.SessionRow{
		{ID: "sess_live", KeyID: "key_a", Language: "python3", State: "running", Network: `{"enabled":true,"allowed_domains":["pypi.org"]}`, CreatedAt: now, LastUsedAt: now},
		{ID: "sess_done", KeyID: "key_a", Language: "bash", State: "ended", Network: `{}`, CreatedAt: now, LastUsedAt: now},
	} {
		if err := st.InsertSession(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.SetSessionState(ctx, "sess_done", "ended", "deleted", true); err != nil {
		t.Fatal(err)
	}
	disk := fakeDisk{"sess_live": {10, 100}, "sess_done": {1, 2}}
	s := NewStoreSessions(st, disk)

	live, err := s.Session(ctx, "sess_live")
	if err != nil {
		t.Fatal(err)
	}
	if live.KeyName != "alice" || !live.NetworkEnabled || len(live.AllowedDomains) != 1 || live.DiskUsed != 10 || live.DiskSize != 100 {
		t.Errorf("live session %+v", live)
	}
	done, err := s.Session(ctx, "sess_done")
	if err != nil {
		t.Fatal(err)
	}
	if done.EndedAt.IsZero() || done.DiskSize != 0 || done.NetworkEnabled {
		t.Errorf("ended session %+v", done)
	}
	if _, err := s.Session(ctx, "sess_none"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown session: %v", err)
	}

	if err := st.InsertUsage(ctx, []store.UsageRow{
		{KeyID: "key_a", Route: "POST /v1/execute", Status: 200, ExecMS: 5, At: now},
		{KeyID: "key_a", Route: "GET /v1/sessions", Status: 500, At: now},
	}); err != nil {
		t.Fatal(err)
	}
	rows, err := s.Usage(ctx, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].KeyName != "alice" || rows[0].Requests != 2 || rows[0].Errors != 1 || rows[0].ExecMS != 5 {
		t.Errorf("usage %+v", rows)
	}
}

// storeWithKey opens a real SQLite store in a temporary folder holding one
// key (key_a, "alice") of plan, and returns it with the time it used.
func storeWithKey(t *testing.T, plan string) (*store.Store, time.Time) {
	t.Helper()
	st, err := store.Open(t.Context(), filepath.Join(t.TempDir(), "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Now().UTC().Truncate(time.Millisecond)
	if err := st.InsertKey(t.Context(), store.KeyRow{ID: "key_a", Name: "alice", Plan: plan, Hash: "h", CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	return st, now
}
