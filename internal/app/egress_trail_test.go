package app

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// The trail the API serves comes from the store: decisions recorded by the
// proxy hook are listed (also ones still queued), clipped, owned by the
// session's key, and the owner of an unknown session is ErrNotFound.
func TestEgressTrailFromTheStore(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(t.TempDir(), "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now()
	if err := st.InsertSession(ctx, store.SessionRow{ID: "sess_a", KeyID: "key_1", Language: "python3", State: "running", Network: `{"enabled":true}`, IdleTTL: time.Minute, CreatedAt: now, LastUsedAt: now}); err != nil {
		t.Fatal(err)
	}
	w := store.NewEgressWriter(ctx, st, time.Hour, slog.New(slog.DiscardHandler)) // only Flush writes
	defer w.Close()
	trail := &egressTrail{st: st, w: w}
	w.Record(egressRow(egress.Decision{Time: now, Session: "sess_a", Mode: egress.ModeConnect, Host: "api.example.com", Port: 443,
		Addr: netip.MustParseAddr("192.0.2.7"), Outcome: egress.OutcomeAllow, Reason: "matched", BytesUp: 10, BytesDown: 20, Duration: 1500 * time.Millisecond}))
	w.Record(egressRow(egress.Decision{Time: now.Add(time.Millisecond), Session: "sess_a", Mode: egress.ModeConnect, Host: strings.Repeat("x", 5000),
		Port: 443, Outcome: egress.OutcomeDeny, Reason: "host not in allowed_domains"}))

	got, err := trail.EgressDecisions(ctx, "sess_a", 10)
	if err != nil {
		t.Fatal(err)
	}
	ds := got
	if len(ds) != 2 || ds[0].Host != "api.example.com" || ds[0].Addr != "192.0.2.7" || ds[0].DurationMS != 1500 || ds[0].BytesDown != 20 {
		t.Fatalf("decisions: %+v", ds)
	}
	if len(ds[1].Host) != egress.MaxAuditText || ds[1].Outcome != "deny" {
		t.Fatalf("hostile host not clipped: %d bytes", len(ds[1].Host))
	}
	if last, _ := trail.EgressDecisions(ctx, "sess_a", 1); len(last) != 1 || last[0].Outcome != "deny" {
		t.Fatalf("limit 1 should give the latest: %+v", last)
	}
	if owner, err := trail.SessionOwner(ctx, "sess_a"); err != nil || owner != "key_1" {
		t.Fatalf("owner: %q %v", owner, err)
	}
	if _, err := trail.SessionOwner(ctx, "sess_missing"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("unknown session: %v", err)
	}
}
