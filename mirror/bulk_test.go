package mirror

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestParseRequirements(t *testing.T) {
	t.Parallel()
	h := strings.Repeat("a1", 32)
	tests := []struct {
		name    string
		in      string
		spec    string // "" when a problem is expected
		hashes  int
		problem string
	}{
		{name: "pinned", in: "requests==2.32.3", spec: "requests==2.32.3"},
		{name: "hash", in: "requests==2.32.3 --hash=sha256:" + h, spec: "requests==2.32.3", hashes: 1},
		{name: "two hashes split", in: "requests==2.32.3 \\\n  --hash=sha256:" + h + " \\\n  --hash sha256:" + strings.ToUpper(h), spec: "requests==2.32.3", hashes: 2},
		{name: "extras", in: "uvicorn[standard]==0.30.0", spec: "uvicorn==0.30.0"},
		{name: "marker", in: `pywin32==306 ; sys_platform == "win32"`, spec: "pywin32==306"},
		{name: "marker no space", in: `idna==3.7; python_version >= "3.8" --hash=sha256:` + h, spec: "idna==3.7", hashes: 1},
		{name: "comment", in: "six==1.16.0  # needed by x", spec: "six==1.16.0"},
		{name: "unpinned", in: "requests>=2", problem: "not pinned"},
		{name: "bare", in: "requests", problem: "not pinned"},
		{name: "triple equals", in: "requests===2.0", problem: "not pinned"},
		{name: "range after pin", in: "requests==2.*", problem: "not pinned"},
		{name: "url", in: "pkg @ https://example.com/pkg.whl", problem: "URL"},
		{name: "editable", in: "-e git+https://x/y.git#egg=y", problem: "option -e"},
		{name: "nested file", in: "-r other.txt", problem: "option -r"},
		{name: "index url", in: "--index-url https://evil.example/simple", problem: "option --index-url"},
		{name: "md5 hash", in: "six==1.16.0 --hash=md5:abcd", problem: "only sha256"},
		{name: "short hash", in: "six==1.16.0 --hash=sha256:abcd", problem: "only sha256"},
		{name: "other option", in: "six==1.16.0 --no-binary six", problem: "option --no-binary"},
		{name: "bad name", in: "../../etc==1.0", problem: "bad package spec"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rs, err := ParseRequirements([]byte("# header\n\n" + tc.in + "\n"))
			if err != nil || len(rs) != 1 {
				t.Fatalf("got %+v, %v", rs, err)
			}
			r := rs[0]
			if r.Line != 3 {
				t.Errorf("line %d", r.Line)
			}
			if tc.problem != "" {
				if !strings.Contains(r.Problem, tc.problem) {
					t.Fatalf("problem %q, want %q", r.Problem, tc.problem)
				}
				return
			}
			if r.Problem != "" || r.Spec.String() != tc.spec || len(r.Hashes) != tc.hashes {
				t.Fatalf("got %+v", r)
			}
		})
	}
	if _, err := ParseRequirements([]byte(strings.Repeat("x", 5<<20))); !errors.Is(err, ErrBadSpec) {
		t.Errorf("huge file: %v", err)
	}
}

