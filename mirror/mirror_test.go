package mirror

import (
	"archive/zip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestAdmitRealWheelAndLookup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	a, err := m.AddFile(ctx, "testdata/wheels/wheel-0.43.0-py3-none-any.whl", nil)
	if err != nil {
		t.Fatalf("AddFile: %v", err)
	}
	if a.Status != StatusAdmitted || a.Name != "wheel" || a.MetadataSHA256 == "" || a.OSVSnapshot == "" {
		t.Fatalf("artifact = %+v", a)
	}
	got, err := m.Lookup(ctx, Pip, "Wheel", "")
	if err != nil || got.SHA256 != a.SHA256 || got.URLPath != "/mirror/pypi/files/"+a.SHA256+"/wheel-0.43.0-py3-none-any.whl" {
		t.Fatalf("Lookup = %+v, %v", got, err)
	}
	if _, err := m.Lookup(ctx, Pip, "wheel", "0.42"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup missing version err = %v", err)
	}
	// Stored by content address.
	if _, err := os.Stat(filepath.Join(m.cfg.StoreDir, "blobs", "sha256", a.SHA256[:2], a.SHA256)); err != nil {
		t.Errorf("blob not stored: %v", err)
	}
	audit, _ := m.Audit(ctx, 10)
	if len(audit) == 0 || audit[0].Event != AuditAdmission || audit[0].OSVSnapshot != a.OSVSnapshot {
		t.Errorf("audit = %+v", audit)
	}
}

func TestOSVGateRefusesAndException(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	fn, data := buildWheel(t, wheelSpec{name: "requests", version: "2.31.0"})
	_, err := m.AddWheel(ctx, fn, data, "test", nil)
	var re *RefusedError
	if !errors.As(err, &re) || !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("err = %v, want RefusedError", err)
	}
	want := []string{"GHSA-9hjg-9r4m-mvj7", "GHSA-9wx4-h78v-vm56"}
	if !slices.Equal(re.Advisories, want) {
		t.Errorf("advisories = %v, want %v", re.Advisories, want)
	}
	a, err := m.Lookup(ctx, Pip, "requests", "2.31.0")
	if !errors.Is(err, ErrNotAdmitted) || a.Status != StatusRefused || len(a.Reasons) == 0 {
		t.Errorf("Lookup refused = %+v, %v", a, err)
	}
	// Accepting only one of the two ids is not enough.
	if _, err := m.AddWheel(ctx, fn, data, "test", want[:1]); !errors.As(err, &re) || !strings.Contains(strings.Join(re.Reasons, " "), "not exactly") {
		t.Fatalf("partial accept err = %v", err)
	}
	// Accepting exactly those ids admits it and records the exception.
	a, err = m.AddWheel(ctx, fn, data, "test", []string{want[1], want[0]})
	if err != nil || a.Status != StatusAdmitted || !slices.Equal(a.Accepted, want) {
		t.Fatalf("accepted add = %+v, %v", a, err)
	}
	audit, _ := m.Audit(ctx, 10)
	var sawException bool
	for _, e := range audit {
		if e.Event == AuditException && slices.Equal(e.Advisories, want) {
			sawException = true
		}
	}
	if !sawException {
		t.Errorf("no exception audit row: %+v", audit)
	}
}

func TestMalwareAndNameNormalisation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	fn, data := buildWheel(t, wheelSpec{name: "colorama_py", version: "0.6", metaName: "Colorama.Py"})
	_, err := m.AddWheel(ctx, fn, data, "test", nil)
	var re *RefusedError
	if !errors.As(err, &re) || !slices.Equal(re.Advisories, []string{"MAL-2024-4920"}) || !strings.Contains(re.Error(), "malicious") {
		t.Fatalf("err = %v", err)
	}
	_, err = m.AddNPMTarball(ctx, npmFixture(t, "axois", "1.0.0"), "test", nil)
	if !errors.As(err, &re) || !slices.Equal(re.Advisories, []string{"MAL-2025-15245"}) {
		t.Fatalf("npm malware err = %v", err)
	}
	_, err = m.AddNPMTarball(ctx, npmFixture(t, "axios", "1.7.0"), "test", nil)
	if !errors.As(err, &re) || !slices.Contains(re.Advisories, "GHSA-8hc4-vh64-cxmj") {
		t.Fatalf("Axios (capital A record) not matched: %v", err)
	}
}

