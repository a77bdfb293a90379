package mirror

import (
	"archive/zip"
	"bytes"
	"io"
	"os"
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

// FuzzReadZip: arbitrary bytes as a wheel never panic.
func FuzzReadZip(f *testing.F) {
	_, w := buildWheel(f, wheelSpec{name: "demo", version: "1.0"})
	f.Add(w)
	f.Add([]byte("PK\x03\x04"))
	l := DefaultConfig().Limits
	l.MaxUncompressedBytes = 1 << 20
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = InspectWheel("demo-1.0-py3-none-any.whl", data, l)
	})
}