func TestParseLockfile(t *testing.T) {
	t.Parallel()
	v3 := `{"name":"app","lockfileVersion":3,"packages":{
		"":{"name":"app"},
		"node_modules/ms":{"version":"2.1.3","resolved":"https://registry.npmjs.org/ms/-/ms-2.1.3.tgz","integrity":"sha512-x"},
		"node_modules/a/node_modules/ms":{"version":"2.1.3","integrity":"sha512-x"},
		"node_modules/b/node_modules/ms":{"version":"2.0.0","integrity":"sha512-y"},
		"node_modules/@scope/pkg":{"version":"1.0.0","resolved":"https://registry.npmjs.org/@scope/pkg/-/pkg-1.0.0.tgz"},
		"node_modules/alias":{"name":"real","version":"1.0.0","resolved":"https://registry.npmjs.org/real/-/real-1.0.0.tgz"},
		"node_modules/bundled":{"version":"1.0.0","inBundle":true},
		"node_modules/local":{"resolved":"libs/local","link":true},
		"libs/local":{"name":"local","version":"0.0.1"},
		"node_modules/evil":{"version":"1.0.0","resolved":"https://evil.example/evil/-/evil-1.0.0.tgz"},
		"node_modules/gitdep":{"version":"git+https://github.com/a/b.git#c","resolved":"git+https://github.com/a/b.git#c"},
		"node_modules/tarurl":{"version":"1.0.0","resolved":"https://example.com/x.tgz"},
		"node_modules/../../x":{"version":"1.0.0"}
	}}`
	es, err := ParseLockfile([]byte(v3), "https://registry.npmjs.org")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range es {
		got[e.Name+"@"+e.Version] = e.Problem
	}
	want := map[string]string{
		"ms@2.1.3": "", "ms@2.0.0": "", "@scope/pkg@1.0.0": "", "real@1.0.0": "",
		"local@": "a link to a local folder", "local@0.0.1": "a workspace or local folder",
		"evil@1.0.0":   "resolved from evil.example, not the registry",
		"tarurl@1.0.0": "resolved from example.com, not the registry",
		"gitdep@git+https://github.com/a/b.git#c": "not from a registry (git+https://github.com/a/b.git#c)",
		"../../x@1.0.0": `bad package name "../../x"`,
	}
	if len(got) != len(want) {
		t.Errorf("got %d entries %v, want %d", len(got), got, len(want))
	}
	for k, w := range want {
		if p, ok := got[k]; !ok || p != w {
			t.Errorf("%s: problem %q (present %v), want %q", k, p, ok, w)
		}
	}
	// A lockfile from another registry host is curated from the mirror's own.
	es, _ = ParseLockfile([]byte(`{"lockfileVersion":2,"packages":{"node_modules/x":{"version":"1.0.0","resolved":"https://npm.corp.example/x/-/x-1.0.0.tgz"}}}`), "https://npm.corp.example/")
	if len(es) != 1 || es[0].Problem != "" {
		t.Errorf("configured registry host: %+v", es)
	}
	// lockfile v1: a dependency tree.
	v1 := `{"lockfileVersion":1,"dependencies":{"debug":{"version":"2.6.9","integrity":"sha512-a","requires":{"ms":"2.0.0"},
		"dependencies":{"ms":{"version":"2.0.0","integrity":"sha512-b"}}},"ms":{"version":"2.1.3"}}}`
	es, err = ParseLockfile([]byte(v1), "https://registry.npmjs.org")
	if err != nil || len(es) != 3 || es[0].Name != "debug" || es[1].Version != "2.0.0" || es[2].Version != "2.1.3" {
		t.Errorf("v1: %+v, %v", es, err)
	}
	for _, bad := range []string{`{}`, `[]`, `{"name":"x","version":"1.0.0","dependencies":{"ms":"^2"}}`, `not json`} {
		if _, err := ParseLockfile([]byte(bad), ""); !errors.Is(err, ErrBadSpec) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func FuzzParseRequirements(f *testing.F) {
	for _, s := range []string{"a==1.0 --hash=sha256:" + strings.Repeat("0", 64), "-r x\n#c\nb[x]==2; python_version<'3'", "x==1 \\\n --hash sha256:", "a@b"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rs, err := ParseRequirements(b)
		if err != nil {
			return
		}
		for _, r := range rs {
			if r.Problem == "" && (!ValidName(Pip, r.Spec.Name) || !ValidVersion(Pip, r.Spec.Version)) {
				t.Fatalf("accepted %+v", r)
			}
			for _, h := range r.Hashes {
				if len(h) != 64 {
					t.Fatalf("hash %q", h)
				}
			}
		}
	})
}

func FuzzParseLockfile(f *testing.F) {
	f.Add([]byte(`{"lockfileVersion":3,"packages":{"node_modules/ms":{"version":"2.1.3","resolved":"https://registry.npmjs.org/ms/-/ms-2.1.3.tgz"}}}`))
	f.Add([]byte(`{"lockfileVersion":1,"dependencies":{"a":{"version":"1.0.0","dependencies":{"b":{"version":"2.0.0"}}}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := ParseLockfile(b, "https://registry.npmjs.org")
		if err != nil {
			return
		}
		for _, e := range es {
			if e.Problem == "" && (!ValidName(NPM, e.Name) || !ValidVersion(NPM, e.Version)) {
				t.Fatalf("accepted %+v", e)
			}
		}
	})
}

// TestResolveNewest: a bare name takes the newest stable version with no
// open advisory, at most the registry's latest tag, and names what it
// passed over with the fixed versions.
func TestResolveNewest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	reg := newNPMRegistry(t)
	for _, v := range []string{"6.9.7", "6.10.2", "6.11.0-rc.1"} {
		reg.add("qs", v, regVersion{tarball: plainNPM(t, "qs", v, ""), time: "2022-01-01T00:00:00Z"})
	}
	reg.add("qs", "7.0.0", regVersion{tarball: plainNPM(t, "qs", "7.0.0", ""), time: "2022-01-01T00:00:00Z"})
	reg.add("qs", "6.10.5", regVersion{tarball: plainNPM(t, "qs", "6.10.5", ""), deprecated: "broken"})
	reg.tags["qs"] = "6.10.5"
	reg.add("minimist", "1.2.5", regVersion{tarball: plainNPM(t, "minimist", "1.2.5", "")})
	m := newTestMirror(t, true)
	m.cfg.NPMRegistryURL = reg.URL
	res, err := m.ResolveNewest(ctx, NPM, "qs")
	if err != nil || res.Spec.Version != "6.9.7" || len(res.Skipped) != 1 || res.Skipped[0].Version != "6.10.2" ||
		strings.Join(res.Skipped[0].Fixed, ",") != "6.10.3" || res.Skipped[0].Advisories[0] != "GHSA-hrpp-h998-j3pp" {
		t.Fatalf("qs: %+v, %v", res, err)
	}
	if _, err := m.ResolveNewest(ctx, NPM, "minimist"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "open advisory") {
		t.Errorf("minimist: %v", err)
	}
	if _, err := m.ResolveNewest(ctx, NPM, "../x"); !errors.Is(err, ErrBadSpec) {
		t.Errorf("bad name: %v", err)
	}
}
