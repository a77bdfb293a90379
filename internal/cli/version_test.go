package cli

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/buildinfo"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// gitIn runs git in dir and returns its trimmed output.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestBuildIsAttested builds the binary as setup.sh does (scripts/build.sh)
// from a git checkout of this tree and from a git worktree of it, in an
// environment whose GOFLAGS turn VCS stamping off, and checks what
// `version` and `doctor` say: the module version, the revision, the build
// time and the runsc version, never "dev" or VERSION_MISSING.
func TestBuildIsAttested(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Skip(t, "git not installed")
	}
	root := testenv.ModuleRoot()
	repo := filepath.Join(t.TempDir(), "src")
	files := strings.Split(gitIn(t, root, "ls-files", "-co", "--exclude-standard"), "\n")
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue // deleted in the work tree
		}
		fi, _ := os.Stat(filepath.Join(root, f))
		p := filepath.Join(repo, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	gitIn(t, repo, "init", "-q")
	gitIn(t, repo, "add", "-A")
	gitIn(t, repo, "commit", "-qm", "snapshot")
	rev := gitIn(t, repo, "rev-parse", "HEAD")
	wt := filepath.Join(t.TempDir(), "wt")
	gitIn(t, repo, "worktree", "add", "-q", wt)

	wantRunsc := ""
	if bin, err := exec.LookPath("runsc"); err == nil {
		if v, from, err := buildinfo.RunscVersion(bin); err == nil && from == "binary" {
			wantRunsc = v
		}
	}
	pin := ""
	if b, err := os.ReadFile(filepath.Join(root, "scripts", "setup.sh")); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "RUNSC_VERSION=v"); ok && pin == "" {
				pin = "v" + v
			}
		}
	}

	for _, tc := range []struct {
		name, dir   string
		pseudoStamp bool // Go's VCS stamp names the version
	}{
		{name: "checkout", dir: repo, pseudoStamp: true},
		{name: "worktree", dir: wt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			start := time.Now().UTC().Truncate(time.Second)
			cmd := exec.Command("bash", "scripts/build.sh", out)
			cmd.Dir = tc.dir
			cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "RUNSC_VERSION=")
			if b, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("scripts/build.sh: %v\n%s", err, b)
			}
			bin := filepath.Join(out, "sandboxapi")
			b, err := exec.Command(bin, "version", "--json").Output()
			if err != nil {
				t.Fatal(err)
			}
			var in buildinfo.Info
			if err := json.Unmarshal(b, &in); err != nil {
				t.Fatalf("version --json: %v: %s", err, b)
			}
			t.Logf("version: %s", b)
			if in.Revision != rev || in.Modified {
				t.Errorf("revision %q modified %t, want %s unmodified", in.Revision, in.Modified, rev)
			}
			if tc.pseudoStamp && (!strings.HasPrefix(in.Version, "v0.0.0-") || !strings.HasSuffix(in.Version, rev[:12]) || in.CommitTime == "") {
				t.Errorf("version %q commit time %q: want Go's pseudo-version of %s", in.Version, in.CommitTime, rev[:12])
			}
			if bt, err := time.Parse(time.RFC3339, in.BuildTime); err != nil || bt.Before(start) || bt.After(time.Now().Add(time.Minute)) {
				t.Errorf("build time %q (%v), want a time since %s", in.BuildTime, err, start)
			}
			if wantRunsc != "" && in.Runsc != wantRunsc {
				t.Errorf("runsc %q, want %q (read from the runsc binary)", in.Runsc, wantRunsc)
			}
			if in.Runsc == "" || in.Runsc == buildinfo.Unknown || strings.Contains(in.Runsc, "MISSING") {
				t.Errorf("runsc %q", in.Runsc)
			}
			line, err := exec.Command(bin, "version").Output()
			if err != nil || !strings.Contains(string(line), rev[:12]) || strings.Contains(string(line), "sandboxapi dev\n") {
				t.Errorf("version = %q (%v)", line, err)
			}
			if os.Geteuid() != 0 || wantRunsc == "" {
				return
			}
			// doctor names both; its exit code depends on the rest of the host.
			doc, _ := exec.Command(bin, "doctor", "--data-dir", t.TempDir()).Output()
			var buildLine, runscLine string
			for _, l := range strings.Split(string(doc), "\n") {
				f := strings.Fields(l)
				if len(f) > 2 && f[1] == "build" {
					buildLine = l
				}
				if len(f) > 2 && f[1] == "runsc" {
					runscLine = l
				}
			}
			if !strings.HasPrefix(buildLine, "ok") || !strings.Contains(buildLine, rev[:12]) || !strings.Contains(buildLine, "built ") {
				t.Errorf("doctor's build line %q\n%s", buildLine, doc)
			}
			if !strings.Contains(runscLine, "gVisor "+wantRunsc) || strings.Contains(runscLine, "MISSING") {
				t.Errorf("doctor's runsc line %q", runscLine)
			}
			if pin == wantRunsc && !strings.HasPrefix(runscLine, "ok") {
				t.Errorf("doctor's runsc line %q: the installed runsc is the pinned one", runscLine)
			}
		})
	}
}
