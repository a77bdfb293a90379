package executor

import "github.com/sandboxapi/sandboxapi/rootfs"

// DefaultRootfsCache is where `sandboxapi rootfs build` puts builds, one
// folder per recipe hash.
const DefaultRootfsCache = rootfs.DefaultCache

// ErrNoRootfs is returned when no complete rootfs build exists.
var ErrNoRootfs = rootfs.ErrNotBuilt

// FindRootfs returns the rootfs tree and versions file of a build folder
// (one holding .complete), or of the newest complete build under cache
// (DefaultRootfsCache when empty); see rootfs.Find.
func FindRootfs(path, cache string) (tree, versions string, err error) {
	return rootfs.Find(path, cache)
}
