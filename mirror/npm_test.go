package mirror

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
)

func untar(t *testing.T, b []byte) map[string]*tar.Header {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	out := map[string]*tar.Header{}
	var order []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
		order = append(order, h.Name)
	}
	for i := 1; i < len(order); i++ {
		if order[i-1] >= order[i] {
			t.Errorf("entries not sorted: %v", order)
		}
	}
	return out
}

func TestSanitizeNPMKeepsPublished(t *testing.T) {
	t.Parallel()
	in := npmFixture(t, "hello-fixture", "1.0.0")
	p, err := SanitizeNPM(in, DefaultConfig().Limits)
	if err != nil {
		t.Fatalf("SanitizeNPM: %v", err)
	}
	// Install scripts and dependency fields stay: the installer removes
	// them when it extracts the package into a session.
	if !bytes.Equal(p.Tarball, in) || len(p.Removed) != 0 {
		t.Fatalf("tarball changed (removed %v)", p.Removed)
	}
	var man map[string]any
	if err := json.Unmarshal(p.Manifest, &man); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"dependencies", "optionalDependencies", "peerDependencies", "bundleDependencies", "devDependencies", "scripts"} {
		if _, ok := man[f]; !ok {
			t.Errorf("manifest lost %s", f)
		}
	}
	// left-pad is listed in bundleDependencies but not bundled: needed.
	if len(p.Dependencies) != 1 || p.Dependencies["left-pad"] != "^1.0.0" {
		t.Errorf("Dependencies = %v", p.Dependencies)
	}
	if in, _ := npmDigests(in); p.Integrity != in || len(p.Shasum) != 40 {
		t.Errorf("digests %q %q", p.Integrity, p.Shasum)
	}
}

// TestSanitizeNPMRepackDeterministic: an archive with data after its end
// is re-packed, deterministically, with sorted entries, fixed mtimes and
// owners, and package.json unchanged.
func TestSanitizeNPMRepackDeterministic(t *testing.T) {
	t.Parallel()
	withTail := func() []byte {
		var b bytes.Buffer
		zr, _ := gzip.NewReader(bytes.NewReader(npmFixture(t, "hello-fixture", "1.0.0")))
		raw := new(bytes.Buffer)
		raw.ReadFrom(zr)
		gw := gzip.NewWriter(&b)
		gw.Write(raw.Bytes())
		gw.Write([]byte("hidden after the end of the archive"))
		gw.Close()
		return b.Bytes()
	}
	p, err := SanitizeNPM(withTail(), DefaultConfig().Limits)
	if err != nil {
		t.Fatal(err)
	}
	hs := untar(t, p.Tarball)
	for name, h := range hs {
		if !h.ModTime.Equal(npmMTime) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" {
			t.Errorf("%s: not normalised: %v %d %d %q", name, h.ModTime, h.Uid, h.Gid, h.Uname)
		}
	}
	if hs["package/bin/hello.js"].Mode != 0o755 || hs["package/index.js"].Mode != 0o644 {
		t.Errorf("modes: %o %o", hs["package/bin/hello.js"].Mode, hs["package/index.js"].Mode)
	}
	if !strings.Contains(string(p.Manifest), `"postinstall": "node steal.js"`) {
		t.Errorf("manifest changed by the re-pack: %s", p.Manifest)
	}
	p2, err := SanitizeNPM(withTail(), DefaultConfig().Limits)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.Tarball, p2.Tarball) || p.Integrity != p2.Integrity {
		t.Error("re-pack is not deterministic")
	}
}

func TestSanitizeRealIsNumber(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/npm/is-number-7.0.0.tgz")
	if err != nil {
		t.Fatal(err)
	}
	var dist struct{ Integrity, Shasum string }
	b, _ := os.ReadFile("testdata/npm/is-number-7.0.0.dist.json")
	json.Unmarshal(b, &dist)
	if err := checkIntegrity(data, dist.Integrity, dist.Shasum); err != nil {
		t.Fatalf("recorded fixture fails its registry integrity: %v", err)
	}
	if err := checkIntegrity(append(data, 0), dist.Integrity, ""); err == nil {
		t.Fatal("altered tarball passed integrity")
	}
	p, err := SanitizeNPM(data, DefaultConfig().Limits)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "is-number" || p.Version != "7.0.0" {
		t.Errorf("got %s@%s", p.Name, p.Version)
	}
	// Nothing to strip: kept byte for byte, so the registry's integrity
	// (and a lockfile's) still holds.
	if !bytes.Equal(p.Tarball, data) || p.Integrity != dist.Integrity || p.Shasum != dist.Shasum || len(p.Removed) != 0 {
		t.Errorf("is-number re-packed: integrity %s, removed %v", p.Integrity, p.Removed)
	}
}

