package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultRootfsCache is where `sandboxapi rootfs build` puts builds, one
// folder per recipe hash.
const DefaultRootfsCache = "/var/cache/sandboxapi/rootfs"

// ErrNoRootfs is returned when no complete rootfs build exists.
var ErrNoRootfs = errors.New("no rootfs built (run `sandboxapi rootfs build`)")

// FindRootfs returns the rootfs tree and versions file of a build folder
// (one holding .complete), or of the newest complete build under cache.
func FindRootfs(path, cache string) (rootfs, versions string, err error) {
	if path != "" {
		if _, err := os.Stat(filepath.Join(path, ".complete")); err == nil {
			return filepath.Join(path, "rootfs"), filepath.Join(path, "versions.json"), nil
		}
		if _, err := os.Stat(filepath.Join(path, "bin", "sh")); err == nil {
			// A bare tree: versions sit beside it if at all.
			return path, filepath.Join(filepath.Dir(path), "versions.json"), nil
		}
		return "", "", fmt.Errorf("rootfs %s: %w", path, ErrNoRootfs)
	}
	if cache == "" {
		cache = DefaultRootfsCache
	}
	marks, _ := filepath.Glob(filepath.Join(cache, "*", ".complete"))
	var best string
	var bestTime int64
	for _, m := range marks {
		fi, err := os.Stat(m)
		if err == nil && fi.ModTime().UnixNano() > bestTime {
			best, bestTime = filepath.Dir(m), fi.ModTime().UnixNano()
		}
	}
	if best == "" {
		return "", "", ErrNoRootfs
	}
	return filepath.Join(best, "rootfs"), filepath.Join(best, "versions.json"), nil
}
