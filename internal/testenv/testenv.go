// Package testenv finds what tests on real sandboxes need: runsc, a built
// rootfs and the guest binary. With SANDBOXAPI_REQUIRE_RUNSC=1 (CI) a
// missing piece fails the test instead of skipping it.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Required reports whether CI demands the real components.
func Required() bool { return os.Getenv("SANDBOXAPI_REQUIRE_RUNSC") == "1" }

// Skip fails or skips the test, as Required says.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	if Required() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

var (
	guestOnce sync.Once
	guestPath string
	guestErr  error
)

// Guest builds the sandboxapi-guest binary once per test process.
func Guest(t testing.TB) string {
	t.Helper()
	guestOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandboxapi-guest-")
		if err != nil {
			guestErr = err
			return
		}
		guestPath = filepath.Join(dir, "sandboxapi-guest")
		cmd := exec.Command("go", "build", "-trimpath", "-o", guestPath, "./cmd/sandboxapi-guest")
		cmd.Dir = ModuleRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			guestErr = &buildError{out: string(out), err: err}
		}
	})
	if guestErr != nil {
		t.Fatalf("building guest: %v", guestErr)
	}
	return guestPath
}

type buildError struct {
	out string
	err error
}

func (b *buildError) Error() string { return b.err.Error() + ": " + b.out }

// ModuleRoot is the repository root.
func ModuleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Runsc returns the runsc binary or skips/fails.
func Runsc(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		Skip(t, "sandbox tests need root")
	}
	p, err := exec.LookPath("runsc")
	if err != nil {
		Skip(t, "runsc not installed: %v", err)
	}
	return p
}
