package executor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A home is a per-session ext4 image, loop-mounted on the host and bound
// into the sandbox at /home/sandbox. Its size is the session's disk limit:
// filling it gives ENOSPC inside, never a full host disk.

func homeImage(dir string) string { return filepath.Join(dir, "home.img") }
func homeMount(dir string) string { return filepath.Join(dir, "home") }

// makeHome creates, formats and mounts a home image in dir.
func makeHome(ctx context.Context, dir string, size int64) (err error) {
	if err := os.MkdirAll(homeMount(dir), 0o700); err != nil {
		return fmt.Errorf("creating home folder: %w", err)
	}
	img := homeImage(dir)
	f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("creating home image: %w", err)
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sizing home image: %w", err)
	}
	owner := fmt.Sprintf("root_owner=%d:%d,lazy_itable_init=1,lazy_journal_init=1", SandboxUID, SandboxUID)
	if err := runTool(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", owner, img); err != nil {
		return err
	}
	if err := mountHome(ctx, dir); err != nil {
		return err
	}
	// The host touches only this fresh file system, before any sandbox can.
	_ = os.Remove(filepath.Join(homeMount(dir), "lost+found"))
	return nil
}

// mountHome loop-mounts dir's home image at its mount point; a home that
// is mounted already (a hibernation could not unmount it) is used as it is,
// so that one image is never mounted twice.
func mountHome(ctx context.Context, dir string) error {
	if mounted(homeMount(dir)) {
		return nil
	}
	if err := os.MkdirAll(homeMount(dir), 0o700); err != nil {
		return fmt.Errorf("creating home folder: %w", err)
	}
	// Loop devices are allocated host-wide: parallel mounts can race for
	// the same free one, so a failed attach is retried.
	for attempt := 0; ; attempt++ {
		err := runTool(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", homeImage(dir), homeMount(dir))
		if err == nil {
			return nil
		}
		if attempt == 2 || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(50*(attempt+1)) * time.Millisecond)
	}
}

// unmountHome unmounts dir's home (which syncs it to the image and frees
// the loop device), retrying while something still holds it. It never
// detaches lazily: a home must be off its image before the image is
// mounted again. Not mounted is fine.
func unmountHome(dir string) error {
	mnt := homeMount(dir)
	var err error
	for attempt := 0; attempt < 20 && mounted(mnt); attempt++ {
		if err = unix.Unmount(mnt, 0); err == nil || errors.Is(err, unix.EINVAL) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil && mounted(mnt) {
		return fmt.Errorf("unmounting %s: %w", mnt, err)
	}
	return nil
}

// FIFREEZE and FITHAW (linux/fs.h: _IOWR('X', 119/120, int)).
const (
	ioctlFIFREEZE = 0xC0045877
	ioctlFITHAW   = 0xC0045878
)

// freezeHome flushes a mounted home to its image and blocks writes to it
// until thawHome.
func freezeHome(mnt string) error {
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.IoctlSetInt(fd, ioctlFIFREEZE, 0)
}

// thawHome undoes freezeHome on dir's home; a home that is not frozen or
// not mounted is fine (a crash during a fork may leave one frozen).
func thawHome(dir string) {
	mnt := homeMount(dir)
	if !mounted(mnt) {
		return
	}
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	_ = unix.IoctlSetInt(fd, ioctlFITHAW, 0)
}

// copyImage copies a home image without copying unused blocks: a reflink
// where the file system has them (btrfs, xfs), else a sparse copy (holes
// found with SEEK_DATA/SEEK_HOLE). dst must not exist.
func copyImage(ctx context.Context, src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("copying home image: %s exists", dst)
	}
	return runTool(ctx, "cp", "--reflink=auto", "--sparse=always", "--", src, dst)
}

// dropHome unmounts the home (lazily if something still holds it) and
// removes dir. A home that was never mounted is fine.
func dropHome(ctx context.Context, dir string) error {
	mnt := homeMount(dir)
	if mounted(mnt) {
		if err := unix.Unmount(mnt, 0); err != nil {
			if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmounting %s: %w", mnt, err)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// mounted reports whether path is a mount point, from /proc/self/mountinfo.
func mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMount(f[4]) == path {
			return true
		}
	}
	return false
}

func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func runTool(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running %s: %s: %w", name, strings.TrimSpace(out.String()), err)
	}
	return nil
}
