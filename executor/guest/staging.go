package guest

import (
	"encoding/hex"
	"errors"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// StagingPrefix starts the name of the temporary file an upload writes
// beside its target (putFile): StagingPrefix and 16 lowercase hex digits.
// Listings hide such names; the guest removes the ones left over when it
// starts (SweepStaging).
const StagingPrefix = ".sbx-upload-"

// stagingHexLen is the length of the random part of a staging name.
const stagingHexLen = 16

// newStagingName returns a fresh staging file name.
func newStagingName(rnd [stagingHexLen / 2]byte) string {
	return StagingPrefix + hex.EncodeToString(rnd[:])
}

// IsStagingName reports whether name is exactly a staging file's name
// (newStagingName), and nothing that merely starts like one.
func IsStagingName(name string) bool {
	h, ok := strings.CutPrefix(name, StagingPrefix)
	if !ok || len(h) != stagingHexLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// SweepResult says what SweepStaging removed and whether it looked at
// everything.
type SweepResult struct {
	Files    int   // staging files removed
	Bytes    int64 // the disk space they held
	Complete bool  // the whole tree was looked at (no budget or depth cut)
}

// sweepHome runs SweepStaging on the home as the home's owner (pid 1 has
// no CAP_DAC_OVERRIDE: as root it may not remove files from the user's
// folders), on a thread of its own that ends with it, and waits for it.
func (h *host) sweepHome(deadline time.Time) (SweepResult, error) {
	type answer struct {
		res SweepResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		var a answer
		var st unix.Stat_t
		if a.err = unix.Lstat(h.homeRoot, &st); a.err == nil {
			a.err = h.userRunner(int(st.Uid), int(st.Gid))(func() error {
				var err error
				a.res, err = SweepStaging(h.homeRoot, deadline)
				return err
			})
		}
		done <- a
	}()
	a := <-done
	return a.res, a.err
}

// sweepMaxDepth bounds how deep SweepStaging descends (a descriptor is
// open for every level).
const sweepMaxDepth = 128

// SweepStaging removes the staging files of uploads that never ended from
// the tree under root: the sandbox (or the server) was killed while one
// was written, and nothing else would ever remove it. The guest runs it
// when it starts, before it serves any upload, so every staging file it
// finds is stale. It never follows a symlink (every step is relative to
// an open directory, O_NOFOLLOW), never leaves root's file system, and
// removes only regular files whose name is exactly a staging name. It
// stops, Complete false, when deadline passes; the zero deadline is none.
func SweepStaging(root string, deadline time.Time) (SweepResult, error) {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return SweepResult{}, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return SweepResult{}, err
	}
	sw := &sweeper{dev: st.Dev, deadline: deadline, res: SweepResult{Complete: true}}
	err = sw.dir(fd, 0) // closes fd
	return sw.res, err
}

type sweeper struct {
	dev      uint64
	deadline time.Time
	res      SweepResult
}

func (sw *sweeper) expired() bool {
	if !sw.deadline.IsZero() && time.Now().After(sw.deadline) {
		sw.res.Complete = false
		return true
	}
	return false
}

// dir sweeps the open directory fd (and closes it). Errors on single
// entries are skipped: a sweep removes what it can.
func (sw *sweeper) dir(fd, depth int) error {
	d := os.NewFile(uintptr(fd), "dir")
	defer d.Close()
	for {
		if sw.expired() {
			return nil
		}
		ents, err := d.ReadDir(256)
		for _, ent := range ents {
			name := ent.Name()
			typ := ent.Type() // Go looks an unknown d_type up with lstat
			switch {
			case IsStagingName(name):
				sw.removeStaging(fd, name)
			case typ.IsDir():
				if depth+1 >= sweepMaxDepth {
					sw.res.Complete = false
					continue
				}
				sfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					continue // gone, or not a directory any more
				}
				var st unix.Stat_t
				if err := unix.Fstat(sfd, &st); err != nil || st.Dev != sw.dev {
					unix.Close(sfd) // another file system mounted here
					continue
				}
				if err := sw.dir(sfd, depth+1); err != nil {
					return err
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// removeStaging removes the staging file name in directory fd when it is
// a regular file.
func (sw *sweeper) removeStaging(fd int, name string) {
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	if err := unix.Unlinkat(fd, name, 0); err != nil {
		return
	}
	sw.res.Files++
	sw.res.Bytes += st.Blocks * 512
}
