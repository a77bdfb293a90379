// Package rootfs embeds the runtime rootfs recipe and its build script, so
// `sandboxapi rootfs build` needs nothing beside the binary.
package rootfs

import (
	"context"
	_ "embed"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:embed build.sh
var buildScript []byte

//go:embed recipe.conf
var recipe []byte

// Build runs the build script with plan, the part of the recipe the
// runtimes file makes (a no-op when the hash of recipe and plan is
// cached), and returns the build folder.
func Build(ctx context.Context, cache string, plan []byte, progress io.Writer) (string, error) {
	dir, err := os.MkdirTemp("", "sandboxapi-rootfs-")
	if err != nil {
		return "", fmt.Errorf("creating recipe folder: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, "build.sh"), buildScript, 0o755); err != nil {
		return "", fmt.Errorf("writing build script: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "recipe.conf"), recipe, 0o644); err != nil {
		return "", fmt.Errorf("writing recipe: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plan.sh"), plan, 0o644); err != nil {
		return "", fmt.Errorf("writing plan: %w", err)
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(dir, "build.sh"), cache, filepath.Join(dir, "plan.sh"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, progress
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building rootfs: %w", err)
	}
	return strings.TrimSpace(out.String()), nil
}
