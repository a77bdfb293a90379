package installer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

const reg = "https://registry.npmjs.org/"

// lockOf is a lockfile v3 holding entries (path -> entry).
func lockOf(entries map[string]any) []byte {
	pk := map[string]any{"": map[string]any{"name": "app", "version": "1.0.0"}}
	for k, v := range entries {
		pk[k] = v
	}
	b, _ := json.Marshal(map[string]any{"name": "app", "lockfileVersion": 3, "requires": true, "packages": pk})
	return b
}

func entry(name, version string) map[string]any {
	base := name[strings.LastIndexByte(name, '/')+1:]
	return map[string]any{"version": version, "resolved": reg + name + "/-/" + base + "-" + version + ".tgz", "integrity": "sha512-" + name + version}
}

// TestParseLockfileHostile: every way a lockfile could put a file outside
// node_modules, install something not from the registry, or pass a bound
// is refused with ErrBadLockfile; real shapes are accepted.
func TestParseLockfileHostile(t *testing.T) {
	t.Parallel()
	ok := entry("ms", "2.1.3")
	with := func(k string, v any) map[string]any {
		e := entry("ms", "2.1.3")
		e[k] = v
		return e
	}
	many := map[string]any{}
	for k := range 300 {
		many[fmt.Sprintf("node_modules/p%d", k)] = entry(fmt.Sprintf("p%d", k), "1.0.0")
	}
	cases := []struct {
		name string
		data []byte
		want string // "" accepted
	}{
		{"plain", lockOf(map[string]any{"node_modules/ms": ok}), ""},
		{"nested and scoped", lockOf(map[string]any{"node_modules/@s/a": entry("@s/a", "1.0.0"), "node_modules/@s/a/node_modules/ms": ok}), ""},
		{"v2", []byte(`{"lockfileVersion":2,"packages":{"":{},"node_modules/ms":` + mustJSON(ok) + `},"dependencies":{}}`), ""},
		{"no resolved (omit-lockfile-registry-resolved)", lockOf(map[string]any{"node_modules/ms": map[string]any{"version": "2.1.3", "integrity": "sha1-x sha512-y"}}), ""},
		{"v1", []byte(`{"lockfileVersion":1,"dependencies":{"ms":{"version":"2.1.3"}}}`), "lockfileVersion"},
		{"not json", []byte(`{"lockfileVersion":3,`), "not a package-lock"},
		{"array", []byte(`[]`), "not a package-lock"},
		{"no packages", []byte(`{"lockfileVersion":3,"packages":{"":{}}}`), "no package"},
		{"absolute", lockOf(map[string]any{"/etc/passwd": ok}), "not under node_modules"},
		{"dot dot", lockOf(map[string]any{"node_modules/../../x": ok}), "not an npm package name"},
		{"dot dot nested", lockOf(map[string]any{"node_modules/ms": ok, "node_modules/ms/node_modules/..": ok}), "not an npm package name"},
		{"dot", lockOf(map[string]any{"node_modules/.": ok}), "not an npm package name"},
		{"hidden", lockOf(map[string]any{"node_modules/.bin": ok}), "not an npm package name"},
		{"empty name", lockOf(map[string]any{"node_modules/": ok}), "not an npm package name"},
		{"double slash", lockOf(map[string]any{"node_modules//ms": ok}), "not an npm package name"},
		{"trailing slash", lockOf(map[string]any{"node_modules/ms/": ok}), "chain"},
		{"backslash", lockOf(map[string]any{`node_modules/..\x`: ok}), "not an npm package name"},
		{"NUL", lockOf(map[string]any{"node_modules/ms\x00": ok}), "not an npm package name"},
		{"upper case", lockOf(map[string]any{"node_modules/MS": ok}), "not an npm package name"},
		{"scope without name", lockOf(map[string]any{"node_modules/@s": ok}), "not an npm package name"},
		{"scope dot dot", lockOf(map[string]any{"node_modules/@s/..": ok}), "not an npm package name"},
		{"scope is dot dot", lockOf(map[string]any{"node_modules/@../x": ok}), "not an npm package name"},
		{"not node_modules between", lockOf(map[string]any{"node_modules/ms": ok, "node_modules/ms/lib/x": ok}), "chain"},
		{"workspace", lockOf(map[string]any{"packages/a": ok}), "not under node_modules"},
		{"workspace node_modules", lockOf(map[string]any{"packages/a/node_modules/ms": ok}), "not under node_modules"},
		{"orphan nested", lockOf(map[string]any{"node_modules/a/node_modules/ms": ok}), "does not list"},
		{"too deep", lockOf(map[string]any{"node_modules/a" + strings.Repeat("/node_modules/a", 40): ok}), "deeper"},
		{"long path", lockOf(map[string]any{"node_modules/" + strings.Repeat("a", 2000): ok}), "over 1024"},
		{"link", lockOf(map[string]any{"node_modules/ms": map[string]any{"resolved": "../ms", "link": true}}), "link"},
		{"bundled", lockOf(map[string]any{"node_modules/ms": with("inBundle", true)}), "bundled"},
		{"bundles", lockOf(map[string]any{"node_modules/ms": with("bundleDependencies", []string{"x"})}), "bundles"},
		{"alias", lockOf(map[string]any{"node_modules/ms": with("name", "evil")}), "alias"},
		{"range", lockOf(map[string]any{"node_modules/ms": with("version", "^2.1.3")}), "exact"},
		{"file version", lockOf(map[string]any{"node_modules/ms": with("version", "file:../ms")}), "exact"},
		{"no version", lockOf(map[string]any{"node_modules/ms": map[string]any{"integrity": "sha512-x"}}), "exact"},
		{"file resolved", lockOf(map[string]any{"node_modules/ms": with("resolved", "file:../ms-2.1.3.tgz")}), "https"},
		{"git resolved", lockOf(map[string]any{"node_modules/ms": with("resolved", "git+ssh://git@github.com/vercel/ms.git#abc")}), "https"},
		{"github resolved", lockOf(map[string]any{"node_modules/ms": with("resolved", "github:vercel/ms")}), "https"},
		{"http resolved", lockOf(map[string]any{"node_modules/ms": with("resolved", "http://registry.npmjs.org/ms/-/ms-2.1.3.tgz")}), "https"},
		{"tarball elsewhere", lockOf(map[string]any{"node_modules/ms": with("resolved", "https://evil.example/x.tgz")}), "registry tarball"},
		{"other package's tarball", lockOf(map[string]any{"node_modules/ms": with("resolved", reg+"evil/-/evil-1.0.0.tgz")}), "registry tarball"},
		{"credentials", lockOf(map[string]any{"node_modules/ms": with("resolved", "https://u:p@registry.npmjs.org/ms/-/ms-2.1.3.tgz")}), "https"},
		{"no integrity", lockOf(map[string]any{"node_modules/ms": with("integrity", "")}), "sha512"},
		{"sha1 only", lockOf(map[string]any{"node_modules/ms": with("integrity", "sha1-abc")}), "sha512"},
		{"huge integrity", lockOf(map[string]any{"node_modules/ms": with("integrity", "sha512-"+strings.Repeat("a", 5000))}), "over 2048"},
		{"entry not an object", lockOf(map[string]any{"node_modules/ms": "x"}), "not an object"},
		{"too many", lockOf(many), "at most 256"},
		{"too large", append(lockOf(map[string]any{"node_modules/ms": ok}), make([]byte, MaxLockfileBytes)...), "MiB"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			es, err := parseLockfile(tc.data, 256)
			if tc.want == "" {
				if err != nil || len(es) == 0 {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, sandbox.ErrBadLockfile) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrBadLockfile with %q", err, tc.want)
			}
			if len(err.Error()) > 400 {
				t.Errorf("error of %d bytes", len(err.Error()))
			}
		})
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestPlanLockfile: a lockfile's packages go at its paths, each checked
// against the catalog (missing and integrity mismatches are 422s naming
// the path), and its dependencies are checked as Node resolves them.
func TestPlanLockfile(t *testing.T) {
	t.Parallel()
	c := listCatalog{"debug@2.6.9": {"ms": "2.0.0"}, "ms@2.0.0": nil, "ms@2.1.3": nil, "send@0.19.0": {"ms": "2.1.3", "debug": "2.6.9"}}
	inst := New(DefaultConfig(), c, nil, nil, nil, nil)
	plan := func(lock []byte) ([]planned, []requirement, error) {
		return inst.plan(context.Background(), sandbox.InstallRequest{Manager: "npm", Lockfile: lock})
	}
	good := map[string]any{"node_modules/debug": entry("debug", "2.6.9"), "node_modules/ms": entry("ms", "2.0.0"),
		"node_modules/send": entry("send", "0.19.0"), "node_modules/send/node_modules/ms": entry("ms", "2.1.3")}
	got, reqs, err := plan(lockOf(good))
	if err != nil || len(reqs) != 0 || len(got) != 4 || got[3].path != "node_modules/send/node_modules/ms" || got[3].a.Version != "2.1.3" || got[3].requested != got[3].path {
		t.Fatalf("good: %+v %+v %v", got, reqs, err)
	}
	var rej *sandbox.RejectedError
	bad := map[string]any{"node_modules/ms": entry("ms", "2.1.3"), "node_modules/debug": entry("debug", "2.6.9")}
	if _, _, err := plan(lockOf(bad)); !errors.As(err, &rej) || rej.Packages[0].Package != "node_modules/debug" || rej.Packages[0].MissingDependencies[0].Requested != "2.1.3" {
		t.Fatalf("ms out of range for debug: %v", err)
	}
	forged := entry("ms", "2.0.0")
	forged["integrity"] = "sha512-other"
	if _, _, err := plan(lockOf(map[string]any{"node_modules/ms": forged, "node_modules/x": entry("x", "1.0.0")})); !errors.As(err, &rej) || len(rej.Packages) != 2 ||
		rej.Packages[0].Status != "integrity_mismatch" || rej.Packages[1].Status != "missing" {
		t.Fatalf("forged integrity and missing package: %v %+v", err, rej)
	}
	if _, reqs, err := plan(lockOf(map[string]any{"node_modules/debug": entry("debug", "2.6.9")})); err != nil || len(reqs) != 1 || reqs[0].Name != "ms" {
		t.Fatalf("debug alone: %+v %v", reqs, err)
	}
	for _, req := range []sandbox.InstallRequest{{Manager: "pip", Lockfile: lockOf(good)}, {Manager: "npm", Packages: []string{"ms"}, Lockfile: lockOf(good)}} {
		if _, _, err := inst.plan(context.Background(), req); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%s with packages %v: %v", req.Manager, req.Packages, err)
		}
	}
}

