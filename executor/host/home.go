package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
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

func HomeImage(dir string) string { return filepath.Join(dir, "home.img") }
func HomeMount(dir string) string { return filepath.Join(dir, "home") }

// Home is where one session's home lives: its image in imgDir, under
// executor.homes_dir (which other nodes may share), and its node-local
// folder dir (the mount point, the bundle, the network record). With the
// default homes_dir both are one folder. The zero value is no home.
type Home struct {
	Dir    string // <data_dir>/sessions/<id>
	ImgDir string // <homes_dir>/<id>
}

func (h Home) Image() string { return HomeImage(h.ImgDir) }
func (h Home) Mount() string { return HomeMount(h.Dir) }

// Apart reports whether the image lives apart from the node-local folder.
func (h Home) Apart() bool { return h.ImgDir != h.Dir }

// MakeHome creates, formats and mounts a home image. The node-local
// folder is made first: an image in a shared homes_dir with no folder of
// this node beside it is never this node's to remove (see the
// executor's reconcile).
func MakeHome(ctx context.Context, h Home, size int64) (err error) {
	if err := os.MkdirAll(h.Mount(), 0o700); err != nil {
		return fmt.Errorf("creating home folder: %w", err)
	}
	if err := os.MkdirAll(h.ImgDir, 0o700); err != nil {
		return fmt.Errorf("creating home image folder: %w", err)
	}
	img := h.Image()
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
	if err := RunTool(ctx, "mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", owner, img); err != nil {
		return err
	}
	if err := MountHome(ctx, h); err != nil {
		return err
	}
	// The host touches only this fresh file system, before any sandbox can.
	_ = os.Remove(filepath.Join(h.Mount(), "lost+found"))
	return nil
}

// ErrImageBusy is returned when a home image is attached to a loop device
// that is not this home's mount: another node on this host mounted it, or
// a detached mount still holds it. Mounting it again would corrupt it.
var ErrImageBusy = errors.New("home image is in use by another mount")

// ImageBusyWait is how long MountHome waits for a loop device still on an
// image to go (the kernel frees one a moment after its last unmount).
const ImageBusyWait = 5 * time.Second

// MountHome loop-mounts the home image at its mount point; a home that is
// mounted already (a hibernation could not unmount it) is used as it is,
// so that one image is never mounted twice. An image that a loop device
// of this host still holds is waited for, then refused (ErrImageBusy).
func MountHome(ctx context.Context, h Home) error {
	if Mounted(h.Mount()) {
		return nil
	}
	if err := os.MkdirAll(h.Mount(), 0o700); err != nil {
		return fmt.Errorf("creating home folder: %w", err)
	}
	if err := WaitImageFree(ctx, h.Image(), h.Mount(), ImageBusyWait); err != nil {
		return err
	}
	// Loop devices are allocated host-wide: parallel mounts can race for
	// the same free one, so a failed attach is retried.
	for attempt := 0; ; attempt++ {
		err := RunTool(ctx, "mount", "-t", "ext4", "-o", "loop,nosuid,nodev,noatime", h.Image(), h.Mount())
		if err == nil {
			return nil
		}
		if attempt == 2 || ctx.Err() != nil {
			return err
		}
		time.Sleep(time.Duration(50*(attempt+1)) * time.Millisecond)
	}
}

// WaitImageFree waits up to limit until no loop device of this host is
// backed by img, else ErrImageBusy.
func WaitImageFree(ctx context.Context, img, mnt string, limit time.Duration) error {
	if devs := releaseLoops(ctx, img, mnt, time.Now().Add(limit)); len(devs) > 0 {
		return fmt.Errorf("mounting %s: %w (%s)", img, ErrImageBusy, strings.Join(devs, ", "))
	}
	return nil
}

