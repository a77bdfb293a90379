package osvdb

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

const (
	layoutDir    = "osv-scanner" // <dir>/osv-scanner/<Ecosystem>/all.zip
	snapshotFile = "snapshot.json"
	maxRecord    = 16 << 20
	maxZip       = 2 << 30
)

// fixedTime is the mtime of zip entries, so a snapshot is byte-stable.
var fixedTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

type rawRecord struct {
	rec  *Record
	data []byte
	sum  string
}

// Import reads OSV records from src (a folder holding <Ecosystem>/<ID>.json
// files and/or all.zip files at any depth, or a single .zip or .json file),
// writes them as a new snapshot into dir (replacing any previous one) and
// returns its description. Records that do not parse fail the import; it is
// all or nothing. Import is not safe to run concurrently on the same dir.
func Import(src, dir string, now time.Time) (Snapshot, error) {
	recs := map[string]*rawRecord{} // by id; later duplicates must be identical
	add := func(name string, data []byte) error {
		var r Record
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("parsing osv record %s: %w", name, err)
		}
		if r.ID == "" {
			return fmt.Errorf("parsing osv record %s: no id", name)
		}
		sum := sha256.Sum256(data)
		rr := &rawRecord{rec: &r, data: data, sum: hex.EncodeToString(sum[:])}
		if old, ok := recs[r.ID]; ok && old.rec.Modified.After(r.Modified) {
			return nil // keep the newer copy
		}
		recs[r.ID] = rr
		return nil
	}
	st, err := os.Stat(src)
	if err != nil {
		return Snapshot{}, fmt.Errorf("reading osv source: %w", err)
	}
	if !st.IsDir() {
		if err := readFile(src, add); err != nil {
			return Snapshot{}, err
		}
	} else {
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !(strings.HasSuffix(p, ".json") || strings.HasSuffix(p, ".zip")) {
				return nil
			}
			if filepath.Base(p) == snapshotFile {
				return nil
			}
			return readFile(p, add)
		})
		if err != nil {
			return Snapshot{}, fmt.Errorf("walking osv source %s: %w", src, err)
		}
	}
	if len(recs) == 0 {
		return Snapshot{}, fmt.Errorf("importing osv records from %s: %w: no records found", src, ErrUnavailable)
	}
	return writeSnapshot(dir, src, recs, now)
}

func readFile(p string, add func(string, []byte) error) error {
	if strings.HasSuffix(p, ".json") {
		data, err := readLimited(p, maxRecord)
		if err != nil {
			return err
		}
		return add(p, data)
	}
	zr, err := zip.OpenReader(p)
	if err != nil {
		return fmt.Errorf("opening osv zip %s: %w", p, err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, ".json") || f.FileInfo().IsDir() {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("opening %s in %s: %w", f.Name, p, err)
		}
		data, err := io.ReadAll(io.LimitReader(rc, maxRecord+1))
		rc.Close()
		if err != nil {
			return fmt.Errorf("reading %s in %s: %w", f.Name, p, err)
		}
		if len(data) > maxRecord {
			return fmt.Errorf("reading %s in %s: record too large", f.Name, p)
		}
		if err := add(p+":"+f.Name, data); err != nil {
			return err
		}
	}
	return nil
}

func readLimited(p string, n int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", p, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, n+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if int64(len(data)) > n {
		return nil, fmt.Errorf("reading %s: larger than %d bytes", p, n)
	}
	return data, nil
}

