package mirror

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"encoding/csv"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestInspectRealWheels(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file, name, version string
	}{
		{"testdata/wheels/wheel-0.43.0-py3-none-any.whl", "wheel", "0.43.0"},
		{"testdata/wheels/example-21.12-py3-none-any.whl", "example", "21.12"},
	} {
		data, err := os.ReadFile(tt.file)
		if err != nil {
			t.Fatal(err)
		}
		fn := tt.file[strings.LastIndex(tt.file, "/")+1:]
		w, err := InspectWheel(fn, data, DefaultConfig().Limits)
		if err != nil {
			t.Fatalf("InspectWheel(%s): %v", fn, err)
		}
		if w.Name != tt.name || w.Version != tt.version || len(w.Metadata) == 0 {
			t.Errorf("%s: got %q %q", fn, w.Name, w.Version)
		}
	}
}

func TestInspectWheelHostile(t *testing.T) {
	t.Parallel()
	small := DefaultConfig().Limits
	small.MaxUncompressedBytes = 4 << 20
	bomb := func(zw *zip.Writer) {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: "bomb/zeros.bin", Method: zip.Deflate})
		w.Write(make([]byte, 8<<20))
	}
	link := func(zw *zip.Writer) {
		h := &zip.FileHeader{Name: "evil/link", Method: zip.Store}
		h.SetMode(os.ModeSymlink | 0o777)
		w, _ := zw.CreateHeader(h)
		io.WriteString(w, "/etc/passwd")
	}
	slip := func(name string) func(zw *zip.Writer) {
		return func(zw *zip.Writer) {
			w, _ := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Store})
			io.WriteString(w, "pwned")
		}
	}
	// entry adds a raw entry with the given header fields.
	entry := func(h zip.FileHeader, body string) func(zw *zip.Writer) {
		return func(zw *zip.Writer) {
			w, _ := zw.CreateHeader(&h)
			io.WriteString(w, body)
		}
	}
	tests := []struct {
		name   string
		spec   wheelSpec
		fn     string // override file name
		data   []byte // override bytes
		limits *Limits
		want   string
	}{
		{name: "zip slip", spec: wheelSpec{name: "demo", version: "1.0", extra: slip("../../etc/cron.d/x")}, want: "escapes"},
		{name: "absolute path", spec: wheelSpec{name: "demo", version: "1.0", extra: slip("/etc/passwd")}, want: "absolute"},
		{name: "backslash path", spec: wheelSpec{name: "demo", version: "1.0", extra: slip(`..\..\x`)}, want: "backslash"},
		{name: "symlink entry", spec: wheelSpec{name: "demo", version: "1.0", extra: link}, want: "symbolic link"},
		{name: "zip bomb ratio", spec: wheelSpec{name: "demo", version: "1.0", extra: bomb}, want: "ratio"},
		{name: "zip bomb size", spec: wheelSpec{name: "demo", version: "1.0", extra: bomb}, limits: &small, want: "limit"},
		{name: "record hash mismatch", spec: wheelSpec{name: "demo", version: "1.0", record: func(r []string) []string {
			for i, row := range r {
				if strings.HasPrefix(row, "demo/__init__.py,") {
					r[i] = "demo/__init__.py," + recordHash([]byte("other")) + ",18"
				}
			}
			return r
		}}, want: "sha256 of"},
		{name: "file missing from record", spec: wheelSpec{name: "demo", version: "1.0", extra: slip("demo/extra.py")}, want: "not listed"},
		{name: "record lists absent file", spec: wheelSpec{name: "demo", version: "1.0", record: func(r []string) []string {
			return append(r, "demo/ghost.py,"+recordHash(nil)+",0")
		}}, want: "not in the wheel"},
		{name: "record md5", spec: wheelSpec{name: "demo", version: "1.0", record: func(r []string) []string {
			for i, row := range r {
				if strings.HasPrefix(row, "demo/__init__.py,") {
					r[i] = "demo/__init__.py,md5=abc,18"
				}
			}
			return r
		}}, want: "no sha256"},
		{name: "metadata name mismatch", spec: wheelSpec{name: "demo", version: "1.0", metaName: "requests"}, want: "METADATA name"},
		{name: "metadata version mismatch", spec: wheelSpec{name: "demo", version: "1.0", metaVersion: "2.0"}, want: "METADATA version"},
		// pip treats any name without a trailing '/' as a file and extracts
		// it, whatever the attributes say: such an entry must not slip past
		// RECORD by looking like a folder.
		{name: "msdos folder attribute on a file", spec: wheelSpec{name: "demo", version: "1.0",
			extra: entry(zip.FileHeader{Name: "demo/evil.py", CreatorVersion: 0 << 8, ExternalAttrs: 0x10}, "import os\n")}, want: "folder attributes"},
		{name: "unix folder mode on a file", spec: wheelSpec{name: "demo", version: "1.0",
			extra: entry(zip.FileHeader{Name: "demo/evil.py", CreatorVersion: 3 << 8, ExternalAttrs: 0o40755 << 16}, "import os\n")}, want: "folder attributes"},
		{name: "empty file with folder attribute", spec: wheelSpec{name: "demo", version: "1.0",
			extra: entry(zip.FileHeader{Name: "demo/evil.pth", CreatorVersion: 0 << 8, ExternalAttrs: 0x10}, "")}, want: "folder attributes"},
		{name: "folder entry holding data", fn: "demo-1.0-py3-none-any.whl", data: folderWithData(t), want: "folder entry holding data"},
		{name: "sdist by name", fn: "demo-1.0.tar.gz", data: []byte("x"), want: "source distribution"},
		{name: "sdist renamed to whl", fn: "demo-1.0-py3-none-any.whl", data: buildTarball(t, []tarEntry{{name: "demo-1.0/PKG-INFO", body: "Name: demo"}, {name: "demo-1.0/setup.py", body: "import os"}}), want: "sdist renamed"},
		{name: "zip sdist renamed to whl", fn: "demo-1.0-py3-none-any.whl", data: zipOf(t, map[string]string{"PKG-INFO": "Name: demo\n", "setup.py": "x"}), want: "source distribution renamed"},
		{name: "bad file name", fn: "demo.whl", data: []byte("x"), want: "want name-version"},
		{name: "not a zip", fn: "demo-1.0-py3-none-any.whl", data: []byte("hello"), want: "not a zip"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fn, data := tt.fn, tt.data
			if data == nil {
				fn, data = buildWheel(t, tt.spec)
			}
			l := DefaultConfig().Limits
			if tt.limits != nil {
				l = *tt.limits
			}
			_, err := InspectWheel(fn, data, l)
			if err == nil {
				t.Fatalf("InspectWheel accepted a hostile wheel")
			}
			if !IsArchiveProblem(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want a refusal containing %q", err, tt.want)
			}
		})
	}
}

