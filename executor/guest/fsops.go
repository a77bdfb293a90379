package guest

// The filesystem operations of the files API besides moving bytes: stat,
// make a folder, move, remove (a file or a whole tree) and list to a
// depth. They run in the guest as the sandbox user, on the same walk as
// put, get and list (files.go): every folder is opened relative to the
// one before with the symlink checks of openDirAt, the last component is
// looked at with fstatat(AT_SYMLINK_NOFOLLOW) and changed with the *at
// calls on the parent's descriptor, so no symlink is ever followed, and
// no path outside Home can be named (CleanPath refuses it first).
//
// Each is one file stream (Op "stat", "mkdir", "move", "remove", "list"
// with Depth) on the agent channel, or one `guest fsop` under runsc exec
// for a sandbox without a channel: no process of the user is started or
// killed, so they neither cost an execute nor disturb the user's runs.

import (
	"errors"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// FSArgs are the arguments of the filesystem operations besides the path.
type FSArgs struct {
	// To is a move's destination (a path as CleanPath takes it).
	To string `json:"to,omitempty"`
	// Overwrite lets a move replace what is at To (a file, or an empty
	// folder when the source is a folder); without it an existing To is
	// CodeExists.
	Overwrite bool `json:"overwrite,omitempty"`
	// Parents makes a mkdir create missing folders above the new one.
	Parents bool `json:"parents,omitempty"`
	// Depth is how many levels a list descends (0 and 1: the folder's
	// own entries); at most MaxListDepth.
	Depth int `json:"depth,omitempty"`
	// Recursive makes a watch follow the folders below the watched one.
	Recursive bool `json:"recursive,omitempty"`
}

const (
	// MaxListDepth bounds a listing's depth.
	MaxListDepth = 64
	// MaxRemoveEntries bounds the entries one remove deletes; a larger
	// tree is refused with CodeTooLarge once that many are gone.
	MaxRemoveEntries = 100000
	// maxRemoveDepth bounds how deep a remove descends (each level holds
	// a descriptor).
	maxRemoveDepth = 512
)

// CodeExists is a mkdir or move whose target is already there (or a
// folder that is not empty where an empty one is needed).
const CodeExists = "exists"

// fsOp runs one filesystem operation; every step resolves names, so all
// of it runs inside asUser.
func (h *host) fsOp(op string, comps []string, args FSArgs, max int64, asUser func(func() error) error) (FileResult, error) {
	var res FileResult
	err := asUser(func() error {
		var err error
		switch op {
		case "stat":
			res.Info, err = h.stat(comps)
		case "mkdir":
			res.Info, err = h.mkdir(comps, args.Parents)
		case "move":
			res.Info, err = h.move(comps, args)
		case "remove":
			err = h.remove(comps)
		case "list":
			res.Entries, res.Truncated, err = h.listTree(comps, args.Depth, int(max))
		default:
			err = failf(CodeInvalid, "unknown file operation %q", op)
		}
		return err
	})
	return res, err
}

// IsFSOp reports whether op is one of fsOp's operations.
func IsFSOp(op string) bool {
	switch op {
	case "stat", "mkdir", "move", "remove", "list":
		return true
	}
	return false
}

// leafEntry describes name in dirfd without following it; a symlink's
// target is read, never resolved.
func leafEntry(dirfd int, name, what string) (*FileEntry, *unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, nil, classify(what, err)
	}
	e := entry(name, &st)
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		e.Target = readLink(dirfd, name)
	}
	return &e, &st, nil
}

// readLink is a symlink's text ("" if it cannot be read).
func readLink(dirfd int, name string) string {
	buf := make([]byte, MaxPathLen)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil || n < 0 {
		return ""
	}
	return string(buf[:n])
}

// stat describes the file at comps; a symlink is described, not followed.
func (h *host) stat(comps []string) (*FileEntry, error) {
	if len(comps) == 0 {
		fd, err := h.walk(nil, false)
		if err != nil {
			return nil, err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, classify(Home, err)
		}
		e := entry(Home[strings.LastIndexByte(Home, '/')+1:], &st)
		return &e, nil
	}
	dirfd, err := h.walk(comps[:len(comps)-1], false)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)
	e, _, err := leafEntry(dirfd, comps[len(comps)-1], JoinHome(comps))
	return e, err
}

