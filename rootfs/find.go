package rootfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// DefaultCache is where `sandboxapi rootfs build` puts builds, one folder
// per recipe hash.
const DefaultCache = "/var/cache/sandboxapi/rootfs"

// ErrNotBuilt is returned when no complete rootfs build exists.
var ErrNotBuilt = errors.New("no rootfs built (run `sandboxapi rootfs build`)")

// Find returns the rootfs tree and versions file of a build folder
// (one holding .complete), or of the newest complete build under cache
// (DefaultCache when empty); the doctor and the executor both use it.
func Find(path, cache string) (tree, versions string, err error) {
	if path != "" {
		if _, err := os.Stat(filepath.Join(path, ".complete")); err == nil {
			return filepath.Join(path, "rootfs"), filepath.Join(path, "versions.json"), nil
		}
		if _, err := os.Stat(filepath.Join(path, "bin", "sh")); err == nil {
			// A bare tree: versions sit beside it if at all.
			return path, filepath.Join(filepath.Dir(path), "versions.json"), nil
		}
		return "", "", fmt.Errorf("rootfs %s: %w", path, ErrNotBuilt)
	}
	if cache == "" {
		cache = DefaultCache
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
		return "", "", ErrNotBuilt
	}
	return filepath.Join(best, "rootfs"), filepath.Join(best, "versions.json"), nil
}
