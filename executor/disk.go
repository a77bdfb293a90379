package executor

import (
	"path/filepath"
	"strings"

	"github.com/sandboxapi/sandboxapi/executor/host"
	"golang.org/x/sys/unix"
)

// HomeUsage reports how much of session id's home is used and its size,
// in bytes, from statfs on the home's mount point (the host never walks
// the home itself). ok is false when the session has no mounted home
// here (ended, another node's, or an id that is not a plain name).
func (e *Executor) HomeUsage(id string) (used, size int64, ok bool) {
	if id == "" || id != filepath.Base(id) || strings.HasPrefix(id, ".") {
		return 0, 0, false
	}
	mnt := host.HomeMount(e.boxes.dir(id))
	var st, parent unix.Statfs_t
	if unix.Statfs(mnt, &st) != nil || unix.Statfs(filepath.Dir(mnt), &parent) != nil || st.Fsid == parent.Fsid {
		return 0, 0, false // not mounted: the folder's own file system
	}
	bs := int64(st.Bsize)
	return (int64(st.Blocks) - int64(st.Bfree)) * bs, int64(st.Blocks) * bs, true
}