// mkdir makes the folder at comps (mode 0755); with parents, missing
// folders above it too. The folder itself must not exist yet: an existing
// one (or anything else there) is CodeExists, so a caller can tell it
// made the folder.
func (h *host) mkdir(comps []string, parents bool) (*FileEntry, error) {
	what := JoinHome(comps)
	if len(comps) == 0 {
		return nil, failf(CodeExists, "%s already exists", Home)
	}
	dirfd, err := h.walk(comps[:len(comps)-1], parents)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dirfd)
	name := comps[len(comps)-1]
	if err := unix.Mkdirat(dirfd, name, 0o755); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, failf(CodeExists, "%s already exists", what)
		}
		return nil, classify(what, err)
	}
	e, _, err := leafEntry(dirfd, name, what)
	return e, err
}

// move renames the file or folder at comps to args.To, making missing
// folders above the destination. The source may be a symlink (the link
// moves; its target is never touched); the destination may not be one.
// The home can be neither moved nor replaced.
func (h *host) move(comps []string, args FSArgs) (*FileEntry, error) {
	to, err := CleanPath(args.To)
	if err != nil {
		return nil, failf(CodeInvalid, "destination: %v", err)
	}
	what, dest := JoinHome(comps), JoinHome(to)
	switch {
	case len(comps) == 0:
		return nil, failf(CodeInvalid, "%s itself cannot be moved", Home)
	case len(to) == 0:
		return nil, failf(CodeInvalid, "%s itself cannot be replaced", Home)
	case len(to) > len(comps) && slicesEqual(to[:len(comps)], comps):
		return nil, failf(CodeInvalid, "%s cannot be moved into itself", what)
	}
	sfd, err := h.walk(comps[:len(comps)-1], false)
	if err != nil {
		return nil, err
	}
	defer unix.Close(sfd)
	sname := comps[len(comps)-1]
	if _, _, err := leafEntry(sfd, sname, what); err != nil {
		return nil, err
	}
	dfd, err := h.walk(to[:len(to)-1], true)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	dname := to[len(to)-1]
	var dst unix.Stat_t
	switch err := unix.Fstatat(dfd, dname, &dst, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && dst.Mode&unix.S_IFMT == unix.S_IFLNK:
		return nil, failf(CodeSymlink, "%s is a symbolic link; a move does not replace links", dest)
	case err == nil && !args.Overwrite:
		return nil, failf(CodeExists, "%s already exists", dest)
	case err != nil && !errors.Is(err, unix.ENOENT):
		return nil, classify(dest, err)
	}
	flags := uint(0)
	if !args.Overwrite {
		flags = unix.RENAME_NOREPLACE // closes the race with a file made since the check
	}
	err = unix.Renameat2(sfd, sname, dfd, dname, flags)
	if flags != 0 && (errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EINVAL)) {
		err = unix.Renameat(sfd, sname, dfd, dname)
	}
	switch {
	case errors.Is(err, unix.EEXIST), errors.Is(err, unix.ENOTEMPTY):
		return nil, failf(CodeExists, "%s already exists and is not an empty folder", dest)
	case errors.Is(err, unix.EINVAL):
		return nil, failf(CodeInvalid, "%s cannot be moved into itself", what)
	case errors.Is(err, unix.EISDIR):
		return nil, failf(CodeNotRegular, "%s is a folder; only a folder can replace it", dest)
	case err != nil:
		return nil, classify(dest, err)
	}
	e, _, err := leafEntry(dfd, dname, dest)
	if err == nil {
		e.Name = dname
	}
	return e, err
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// remove deletes the file, symlink (not its target) or folder tree at
// comps. A tree goes entry by entry, never through a symlink; one over
// MaxRemoveEntries entries or maxRemoveDepth levels is refused part way
// (CodeTooLarge), what was deleted by then staying deleted.
func (h *host) remove(comps []string) error {
	if len(comps) == 0 {
		return failf(CodeInvalid, "%s itself cannot be removed", Home)
	}
	what := JoinHome(comps)
	dirfd, err := h.walk(comps[:len(comps)-1], false)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	name := comps[len(comps)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return classify(what, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Unlinkat(dirfd, name, 0); err != nil {
			return classify(what, err)
		}
		return nil
	}
	budget := MaxRemoveEntries
	return removeTree(dirfd, name, what, &budget, 0)
}

// removeTree deletes the folder name in dirfd and everything below it.
func removeTree(dirfd int, name, what string, budget *int, depth int) error {
	if depth >= maxRemoveDepth {
		return failf(CodeTooLarge, "%s is more than %d folders deep; remove it in parts", what, maxRemoveDepth)
	}
	fd, err := openDirAt(dirfd, name, what, false)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), what)
	defer d.Close()
	for {
		// Read, then delete, in batches: a directory read does not skip
		// entries because earlier ones went (each batch starts over).
		if _, err := d.Seek(0, 0); err != nil {
			return classify(what, err)
		}
		names, err := d.Readdirnames(1024)
		if len(names) == 0 {
			break
		}
		if err != nil {
			return classify(what, err)
		}
		for _, n := range names {
			if *budget <= 0 {
				return failf(CodeTooLarge, "%s holds more than %d entries; remove it in parts", what, MaxRemoveEntries)
			}
			*budget--
			sub := what + "/" + n
			var st unix.Stat_t
			if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue
				}
				return classify(sub, err)
			}
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				err = removeTree(fd, n, sub, budget, depth+1)
			} else {
				err = unix.Unlinkat(fd, n, 0)
			}
			if err != nil && !errors.Is(err, unix.ENOENT) {
				return classify(sub, err)
			}
		}
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil {
		return classify(what, err)
	}
	return nil
}

