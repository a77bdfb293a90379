package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// CycloneDXModules returns the node_modules folder holding
// @cyclonedx/cyclonedx-library (SANDBOXAPI_CYCLONEDX_MODULES, else the
// test tools cache scripts/test.sh fills). Without it (or node) the test
// is skipped, and fails when SANDBOXAPI_REQUIRE_CLIENTS=1.
func CycloneDXModules(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("SANDBOXAPI_CYCLONEDX_MODULES")
	if dir == "" {
		dir = "/var/cache/sandboxapi/testtools/cyclonedx/node_modules"
	}
	_, err := os.Stat(filepath.Join(dir, "@cyclonedx", "cyclonedx-library", "package.json"))
	_, nerr := exec.LookPath("node")
	if err != nil || nerr != nil {
		msg := "CycloneDX validator (node and @cyclonedx/cyclonedx-library in " + dir + ") missing; scripts/test.sh installs it"
		if os.Getenv("SANDBOXAPI_REQUIRE_CLIENTS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dir
}

// ValidateWithCycloneDX runs the CycloneDX library's strict JSON validator
// (schema 1.6) on files and fails t on any error.
func ValidateWithCycloneDX(t testing.TB, modules string, files ...string) {
	t.Helper()
	args := append([]string{CycloneDXValidator(), modules}, files...)
	out, err := exec.Command("node", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("CycloneDX validation failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// CycloneDXValidator is the path of the node script that validates files.
func CycloneDXValidator() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "cyclonedx_validate.cjs")
}

// HasCycloneDX reports whether the validator is installed.
func HasCycloneDX() bool {
	dir := os.Getenv("SANDBOXAPI_CYCLONEDX_MODULES")
	if dir == "" {
		dir = "/var/cache/sandboxapi/testtools/cyclonedx/node_modules"
	}
	_, err := os.Stat(filepath.Join(dir, "@cyclonedx", "cyclonedx-library", "package.json"))
	return err == nil
}