func TestNothingAdmittedWithoutOSV(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, false)
	_, err := m.AddFile(ctx, "testdata/wheels/example-21.12-py3-none-any.whl", nil)
	var re *RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Error(), "osv database unavailable") {
		t.Fatalf("err = %v, want refusal for missing OSV", err)
	}
	if _, err := m.OSVStatus(ctx); !errors.Is(err, ErrOSVUnavailable) {
		t.Errorf("OSVStatus err = %v", err)
	}
	// An unreadable snapshot is as bad as none.
	if _, err := m.ImportOSV(ctx, "testdata/osv"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m.osvDir(), "osv-scanner", "PyPI", "all.zip"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddFile(ctx, "testdata/wheels/example-21.12-py3-none-any.whl", nil); !errors.As(err, &re) {
		t.Fatalf("err = %v, want refusal for unreadable OSV", err)
	}
}

func TestOSVStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	st, err := m.OSVStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Present || st.Records != 48 || st.Stale || st.NewestModified.Year() != 2026 || time.Since(st.ImportedAt) > time.Minute {
		t.Errorf("status = %+v", st)
	}
	newest := time.Date(2026, 9, 4, 0, 47, 46, 156672516, time.UTC)
	if !st.NewestModified.Equal(newest) {
		t.Errorf("NewestModified = %v, want %v", st.NewestModified, newest)
	}
	later := newest.Add(240 * time.Hour)
	m.now = func() time.Time { return later }
	st, err = m.OSVStatus(ctx)
	if err != nil || st.ModifiedAge != 240*time.Hour {
		t.Errorf("ModifiedAge = %v (%v), want 240h", st.ModifiedAge, err)
	}
	m.now = func() time.Time { return time.Now().Add(100 * time.Hour) }
	if st, _ := m.OSVStatus(ctx); !st.Stale {
		t.Errorf("not stale after 100h: %+v", st)
	}
}