// FuzzParseLockfile: whatever the lockfile, an accepted one places only
// packages inside node_modules, at clean paths of valid names whose
// parents it lists, at most max of them.
func FuzzParseLockfile(f *testing.F) {
	f.Add(lockOf(map[string]any{"node_modules/ms": entry("ms", "2.1.3")}))
	f.Add(lockOf(map[string]any{"node_modules/@s/a": entry("@s/a", "1.0.0"), "node_modules/@s/a/node_modules/ms": entry("ms", "2.1.3")}))
	f.Add([]byte(`{"lockfileVersion":3,"packages":{"node_modules/../x":{"version":"1.0.0","integrity":"sha512-x"}}}`))
	f.Add([]byte(`{"lockfileVersion":2,"packages":{"node_modules/a/node_modules/@s/b":{"version":"1.0.0","integrity":"sha512-x"},"node_modules/a":{"version":"1.0.0","integrity":"sha512-x"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		es, err := parseLockfile(data, 8)
		if err != nil {
			if !errors.Is(err, sandbox.ErrBadLockfile) {
				t.Fatalf("error not ErrBadLockfile: %v", err)
			}
			return
		}
		if len(es) == 0 || len(es) > 8 {
			t.Fatalf("%d entries", len(es))
		}
		paths := map[string]bool{}
		for _, e := range es {
			paths[e.Path] = true
		}
		for _, e := range es {
			j := filepath.Join("/home/sandbox", e.Path)
			if filepath.Clean(e.Path) != e.Path || !strings.HasPrefix(j, "/home/sandbox/node_modules/") || strings.Contains(e.Path, "\\") {
				t.Fatalf("path %q escapes", e.Path)
			}
			if !strings.HasSuffix(e.Path, "node_modules/"+e.Name) || !npmName.MatchString(e.Name) || !npmVersion.MatchString(e.Version) || !strings.HasPrefix(e.Integrity, "sha512-") {
				t.Fatalf("entry %+v", e)
			}
			for _, part := range strings.Split(e.Path, "/") {
				if part == "" || part == "." || part == ".." {
					t.Fatalf("path %q has part %q", e.Path, part)
				}
			}
			if p := parentPath(e.Path); p != "" && !paths[p] {
				t.Fatalf("%q without its parent", e.Path)
			}
		}
	})
}

// TestInstallScriptNPMPath: install.py checks each planned path again
// before it writes (defence in depth behind parseLockfile): hostile paths
// are refused, real ones accepted, and every top-level entry is the
// package folder that holds the path.
func TestInstallScriptNPMPath(t *testing.T) {
	t.Parallel()
	py, dir := hostPython(t)
	cases := map[string]string{
		"ms": "ms", "@s/a": "@s/a", "a/node_modules/b": "a", "@s/a/node_modules/@t/b": "@s/a", "send/node_modules/encodeurl": "send",
		"../x": "", "a/../../x": "", "/etc": "", "a/node_modules/..": "", ".bin": "", "a//b": "", "a/": "", "a/lib/b": "",
		"@s": "", "@s/..": "", "a\\b": "", "a\x00": "", "A": "", "node_modules/a": "", strings.Repeat("a/node_modules/", 40) + "a": "",
	}
	for path, top := range cases {
		jb, _ := json.Marshal(map[string]any{"name": "x", "path": path})
		out, err := runScript(t, py, dir, `import json
try:
    print("top:", install.npm_top(install.npm_path(json.loads(sys.argv[1]))))
except install.Failure as e:
    print("refused:", e)`, nil, string(jb))
		want := "refused:"
		if top != "" {
			want = "top: " + top + "\n"
		}
		if err != nil || !strings.HasPrefix(out, want) {
			t.Errorf("%q: err %v, out %q, want %q", path, err, out, want)
		}
	}
}