// listTree lists the folder at comps and, below depth 1, the folders in
// it down to depth levels, depth first with names sorted; an entry's Name
// is its path relative to the listed folder. Symlinks are listed, never
// followed. At most max entries (then truncated).
func (h *host) listTree(comps []string, depth, max int) ([]FileEntry, bool, error) {
	switch {
	case depth < 0 || depth > MaxListDepth:
		return nil, false, failf(CodeInvalid, "depth must be between 1 and %d", MaxListDepth)
	case depth <= 1:
		return h.listDir(comps, max)
	}
	fd, err := h.walk(comps, false)
	if err != nil {
		return nil, false, err
	}
	l := &treeLister{max: max}
	err = l.list(fd, JoinHome(comps), "", depth)
	unix.Close(fd)
	if err != nil {
		return nil, false, err
	}
	return l.out, l.truncated, nil
}

type treeLister struct {
	max       int
	out       []FileEntry
	truncated bool
}

// list adds the entries of the open folder fd (named what, at rel below
// the listed one) and descends depth-1 more levels; it does not close fd.
func (l *treeLister) list(fd int, what, rel string, depth int) error {
	dup, err := unix.Dup(fd)
	if err != nil {
		return classify(what, err)
	}
	d := os.NewFile(uintptr(dup), what)
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return classify(what, err)
	}
	sort.Strings(names)
	for _, n := range names {
		if strings.HasPrefix(n, StagingPrefix) {
			continue
		}
		if l.max > 0 && len(l.out) >= l.max {
			l.truncated = true
			return nil
		}
		e, st, err := leafEntry(fd, n, what+"/"+n)
		if err != nil {
			continue // gone since the read
		}
		e.Name = rel + n
		l.out = append(l.out, *e)
		if depth > 1 && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			sub, err := openDirAt(fd, n, what+"/"+n, false)
			if err != nil {
				continue // replaced since the look, or not ours to read
			}
			err = l.list(sub, what+"/"+n, rel+n+"/", depth-1)
			unix.Close(sub)
			if err != nil {
				return err
			}
			if l.truncated {
				return nil
			}
		}
	}
	return nil
}
