package store

import (
	"context"
	"testing"
	"time"
)

func TestSessionInstalls(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openTestStore(t)
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	six := InstallRow{SessionID: "s1", KeyID: "k1", Manager: "pip", Name: "six", Version: "1.16.0", Filename: "six.whl", SHA256: "aa", OSVSnapshot: "snap1", InstalledAt: at}
	ms := InstallRow{SessionID: "s1", KeyID: "k1", Manager: "npm", Name: "ms", Version: "2.1.3", Filename: "ms-2.1.3.tgz", SHA256: "bb", OSVSnapshot: "snap1", InstalledAt: at}
	other := six
	other.SessionID = "s2"
	if err := st.InsertInstalls(ctx, []InstallRow{six, ms, other}); err != nil {
		t.Fatal(err)
	}
	again := six
	again.OSVSnapshot, again.InstalledAt = "snap2", at.Add(time.Hour)
	if err := st.InsertInstalls(ctx, []InstallRow{again}); err != nil {
		t.Fatal(err)
	}
	got, err := st.SessionInstalls(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != ms || got[1] != again {
		t.Fatalf("installs %+v", got)
	}
	if none, err := st.SessionInstalls(ctx, "nope"); err != nil || len(none) != 0 {
		t.Fatalf("unknown session: %v %v", none, err)
	}
}

func TestKeyKinds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openTestStore(t)
	for _, k := range []KeyRow{{ID: "c", Name: "c", Plan: "PRO", Hash: "h1"}, {ID: "a", Name: "a", Plan: "MEGA", Hash: "h2", Kind: KindAdmin}} {
		if err := st.InsertKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.InsertKey(ctx, KeyRow{ID: "x", Name: "x", Plan: "PRO", Hash: "h3", Kind: "root"}); err == nil {
		t.Fatal("an unknown kind was stored")
	}
	for hash, want := range map[string]string{"h1": KindClient, "h2": KindAdmin} {
		k, err := st.KeyByHash(ctx, hash)
		if err != nil || k.Kind != want {
			t.Fatalf("%s: kind %q %v, want %q", hash, k.Kind, err, want)
		}
	}
}

// RecentSessions reads the same columns as GetSession (a column added to
// sessions must be read by every query that scans a SessionRow).
func TestRecentSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := openTestStore(t)
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i, id := range []string{"s1", "s2"} {
		r := SessionRow{ID: id, KeyID: "k1", Language: "python3", State: "running", Network: "{}", IdleTTL: time.Minute,
			CreatedAt: at.Add(time.Duration(i) * time.Second), LastUsedAt: at, DiskBytes: 64 << 20, ParentID: "p"}
		if err := st.InsertSession(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := st.RecentSessions(ctx, 10)
	if err != nil || len(rows) != 2 || rows[0].ID != "s2" {
		t.Fatalf("recent sessions: %+v %v", rows, err)
	}
	one, err := st.GetSession(ctx, "s2")
	if err != nil || one.DiskBytes != rows[0].DiskBytes || one.ParentID != rows[0].ParentID {
		t.Fatalf("GetSession %+v and RecentSessions %+v differ (%v)", one, rows[0], err)
	}
}
