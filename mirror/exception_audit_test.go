package mirror

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// countingHandler counts log records at warn level and above.
type countingHandler struct{ warns *atomic.Int32 }

func (h countingHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countingHandler) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		h.warns.Add(1)
	}
	return nil
}
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countingHandler) WithGroup(string) slog.Handler      { return h }

// TestExceptionAuditedOnChangeOnly: a recheck (run by every readiness
// check, about 8,600 times a day) writes an exception row and a warning
// for an artifact kept by accepted advisories only when that exception
// changes: judged against a new OSV snapshot, other accepted advisories
// matching, or none matching any more.
func TestExceptionAuditedOnChangeOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	var warns atomic.Int32
	m.log = slog.New(countingHandler{&warns})
	fn, data := buildWheel(t, wheelSpec{name: "requests", version: "2.31.0"})
	ids := []string{"GHSA-9hjg-9r4m-mvj7", "GHSA-9wx4-h78v-vm56"}
	if _, err := m.AddWheel(ctx, fn, data, "test", ids); err != nil {
		t.Fatal(err)
	}
	exceptions := func() []AuditEntry {
		t.Helper()
		all, err := m.Audit(ctx, 100000)
		if err != nil {
			t.Fatal(err)
		}
		var out []AuditEntry
		for _, e := range all {
			if e.Event == AuditException && e.Name == "requests" {
				out = append(out, e)
			}
		}
		return out
	}
	recheck := func(n int) {
		t.Helper()
		for range n {
			res, err := m.Recheck(ctx)
			if err != nil || len(res.Quarantined) != 0 {
				t.Fatalf("recheck = %+v, %v", res, err)
			}
		}
	}
	step := func(name string, wantRows, wantWarns int) []AuditEntry {
		t.Helper()
		got := exceptions()
		if len(got) != wantRows || int(warns.Load()) != wantWarns {
			t.Fatalf("%s: %d exception rows and %d warnings, want %d and %d: %+v", name, len(got), warns.Load(), wantRows, wantWarns, got)
		}
		return got
	}
	step("admission", 1, 1)
	recheck(200) // about half an hour of readiness checks
	step("unchanged exception", 1, 1)

	// The same records imported again: the same snapshot, nothing new.
	if _, err := m.ImportOSV(ctx, "testdata/osv"); err != nil {
		t.Fatal(err)
	}
	recheck(20)
	step("same snapshot re-imported", 1, 1)

	// A new snapshot (one more record, about another package) that still
	// matches both accepted ids: one row naming it, then quiet again.
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("testdata/osv")); err != nil {
		t.Fatal(err)
	}
	rec := `{"id":"PYSEC-2099-7","modified":"2026-10-01T00:00:00Z","affected":[{"package":{"ecosystem":"PyPI","name":"nothing-here"},"versions":["1.0"]}]}`
	if err := os.WriteFile(filepath.Join(src, "PyPI", "PYSEC-2099-7.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	snap2, err := m.ImportOSV(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	recheck(20)
	got := step("new snapshot", 2, 2)
	if got[0].OSVSnapshot != snap2.ID || !slices.Equal(got[0].Advisories, ids) || !strings.Contains(got[0].Reason, snap2.ID) {
		t.Errorf("row for the new snapshot: %+v", got[0])
	}

	// One accepted advisory withdrawn: the exception narrows.
	if err := os.Remove(filepath.Join(src, "PyPI", ids[1]+".json")); err != nil {
		t.Fatal(err)
	}
	snap3, err := m.ImportOSV(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	recheck(20)
	got = step("narrowed", 3, 3)
	if !slices.Equal(got[0].Advisories, ids[:1]) || got[0].OSVSnapshot != snap3.ID {
		t.Errorf("row for the narrowed exception: %+v", got[0])
	}
	if a, err := m.Lookup(ctx, Pip, "requests", "2.31.0"); err != nil || !slices.Equal(a.Advisories, ids[:1]) {
		t.Errorf("artifact after narrowing = %+v, %v", a, err)
	}

	// No advisory left: the exception lapses, once.
	if err := os.Remove(filepath.Join(src, "PyPI", ids[0]+".json")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.ImportOSV(ctx, src); err != nil {
		t.Fatal(err)
	}
	recheck(20)
	got = step("lapsed", 4, 4)
	if !strings.Contains(got[0].Reason, "lapsed") || len(got[0].Advisories) != 0 {
		t.Errorf("row for the lapsed exception: %+v", got[0])
	}
	if res, err := m.Recheck(ctx); err != nil || len(res.Excepted) != 0 {
		t.Errorf("recheck after the lapse = %+v, %v", res, err)
	}
}