func TestSanitizeNPMHostile(t *testing.T) {
	t.Parallel()
	pj := tarEntry{name: "package/package.json", body: `{"name":"x","version":"1.0.0"}`}
	tests := []struct {
		name    string
		entries []tarEntry
		raw     []byte
		want    string
	}{
		{"symlink", []tarEntry{pj, {name: "package/link", typ: tar.TypeSymlink, linkname: "/etc/passwd"}}, nil, "symbolic link"},
		{"hardlink", []tarEntry{pj, {name: "package/hard", typ: tar.TypeLink, linkname: "package/package.json"}}, nil, "hard link"},
		{"char device", []tarEntry{pj, {name: "package/dev", typ: tar.TypeChar}}, nil, "device"},
		{"block device", []tarEntry{pj, {name: "package/blk", typ: tar.TypeBlock}}, nil, "device"},
		{"fifo", []tarEntry{pj, {name: "package/fifo", typ: tar.TypeFifo}}, nil, "pipe"},
		{"dotdot", []tarEntry{pj, {name: "package/../../etc/x", body: "x"}}, nil, "escapes"},
		{"absolute", []tarEntry{pj, {name: "/etc/x", body: "x"}}, nil, "absolute"},
		{"duplicate", []tarEntry{pj, {name: "package/a.js", body: "1"}, {name: "package/a.js", body: "2"}}, nil, "duplicate"},
		{"no package.json", []tarEntry{{name: "package/a.js", body: "1"}}, nil, "package.json missing"},
		{"bad name", []tarEntry{{name: "package/package.json", body: `{"name":"../x","version":"1.0.0"}`}}, nil, "bad name"},
		{"oversize entry", []tarEntry{pj, {name: "package/big.bin", body: strings.Repeat("a", 3<<20)}}, nil, "size limit"},
		{"not gzip", nil, []byte("plain"), "not a gzip"},
	}
	l := DefaultConfig().Limits
	l.MaxUncompressedBytes = 2 << 20
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			data := tt.raw
			if data == nil {
				data = buildTarball(t, tt.entries)
			}
			_, err := SanitizeNPM(data, l)
			if err == nil || !IsArchiveProblem(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want refusal containing %q", err, tt.want)
			}
		})
	}
}

func TestSanitizeNPMTarBombRatio(t *testing.T) {
	t.Parallel()
	data := buildTarball(t, []tarEntry{{name: "package/package.json", body: `{"name":"x","version":"1.0.0"}`}, {name: "package/zeros", body: strings.Repeat("\x00", 4<<20)}})
	_, err := SanitizeNPM(data, DefaultConfig().Limits)
	if err == nil || !strings.Contains(err.Error(), "ratio") {
		t.Fatalf("err = %v, want ratio refusal", err)
	}
}

func FuzzSanitizeNPM(f *testing.F) {
	f.Add(npmFixture(f, "x", "1.0.0"))
	f.Add([]byte{0x1f, 0x8b})
	l := DefaultConfig().Limits
	l.MaxUncompressedBytes = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := SanitizeNPM(data, l)
		if err != nil {
			return
		}
		// Whatever is accepted re-packs into a clean tarball.
		if _, err := SanitizeNPM(p.Tarball, l); err != nil {
			t.Fatalf("re-pack does not pass its own checks: %v", err)
		}
	})
}

// TestSanitizeNPMBombBoundedAllocation: many 1 MiB entries of zeros, far
// over the ratio in total, are refused once the allowed size is reached,
// not after buffering them all. Not parallel: it reads the process-wide
// allocation counter.
func TestSanitizeNPMBombBoundedAllocation(t *testing.T) {
	entries := []tarEntry{{name: "package/package.json", body: `{"name":"x","version":"1.0.0"}`}}
	zeros := strings.Repeat("\x00", 1<<20)
	for i := range 64 {
		entries = append(entries, tarEntry{name: fmt.Sprintf("package/z%02d", i), body: zeros})
	}
	data := buildTarball(t, entries)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := SanitizeNPM(data, DefaultConfig().Limits)
	runtime.ReadMemStats(&after)
	if err == nil || !IsArchiveProblem(err) || !strings.Contains(err.Error(), "ratio") {
		t.Fatalf("err = %v, want a ratio refusal", err)
	}
	// The budget is 100 x the ~64 KiB tarball: about 6 MiB of entries.
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("refusing a %d byte bomb allocated %d KiB", len(data), got>>10)
	if got > 24<<20 && !raceEnabled {
		t.Errorf("refusing the bomb allocated %d MiB, want under 24", got>>20)
	}
}