func TestRecheckQuarantines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, false)
	// An old database that knows nothing about debug.
	old := t.TempDir()
	os.MkdirAll(filepath.Join(old, "npm"), 0o755)
	b, _ := os.ReadFile("testdata/osv/npm/GHSA-w9mr-4mfr-499f.json")
	os.WriteFile(filepath.Join(old, "npm", "GHSA-w9mr-4mfr-499f.json"), b, 0o644)
	if _, err := m.ImportOSV(ctx, old); err != nil {
		t.Fatal(err)
	}
	a, err := m.AddNPMTarball(ctx, npmFixture(t, "debug", "4.3.0"), "test", nil)
	if err != nil {
		t.Fatalf("add: %v", err)
	}
	clean, err := m.AddNPMTarball(ctx, npmFixture(t, "debug", "4.3.1"), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := serveMirror(t, m)
	if code := get(t, srv.URL+a.URLPath, "").code; code != 200 {
		t.Fatalf("tarball before recheck: %d", code)
	}
	if _, err := m.ImportOSV(ctx, "testdata/osv"); err != nil {
		t.Fatal(err)
	}
	res, err := m.Recheck(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checked != 2 || len(res.Quarantined) != 1 || res.Quarantined[0].Version != "4.3.0" {
		t.Fatalf("recheck = %+v", res)
	}
	if got, err := m.Lookup(ctx, NPM, "debug", "4.3.0"); !errors.Is(err, ErrNotAdmitted) || got.Status != StatusQuarantined {
		t.Errorf("Lookup = %+v, %v", got, err)
	}
	if got, err := m.Lookup(ctx, NPM, "debug", ""); err != nil || got.Version != "4.3.1" {
		t.Errorf("newest admitted = %+v, %v", got, err)
	}
	// The quarantined version vanished from the packument and file endpoint.
	if code := get(t, srv.URL+a.URLPath, "").code; code != 404 {
		t.Errorf("quarantined tarball served: %d", code)
	}
	pk := get(t, srv.URL+"/mirror/npm/debug", "application/json")
	if strings.Contains(pk.body, `"4.3.0"`) || !strings.Contains(pk.body, clean.Integrity) {
		t.Errorf("packument = %s", pk.body)
	}
}

func TestVerifyAndRemove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	a, err := m.AddFile(ctx, "testdata/wheels/example-21.12-py3-none-any.whl", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.AddFile(ctx, "testdata/wheels/wheel-0.43.0-py3-none-any.whl", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Verify(ctx)
	if err != nil || res.Checked != 2 || len(res.Quarantined) != 0 {
		t.Fatalf("verify clean = %+v, %v", res, err)
	}
	p, _ := m.blobs.path(a.SHA256)
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err = m.Verify(ctx)
	if err != nil || len(res.Quarantined) != 1 || res.Quarantined[0].SHA256 != a.SHA256 {
		t.Fatalf("verify tampered = %+v, %v", res, err)
	}
	rm, err := m.Remove(ctx, Pip, "WHEEL", "0.43.0")
	if err != nil || len(rm) != 1 || rm[0].SHA256 != b.SHA256 {
		t.Fatalf("Remove = %+v, %v", rm, err)
	}
	if _, err := m.Lookup(ctx, Pip, "wheel", ""); !errors.Is(err, ErrNotAdmitted) {
		t.Errorf("removed still admitted: %v", err)
	}
	// Its bytes left the disk; the quarantined one's stay (an operator may
	// look at them).
	for sum, want := range map[string]bool{b.SHA256: false, b.MetadataSHA256: false, a.SHA256: true} {
		p, _ := m.blobs.path(sum)
		if _, err := os.Stat(p); (err == nil) != want {
			t.Errorf("blob %s present=%v, want %v", sum[:12], err == nil, want)
		}
	}
	if _, err := m.Remove(ctx, Pip, "nothing", ""); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove unknown err = %v", err)
	}
	// Re-adding a removed artifact runs admission again.
	if a, err := m.AddFile(ctx, "testdata/wheels/wheel-0.43.0-py3-none-any.whl", nil); err != nil || a.Status != StatusAdmitted {
		t.Errorf("re-add = %+v, %v", a, err)
	} else if err := m.blobs.verify(a.SHA256); err != nil {
		t.Errorf("re-added blob: %v", err)
	}
	list, _ := m.List(ctx, "")
	if len(list) != 2 {
		t.Errorf("list = %d rows", len(list))
	}
}

func TestHostileArchivesRecordedAsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	data := buildTarball(t, []tarEntry{{name: "package/package.json", body: `{"name":"x","version":"1.0.0"}`}, {name: "package/l", typ: '2', linkname: "/etc/shadow"}})
	if _, err := m.AddNPMTarball(ctx, data, "test", nil); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("err = %v", err)
	}
	dir := t.TempDir()
	sd := filepath.Join(dir, "demo-1.0.tar.gz")
	os.WriteFile(sd, []byte("sdist"), 0o644)
	_, err := m.AddFile(ctx, sd, nil)
	var re *RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Error(), "only wheels") {
		t.Fatalf("sdist err = %v", err)
	}
	list, _ := m.List(ctx, "")
	for _, a := range list {
		if a.Status != StatusRefused || len(a.Reasons) == 0 {
			t.Errorf("row %+v", a)
		}
	}
	if len(list) != 2 {
		t.Errorf("%d rows, want 2", len(list))
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default invalid: %v", err)
	}
	c := DefaultConfig()
	c.PipIndexURL = "ftp://x"
	c.Limits.MaxRatio = 0
	c.StoreDir = ""
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "pip_index_url") || !strings.Contains(err.Error(), "max_ratio") || !strings.Contains(err.Error(), "store_dir") {
		t.Errorf("Validate = %v", err)
	}
}