// folderWithData is a valid wheel plus an entry named "demo/evil/" that
// holds bytes (zip.Writer refuses to write one, so the name is patched in).
func folderWithData(t testing.TB) []byte {
	_, data := buildWheel(t, wheelSpec{name: "demo", version: "1.0", extra: func(zw *zip.Writer) {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: "demo/evil!", Method: zip.Store})
		io.WriteString(w, "payload")
	}})
	out := bytes.ReplaceAll(data, []byte("demo/evil!"), []byte("demo/evil/"))
	if bytes.Equal(out, data) {
		t.Fatal("patch did not apply")
	}
	return out
}

func TestInspectWheelFolderEntries(t *testing.T) {
	t.Parallel()
	// rawFolder adds an entry "demo/sub!" with the given raw deflate
	// stream, patched into "demo/sub/" below (zip.Writer writes no data
	// for folders).
	rawFolder := func(stream []byte, size uint64) func(zw *zip.Writer) {
		return func(zw *zip.Writer) {
			w, err := zw.CreateRaw(&zip.FileHeader{Name: "demo/sub!", Method: zip.Deflate, CompressedSize64: uint64(len(stream)),
				UncompressedSize64: size, CRC32: crc32.ChecksumIEEE(nil)})
			if err != nil {
				t.Fatal(err)
			}
			w.Write(stream)
		}
	}
	var x bytes.Buffer
	fw, _ := flate.NewWriter(&x, flate.BestCompression)
	fw.Write([]byte("hidden"))
	fw.Close()
	tests := []struct {
		name  string
		extra func(zw *zip.Writer)
		want  string // "" = accepted
	}{
		{name: "plain folder entry", extra: func(zw *zip.Writer) {
			h := &zip.FileHeader{Name: "demo/sub/"}
			h.SetMode(fs.ModeDir | 0o755)
			if _, err := zw.CreateHeader(h); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "empty deflate stream", extra: rawFolder([]byte{0x03, 0x00}, 0)},
		{name: "deflated data, declared empty", extra: rawFolder(x.Bytes(), 0), want: "folder entry holding data"},
		{name: "declared data", extra: rawFolder(x.Bytes(), 6), want: "folder entry holding data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Folder entries need no RECORD row.
			fn, data := buildWheel(t, wheelSpec{name: "demo", version: "1.0", extra: tt.extra})
			data = bytes.ReplaceAll(data, []byte("demo/sub!"), []byte("demo/sub/"))
			_, err := InspectWheel(fn, data, DefaultConfig().Limits)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("err = %v, want a refusal containing %q", err, tt.want)
			}
		})
	}
}

