package executor

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// The files API moves bytes in and out of a session's home through the
// sandbox, never by a host path: the sandbox kernel applies the sandbox
// user's own permissions and the host never resolves a path the sandbox
// controls. Two transports carry the same guest code (the walk, the
// symlink refusals, the atomic put of guest/files.go):
//
//   - a file stream over the sandbox's agent channel (executor/agent's streams),
//     served by pid 1 on a thread that acts as the sandbox user. It starts
//     no process and does not take the session's lock: a transfer runs
//     beside executes.
//   - the guest's put, get and list modes under `runsc exec --user
//     1000:1000`, for sandboxes without a working channel (adopted after a
//     restart). Like Execute, such a call holds the session's lock: a
//     concurrent execute's end kills every process of the user, the file
//     call's included.
//
// Consistency of a file call beside executes (channel path): an upload is
// written to a temporary name and renamed over the target at its end, so
// code sees the old file or the whole new one, never a part; an upload
// that has returned is seen by every execute that starts after. A
// download is read from one open file and is that file's content or an
// error: if the file's size, modification or change time differ at the
// end from the start, the guest holds back the last chunk and the
// download fails (the HTTP body is cut short). A listing is a directory
// read at one moment; entries may change right after.

// FileInfo describes one file in a session's home.
type FileInfo = sandbox.FileInfo

// Errors of the files API (see package sandbox).
var (
	ErrFileNotFound = sandbox.ErrFileNotFound
	ErrNotRegular   = sandbox.ErrNotRegular
	ErrNotDir       = sandbox.ErrNotDir
	ErrSymlink      = sandbox.ErrSymlink
	ErrPermission   = sandbox.ErrPermission
	ErrTooLarge     = sandbox.ErrTooLarge // also used by stateless.go
)

const (
	// DefaultMaxFileBytes applies when Config.MaxFileBytes is zero.
	DefaultMaxFileBytes = 64 << 20
	// MaxListEntries bounds one directory listing.
	MaxListEntries = 10000
	// fileTimeout bounds one file call, transfer included.
	fileTimeout = 10 * time.Minute
	// frameSize is the chunk size of put content on the guest's stdin.
	frameSize = 256 << 10
)

// Files is the session service's files role (api.Files): transfers,
// file operations and watches in a session's home, over the session's
// agent channel or, without one, under runsc exec. It reaches sessions
// only through fileSessions. Get it from Executor.Files; it is safe for
// concurrent use.
type Files struct {
	s       fileSessions
	cfg     Config
	log     *slog.Logger
	runsc   *host.Runsc
	agents  *agent.Transport
	execOps *atomic.Int64 // file calls that took the runsc exec path
}

// fileSessions is what Files needs of the session service: a session's
// channel held for one call, the session's lock for the runsc exec path,
// and the classification of a sandbox that went away.
type fileSessions interface {
	// fileChannel marks the running session busy and returns its agent
	// channel; nil channel: use runsc exec (the session is not held).
	fileChannel(ctx context.Context, owner, id string) (*session, *agent.Conn, error)
	unuse(s *session)
	acquire(ctx context.Context, owner, id string) (*session, error)
	releaseSession(s *session)
	lost(ctx context.Context, id string, res Result, waitErr error) (Result, error)
}

// Files returns the executor's files role.
func (e *Executor) Files() *Files { return e.files }

// MaxFileBytes is the largest file PutFile accepts and GetFile returns.
func (f *Files) MaxFileBytes() int64 {
	if f.cfg.MaxFileBytes > 0 {
		return f.cfg.MaxFileBytes
	}
	return DefaultMaxFileBytes
}

