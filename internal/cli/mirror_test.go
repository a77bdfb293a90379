package cli

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// runCLI runs the CLI as an operator would and returns its exit code and
// output.
func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), append([]string{"sandboxapi"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// mustCLI runs the CLI and fails the test unless it exits 0.
func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errOut := runCLI(t, args...)
	if code != 0 {
		t.Fatalf("sandboxapi %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// findBlob returns the stored file named by its sha256 under dir.
func findBlob(t *testing.T, dir, prefix string) string {
	t.Helper()
	var found string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && len(d.Name()) == 64 && strings.HasPrefix(d.Name(), prefix) {
			found = p
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no blob %s… under %s", prefix, dir)
	}
	return found
}

// TestMirrorVerifyFailsOnQuarantine: `mirror verify` quarantines an
// altered, missing or unreadable stored file and then exits non-zero (a
// systemd timer shows it failed); a run that finds nothing wrong exits 0.
func TestMirrorVerifyFailsOnQuarantine(t *testing.T) {
	td := filepath.Join(testenv.ModuleRoot(), "mirror", "testdata")
	cases := []struct {
		name   string
		damage func(path string) error
	}{
		{"altered", func(p string) error {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b[len(b)/2] ^= 0xff
			return os.WriteFile(p, b, 0o644)
		}},
		{"missing", os.Remove},
		{"unreadable", func(p string) error {
			// A folder where the file was: unreadable even for root.
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Mkdir(p, 0o755)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dd := t.TempDir()
			mustCLI(t, "mirror", "osv", "import", filepath.Join(td, "osv"), "--data-dir", dd)
			added := mustCLI(t, "mirror", "add", filepath.Join(td, "wheels", "wheel-0.43.0-py3-none-any.whl"), "--data-dir", dd)
			_, sum, ok := strings.Cut(added, "sha256=")
			if !ok || len(sum) < 64 {
				t.Fatalf("mirror add printed %q", added)
			}
			if out := mustCLI(t, "mirror", "verify", "--data-dir", dd); !strings.Contains(out, "quarantined 0") {
				t.Fatalf("clean verify: %q", out)
			}
			if err := tc.damage(findBlob(t, dd, sum[:64])); err != nil {
				t.Fatal(err)
			}
			code, out, errOut := runCLI(t, "mirror", "verify", "--data-dir", dd)
			if code == 0 {
				t.Fatalf("verify exited 0 after quarantining:\n%s%s", out, errOut)
			}
			if !strings.Contains(out, "quarantined 1") || !strings.Contains(out, "quarantined pip wheel-0.43.0-py3-none-any.whl") ||
				!strings.Contains(errOut, "1 artifact(s) quarantined") {
				t.Errorf("verify output:\n%s%s", out, errOut)
			}
			// Quarantined stays quarantined; the next run has nothing to fail on.
			if out := mustCLI(t, "mirror", "list", "--data-dir", dd); !strings.Contains(out, "quarantined") {
				t.Errorf("list after verify: %s", out)
			}
			mustCLI(t, "mirror", "verify", "--data-dir", dd)
		})
	}
}

// TestMirrorRecheckFailsOnQuarantine: `mirror recheck` against a new OSV
// snapshot that affects an admitted wheel quarantines it and exits
// non-zero.
func TestMirrorRecheckFailsOnQuarantine(t *testing.T) {
	td := filepath.Join(testenv.ModuleRoot(), "mirror", "testdata")
	dd := t.TempDir()
	mustCLI(t, "mirror", "osv", "import", filepath.Join(td, "osv"), "--data-dir", dd)
	mustCLI(t, "mirror", "add", filepath.Join(td, "wheels", "wheel-0.43.0-py3-none-any.whl"), "--data-dir", dd)
	if out := mustCLI(t, "mirror", "recheck", "--data-dir", dd); !strings.Contains(out, "quarantined 0") {
		t.Fatalf("clean recheck: %q", out)
	}
	src := t.TempDir()
	if err := os.CopyFS(src, os.DirFS(filepath.Join(td, "osv"))); err != nil {
		t.Fatal(err)
	}
	rec := `{"id":"PYSEC-2099-1","modified":"2026-10-01T00:00:00Z","affected":[{"package":{"ecosystem":"PyPI","name":"wheel"},"versions":["0.43.0"]}]}`
	if err := os.WriteFile(filepath.Join(src, "PyPI", "PYSEC-2099-1.json"), []byte(rec), 0o644); err != nil {
		t.Fatal(err)
	}
	mustCLI(t, "mirror", "osv", "import", src, "--data-dir", dd)
	code, out, errOut := runCLI(t, "mirror", "recheck", "--data-dir", dd)
	if code == 0 {
		t.Fatalf("recheck exited 0 after quarantining:\n%s%s", out, errOut)
	}
	if !strings.Contains(out, "quarantined pip wheel-0.43.0-py3-none-any.whl: affected by PYSEC-2099-1") {
		t.Errorf("recheck output:\n%s%s", out, errOut)
	}
	mustCLI(t, "mirror", "recheck", "--data-dir", dd)
}