// bombWheel is a zip of n entries of size bytes of zeros each, written raw
// from one deflated copy: small on disk, each entry under the 1 MiB
// per-entry ratio threshold, the whole far over the archive ratio.
func bombWheel(t testing.TB, n, size int) []byte {
	t.Helper()
	var comp bytes.Buffer
	fw, _ := flate.NewWriter(&comp, flate.BestCompression)
	fw.Write(make([]byte, size))
	fw.Close()
	crc := crc32.ChecksumIEEE(make([]byte, size))
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for i := range n {
		w, err := zw.CreateRaw(&zip.FileHeader{Name: fmt.Sprintf("demo/z%04d.bin", i), Method: zip.Deflate,
			CRC32: crc, CompressedSize64: uint64(comp.Len()), UncompressedSize64: uint64(size)})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(comp.Bytes())
	}
	zw.Close()
	return buf.Bytes()
}

// TestReadZipBombBoundedAllocation: a ~1 MB archive declaring ~900 MiB is
// refused on the archive ratio after reading about its allowed size, and
// the entries are hashed while streaming, not buffered. Not parallel: it
// reads the process-wide allocation counter.
func TestReadZipBombBoundedAllocation(t *testing.T) {
	data := bombWheel(t, 900, 1<<20-1)
	if len(data) > 2<<20 {
		t.Fatalf("bomb is %d bytes", len(data))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := InspectWheel("demo-1.0-py3-none-any.whl", data, DefaultConfig().Limits)
	runtime.ReadMemStats(&after)
	if err == nil || !IsArchiveProblem(err) || !strings.Contains(err.Error(), "ratio") {
		t.Fatalf("err = %v, want a ratio refusal", err)
	}
	got := after.TotalAlloc - before.TotalAlloc
	t.Logf("refusing a %d byte bomb allocated %d KiB", len(data), got>>10)
	if got > 32<<20 && !raceEnabled {
		t.Errorf("refusing the bomb allocated %d MiB, want under 32", got>>20)
	}
}

func TestReadZipLimitsHostile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		data   func(t *testing.T) []byte
		limits func(l *Limits)
		want   string
	}{
		{name: "many small entries over the archive ratio", data: func(t *testing.T) []byte { return bombWheel(t, 200, 1<<20-1) }, want: "archive compression ratio"},
		{name: "many small entries over the size limit", data: func(t *testing.T) []byte { return bombWheel(t, 20, 1<<20-1) },
			limits: func(l *Limits) { l.MaxUncompressedBytes = 4 << 20 }, want: "over the 4194304 byte limit"},
		{name: "declared sizes that wrap around", data: func(t *testing.T) []byte {
			var buf bytes.Buffer
			zw := zip.NewWriter(&buf)
			for i, size := range []uint64{1 << 63, 1 << 63, 10} {
				w, _ := zw.CreateRaw(&zip.FileHeader{Name: fmt.Sprintf("demo/w%d", i), Method: zip.Store, UncompressedSize64: size, CompressedSize64: 1})
				w.Write([]byte("x"))
			}
			zw.Close()
			return buf.Bytes()
		}, want: "byte limit"},
		{name: "one entry over its own ratio", data: func(t *testing.T) []byte { return bombWheel(t, 1, 8<<20) }, want: "compression ratio"},
		{name: "declared size smaller than the data", data: func(t *testing.T) []byte {
			var buf bytes.Buffer
			zw := zip.NewWriter(&buf)
			w, _ := zw.CreateRaw(&zip.FileHeader{Name: "demo/a", Method: zip.Store, UncompressedSize64: 2, CompressedSize64: 5, CRC32: crc32.ChecksumIEEE([]byte("hello"))})
			w.Write([]byte("hello"))
			zw.Close()
			return buf.Bytes()
		}, want: "entry \"demo/a\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l := DefaultConfig().Limits
			if tt.limits != nil {
				tt.limits(&l)
			}
			_, err := readZip(tt.data(t), l, nil)
			if err == nil || !IsArchiveProblem(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want a refusal containing %q", err, tt.want)
			}
		})
	}
}

func zipOf(t testing.TB, files map[string]string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for k, v := range files {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: k, Modified: time.Now()})
		io.WriteString(w, v)
	}
	zw.Close()
	return buf.Bytes()
}