// checkFilePath validates path before any sandbox work.
func checkFilePath(path string) ([]string, error) {
	comps, err := guest.CleanPath(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return comps, nil
}

// PutFile writes r (size bytes, or -1 if unknown) to path in owner's
// session, replacing a regular file there and creating missing parent
// folders. The write is atomic: an upload that fails or is over the limit
// leaves the old file (or nothing) in place.
func (f *Files) PutFile(ctx context.Context, owner, id, path string, r io.Reader, size int64) (FileInfo, error) {
	comps, err := checkFilePath(path)
	if err != nil {
		return FileInfo{}, err
	}
	max := f.MaxFileBytes()
	if size > max {
		return FileInfo{}, fmt.Errorf("%w: file of %d bytes is over the limit of %d", sandbox.ErrTooLarge, size, max)
	}
	s, a, err := f.s.fileChannel(ctx, owner, id)
	if err != nil {
		return FileInfo{}, err
	}
	if a == nil {
		return f.putFileExec(ctx, owner, id, comps, r, size)
	}
	defer f.s.unuse(s)
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	start := time.Now()
	sent, res, err := f.putFileStream(ctx, a, id, comps, r, size, max)
	f.log.InfoContext(ctx, "file put", "session", id, "path", guest.JoinHome(comps), "bytes", sent, "ms", time.Since(start).Milliseconds(), "err", errString(err))
	if err != nil {
		return FileInfo{}, err
	}
	return toFileInfo(res.Info, guest.JoinHome(comps)), nil
}

// putFileStream uploads over the agent channel.
func (f *Files) putFileStream(ctx context.Context, a *agent.Conn, id string, comps []string, r io.Reader, size, max int64) (int64, *guest.FileResult, error) {
	st, err := f.openStream(ctx, a, id, "put", comps, max)
	if err != nil {
		return 0, nil, err
	}
	defer st.Close()
	sent, uerr := st.Upload(ctx, r, size, max)
	wctx := ctx
	if uerr != nil {
		// The guest was told to drop the upload: wait (briefly) for it to
		// say so, so that no temporary file outlives the call.
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	res, rerr := st.AwaitResult(wctx)
	switch {
	case uerr != nil && errors.Is(uerr, agent.ErrChannel):
		return sent, nil, f.streamError(ctx, id, uerr)
	case uerr != nil:
		return sent, nil, uerr
	case rerr != nil:
		return sent, nil, f.streamError(ctx, id, rerr)
	}
	if err := f.fileError(ctx, id, res, nil, ""); err != nil {
		return sent, nil, err
	}
	return sent, res, nil
}

// putFileExec is PutFile through `runsc exec` (the guest's put mode),
// holding the session's lock.
func (f *Files) putFileExec(ctx context.Context, owner, id string, comps []string, r io.Reader, size int64) (FileInfo, error) {
	max := f.MaxFileBytes()
	s, err := f.s.acquire(ctx, owner, id)
	if err != nil {
		return FileInfo{}, err
	}
	defer f.s.releaseSession(s)
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()

	start := time.Now()
	pr, pw := io.Pipe()
	pump := &uploadPump{max: max, size: size, done: make(chan struct{})}
	go pump.run(r, pw)
	op, err := f.startFileOp(ctx, id, "put", comps, max, pr, false)
	if err != nil {
		pr.CloseWithError(err)
		return FileInfo{}, err
	}
	res, err := op.result(ctx)
	pr.CloseWithError(io.ErrClosedPipe) // stops the pump if the guest gave up early
	waitErr := op.wait(err != nil)
	select {
	case <-pump.done:
	case <-time.After(5 * time.Second): // a stalled client; its reader is abandoned
	}
	sent, bodyErr := pump.outcome()
	if err == nil && res != nil && res.Code == guest.CodeAborted && bodyErr != nil {
		err = bodyErr
	}
	if err == nil {
		err = f.fileError(ctx, id, res, waitErr, op.stderr.String())
	}
	f.log.InfoContext(ctx, "file put", "session", id, "path", guest.JoinHome(comps), "bytes", sent, "ms", time.Since(start).Milliseconds(), "err", errString(err), "exec", true)
	if err != nil {
		return FileInfo{}, err
	}
	return toFileInfo(res.Info, guest.JoinHome(comps)), nil
}

// GetFile opens the regular file at path in owner's session. The reader
// yields exactly FileInfo.Size bytes (io.ErrUnexpectedEOF if the sandbox
// sends fewer); the session stays locked until it is closed, which the
// caller must do.
func (f *Files) GetFile(ctx context.Context, owner, id, path string) (FileInfo, io.ReadCloser, error) {
	comps, err := checkFilePath(path)
	if err != nil {
		return FileInfo{}, nil, err
	}
	s, a, err := f.s.fileChannel(ctx, owner, id)
	if err != nil {
		return FileInfo{}, nil, err
	}
	if a == nil {
		return f.getFileExec(ctx, owner, id, comps)
	}
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	fail := func(err error) (FileInfo, io.ReadCloser, error) {
		cancel()
		f.s.unuse(s)
		f.log.InfoContext(ctx, "file get", "session", id, "path", guest.JoinHome(comps), "err", errString(err))
		return FileInfo{}, nil, err
	}
	st, err := f.openStream(ctx, a, id, "get", comps, f.MaxFileBytes())
	if err != nil {
		return fail(err)
	}
	res, err := st.AwaitResult(ctx)
	if err == nil {
		err = f.fileError(ctx, id, res, nil, "")
	} else {
		err = f.streamError(ctx, id, err)
	}
	if err == nil && res.Info == nil {
		err = errors.New("guest sent no file information")
	}
	if err != nil {
		_ = st.Send(guest.FrameFileCancel, nil)
		st.Close()
		return fail(err)
	}
	info := toFileInfo(res.Info, guest.JoinHome(comps))
	var rc *agent.Reader
	rc = agent.NewReader(ctx, st, info.Size, func(complete bool) {
		cancel()
		f.s.unuse(s)
		f.log.InfoContext(ctx, "file get", "session", id, "path", info.Path, "bytes", info.Size-rc.Remaining(), "complete", complete)
	})
	return info, rc, nil
}

// getFileExec is GetFile through `runsc exec` (the guest's get mode); the
// session stays locked until the reader is closed.
func (f *Files) getFileExec(ctx context.Context, owner, id string, comps []string) (FileInfo, io.ReadCloser, error) {
	s, err := f.s.acquire(ctx, owner, id)
	if err != nil {
		return FileInfo{}, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	fail := func(err error) (FileInfo, io.ReadCloser, error) {
		cancel()
		f.s.releaseSession(s)
		f.log.InfoContext(ctx, "file get", "session", id, "path", guest.JoinHome(comps), "err", errString(err))
		return FileInfo{}, nil, err
	}
	op, err := f.startFileOp(ctx, id, "get", comps, f.MaxFileBytes(), nil, true)
	if err != nil {
		return fail(err)
	}
	res, err := op.result(ctx)
	if err != nil || res == nil || res.Code != "" || res.Info == nil {
		waitErr := op.wait(true)
		if err == nil {
			err = f.fileError(ctx, id, res, waitErr, op.stderr.String())
		}
		if err == nil {
			err = errors.New("guest sent no file information")
		}
		return fail(err)
	}
	info := toFileInfo(res.Info, guest.JoinHome(comps))
	rc := &fileReader{op: op, remain: info.Size}
	// A caller's cancellation ends the transfer: the reader then fails.
	stopWatch := context.AfterFunc(ctx, func() { op.kill() })
	rc.done = func() {
		stopWatch()
		cancel()
		f.s.releaseSession(s)
		f.log.InfoContext(ctx, "file get", "session", id, "path", info.Path, "bytes", info.Size-rc.remain, "complete", rc.remain == 0, "exec", true)
	}
	return info, rc, nil
}

// Listing is a directory listing with its truncated flag.
type Listing = sandbox.Listing

// List lists the folder at path in owner's session, sorted by name, at
// most MaxListEntries entries, and says whether it held more. Symlinks are
// listed, not followed.
func (f *Files) List(ctx context.Context, owner, id, path string) (Listing, error) {
	comps, err := checkFilePath(path)
	if err != nil {
		return Listing{}, err
	}
	s, a, err := f.s.fileChannel(ctx, owner, id)
	if err != nil {
		return Listing{}, err
	}
	var res *guest.FileResult
	if a == nil {
		res, err = f.listExec(ctx, owner, id, comps)
	} else {
		res, err = f.listStream(ctx, s, a, id, comps)
	}
	if err != nil {
		return Listing{}, err
	}
	dir := guest.JoinHome(comps)
	out := make([]FileInfo, 0, len(res.Entries))
	for i := range res.Entries {
		out = append(out, toFileInfo(&res.Entries[i], dir+"/"+res.Entries[i].Name))
	}
	return Listing{Entries: out, Truncated: res.Truncated}, nil
}

func (f *Files) listStream(ctx context.Context, s *session, a *agent.Conn, id string, comps []string) (*guest.FileResult, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return f.fsStream(ctx, s, a, id, "list", comps, guest.FSArgs{}, MaxListEntries)
}

// listExec lists through `runsc exec` (the guest's list mode), holding the
// session's lock.
func (f *Files) listExec(ctx context.Context, owner, id string, comps []string) (*guest.FileResult, error) {
	s, err := f.s.acquire(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	defer f.s.releaseSession(s)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	op, err := f.startFileOp(ctx, id, "list", comps, MaxListEntries, nil, false)
	if err != nil {
		return nil, err
	}
	res, err := op.result(ctx)
	waitErr := op.wait(err != nil)
	if err == nil {
		err = f.fileError(ctx, id, res, waitErr, op.stderr.String())
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// fileChannel checks owner's session and returns its agent channel when
// it has a working one; the session is then marked busy (release it with
// unuse) but not locked. Without a channel it returns a nil channel and
// holds nothing: the caller takes the exec path, which locks.
func (e *Executor) fileChannel(ctx context.Context, owner, id string) (*session, *agent.Conn, error) {
	s, err := e.use(owner, id)
	if errors.Is(err, ErrBadState) && e.hibernated(id) {
		// A hibernated session is resumed under its lock, as for an
		// execute; the transfer is then marked busy (so that idle
		// hibernation leaves it alone) before the lock is let go.
		rs, rerr := e.acquire(ctx, owner, id)
		if rerr != nil {
			return nil, nil, rerr
		}
		s, err = e.use(owner, id)
		e.releaseSession(rs)
	}
	if err != nil {
		return nil, nil, err
	}
	a := e.agents.For(id)
	if a != nil {
		if err := a.Ready(10 * time.Second); err != nil {
			e.agents.Drop(id)
			e.log.WarnContext(ctx, "guest agent unavailable, using runsc exec", "sandbox", id, "err", err)
			a = nil
		}
	}
	if a == nil {
		e.unuse(s)
		return nil, nil, nil
	}
	return s, a, nil
}

// use marks owner's running session busy (the reaper leaves it alone)
// without taking its lock.
func (e *Executor) use(owner, id string) (*session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sessions[id]
	if !ok || s.owner != owner {
		return nil, ErrNotFound
	}
	if s.state != StateRunning {
		return nil, fmt.Errorf("%w: %s", ErrBadState, s.state)
	}
	s.busy++
	return s, nil
}

// hibernated reports whether session id is hibernated now.
func (e *Executor) hibernated(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.sessions[id]
	return ok && s.state == StateHibernated
}

func (e *Executor) unuse(s *session) {
	e.mu.Lock()
	s.busy--
	s.lastUsed = time.Now()
	e.mu.Unlock()
}

// openStream opens a file stream of op on the channel.
func (f *Files) openStream(ctx context.Context, a *agent.Conn, id, op string, comps []string, max int64) (*agent.Stream, error) {
	return f.openStreamArgs(ctx, a, id, op, comps, max, guest.FSArgs{})
}

// openStreamArgs is openStream with an fs operation's arguments.
func (f *Files) openStreamArgs(ctx context.Context, a *agent.Conn, id, op string, comps []string, max int64, args guest.FSArgs) (*agent.Stream, error) {
	st, err := a.OpenStream(ctx)
	if err != nil {
		return nil, f.streamError(ctx, id, err)
	}
	b, err := json.Marshal(guest.FileOpen{Stream: st.ID(), Op: op, Path: guest.JoinHome(comps), Max: max, UID: host.SandboxUID, GID: host.SandboxUID, FSArgs: args})
	if err == nil {
		err = a.Send(guest.FrameFileOpen, b)
	}
	if err != nil {
		st.Close()
		return nil, f.streamError(ctx, id, err)
	}
	return st, nil
}

// streamError turns a stream that ended without a result into the
// caller's error: the caller's own cancellation, or a channel that broke,
// in which case the sandbox may be gone (then the session is lost).
func (f *Files) streamError(ctx context.Context, id string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	f.agents.Drop(id)
	return f.fileError(ctx, id, nil, err, "")
}

// uploadPump frames an upload for the guest: chunks of up to frameSize,
// each behind its 4-byte length, then a zero-length end frame. Only a clean
// io.EOF from the reader (with the announced size, if any) sends the end
// frame, so a cut or oversize body never replaces a file.
type uploadPump struct {
	max, size int64
	done      chan struct{}

	mu   sync.Mutex
	sent int64
	err  error
}

func (u *uploadPump) outcome() (int64, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.sent, u.err
}

func (u *uploadPump) fail(pw *io.PipeWriter, err error) {
	u.mu.Lock()
	u.err = err
	u.mu.Unlock()
	pw.CloseWithError(err)
}

func (u *uploadPump) run(r io.Reader, pw *io.PipeWriter) {
	defer close(u.done)
	buf := make([]byte, frameSize)
	var hdr [4]byte
	for {
		n, rerr := 0, error(nil)
		for n < len(buf) && rerr == nil {
			var m int
			m, rerr = r.Read(buf[n:])
			n += m
		}
		if n > 0 {
			u.mu.Lock()
			u.sent += int64(n)
			sent := u.sent
			u.mu.Unlock()
			if sent > u.max {
				u.fail(pw, fmt.Errorf("%w: upload is over the limit of %d bytes", sandbox.ErrTooLarge, u.max))
				return
			}
			binary.BigEndian.PutUint32(hdr[:], uint32(n))
			if _, err := pw.Write(hdr[:]); err != nil {
				return
			}
			if _, err := pw.Write(buf[:n]); err != nil {
				return
			}
		}
		switch {
		case errors.Is(rerr, io.EOF):
			sent, _ := u.outcome()
			if u.size >= 0 && sent != u.size {
				u.fail(pw, fmt.Errorf("%w: upload ended after %d of %d bytes", ErrInvalid, sent, u.size))
				return
			}
			binary.BigEndian.PutUint32(hdr[:], 0)
			_, _ = pw.Write(hdr[:])
			pw.Close()
			return
		case rerr != nil:
			u.fail(pw, fmt.Errorf("reading upload: %w", rerr))
			return
		}
	}
}

func toFileInfo(g *guest.FileEntry, path string) FileInfo {
	if g == nil {
		return FileInfo{Path: path}
	}
	return FileInfo{Name: g.Name, Path: path, Size: g.Size, Mode: fmt.Sprintf("%04o", g.Mode),
		ModTime: time.Unix(0, g.MTimeNS).UTC(), Type: g.Type, Target: g.Target}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// fileError maps the guest's result to the shared errors. No result at
// all means the guest died: the sandbox may be gone.
func (f *Files) fileError(ctx context.Context, id string, res *guest.FileResult, waitErr error, stderr string) error {
	if res == nil {
		if stderr != "" {
			f.log.WarnContext(ctx, "file call failed in the sandbox", "session", id, "stderr", stderr)
		}
		_, err := f.s.lost(ctx, id, Result{}, waitErr)
		return err
	}
	var sentinel error
	switch res.Code {
	case "":
		return nil
	case guest.CodeInvalid:
		sentinel = ErrInvalid
	case guest.CodeNotFound:
		sentinel = ErrFileNotFound
	case guest.CodeNotRegular:
		sentinel = ErrNotRegular
	case guest.CodeNotDir:
		sentinel = ErrNotDir
	case guest.CodeSymlink:
		sentinel = ErrSymlink
	case guest.CodeTooLarge, guest.CodeNoSpace:
		sentinel = sandbox.ErrTooLarge
	case guest.CodePermission:
		sentinel = ErrPermission
	case guest.CodeExists:
		sentinel = sandbox.ErrFileExists
	default:
		return fmt.Errorf("file call in sandbox %s: %s: %s", id, res.Code, res.Error)
	}
	// The guest writes these messages itself; they name only sandbox paths.
	return fmt.Errorf("%w: %s", sentinel, res.Error)
}

// fileOp is one running guest file mode.
type fileOp struct {
	cmd      *exec.Cmd
	cancel   context.CancelFunc
	results  chan fileLine
	stdout   io.ReadCloser // get only
	stderr   *limitedBuffer
	waitOnce sync.Once
	waitErr  error
}

type fileLine struct {
	res *guest.FileResult
	err error
}

// startFileOp starts `guest <mode>` as the sandbox user; body (put only)
// follows the header on stdin.
func (f *Files) startFileOp(ctx context.Context, id, mode string, comps []string, max int64, body io.Reader, wantStdout bool) (*fileOp, error) {
	return f.startFileReq(ctx, id, mode, &guest.FileRequest{Path: guest.JoinHome(comps), Max: max}, body, wantStdout)
}

// startFileReq is startFileOp with the whole request (an fsop's included).
func (f *Files) startFileReq(ctx context.Context, id, mode string, req *guest.FileRequest, body io.Reader, wantStdout bool) (*fileOp, error) {
	f.execOps.Add(1)
	header, err := guest.EncodeFile(req)
	if err != nil {
		return nil, fmt.Errorf("encoding file request: %w", err)
	}
	rr, rw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("creating result pipe: %w", err)
	}
	// runsc exec gets a context of its own: it is killed on purpose (kill),
	// never as a side effect of the caller's context.
	cmdCtx, cmdCancel := context.WithCancel(context.Background())
	user := strconv.Itoa(host.SandboxUID) + ":" + strconv.Itoa(host.SandboxUID)
	cmd := f.runsc.Command(cmdCtx, "", "exec", "--user", user, "--cwd", "/", "--pass-fd", "3:3", id, host.GuestBin, mode)
	if body != nil {
		cmd.Stdin = io.MultiReader(bytes.NewReader(header), body)
	} else {
		cmd.Stdin = bytes.NewReader(header)
	}
	op := &fileOp{cmd: cmd, cancel: cmdCancel, results: make(chan fileLine, 1), stderr: &limitedBuffer{max: 8 << 10}}
	cmd.Stderr = op.stderr
	if wantStdout {
		if op.stdout, err = cmd.StdoutPipe(); err != nil {
			rr.Close()
			rw.Close()
			cmdCancel()
			return nil, fmt.Errorf("creating output pipe: %w", err)
		}
	}
	cmd.ExtraFiles = []*os.File{rw}
	if err := cmd.Start(); err != nil {
		rr.Close()
		rw.Close()
		cmdCancel()
		return nil, fmt.Errorf("starting runsc exec: %w", err)
	}
	rw.Close()
	go func() {
		defer rr.Close()
		// One JSON line; a get streams its content only after it.
		line, err := bufio.NewReaderSize(io.LimitReader(rr, 16<<20), 64<<10).ReadBytes('\n')
		if err != nil {
			op.results <- fileLine{err: err}
			return
		}
		var res guest.FileResult
		if err := json.Unmarshal(line, &res); err != nil {
			op.results <- fileLine{err: fmt.Errorf("decoding guest result: %w", err)}
			return
		}
		op.results <- fileLine{res: &res}
	}()
	return op, nil
}

// result waits for the guest's result line. A nil result with a nil error
// means the guest ended without one.
func (op *fileOp) result(ctx context.Context) (*guest.FileResult, error) {
	select {
	case l := <-op.results:
		if l.err != nil {
			return nil, nil
		}
		return l.res, nil
	case <-ctx.Done():
		op.kill()
		return nil, ctx.Err()
	}
}

// kill ends the runsc exec client; the guest then loses its pipes and dies.
func (op *fileOp) kill() { op.cancel() }

// wait reaps runsc exec; with abort it is killed first.
func (op *fileOp) wait(abort bool) error {
	op.waitOnce.Do(func() {
		if abort {
			op.kill()
		}
		done := make(chan error, 1)
		go func() { done <- op.cmd.Wait() }()
		select {
		case op.waitErr = <-done:
		case <-time.After(30 * time.Second):
			op.kill()
			op.waitErr = <-done
		}
		op.cancel()
	})
	return op.waitErr
}

// fileReader streams a get's content and unlocks the session on Close.
type fileReader struct {
	op     *fileOp
	remain int64
	done   func()
	closed bool
}

func (f *fileReader) Read(p []byte) (int, error) {
	if f.remain <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > f.remain {
		p = p[:f.remain]
	}
	n, err := f.op.stdout.Read(p)
	f.remain -= int64(n)
	switch {
	case f.remain == 0:
		return n, io.EOF
	case errors.Is(err, io.EOF):
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (f *fileReader) Close() error {
	if f.closed {
		return nil
	}
	f.closed = true
	err := f.op.wait(f.remain > 0)
	f.done()
	if f.remain > 0 {
		return nil // the caller stopped early; that is not a failure here
	}
	if err != nil {
		return fmt.Errorf("finishing file transfer: %w", err)
	}
	return nil
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