func TestFilenameBoundToContent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	fn, one := buildWheel(t, wheelSpec{name: "demo", version: "1.0"})
	_, two := buildWheel(t, wheelSpec{name: "demo", version: "1.0", files: map[string]string{"demo/other.py": "x = 2\n"}})
	a, err := m.AddWheel(ctx, fn, one, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddWheel(ctx, fn, two, "test", nil); !errors.Is(err, ErrNotAdmitted) || !strings.Contains(err.Error(), "different content") {
		t.Fatalf("replacing content err = %v", err)
	}
	if got, err := m.Lookup(ctx, Pip, "demo", "1.0"); err != nil || got.SHA256 != a.SHA256 {
		t.Fatalf("original no longer served: %+v, %v", got, err)
	}
	if _, err := m.Remove(ctx, Pip, "demo", "1.0"); err != nil {
		t.Fatal(err)
	}
	if b, err := m.AddWheel(ctx, fn, two, "test", nil); err != nil || b.SHA256 == a.SHA256 {
		t.Fatalf("re-add after remove = %+v, %v", b, err)
	}
}

func TestAcceptedIDsMustMatchNow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	fn, data := buildWheel(t, wheelSpec{name: "demo", version: "1.0"})
	// demo 1.0 matches nothing: accepting an id in advance is refused.
	_, err := m.AddWheel(ctx, fn, data, "test", []string{"GHSA-9hjg-9r4m-mvj7"})
	var re *RefusedError
	if !errors.As(err, &re) || !strings.Contains(re.Error(), "match no advisory") || len(re.Advisories) != 0 {
		t.Fatalf("pre-accepted err = %v", err)
	}
	if _, err := m.Lookup(ctx, Pip, "demo", "1.0"); !errors.Is(err, ErrNotAdmitted) {
		t.Errorf("pre-accepted wheel served: %v", err)
	}
	// Without the bogus id it is admitted, with nothing accepted.
	a, err := m.AddWheel(ctx, fn, data, "test", nil)
	if err != nil || a.Status != StatusAdmitted || len(a.Accepted) != 0 {
		t.Fatalf("clean add = %+v, %v", a, err)
	}
}

// TestRecheckExceptionsAudited: an artifact kept only because of accepted
// ids gets an exception row naming them and the snapshot when a recheck
// first judges it against a new snapshot (TestExceptionAuditedOnChangeOnly:
// not on every recheck); ids stored as accepted that never matched at admission (rows
// written before admission refused them) cover nothing.
func TestRecheckExceptionsAudited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	fn, data := buildWheel(t, wheelSpec{name: "requests", version: "2.31.0"})
	ids := []string{"GHSA-9hjg-9r4m-mvj7", "GHSA-9wx4-h78v-vm56"}
	if _, err := m.AddWheel(ctx, fn, data, "test", ids); err != nil {
		t.Fatal(err)
	}
	// A legacy row: admitted clean with an id accepted in advance.
	legacy, err := m.AddNPMTarball(ctx, npmFixture(t, "debug", "4.3.1"), "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.db.ExecContext(ctx, `UPDATE mirror_artifacts SET accepted='["GHSA-9vvw-cc9w-f27h","GHSA-gxpj-cx7g-858c"]' WHERE id=?`, legacy.ID); err != nil {
		t.Fatal(err)
	}
	// Flag debug 4.3.1 with a new snapshot: every record, plus one that
	// affects it.
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("testdata/osv")); err != nil {
		t.Fatal(err)
	}
	rec := `{"id":"GHSA-9vvw-cc9w-f27h","modified":"2026-10-01T00:00:00Z","affected":[{"package":{"ecosystem":"npm","name":"debug"},"versions":["4.3.1"]}]}`
	if err := os.WriteFile(filepath.Join(src, "npm", "GHSA-9vvw-cc9w-f27h.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := m.ImportOSV(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.Recheck(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Quarantined) != 1 || res.Quarantined[0].Name != "debug" {
		t.Errorf("quarantined = %+v, want the legacy pre-accepted row", res.Quarantined)
	}
	if len(res.Excepted) != 1 || res.Excepted[0].Name != "requests" {
		t.Fatalf("excepted = %+v", res.Excepted)
	}
	audit, _ := m.Audit(ctx, 5)
	var found bool
	for _, e := range audit {
		if e.Event == AuditException && e.Name == "requests" && e.OSVSnapshot == snap.ID && slices.Equal(e.Advisories, ids) &&
			strings.Contains(e.Reason, ids[0]) && strings.Contains(e.Reason, snap.ID) {
			found = true
		}
	}
	if !found {
		t.Errorf("no exception row for the recheck against %s: %+v", snap.ID, audit)
	}
	if got, err := m.Lookup(ctx, Pip, "requests", "2.31.0"); err != nil || got.OSVSnapshot != snap.ID {
		t.Errorf("kept artifact = %+v, %v; want it stamped with %s", got, err, snap.ID)
	}
}

