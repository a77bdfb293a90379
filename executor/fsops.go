package executor

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
)

// The files API's operations besides moving bytes (stat, make a folder,
// move, remove, list to a depth) are done by the guest on its own walk
// (guest/fsops.go), like put and get: over the agent channel when the
// sandbox has one (no process is started, the session's lock is not
// taken, an execute's end does not touch them), else as one `guest fsop`
// under runsc exec holding the lock. The host never resolves a path.

// fsTimeout bounds one operation (a remove of a large tree included).
const fsTimeout = 2 * time.Minute

// Stat describes the file at path in owner's session without following
// a symlink (Target then holds its text).
func (f *Files) Stat(ctx context.Context, owner, id, p string) (FileInfo, error) {
	comps, res, err := f.fsCall(ctx, owner, id, "stat", p, guest.FSArgs{}, 0)
	if err != nil {
		return FileInfo{}, err
	}
	return toFileInfo(res.Info, guest.JoinHome(comps)), nil
}

// MakeDir makes the folder at path (with parents, the missing folders
// above it too). An existing path is ErrFileExists.
func (f *Files) MakeDir(ctx context.Context, owner, id, p string, parents bool) (FileInfo, error) {
	comps, res, err := f.fsCall(ctx, owner, id, "mkdir", p, guest.FSArgs{Parents: parents}, 0)
	if err != nil {
		return FileInfo{}, err
	}
	return toFileInfo(res.Info, guest.JoinHome(comps)), nil
}

// Move renames from to to, making missing folders above to. An existing
// to is ErrFileExists unless overwrite; a symlink at to is ErrSymlink; the
// home can be neither moved nor replaced (ErrInvalid).
func (f *Files) Move(ctx context.Context, owner, id, from, to string, overwrite bool) (FileInfo, error) {
	dest, err := checkFilePath(to)
	if err != nil {
		return FileInfo{}, err
	}
	_, res, err := f.fsCall(ctx, owner, id, "move", from, guest.FSArgs{To: guest.JoinHome(dest), Overwrite: overwrite}, 0)
	if err != nil {
		return FileInfo{}, err
	}
	return toFileInfo(res.Info, guest.JoinHome(dest)), nil
}

// Remove deletes the file, symlink or folder tree at path (a tree of at
// most guest.MaxRemoveEntries entries; a larger one is ErrTooLarge, part
// of it deleted). The home itself cannot be removed (ErrInvalid).
func (f *Files) Remove(ctx context.Context, owner, id, p string) error {
	_, _, err := f.fsCall(ctx, owner, id, "remove", p, guest.FSArgs{}, 0)
	return err
}

// ListDepth lists the folder at path and the folders below it down to
// depth levels (1: the folder's own entries, as List), depth first and by
// name, at most MaxListEntries entries in all (Truncated then).
func (f *Files) ListDepth(ctx context.Context, owner, id, p string, depth int) (Listing, error) {
	if depth < 1 || depth > guest.MaxListDepth {
		return Listing{}, fmt.Errorf("%w: depth must be between 1 and %d", ErrInvalid, guest.MaxListDepth)
	}
	comps, res, err := f.fsCall(ctx, owner, id, "list", p, guest.FSArgs{Depth: depth}, MaxListEntries)
	if err != nil {
		return Listing{}, err
	}
	dir := guest.JoinHome(comps)
	out := make([]FileInfo, 0, len(res.Entries))
	for i := range res.Entries {
		g := &res.Entries[i]
		fi := toFileInfo(g, dir+"/"+g.Name)
		fi.Name = path.Base(g.Name)
		out = append(out, fi)
	}
	return Listing{Entries: out, Truncated: res.Truncated}, nil
}

// fsCall runs one fs operation in owner's session.
func (f *Files) fsCall(ctx context.Context, owner, id, op, p string, args guest.FSArgs, max int64) ([]string, *guest.FileResult, error) {
	comps, err := checkFilePath(p)
	if err != nil {
		return nil, nil, err
	}
	s, a, err := f.s.fileChannel(ctx, owner, id)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, fsTimeout)
	defer cancel()
	start := time.Now()
	var res *guest.FileResult
	if a == nil {
		res, err = f.fsExec(ctx, owner, id, op, comps, args, max)
	} else {
		res, err = f.fsStream(ctx, s, a, id, op, comps, args, max)
	}
	f.log.InfoContext(ctx, "file "+op, "session", id, "path", guest.JoinHome(comps), "to", args.To, "ms", time.Since(start).Milliseconds(), "err", errString(err), "exec", a == nil)
	if err == nil && res == nil {
		err = errors.New("guest sent no result")
	}
	return comps, res, err
}

func (f *Files) fsStream(ctx context.Context, s *session, a *agent.Conn, id, op string, comps []string, args guest.FSArgs, max int64) (*guest.FileResult, error) {
	defer f.s.unuse(s)
	st, err := f.openStreamArgs(ctx, a, id, op, comps, max, args)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	res, err := st.AwaitResult(ctx)
	if err != nil {
		return nil, f.streamError(ctx, id, err)
	}
	if err := f.fileError(ctx, id, res, nil, ""); err != nil {
		return nil, err
	}
	return res, nil
}

// fsExec runs the operation as `guest fsop` under runsc exec, holding the
// session's lock.
func (f *Files) fsExec(ctx context.Context, owner, id, op string, comps []string, args guest.FSArgs, max int64) (*guest.FileResult, error) {
	s, err := f.s.acquire(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer f.s.releaseSession(s)
	fop, err := f.startFileReq(ctx, id, "fsop", &guest.FileRequest{Path: guest.JoinHome(comps), Max: max, Op: op, FSArgs: args}, nil, false)
	if err != nil {
		return nil, err
	}
	res, err := fop.result(ctx)
	waitErr := fop.wait(err != nil)
	if err == nil {
		err = f.fileError(ctx, id, res, waitErr, fop.stderr.String())
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}
