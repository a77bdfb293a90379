package osvdb

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/osv-scalibr/semantic"
)

func loadTestDB(t *testing.T) *DB {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "osv")
	if _, err := Import("../testdata/osv", dir, time.Now()); err != nil {
		t.Fatalf("Import: %v", err)
	}
	db, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return db
}

func ids(f []Finding) []string {
	out := []string{}
	for _, x := range f {
		out = append(out, x.ID)
	}
	return out
}

func TestMatchRealRecords(t *testing.T) {
	t.Parallel()
	db := loadTestDB(t)
	tests := []struct {
		name     string
		eco, pkg string
		version  string
		want     []string
	}{
		{name: "pip fixed in 25.3", eco: "PyPI", pkg: "pip", version: "24.2", want: []string{"GHSA-4xh5-x5gv-qwph"}},
		{name: "pip old", eco: "PyPI", pkg: "pip", version: "23.2.1", want: []string{"GHSA-4xh5-x5gv-qwph", "GHSA-mq26-g339-26xf", "PYSEC-2023-228"}},
		{name: "pip fixed", eco: "PyPI", pkg: "pip", version: "25.3", want: []string{}},
		{name: "introduced bound", eco: "PyPI", pkg: "requests", version: "2.2.0", want: []string{"GHSA-9hjg-9r4m-mvj7", "GHSA-9wx4-h78v-vm56"}},
		{name: "inside introduced..fixed", eco: "PyPI", pkg: "requests", version: "2.30.0", want: []string{"GHSA-9hjg-9r4m-mvj7", "GHSA-9wx4-h78v-vm56", "GHSA-j8r2-6x86-q33q", "PYSEC-2023-74"}},
		{name: "GIT range first does not hide ECOSYSTEM", eco: "PyPI", pkg: "setuptools", version: "65.5.0", want: []string{"GHSA-5rjg-fvgr-3xxf", "GHSA-cx63-2mw6-8hw5", "GHSA-r9hx-vwmv-q579", "PYSEC-2022-43012"}},
		{name: "PEP 503 names", eco: "PyPI", pkg: "JINJA2", version: "3.1.5", want: []string{"GHSA-cpwx-vrp4-4pq7"}},
		{name: "PEP 440 prerelease below fix", eco: "PyPI", pkg: "jinja2", version: "3.1.6rc1", want: []string{"GHSA-cpwx-vrp4-4pq7"}},
		{name: "PEP 440 post release above fix", eco: "PyPI", pkg: "Jinja2", version: "3.1.6.post1", want: []string{}},
		{name: "malicious explicit versions", eco: "PyPI", pkg: "colorama_py", version: "0.6", want: []string{"MAL-2024-4920"}},
		{name: "versions[] in PEP 440 equality", eco: "PyPI", pkg: "colorama-py", version: "0.6.0", want: []string{"MAL-2024-4920"}},
		{name: "malicious other version", eco: "PyPI", pkg: "colorama-py", version: "0.7", want: []string{}},
		{name: "two urllib3 ranges", eco: "PyPI", pkg: "urllib3", version: "2.0.6", want: []string{"GHSA-34jh-p97f-mpxf", "GHSA-48p4-8xcf-vxj5", "GHSA-g4mx-q9vg-27p4", "GHSA-pq67-6m6q-mj2v"}},
		{name: "npm case-insensitive Axios", eco: "npm", pkg: "axios", version: "1.5.0", want: []string{"GHSA-4hjh-wcwx-xvwj", "GHSA-8hc4-vh64-cxmj", "GHSA-wf5p-g6vw-rhxx"}},
		{name: "npm last_affected inclusive", eco: "npm", pkg: "lodash.trim", version: "4.5.1", want: []string{"GHSA-29mw-wpgm-hmr9"}},
		{name: "npm last_affected above", eco: "npm", pkg: "lodash.trim", version: "4.5.2", want: []string{}},
		{name: "npm malicious all versions", eco: "npm", pkg: "axois", version: "9.9.9", want: []string{"MAL-2025-15245"}},
		{name: "npm semver prerelease", eco: "npm", pkg: "express", version: "5.0.0-beta.1", want: []string{"GHSA-qw6h-vgh9-j6wx", "GHSA-rv95-896h-c2vc"}},
		{name: "npm clean", eco: "npm", pkg: "is-number", version: "7.0.0", want: []string{}},
		{name: "npm fixed exact", eco: "npm", pkg: "lodash", version: "4.17.21", want: []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := db.Match(tt.eco, tt.pkg, tt.version)
			if err != nil {
				t.Fatalf("Match: %v", err)
			}
			if !slices.Equal(ids(got), tt.want) {
				t.Errorf("Match(%s %s %s) = %v, want %v", tt.eco, tt.pkg, tt.version, ids(got), tt.want)
			}
		})
	}
}