func TestInspectWheelEntryCount(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for i := 0; i < 50; i++ {
		files["demo/f"+strings.Repeat("x", i)+".py"] = ""
	}
	fn, data := buildWheel(t, wheelSpec{name: "demo", version: "1.0", files: files})
	l := DefaultConfig().Limits
	l.MaxEntries = 20
	if _, err := InspectWheel(fn, data, l); err == nil || !strings.Contains(err.Error(), "entries") {
		t.Fatalf("err = %v, want entry-count refusal", err)
	}
}

// FuzzCheckEntryName: the check never panics, and an accepted name never
// escapes when joined to a root.
func FuzzCheckEntryName(f *testing.F) {
	for _, s := range []string{"a/b.py", "../x", "/etc/passwd", `a\..\b`, "a/../../b", "C:/x", "a/./b", "", "a\x00b", "..", "a/..", "ok/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if CheckEntryName(name) != nil {
			return
		}
		depth := 0
		for _, seg := range strings.Split(name, "/") {
			switch seg {
			case "..":
				depth--
			case "", ".":
			default:
				depth++
			}
			if depth < 0 {
				t.Fatalf("accepted escaping name %q", name)
			}
		}
		if strings.HasPrefix(name, "/") || strings.Contains(name, `\`) {
			t.Fatalf("accepted %q", name)
		}
	})
}

// FuzzReadZip: arbitrary bytes as a wheel never panic, and a wheel that
// is accepted holds nothing pip would extract unchecked: read again with
// archive/zip alone and pip's rule (a name ending in '/' is a folder,
// anything else a file), every file is listed in RECORD with its sha256
// (RECORD and its signatures excepted), has a safe name, and every folder
// entry is empty.
func FuzzReadZip(f *testing.F) {
	_, w := buildWheel(f, wheelSpec{name: "demo", version: "1.0"})
	f.Add(w)
	f.Add([]byte("PK\x03\x04"))
	f.Add(folderWithData(f))
	_, w = buildWheel(f, wheelSpec{name: "demo", version: "1.0", extra: func(zw *zip.Writer) {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: "demo/evil.py", ExternalAttrs: 0x10})
		io.WriteString(w, "import os\n")
	}})
	f.Add(w)
	l := DefaultConfig().Limits
	l.MaxUncompressedBytes = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := InspectWheel("demo-1.0-py3-none-any.whl", data, l); err != nil {
			return
		}
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatalf("accepted, but archive/zip cannot open it: %v", err)
		}
		contents := map[string][]byte{}
		for _, f := range zr.File {
			if strings.HasSuffix(f.Name, "/") {
				// archive/zip will not open a folder with data: inflate
				// the raw bytes.
				raw, err := f.OpenRaw()
				if err != nil {
					t.Fatalf("accepted, but folder %q does not open: %v", f.Name, err)
				}
				var n int64
				switch f.Method {
				case zip.Store:
					n, _ = io.Copy(io.Discard, raw)
				case zip.Deflate:
					n, _ = io.Copy(io.Discard, flate.NewReader(raw))
				default:
					t.Fatalf("accepted folder %q with method %d", f.Name, f.Method)
				}
				if n > 0 || f.UncompressedSize64 > 0 {
					t.Fatalf("accepted folder entry %q holding %d bytes", f.Name, n)
				}
				continue
			}
			rc, err := f.Open()
			if err != nil {
				t.Fatalf("accepted, but %q does not open: %v", f.Name, err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatalf("accepted, but %q does not read: %v", f.Name, err)
			}
			if CheckEntryName(f.Name) != nil {
				t.Fatalf("accepted unsafe name %q", f.Name)
			}
			contents[f.Name] = b
		}
		var record string
		for name := range contents {
			if strings.HasSuffix(name, ".dist-info/RECORD") {
				record = name
			}
		}
		rows, err := csv.NewReader(bytes.NewReader(contents[record])).ReadAll()
		if record == "" || err != nil {
			t.Fatalf("accepted without a readable RECORD (%q): %v", record, err)
		}
		hashes := map[string]string{}
		for _, row := range rows {
			if len(row) == 3 {
				hashes[row[0]] = row[1]
			}
		}
		for name, b := range contents {
			if name == record || name == record+".jws" || name == record+".p7s" {
				continue
			}
			h, ok := hashes[name]
			if !ok {
				t.Fatalf("accepted file %q that RECORD does not list", name)
			}
			if strings.TrimRight(h, "=") != strings.TrimRight(recordHash(b), "=") {
				t.Fatalf("accepted file %q whose RECORD hash %q does not match", name, h)
			}
		}
	})
}
