package guest

// The file modes (put, get, list) move files in and out of the home. The
// host starts them with `runsc exec --user 1000:1000`, so the sandbox
// kernel checks every access against the sandbox user's own rights, and
// the walk below never follows a symlink: each directory is opened with
// openat(O_NOFOLLOW|O_DIRECTORY) relative to the one before, starting at
// Home, and the last component is checked with fstatat(AT_SYMLINK_NOFOLLOW)
// and opened with O_NOFOLLOW|O_NONBLOCK (a FIFO cannot stall the call).
//
// Wire format: stdin starts with the same length-prefixed JSON header as
// "run" (a FileRequest). For put, the content follows in frames: a 4-byte
// big-endian length and that many bytes, ended by a zero-length frame; a
// stream that stops before that frame is an aborted upload and leaves
// nothing behind. The result is one JSON line (a FileResult) on fd 3,
// written before a get streams exactly Info.Size bytes to stdout.

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxFrame bounds one frame of put content.
const MaxFrame = 1 << 20

// FileRequest is the header of the put, get and list modes.
type FileRequest struct {
	Path string `json:"path"`
	// Max is the largest file in bytes (put, get) or the most entries (list).
	Max int64 `json:"max"`
	// Op and FSArgs are a `guest fsop`'s operation and arguments (fsops.go).
	Op string `json:"op,omitempty"`
	FSArgs
}

// Result codes of the file modes; "" is success.
const (
	CodeInvalid    = "invalid"
	CodeNotFound   = "not_found"
	CodeNotRegular = "not_regular"
	CodeNotDir     = "not_dir"
	CodeSymlink    = "symlink"
	CodeTooLarge   = "too_large"
	CodeNoSpace    = "no_space"
	CodePermission = "permission"
	CodeAborted    = "aborted"
	CodeIO         = "io"
)

// FileEntry describes one file, never following a symlink.
type FileEntry struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // permission and setuid/setgid/sticky bits
	MTimeNS int64  `json:"mtime_ns"`
	Type    string `json:"type"` // file, dir, symlink, fifo, socket, char_device, block_device
	// Target is a symlink's text, as stored (never resolved); stat, move
	// and deep listings fill it.
	Target string `json:"target,omitempty"`
}

// FileResult is the outcome of a file mode.
type FileResult struct {
	Code      string      `json:"code,omitempty"`
	Error     string      `json:"error,omitempty"`
	Info      *FileEntry  `json:"info,omitempty"`
	Entries   []FileEntry `json:"entries,omitempty"`
	Truncated bool        `json:"truncated,omitempty"`
}

// EncodeFile frames a FileRequest for the guest's stdin.
func EncodeFile(req *FileRequest) ([]byte, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	out := strconv.AppendInt(nil, int64(len(b)), 10)
	out = append(out, '\n')
	return append(out, b...), nil
}

// fileFail is a FileResult error.
type fileFail struct{ code, msg string }

func (f *fileFail) Error() string { return f.msg }

func failf(code, format string, args ...any) *fileFail {
	return &fileFail{code: code, msg: fmt.Sprintf(format, args...)}
}

// fileMode runs one of put, get, list and fsop and reports on fd 3.
func fileMode(mode string) int {
	h := newHost()
	out := os.NewFile(3, "result")
	report := func(res FileResult) bool {
		if out == nil {
			return false
		}
		b, _ := json.Marshal(res)
		_, err := out.Write(append(b, '\n'))
		_ = out.Close()
		out = nil
		return err == nil
	}
	// Defence in depth: no other process runs while a file call holds the
	// session, but a same-uid process must not be able to ptrace this one
	// or reach its descriptors through /proc anyway.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	req, err := readFileRequest(os.Stdin)
	if err != nil {
		report(FileResult{Code: CodeInvalid, Error: err.Error()})
		return 1
	}
	comps, err := CleanPath(req.Path)
	if err != nil {
		report(FileResult{Code: CodeInvalid, Error: err.Error()})
		return 1
	}
	var res FileResult
	switch mode {
	case "put":
		in := bufio.NewReaderSize(os.Stdin, 64<<10)
		res.Info, err = h.putFile(comps, func(w io.Writer, what string) error { return copyFrames(w, in, req.Max, what) }, asIs)
	case "get":
		var f *os.File
		f, res.Info, err = h.openRegular(comps, req.Max)
		if err == nil {
			defer f.Close()
			if !report(res) {
				return 1
			}
			// Exactly Size bytes: the host knows a short stream from a
			// finished one.
			if _, err := io.CopyN(os.Stdout, f, res.Info.Size); err != nil {
				fmt.Fprintln(os.Stderr, "guest: sending file:", err)
				return 1
			}
			return 0
		}
	case "list":
		res.Entries, res.Truncated, err = h.listDir(comps, int(req.Max))
	case "fsop":
		res, err = h.fsOp(req.Op, comps, req.FSArgs, req.Max, asIs)
	default:
		err = failf(CodeInvalid, "unknown file mode %q", mode)
	}
	if err != nil {
		var ff *fileFail
		if !errors.As(err, &ff) {
			ff = &fileFail{code: CodeIO, msg: err.Error()}
		}
		res = FileResult{Code: ff.code, Error: ff.msg}
	}
	if !report(res) {
		return 1
	}
	return 0
}

