package buildinfo

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	stamped := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sandboxapi/sandboxapi", Version: "v0.0.0-20261201124234-99c73044bcce"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "99c73044bccef4f0f1267991c2d9467bcfc7bd96"},
			{Key: "vcs.time", Value: "2026-12-01T12:42:34Z"}, {Key: "vcs.modified", Value: "false"}}}
	dirty := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sandboxapi/sandboxapi", Version: "v0.0.0-20261201124234-99c73044bcce+dirty"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "99c73044bccef4f0f1267991c2d9467bcfc7bd96"}, {Key: "vcs.modified", Value: "true"}}}
	devel := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/sandboxapi/sandboxapi", Version: "(devel)"}}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		o    overrides
		want Info
		line string
	}{
		{name: "no build information", want: Info{Version: "dev", Revision: Unknown}, line: "dev (revision unknown)"},
		{name: "no VCS stamp", bi: devel, want: Info{Version: "dev", Revision: Unknown, GoVersion: "go1.26.8"}, line: "dev (revision unknown, go1.26.8)"},
		{name: "VCS stamp", bi: stamped, o: overrides{buildTime: "2026-12-01T13:00:00Z"},
			want: Info{Version: "v0.0.0-20261201124234-99c73044bcce", Revision: "99c73044bccef4f0f1267991c2d9467bcfc7bd96", CommitTime: "2026-12-01T12:42:34Z", BuildTime: "2026-12-01T13:00:00Z", GoVersion: "go1.26.8"},
			line: "v0.0.0-20261201124234-99c73044bcce (revision 99c73044bcce, committed 2026-12-01T12:42:34Z, built 2026-12-01T13:00:00Z, go1.26.8)"},
		{name: "modified tree", bi: dirty,
			want: Info{Version: "v0.0.0-20261201124234-99c73044bcce+dirty", Revision: "99c73044bccef4f0f1267991c2d9467bcfc7bd96", Modified: true, GoVersion: "go1.26.8"},
			line: "v0.0.0-20261201124234-99c73044bcce+dirty (revision 99c73044bcce+dirty, modified, go1.26.8)"},
		{name: "release version and revision by ldflags (worktree build)", bi: devel, o: overrides{version: "v1.4.0", revision: "abcdef0123456789", modified: "true"},
			want: Info{Version: "v1.4.0", Revision: "abcdef0123456789", Modified: true, GoVersion: "go1.26.8"},
			line: "v1.4.0 (revision abcdef012345+dirty, modified, go1.26.8)"},
		{name: "ldflags version beats the pseudo-version", bi: stamped, o: overrides{version: "v1.4.0"},
			want: Info{Version: "v1.4.0", Revision: "99c73044bccef4f0f1267991c2d9467bcfc7bd96", CommitTime: "2026-12-01T12:42:34Z", GoVersion: "go1.26.8"},
			line: "v1.4.0 (revision 99c73044bcce, committed 2026-12-01T12:42:34Z, go1.26.8)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := fromBuildInfo(tc.bi, tc.o)
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			if s := got.String(); s != tc.line {
				t.Errorf("String() = %q, want %q", s, tc.line)
			}
		})
	}
}

// TestRunscVersion reads the gVisor version from the installed runsc
// binary itself (its `--version` says VERSION_MISSING), and falls back to
// setup's stamp, then to the version the build was made for.
func TestRunscVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	stamp := filepath.Join(dir, "runsc.version")
	if err := os.WriteFile(stamp, []byte("v0.0.0-20260905035102-160fafc42237\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable() // a Go binary of another module
	if err != nil {
		t.Fatal(err)
	}
	notGo := filepath.Join(dir, "script")
	if err := os.WriteFile(notGo, []byte("#!/bin/sh\necho runsc version VERSION_MISSING\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, stamp, built string
		want, from               string
		err                      error
	}{
		{name: "stamp when the binary is not runsc", path: self, stamp: stamp, want: "v0.0.0-20260905035102-160fafc42237", from: "stamp"},
		{name: "stamp when the binary is no Go program", path: notGo, stamp: stamp, want: "v0.0.0-20260905035102-160fafc42237", from: "stamp"},
		{name: "build pin without a stamp", path: notGo, stamp: filepath.Join(dir, "none"), built: "v0.0.0-1", want: "v0.0.0-1", from: "build"},
		{name: "nothing known", path: filepath.Join(dir, "none"), stamp: filepath.Join(dir, "none"), err: ErrRunscVersionUnknown},
	}
	if bin, err := exec.LookPath("runsc"); err == nil {
		// The real one: a `go install gvisor.dev/gvisor/runsc@V` build.
		out, err := exec.Command("go", "version", "-m", bin).Output()
		if err != nil {
			t.Fatal(err)
		}
		var want string
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "mod" && f[1] == "gvisor.dev/gvisor" {
				want = f[2]
			}
		}
		tests = append(tests, struct {
			name, path, stamp, built string
			want, from               string
			err                      error
		}{name: "installed runsc", path: bin, stamp: filepath.Join(dir, "none"), built: "v0.0.0-other", want: want, from: "binary"})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, from, err := runscVersion(tc.path, tc.stamp, tc.built)
			if !errors.Is(err, tc.err) || got != tc.want || from != tc.from {
				t.Fatalf("runscVersion = %q, %q, %v; want %q, %q, %v", got, from, err, tc.want, tc.from, tc.err)
			}
			if strings.Contains(got, "MISSING") {
				t.Fatalf("version %q", got)
			}
		})
	}
}