func snapshotID(recs map[string]*rawRecord) string {
	ids := make([]string, 0, len(recs))
	for id := range recs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	h := sha256.New()
	for _, id := range ids {
		fmt.Fprintf(h, "%s %s\n", id, recs[id].sum)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeSnapshot(dir, src string, recs map[string]*rawRecord, now time.Time) (Snapshot, error) {
	// Only records naming a usable ecosystem are written (into one zip per
	// ecosystem); the id, count and newest time cover exactly those, so
	// that Load, which can only see what was written, agrees.
	byEco := map[string][]*rawRecord{}
	written := map[string]*rawRecord{}
	for id, r := range recs {
		ecos := map[string]bool{}
		for _, a := range r.rec.Affected {
			e := baseEcosystem(a.Package.Ecosystem)
			if e != "" && !ecos[e] && !strings.ContainsAny(e, `/\`) && e != "." && e != ".." {
				ecos[e] = true
				byEco[e] = append(byEco[e], r)
				written[id] = r
			}
		}
	}
	if len(written) == 0 {
		return Snapshot{}, fmt.Errorf("importing osv records from %s: %w: none of %d records names an ecosystem", src, ErrUnavailable, len(recs))
	}
	snap := Snapshot{ID: snapshotID(written), Contents: Contents{ImportedAt: now.UTC(), Records: len(written), Skipped: len(recs) - len(written)}, Source: src}
	for _, r := range written {
		if r.rec.Modified.After(snap.NewestModified) {
			snap.NewestModified = r.rec.Modified.UTC()
		}
	}
	parent := filepath.Dir(filepath.Clean(dir))
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return Snapshot{}, fmt.Errorf("creating osv folder: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".osv-import-*")
	if err != nil {
		return Snapshot{}, fmt.Errorf("creating osv staging folder: %w", err)
	}
	defer os.RemoveAll(tmp)
	for eco, rs := range byEco {
		snap.Ecosystems = append(snap.Ecosystems, eco)
		slices.SortFunc(rs, func(a, b *rawRecord) int { return strings.Compare(a.rec.ID, b.rec.ID) })
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for _, r := range rs {
			w, err := zw.CreateHeader(&zip.FileHeader{Name: r.rec.ID + ".json", Method: zip.Deflate, Modified: fixedTime})
			if err != nil {
				return Snapshot{}, fmt.Errorf("writing osv zip: %w", err)
			}
			if _, err := w.Write(r.data); err != nil {
				return Snapshot{}, fmt.Errorf("writing osv zip: %w", err)
			}
		}
		if err := zw.Close(); err != nil {
			return Snapshot{}, fmt.Errorf("writing osv zip: %w", err)
		}
		ed := filepath.Join(tmp, layoutDir, eco)
		if err := os.MkdirAll(ed, 0o755); err != nil {
			return Snapshot{}, fmt.Errorf("creating osv folder: %w", err)
		}
		if err := os.WriteFile(filepath.Join(ed, "all.zip"), buf.Bytes(), 0o644); err != nil {
			return Snapshot{}, fmt.Errorf("writing osv zip: %w", err)
		}
	}
	sort.Strings(snap.Ecosystems)
	meta, _ := json.MarshalIndent(snap, "", "  ")
	if err := os.WriteFile(filepath.Join(tmp, snapshotFile), meta, 0o644); err != nil {
		return Snapshot{}, fmt.Errorf("writing osv snapshot: %w", err)
	}
	// The staged snapshot must load (ids agree, zips read) before it
	// replaces the current one.
	if _, err := Load(tmp); err != nil {
		return Snapshot{}, fmt.Errorf("checking the new osv snapshot: %w", err)
	}
	old := dir + ".old"
	_ = os.RemoveAll(old)
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Snapshot{}, fmt.Errorf("replacing osv snapshot: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		_ = os.Rename(old, dir)
		return Snapshot{}, fmt.Errorf("replacing osv snapshot: %w", err)
	}
	_ = os.RemoveAll(old)
	return snap, nil
}

// ReadSnapshot returns the description of the snapshot in dir without
// loading its records.
func ReadSnapshot(dir string) (Snapshot, error) {
	data, err := readLimited(filepath.Join(dir, snapshotFile), 1<<20)
	if err != nil {
		return Snapshot{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var s Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return Snapshot{}, fmt.Errorf("%w: parsing snapshot: %w", ErrUnavailable, err)
	}
	return s, nil
}

// Load reads the snapshot in dir and verifies its id against the records.
// Any problem wraps ErrUnavailable.
func Load(dir string) (*DB, error) {
	snap, err := ReadSnapshot(dir)
	if err != nil {
		return nil, err
	}
	recs := map[string]*rawRecord{}
	add := func(name string, data []byte) error {
		var r Record
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("parsing %s: %w", name, err)
		}
		sum := sha256.Sum256(data)
		recs[r.ID] = &rawRecord{rec: &r, data: nil, sum: hex.EncodeToString(sum[:])}
		return nil
	}
	for _, eco := range snap.Ecosystems {
		p := filepath.Join(dir, layoutDir, eco, "all.zip")
		if st, err := os.Stat(p); err != nil || st.Size() > maxZip {
			return nil, fmt.Errorf("%w: %s missing or too large", ErrUnavailable, p)
		}
		if err := readFile(p, add); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}
	if got := snapshotID(recs); got != snap.ID {
		return nil, fmt.Errorf("%w: snapshot %s does not match its records (%s)", ErrUnavailable, snap.ID, got)
	}
	list := make([]*Record, 0, len(recs))
	for _, r := range recs {
		list = append(list, r.rec)
	}
	return newDB(snap, list), nil
}
