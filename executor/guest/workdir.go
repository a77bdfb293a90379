package guest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// maxRemoveSteps bounds the walk of removeWork (one step is one folder
// entered or left), so a tree it cannot shrink never loops forever.
const maxRemoveSteps = 1 << 22

// removeWork removes a call's work folder and everything the call left in
// it. It must run only once no process of the call is left.
//
// The folder is the user's, and so is whatever the program made there,
// folders without any permission included. The guest has CAP_CHOWN but
// not CAP_DAC_OVERRIDE, so it cannot read such a folder; it takes each
// folder back (owner itself, mode 0700) before it looks inside. A folder
// left behind would hold its bytes in the staging area for good, and the
// user would have a way to fill it across calls.
//
// The walk holds two descriptors at most and a stack of names, so a tree
// nested deeper than PATH_MAX or the descriptor limit goes too; it never
// follows a symlink.
func removeWork(dir string) error {
	parent, name := filepath.Split(filepath.Clean(dir))
	pfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", parent, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unix.Unlinkat(pfd, name, 0)
	}
	cur, err := enterDir(pfd, name)
	if err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	var stack []string // names from dir down to cur
	for steps := 0; ; steps++ {
		if steps > maxRemoveSteps {
			cur.Close()
			return fmt.Errorf("removing %s: still not empty after %d steps", dir, steps)
		}
		sub, err := clearDir(cur)
		if err != nil {
			cur.Close()
			return fmt.Errorf("removing %s: %w", dir, err)
		}
		if sub != "" {
			next, err := enterDir(int(cur.Fd()), sub)
			cur.Close()
			if err != nil {
				return fmt.Errorf("removing %s: %w", dir, err)
			}
			cur, stack = next, append(stack, sub)
			continue
		}
		if len(stack) == 0 {
			cur.Close()
			if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
				if errors.Is(err, unix.ENOTEMPTY) {
					// An entry the listing skipped: go round again.
					if cur, err = enterDir(pfd, name); err == nil {
						continue
					}
				}
				return fmt.Errorf("removing %s: %w", dir, err)
			}
			return nil
		}
		// cur is empty: go up (nothing moves folders now) and remove it.
		fd, err := unix.Openat(int(cur.Fd()), "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		cur.Close()
		if err != nil {
			return fmt.Errorf("removing %s: %w", dir, err)
		}
		cur = os.NewFile(uintptr(fd), "..")
		child := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if err := unix.Unlinkat(int(cur.Fd()), child, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.ENOENT) {
			cur.Close()
			return fmt.Errorf("removing %s: %w", dir, err)
		}
	}
}

// enterDir takes the folder name in dirfd back (the guest's own, mode
// 0700) and opens it, refusing anything but a folder.
func enterDir(dirfd int, name string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, unix.ENOTDIR
	}
	if err := unix.Fchownat(dirfd, name, os.Geteuid(), os.Getegid(), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, err
	}
	// fchmodat follows a symlink, but name was a folder a moment ago and
	// no process but the guest is left to swap it.
	if err := unix.Fchmodat(dirfd, name, 0o700, 0); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// clearDir unlinks every entry of d but folders and returns the name of
// the first folder it finds ("" once there is none).
func clearDir(d *os.File) (string, error) {
	if _, err := d.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	fd := int(d.Fd())
	for {
		names, err := d.Readdirnames(1024)
		for _, n := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return "", err
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				return n, nil
			}
			if err := unix.Unlinkat(fd, n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return "", err
			}
		}
		if errors.Is(err, io.EOF) {
			return "", nil
		}
		if err != nil {
			return "", err
		}
	}
}