func readFileRequest(r io.Reader) (*FileRequest, error) {
	var n int
	buf := make([]byte, 1)
	for digits := 0; ; digits++ {
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("reading header length: %w", err)
		}
		if buf[0] == '\n' && digits > 0 {
			break
		}
		if buf[0] < '0' || buf[0] > '9' || digits >= 7 {
			return nil, errors.New("reading header length: malformed")
		}
		n = n*10 + int(buf[0]-'0')
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("reading header: %w", err)
	}
	var req FileRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("decoding header: %w", err)
	}
	return &req, nil
}

// classify turns an errno from the walk into a result code.
func classify(what string, err error) *fileFail {
	var ff *fileFail
	if errors.As(err, &ff) {
		return ff
	}
	switch {
	case errors.Is(err, unix.ENOENT):
		return failf(CodeNotFound, "%s does not exist", what)
	case errors.Is(err, unix.ELOOP):
		return failf(CodeSymlink, "%s is a symbolic link; links are not followed", what)
	case errors.Is(err, unix.ENOTDIR):
		return failf(CodeNotDir, "%s is not a directory", what)
	case errors.Is(err, unix.EISDIR):
		return failf(CodeNotRegular, "%s is a directory", what)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EROFS):
		return failf(CodePermission, "%s: permission denied", what)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return failf(CodeNoSpace, "no space left in %s", Home)
	case errors.Is(err, unix.ENOTEMPTY):
		return failf(CodeExists, "%s is a folder that is not empty", what)
	case errors.Is(err, unix.ENAMETOOLONG):
		return failf(CodeInvalid, "%s: name too long", what)
	}
	return failf(CodeIO, "%s: %v", what, err)
}

// typeOf names the file type in a stat mode.
func typeOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "char_device"
	case unix.S_IFBLK:
		return "block_device"
	}
	return "unknown"
}

func entry(name string, st *unix.Stat_t) FileEntry {
	return FileEntry{Name: name, Size: st.Size, Mode: st.Mode & 0o7777, MTimeNS: st.Mtim.Nano(), Type: typeOf(st.Mode)}
}

// walk opens the directory named by comps (below Home) without following
// any symlink; with create, missing directories are made (mode 0755).
//
// O_NOFOLLOW alone is not enough: gVisor follows a final symlink when
// O_DIRECTORY is set as well (measured: a link to /etc opened fine). So
// each component is first looked at with fstatat(AT_SYMLINK_NOFOLLOW),
// must be a directory, and the opened descriptor must be that very
// directory (same device and inode).
func (h *host) walk(comps []string, create bool) (int, error) {
	fd, err := openDirAt(unix.AT_FDCWD, h.homeRoot, Home, false)
	if err != nil {
		return -1, err
	}
	for i, c := range comps {
		nfd, err := openDirAt(fd, c, JoinHome(comps[:i+1]), create)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = nfd
	}
	return fd, nil
}

