package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/doctor"
	"github.com/sandboxapi/sandboxapi/internal/app"
	"github.com/sandboxapi/sandboxapi/store"
)

// TestDoctorPassesOnThisHost runs the real checks against the installed
// runsc and rootfs with a fresh store; every check must pass.
func TestDoctorPassesOnThisHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("doctor's checks need root")
	}
	dir := t.TempDir()
	st, err := store.Open(t.Context(), filepath.Join(dir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	cfg, err := app.LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = dir
	results := doctor.Results(t.Context(), doctorConfig(cfg))
	names := []string{}
	for _, r := range results {
		names = append(names, r.Name)
		if r.Name == "build" {
			// A test binary carries no VCS stamp: a warning, never a failure
			// (TestBuildIsAttested checks a binary built as setup.sh does).
			if r.Status == doctor.Fail || !strings.HasPrefix(r.Detail, "sandboxapi ") {
				t.Errorf("build: %s %s", r.Status, r.Detail)
			}
			continue
		}
		if r.Status != doctor.OK {
			t.Errorf("%s: %s %s (fix: %s)", r.Name, r.Status, r.Detail, r.Fix)
		}
	}
	if got := strings.Join(names, ","); got != "build,runsc,platform,cgroups,rootfs,runtimes,guest,netns,nft,disk,homes,store,tls" {
		t.Errorf("checks = %s", got)
	}
	var out, errw bytes.Buffer
	if code := Run(t.Context(), []string{"sandboxapi", "doctor", "--data-dir", dir}, &out, &errw); code != 0 {
		t.Fatalf("doctor exit %d\n%s%s", code, out.String(), errw.String())
	}
	if !strings.Contains(out.String(), "host ready") {
		t.Errorf("output lacks the verdict:\n%s", out.String())
	}
}

// TestDoctorReportsProblems points doctor at a dynamically linked "runsc",
// a missing rootfs and an unwritable store and expects each named with a
// fix and a non-zero exit.
func TestDoctorReportsProblems(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("doctor's checks need root")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sandboxapi.db"), []byte("not a database, just long enough to be read as a header........................................................................"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "c.yaml")
	cfgText := "version: v1\nexecutor:\n  runsc: /bin/ls\n  rootfs: " + filepath.Join(dir, "nothing") + "\n" +
		"tls:\n  mode: files\n  cert_file: " + filepath.Join(dir, "none.pem") + "\n  key_file: " + filepath.Join(dir, "none.key") + "\n"
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errw bytes.Buffer
	code := Run(t.Context(), []string{"sandboxapi", "doctor", "--config", cfgPath, "--data-dir", dir}, &out, &errw)
	if code == 0 {
		t.Fatalf("doctor passed a broken host:\n%s", out.String())
	}
	for _, want := range []string{
		"FAIL  runsc     /bin/ls is dynamically linked",
		"FAIL  platform",
		"FAIL  rootfs",
		"FAIL  store",
		"FAIL  tls",
		"fix: install a static runsc",
		"fix: run `sandboxapi rootfs build`",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if !strings.Contains(errw.String(), "problem(s) found") {
		t.Errorf("stderr = %q", errw.String())
	}
}
