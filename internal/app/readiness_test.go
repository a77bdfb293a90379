package app

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/readiness"
	"github.com/sandboxapi/sandboxapi/store"
)

// TestInstallGateSeesOSVImportAtOnce: with the real mirror and store, an
// install gate that said "not loaded" opens right after `sandboxapi
// mirror osv import` (its own store and mirror on the same data dir, as
// the operator's command opens them),
// long before the next scheduled readiness run.
func TestInstallGateSeesOSVImportAtOnce(t *testing.T) {
	ctx := context.Background()
	dd := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dd, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := mirror.DefaultConfig()
	cfg.StoreDir = filepath.Join(dd, "mirror") // as the CLI resolves it under the data dir
	m, err := mirror.New(ctx, cfg, st.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := readiness.DefaultConfig()
	rcfg.Interval, rcfg.StaleAfter = readiness.Duration(time.Hour), readiness.Duration(2*time.Hour)
	rcfg.MinRefresh = readiness.Duration(200 * time.Millisecond)
	chk := readiness.New(rcfg, nil)
	chk.Register("osv", readiness.OSV(mirrorOSV{m: m}))
	runCtx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); chk.Stop() }()
	chk.Start(runCtx)
	gate := readinessReporter{chk}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, checks := gate.Checks(ctx, false); checks[0].Status != "pending" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the scheduled first run never finished")
		}
	}

	ok, failing := gate.Ready(ctx)
	if ok || len(failing) != 1 || !strings.Contains(failing[0].Detail, "not loaded") && !strings.Contains(failing[0].Detail, "unavailable") {
		t.Fatalf("before the import: %v %+v", ok, failing)
	}
	osvImport(t, dd, filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "osv"))
	time.Sleep(250 * time.Millisecond) // past min_refresh since the last on-demand run
	start := time.Now()
	ok, failing = gate.Ready(ctx)
	if !ok {
		t.Fatalf("the gate is still closed after the import: %+v", failing)
	}
	t.Logf("gate opened %s after the import's on-demand check", time.Since(start).Round(time.Millisecond))
	if _, checks := gate.Checks(ctx, false); len(checks) != 1 || checks[0].Status != "pass" || !strings.Contains(checks[0].Detail, "snapshot") {
		t.Errorf("readyz after the gate's run: %+v", checks)
	}
}

// osvImport imports the OSV records at path into the data dir dd the way
// `sandboxapi mirror osv import` does: through a store and a mirror of its
// own, as a separate process would.
func osvImport(t *testing.T, dd, path string) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(dd, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := mirror.DefaultConfig()
	cfg.StoreDir = filepath.Join(dd, "mirror")
	m, err := mirror.New(ctx, cfg, st.DB(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.ImportOSV(ctx, path); err != nil {
		t.Fatal(err)
	}
}

// TestStoreCheckFollowsPostgres: readiness's store check passes on a real
// PostgreSQL, fails within store.PingTimeout once it is stopped (with a
// detail that names neither host nor user, since /readyz needs no key),
// and passes again on the same handle once it is started.
func TestStoreCheckFollowsPostgres(t *testing.T) {
	pg := testenv.StartPostgres(t)
	ctx := context.Background()
	st, err := store.OpenURL(ctx, pg.URL(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	check := storeCheck(st, slog.New(slog.DiscardHandler))
	if d, err := check(ctx); err != nil || !strings.Contains(d, "postgres answers SELECT 1") {
		t.Fatalf("up: %q, %v", d, err)
	}
	pg.Stop(t)
	start := time.Now()
	_, err = check(ctx)
	if err == nil {
		t.Fatal("down: the check passed")
	}
	if time.Since(start) > store.PingTimeout+time.Second {
		t.Errorf("down: the check took %v", time.Since(start))
	}
	if msg := err.Error(); !strings.Contains(msg, "postgres cannot be reached") || strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, "user=") {
		t.Errorf("down: detail %q", msg)
	}
	pg.Start(t)
	if d, err := check(ctx); err != nil {
		t.Fatalf("after the restart: %q, %v", d, err)
	}
}
