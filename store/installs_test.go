package store

import (
	"context"
	"testing"
	"time"
)

func TestSessionInstalls(t *testing.T) { eachBackend(t, testSessionInstalls) }

func testSessionInstalls(t *testing.T, open opener) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
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

func TestKeyKinds(t *testing.T) { eachBackend(t, testKeyKinds) }

func testKeyKinds(t *testing.T, open opener) {
	t.Parallel()
	ctx := context.Background()
	st := open(t)
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