// openDirAt opens the directory name in dirfd, refusing symlinks.
func openDirAt(dirfd int, name, what string, create bool) (int, error) {
	var before unix.Stat_t
	err := unix.Fstatat(dirfd, name, &before, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) && create {
		if merr := unix.Mkdirat(dirfd, name, 0o755); merr != nil && !errors.Is(merr, unix.EEXIST) {
			return -1, classify(what, merr)
		}
		err = unix.Fstatat(dirfd, name, &before, unix.AT_SYMLINK_NOFOLLOW)
	}
	if err != nil {
		return -1, classify(what, err)
	}
	switch before.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
	case unix.S_IFLNK:
		return -1, classify(what, unix.ELOOP)
	default:
		return -1, classify(what, unix.ENOTDIR)
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, classify(what, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, classify(what, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Dev != before.Dev || st.Ino != before.Ino {
		unix.Close(fd)
		return -1, failf(CodeSymlink, "%s changed while being opened", what)
	}
	return fd, nil
}

// checkLeaf refuses anything at name in dirfd but a regular file; a
// missing file is reported as such.
func checkLeaf(dirfd int, name, what string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, classify(what, err)
	}
	switch t := st.Mode & unix.S_IFMT; t {
	case unix.S_IFREG:
		return &st, nil
	case unix.S_IFLNK:
		return nil, classify(what, unix.ELOOP)
	case unix.S_IFDIR:
		return nil, failf(CodeNotRegular, "%s is a directory", what)
	default:
		return nil, failf(CodeNotRegular, "%s is not a regular file (%s)", what, typeOf(st.Mode))
	}
}

// openRegular opens the regular file at comps for reading.
func (h *host) openRegular(comps []string, max int64) (*os.File, *FileEntry, error) {
	if len(comps) == 0 {
		return nil, nil, failf(CodeNotRegular, "%s is a directory", Home)
	}
	what := JoinHome(comps)
	dirfd, err := h.walk(comps[:len(comps)-1], false)
	if err != nil {
		return nil, nil, err
	}
	defer unix.Close(dirfd)
	name := comps[len(comps)-1]
	before, err := checkLeaf(dirfd, name, what)
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, classify(what, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, nil, classify(what, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Ino != before.Ino || st.Dev != before.Dev {
		unix.Close(fd)
		return nil, nil, failf(CodeNotRegular, "%s changed while being opened", what)
	}
	if max > 0 && st.Size > max {
		unix.Close(fd)
		return nil, nil, failf(CodeTooLarge, "%s is %d bytes; the limit is %d", what, st.Size, max)
	}
	e := entry(name, &st)
	return os.NewFile(uintptr(fd), what), &e, nil
}

// putFile writes what fill copies to comps, atomically: into a fresh
// temporary file beside it, renamed over the target only once fill has
// returned nil (the whole upload has arrived). An existing target must be
// a regular file; its permission bits are kept. Every step that resolves
// a name runs inside asUser; fill only writes to the open file.
func (h *host) putFile(comps []string, fill func(w io.Writer, what string) error, asUser func(func() error) error) (*FileEntry, error) {
	if len(comps) == 0 {
		return nil, failf(CodeNotRegular, "%s is a directory", Home)
	}
	what := JoinHome(comps)
	name := comps[len(comps)-1]
	dirfd := -1
	var f *os.File
	tmp := ""
	err := asUser(func() error {
		var err error
		dirfd, err = h.walk(comps[:len(comps)-1], true)
		if err != nil {
			return err
		}
		perm := uint32(0o644)
		if st, err := checkLeaf(dirfd, name, what); err == nil {
			perm = st.Mode & 0o777
		} else if ff := classify(what, err); ff.code != CodeNotFound {
			return ff
		}
		var rnd [stagingHexLen / 2]byte
		_, _ = rand.Read(rnd[:])
		tmp = newStagingName(rnd)
		fd, err := unix.Openat(dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, perm)
		if err != nil {
			tmp = ""
			return classify(what, err)
		}
		f = os.NewFile(uintptr(fd), tmp)
		if err := unix.Fchmod(fd, perm); err != nil { // umask may have narrowed it
			return classify(what, err)
		}
		return nil
	})
	committed := false
	defer func() {
		if f != nil {
			f.Close()
		}
		if tmp != "" && !committed {
			_ = asUser(func() error { return unix.Unlinkat(dirfd, tmp, 0) })
		}
		if dirfd >= 0 {
			unix.Close(dirfd)
		}
	}()
	if err != nil {
		return nil, err
	}
	if err := fill(f, what); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	err = asUser(func() error {
		if err := unix.Renameat(dirfd, tmp, dirfd, name); err != nil {
			return classify(what, err)
		}
		committed = true
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return classify(what, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	e := entry(name, &st)
	return &e, nil
}

// asIs runs f with the caller's own credentials (the file modes already
// run as the user).
func asIs(f func() error) error { return f() }

// copyFrames copies framed content to w until the end frame.
func copyFrames(w io.Writer, r io.Reader, max int64, what string) error {
	var hdr [4]byte
	var total int64
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return failf(CodeAborted, "upload of %s ended early", what)
		}
		n := int64(binary.BigEndian.Uint32(hdr[:]))
		if n == 0 {
			return nil
		}
		if n > MaxFrame {
			return failf(CodeInvalid, "frame of %d bytes", n)
		}
		total += n
		if max > 0 && total > max {
			return failf(CodeTooLarge, "upload to %s is over the limit of %d bytes", what, max)
		}
		if _, err := io.CopyN(w, r, n); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return failf(CodeAborted, "upload of %s ended early", what)
			}
			return classify(what, err)
		}
	}
}

// listDir lists the directory at comps without following symlinks; at
// most max entries (sorted by name), the rest reported as truncated.
func (h *host) listDir(comps []string, max int) ([]FileEntry, bool, error) {
	fd, err := h.walk(comps, false)
	if err != nil {
		return nil, false, err
	}
	d := os.NewFile(uintptr(fd), JoinHome(comps))
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, false, classify(JoinHome(comps), err)
	}
	sort.Strings(names)
	truncated := false
	if max > 0 && len(names) > max {
		names, truncated = names[:max], true
	}
	out := make([]FileEntry, 0, len(names))
	for _, n := range names {
		if strings.HasPrefix(n, StagingPrefix) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone since the read
		}
		out = append(out, entry(n, &st))
	}
	return out, truncated, nil
}