// releaseLoops waits, up to deadline, until no loop device of this host
// is backed by img, and returns the devices still there then. The kernel
// frees a device a moment after its last unmount; a copy of the mount at
// mnt that another mount namespace holds keeps it, so from evictAfter on
// such copies are unmounted (evictCopies), once.
func releaseLoops(ctx context.Context, img, mnt string, deadline time.Time) []string {
	start := time.Now()
	evicted := false
	for {
		devs := LoopDevices(img)
		if len(devs) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return devs
		}
		if !evicted && time.Since(start) >= evictAfter {
			evicted = true
			for _, d := range devs {
				evictCopies(ctx, mnt, d)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// evictAfter is how long a loop device may stay on an image after its
// unmount before copies of the mount elsewhere are looked for.
const evictAfter = 200 * time.Millisecond

// dropLoopWait bounds how long deleting a home waits for its loop device
// to go; one held past it goes when its holder does.
const dropLoopWait = 2 * time.Second

// evictCopies lazily unmounts the copies of loop device dev's ("loop3")
// mount at mnt that other mount namespaces of this host hold, and says
// how many it found. A mount namespace made while a home was mounted here
// copies its mount: a runsc gofer or sandbox of another session starting
// at that moment holds one until it pivots into its own root, an
// operator's `unshare -m` for its whole life. The copy keeps the loop
// device, and so the image, busy after the home's unmount here: the
// session could not be resumed (or taken over) until it went. Only a copy
// of the same device at mnt's own path is touched; another node of this
// host that mounted the image (at its own path) is not, and its image
// stays busy.
func evictCopies(ctx context.Context, mnt, dev string) int {
	var st unix.Stat_t
	if mnt == "" || unix.Stat("/dev/"+dev, &st) != nil {
		return 0
	}
	want := fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev)))
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return 0
	}
	procs, _ := os.ReadDir("/proc")
	seen := map[string]bool{self: true}
	n := 0
	for _, p := range procs {
		pid := p.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		ns, err := os.Readlink("/proc/" + pid + "/ns/mnt")
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		if !holdsMount("/proc/"+pid+"/mountinfo", want, mnt) {
			continue
		}
		if err := RunTool(ctx, "nsenter", "--target", pid, "--mount", "--", "umount", "--lazy", "--", mnt); err == nil {
			n++
		}
	}
	return n
}

// holdsMount reports whether the mountinfo file lists device majmin
// ("7:3") mounted at mnt.
func holdsMount(mountinfo, majmin, mnt string) bool {
	b, err := os.ReadFile(mountinfo)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[2] == majmin && UnescapeMount(f[4]) == mnt {
			return true
		}
	}
	return false
}

// SettleImage waits, up to deadline, until no loop device of this host is
// backed by img any more (the kernel frees one a moment after its last
// unmount, and only then lets go of the image; copies of its mount at mnt
// in other mount namespaces are unmounted), then flushes img to its
// storage: on a shared homes_dir another node reads it next.
func SettleImage(img, mnt string, deadline time.Time) error {
	if devs := releaseLoops(context.Background(), img, mnt, deadline); len(devs) > 0 {
		return fmt.Errorf("settling %s: %w (%s)", img, ErrImageBusy, strings.Join(devs, ", "))
	}
	f, err := os.Open(img)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("settling %s: %w", img, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("settling %s: %w", img, err)
	}
	return nil
}

// LoopBacking is the file behind loop device dev ("/dev/loop7"), "" when
// it has none.
func LoopBacking(dev string) string {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// LoopDevices lists the loop devices of this host backed by img (from
// /sys/block/loop*/loop/backing_file, which names the file as the kernel
// resolved it).
func LoopDevices(img string) []string {
	want := map[string]bool{img: true}
	if r, err := filepath.EvalSymlinks(img); err == nil {
		want[r] = true
	}
	paths, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if want[strings.TrimSpace(string(b))] {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(p))))
		}
	}
	return out
}

// UnmountHome unmounts dir's home (which syncs it to the image and frees
// the loop device), retrying while something still holds it. It never
// detaches lazily: a home must be off its image before the image is
// mounted again. Not mounted is fine.
func UnmountHome(dir string) error {
	mnt := HomeMount(dir)
	dev := mountSource(mnt)
	err := unmountOnce(mnt)
	if err == nil && strings.HasPrefix(dev, "/dev/loop") {
		// The kernel frees the loop device a moment after the last
		// unmount: the home is off its image only once it has.
		waitLoopFree(strings.TrimPrefix(dev, "/dev/"), 2*time.Second)
	}
	return err
}