func TestRangeEvents(t *testing.T) {
	t.Parallel()
	mk := func(ranges ...Range) *DB {
		r := &Record{ID: "TEST-1", Affected: []Affected{{Package: Package{Ecosystem: "npm", Name: "x"}, Ranges: ranges}}}
		return newDB(Snapshot{ID: "t"}, []*Record{r})
	}
	git := Range{Type: "GIT", Events: []Event{{Introduced: "0"}, {Fixed: "abcdef"}}}
	eco := Range{Type: "SEMVER", Events: []Event{{Introduced: "1.0.0"}, {Fixed: "1.2.0"}}}
	limited := Range{Type: "ECOSYSTEM", Events: []Event{{Introduced: "0"}, {Limit: "2.0.0"}}}
	unsorted := Range{Type: "ECOSYSTEM", Events: []Event{{Fixed: "3.1.0"}, {Introduced: "3.0.0"}, {Fixed: "1.5.0"}, {Introduced: "1.0.0"}}}
	tests := []struct {
		name    string
		db      *DB
		version string
		want    bool
	}{
		{"git first then semver hit", mk(git, eco), "1.1.0", true},
		{"git first then semver miss", mk(git, eco), "1.2.0", false},
		{"limit below", mk(limited), "1.9.9", true},
		{"limit at", mk(limited), "2.0.0", false},
		{"unsorted events second window", mk(unsorted), "3.0.5", true},
		{"unsorted events gap", mk(unsorted), "2.0.0", false},
		{"unsorted events first window", mk(unsorted), "1.4.0", true},
		{"no ranges no versions = all", newDB(Snapshot{}, []*Record{{ID: "TEST-2", Affected: []Affected{{Package: Package{Ecosystem: "npm", Name: "x"}}}}}), "0.0.1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.db.Match("npm", "x", tt.version)
			if err != nil {
				t.Fatalf("Match: %v", err)
			}
			if (len(got) > 0) != tt.want {
				t.Errorf("affected = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWithdrawnIgnored(t *testing.T) {
	t.Parallel()
	w := time.Now()
	db := newDB(Snapshot{}, []*Record{{ID: "W-1", Withdrawn: &w, Affected: []Affected{{Package: Package{Ecosystem: "npm", Name: "x"}}}}})
	if got, _ := db.Match("npm", "x", "1.0.0"); len(got) != 0 {
		t.Errorf("withdrawn record matched: %v", got)
	}
}

func TestUnparsableAdvisoryVersionFailsClosed(t *testing.T) {
	t.Parallel()
	r := &Record{ID: "BAD-1", Affected: []Affected{{Package: Package{Ecosystem: "PyPI", Name: "x"},
		Ranges: []Range{{Type: "ECOSYSTEM", Events: []Event{{Introduced: "0"}, {Fixed: "not a version!!"}}}}}}}
	db := newDB(Snapshot{}, []*Record{r})
	got, err := db.Match("PyPI", "x", "1.0")
	if err != nil || len(got) != 1 || got[0].Why != "unparsable advisory version" {
		t.Fatalf("Match = %v, %v; want a fail-closed finding", got, err)
	}
}

func TestPanicIsAnError(t *testing.T) {
	t.Parallel()
	db := newDB(Snapshot{}, []*Record{{ID: "P-1", Affected: []Affected{{Package: Package{Ecosystem: "npm", Name: "x"}}}}})
	db.parse = func(string, string) (semantic.Version, error) { panic("boom") }
	_, err := db.Match("npm", "x", "1.0.0")
	if !errors.Is(err, ErrVersion) {
		t.Fatalf("Match err = %v, want ErrVersion", err)
	}
}

func TestBadCandidateVersion(t *testing.T) {
	t.Parallel()
	db := loadTestDB(t)
	if _, err := db.Match("PyPI", "pip", "not..a..version"); !errors.Is(err, ErrVersion) {
		t.Fatalf("err = %v, want ErrVersion", err)
	}
}

func TestSnapshotRoundTripAndTamper(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "osv")
	snap, err := Import("../testdata/osv", dir, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if snap.Records != 48 || !slices.Equal(snap.Ecosystems, []string{"PyPI", "npm"}) {
		t.Errorf("snapshot = %+v", snap)
	}
	if want := time.Date(2026, 9, 4, 0, 47, 46, 156672516, time.UTC); !snap.NewestModified.Equal(want) {
		t.Errorf("newest modified = %v, want %v", snap.NewestModified, want)
	}
	// Re-import of the zips it wrote gives the same id (stable snapshots).
	dir2 := filepath.Join(t.TempDir(), "osv")
	snap2, err := Import(filepath.Join(dir, layoutDir), dir2, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if snap2.ID != snap.ID {
		t.Errorf("re-import id %s != %s", snap2.ID, snap.ID)
	}
	// Tampering with a zip makes the snapshot unreadable.
	if err := os.WriteFile(filepath.Join(dir, layoutDir, "npm", "all.zip"), []byte("junk"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Load tampered = %v, want ErrUnavailable", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Load missing = %v, want ErrUnavailable", err)
	}
}

func TestImportRejectsBadJSON(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "npm"), 0o755)
	os.WriteFile(filepath.Join(src, "npm", "X.json"), []byte("{not json"), 0o644)
	if _, err := Import(src, filepath.Join(t.TempDir(), "osv"), time.Now()); err == nil {
		t.Fatal("Import of bad JSON succeeded")
	}
}

func FuzzMatch(f *testing.F) {
	for _, s := range []string{"1.0.0", "24.2", "1!2.0.post1.dev3", "5.0.0-beta.1", "", "0", "v1", "1.0.0+build", "99999999999999999999999.1"} {
		f.Add("PyPI", s)
		f.Add("npm", s)
	}
	rec := func(eco string) *Record {
		return &Record{ID: "F-1", Affected: []Affected{{Package: Package{Ecosystem: eco, Name: "x"},
			Versions: []string{"1.0", "2.0.0-rc.1"},
			Ranges:   []Range{{Type: "ECOSYSTEM", Events: []Event{{Introduced: "0"}, {Fixed: "1.5"}, {Introduced: "2.0"}, {LastAffected: "2.1"}, {Limit: "3"}}}}}}}
	}
	db := newDB(Snapshot{}, []*Record{rec("PyPI"), rec("npm")})
	f.Fuzz(func(t *testing.T, eco, v string) {
		// Must never panic; errors are fine.
		_, _ = db.Match(eco, "x", v)
	})
}

var _ = json.Marshal

// TestImportSkipsRecordsWithoutEcosystem: records that name no ecosystem
// ("affected": [], an empty or unsafe ecosystem) are not written, so they
// must not count in the snapshot id either; the import leaves a snapshot
// that loads.
func TestImportSkipsRecordsWithoutEcosystem(t *testing.T) {
	t.Parallel()
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS("../testdata/osv")); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{
		"EMPTY-1.json":  `{"id":"EMPTY-1","modified":"2027-01-01T00:00:00Z","affected":[]}`,
		"NOECO-1.json":  `{"id":"NOECO-1","modified":"2027-01-01T00:00:00Z","affected":[{"package":{"ecosystem":"","name":"x"}}]}`,
		"SLASH-1.json":  `{"id":"SLASH-1","modified":"2027-01-01T00:00:00Z","affected":[{"package":{"ecosystem":"../x","name":"x"}}]}`,
		"ABSENT-1.json": `{"id":"ABSENT-1","modified":"2027-01-01T00:00:00Z"}`,
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "osv")
	snap, err := Import(src, dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if snap.Records != 48 || snap.Skipped != 4 || snap.NewestModified.Year() != 2026 {
		t.Errorf("snapshot = %+v, want 48 records, 4 skipped, newest from 2026", snap)
	}
	db, err := Load(dir)
	if err != nil {
		t.Fatalf("Load after import: %v", err)
	}
	if db.Snapshot().ID != snap.ID {
		t.Errorf("loaded id %s, imported %s", db.Snapshot().ID, snap.ID)
	}
	// The id is that of the usable records alone.
	plain, err := Import("../testdata/osv", filepath.Join(t.TempDir(), "osv"), time.Now())
	if err != nil || plain.ID != snap.ID {
		t.Errorf("id with skipped records %s, without %s (%v)", snap.ID, plain.ID, err)
	}
	// A source with nothing usable is refused and leaves the old snapshot.
	junk := t.TempDir()
	os.WriteFile(filepath.Join(junk, "EMPTY-1.json"), []byte(`{"id":"EMPTY-1","affected":[]}`), 0o644)
	if _, err := Import(junk, dir, time.Now()); !errors.Is(err, ErrUnavailable) {
		t.Errorf("import of only unusable records err = %v", err)
	}
	if db, err := Load(dir); err != nil || db.Snapshot().ID != snap.ID {
		t.Errorf("old snapshot after a refused import: %v", err)
	}
}