// TestSnapshotStampedEverywhere: refusals for archive problems and for
// "different content" name the loaded snapshot, and a recheck stamps the
// artifacts it passes.
func TestSnapshotStampedEverywhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	st, err := m.OSVStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fn, good := buildWheel(t, wheelSpec{name: "demo", version: "1.0"})
	_, other := buildWheel(t, wheelSpec{name: "demo", version: "1.0", files: map[string]string{"demo/x.py": "x = 1\n"}})
	_, hostile := buildWheel(t, wheelSpec{name: "demo", version: "2.0", extra: func(zw *zip.Writer) {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: "../evil"})
		w.Write([]byte("x"))
	}})
	if _, err := m.AddWheel(ctx, "demo-2.0-py3-none-any.whl", hostile, "test", nil); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("hostile err = %v", err)
	}
	a, err := m.AddWheel(ctx, fn, good, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddWheel(ctx, fn, other, "test", nil); !errors.Is(err, ErrNotAdmitted) {
		t.Fatalf("different content err = %v", err)
	}
	// A hostile file under the admitted one's name is refused without
	// touching the admitted row.
	_, hostile1 := buildWheel(t, wheelSpec{name: "demo", version: "1.0", extra: func(zw *zip.Writer) {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: "../evil"})
		w.Write([]byte("x"))
	}})
	if _, err := m.AddWheel(ctx, fn, hostile1, "test", nil); !errors.Is(err, ErrNotAdmitted) || !strings.Contains(err.Error(), "different content") {
		t.Fatalf("hostile replacement err = %v", err)
	}
	if got, err := m.Lookup(ctx, Pip, "demo", "1.0"); err != nil || got.SHA256 != a.SHA256 {
		t.Fatalf("admitted row changed: %+v, %v", got, err)
	}
	audit, _ := m.Audit(ctx, 10)
	refusals := 0
	for _, e := range audit {
		if e.OSVSnapshot != st.SnapshotID {
			t.Errorf("%s row %q has snapshot %q, want %s", e.Event, e.Reason, e.OSVSnapshot, st.SnapshotID)
		}
		if e.Event == AuditRefusal {
			refusals++
		}
	}
	if refusals != 3 {
		t.Errorf("%d refusal rows, want 3: %+v", refusals, audit)
	}
	// A new snapshot (one more record): the recheck stamps the passing row.
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("testdata/osv")); err != nil {
		t.Fatal(err)
	}
	rec := `{"id":"TEST-0001","modified":"2026-10-01T00:00:00Z","affected":[{"package":{"ecosystem":"PyPI","name":"other"},"versions":["1.0"]}]}`
	if err := os.WriteFile(filepath.Join(src, "PyPI", "TEST-0001.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	snap, err := m.ImportOSV(ctx, src)
	if err != nil || snap.ID == st.SnapshotID {
		t.Fatalf("import = %+v, %v", snap, err)
	}
	if res, err := m.Recheck(ctx); err != nil || res.Checked != 1 || len(res.Quarantined) != 0 {
		t.Fatalf("recheck = %+v, %v", res, err)
	}
	if got, err := m.Lookup(ctx, Pip, "demo", "1.0"); err != nil || got.OSVSnapshot != snap.ID {
		t.Errorf("passing row = %+v, %v; want snapshot %s", got, err, snap.ID)
	}
}