// waitLoopFree waits up to limit until loop device name (loop7) has no
// backing file.
func waitLoopFree(name string, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for {
		if _, err := os.Stat("/sys/block/" + name + "/loop/backing_file"); err != nil || time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mountSource is the source of the mount at path (/dev/loop7 for a
// home), "" when nothing is mounted there.
func mountSource(path string) string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	src := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || UnescapeMount(f[4]) != path {
			continue
		}
		// After the optional fields: "-", the fs type, the source.
		for i := 5; i+2 < len(f); i++ {
			if f[i] == "-" {
				src = UnescapeMount(f[i+2]) // the last mount there wins
				break
			}
		}
	}
	return src
}

// unmountOnce unmounts mnt, retrying while something still holds it.
func unmountOnce(mnt string) error {
	var err error
	for attempt := 0; attempt < 20 && Mounted(mnt); attempt++ {
		if err = unix.Unmount(mnt, 0); err == nil || errors.Is(err, unix.EINVAL) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil && Mounted(mnt) {
		return fmt.Errorf("unmounting %s: %w", mnt, err)
	}
	return nil
}

// FIFREEZE and FITHAW (linux/fs.h: _IOWR('X', 119/120, int)).
const (
	ioctlFIFREEZE = 0xC0045877
	ioctlFITHAW   = 0xC0045878
)

// FreezeHome flushes a mounted home to its image and blocks writes to it
// until ThawHome.
func FreezeHome(mnt string) error {
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.IoctlSetInt(fd, ioctlFIFREEZE, 0)
}

// ThawHome undoes FreezeHome on dir's home; a home that is not frozen or
// not mounted is fine (a crash during a fork may leave one frozen).
func ThawHome(dir string) {
	mnt := HomeMount(dir)
	if !Mounted(mnt) {
		return
	}
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	_ = unix.IoctlSetInt(fd, ioctlFITHAW, 0)
}

// CopyImage copies a home image without copying unused blocks: a reflink
// where the file system has them (btrfs, xfs), else a sparse copy (holes
// found with SEEK_DATA/SEEK_HOLE). dst must not exist.
func CopyImage(ctx context.Context, src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("copying home image: %s exists", dst)
	}
	return RunTool(ctx, "cp", "--reflink=auto", "--sparse=always", "--", src, dst)
}

// DropHome unmounts the home (lazily if something still holds it) and
// removes its image and its node-local folder, the image first (see
// MakeHome). A home that was never mounted is fine.
func DropHome(ctx context.Context, h Home) error {
	mnt := h.Mount()
	if Mounted(mnt) {
		if err := unix.Unmount(mnt, 0); err != nil {
			if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmounting %s: %w", mnt, err)
			}
		}
	}
	// Its loop device goes with it: a copy of the mount that another
	// mount namespace made meanwhile (a sandbox of another session
	// starting) would hold the device after the image is gone.
	releaseLoops(ctx, h.Image(), mnt, time.Now().Add(dropLoopWait))
	if h.Apart() {
		if err := os.RemoveAll(h.ImgDir); err != nil {
			return fmt.Errorf("removing %s: %w", h.ImgDir, err)
		}
	}
	if err := os.RemoveAll(h.Dir); err != nil {
		return fmt.Errorf("removing %s: %w", h.Dir, err)
	}
	return nil
}

// DropLocal removes the node-local files of a home this node lets go of
// (another node owns the session now, or may): its image stays for the
// new owner. The mount must be gone already; a mount point still mounted
// is left alone, and so is the image when it lives in the same folder.
func DropLocal(h Home) error {
	if Mounted(h.Mount()) {
		return fmt.Errorf("removing %s: home still mounted", h.Dir)
	}
	if h.Apart() {
		return os.RemoveAll(h.Dir)
	}
	var errs []error
	for _, name := range []string{"bundle", "network.json", "resolv.conf", "ca-certificates.crt"} {
		if err := os.RemoveAll(filepath.Join(h.Dir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Mounted reports whether path is a mount point, from /proc/self/mountinfo.
func Mounted(path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && UnescapeMount(f[4]) == path {
			return true
		}
	}
	return false
}

func UnescapeMount(s string) string {
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

func RunTool(ctx context.Context, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("running %s: %s: %w", name, strings.TrimSpace(out.String()), err)
	}
	return nil
}

// MountedHome is a mounted home: its mount point and its source (the loop
// device).
type MountedHome struct {
	Point, Source string
}

// HomeMounts lists the homes mounted at <homes>/<id>/home in this mount
// namespace.
func HomeMounts(homes string) []MountedHome {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	homes = filepath.Clean(homes)
	var out []MountedHome
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		p := UnescapeMount(f[4])
		if filepath.Base(p) != "home" || filepath.Dir(filepath.Dir(p)) != homes {
			continue
		}
		m := MountedHome{Point: p}
		// "... - fstype source options" follows the optional fields.
		for i := 5; i+2 < len(f); i++ {
			if f[i] == "-" {
				m.Source = UnescapeMount(f[i+2])
				break
			}
		}
		out = append(out, m)
	}
	return out
}
