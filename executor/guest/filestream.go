package guest

// File streams: the files API over the agent's own channel. Each transfer
// is a stream of its own, multiplexed with runs on pid 1's stdio, so a
// file call costs no `runsc exec` and does not wait for (or hold up) a run.
//
// A stream is served by a goroutine locked to an OS thread of its own.
// The steps that resolve names (the walk, opening, creating, renaming,
// listing) run with that thread's effective uid and gid set to the
// sandbox user's (setresuid(-1, uid, -1) on that thread alone: Linux and
// gVisor keep credentials per thread), so the sandbox kernel checks them
// against the user's rights, as it did for a `runsc exec --user` process,
// and what they create belongs to the user; the effective capabilities go
// with the uid change. The bytes are then copied as root, on descriptors
// already open: gVisor gives a thread's /proc/1/task/<tid> folder to its
// effective uid (PR_SET_DUMPABLE does not change that, measured), and
// that folder lists pid 1's descriptors, the host channel's included. The
// real and saved uid stay 0 throughout, so the user can neither signal
// nor ptrace the thread. The thread is never given back to the Go
// runtime: it ends with the goroutine (LockOSThread without an unlock).
//
// The walk, the symlink refusals and the atomic put are those of the file
// modes (files.go): the same functions run on either path.
//
// Wire format. Every file frame's payload starts with the stream id (4
// bytes, big-endian; chosen by the host, never 0).
//
//	host -> guest  F  FileOpen as JSON (its Stream field is the id)
//	               D  upload bytes; an empty one ends the upload
//	               C  cancel: drop the upload (nothing is written) or stop a download
//	               W  4-byte credit: the host takes that many more download bytes
//	guest -> host  f  FileResult as JSON: a put's outcome, a get's file info
//	                  (before its bytes) or failure, a listing
//	               d  download bytes; an empty one ends the download
//	               c  the download failed after its result (message follows the id)
//	               w  4-byte credit: the guest takes that many more upload bytes
//
// Flow control: each side may have at most FileWindow bytes of a stream's
// data in flight (sent and not yet granted back), so neither side ever
// buffers more than that per stream and the reader loops never block on a
// slow disk or a slow client. A peer that goes over the window has its
// stream failed.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Frame types of file streams (see above).
const (
	FrameFileOpen   byte = 'F'
	FrameFileData   byte = 'D'
	FrameFileCancel byte = 'C'
	FrameFileWindow byte = 'W'
	FrameFileResult byte = 'f'
	FrameFileChunk  byte = 'd'
	FrameFileAbort  byte = 'c'
	FrameFileCredit byte = 'w'
)

const (
	// FileChunk is the most data one frame carries.
	FileChunk = 1 << 20
	// FileWindow is each side's initial credit per stream, and the most
	// data of a stream either side buffers.
	FileWindow = 4 << 20
	// MaxFileStreams is how many streams the guest serves at once; more
	// are refused (the host keeps below it).
	MaxFileStreams = 4
)

// FileOpen starts a stream.
type FileOpen struct {
	Stream uint32 `json:"stream"`
	Op     string `json:"op"` // put, get, list
	Path   string `json:"path"`
	// Max is the largest file in bytes (put, get) or the most entries (list).
	Max int64 `json:"max"`
	// UID and GID are the user the stream acts as; never root.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// FSArgs are the arguments of stat, mkdir, move, remove and a deep
	// list (fsops.go).
	FSArgs
}

// ErrStreamFrame is returned for a file frame too short to name its stream.
var ErrStreamFrame = errors.New("file frame without a stream id")

// StreamPayload splits a file frame's payload into its stream id and data.
func StreamPayload(p []byte) (uint32, []byte, error) {
	if len(p) < 4 {
		return 0, nil, ErrStreamFrame
	}
	return binary.BigEndian.Uint32(p), p[4:], nil
}

// Credit reads the credit a W or w frame's data carries.
func Credit(data []byte) (int64, error) {
	if len(data) != 4 {
		return 0, errors.New("credit frame of the wrong size")
	}
	return int64(binary.BigEndian.Uint32(data)), nil
}

// WriteStreamFrame writes one file frame: type, length, stream id, data.
func WriteStreamFrame(w io.Writer, typ byte, id uint32, data []byte) error {
	var h [9]byte
	h[0] = typ
	binary.BigEndian.PutUint32(h[1:], uint32(4+len(data)))
	binary.BigEndian.PutUint32(h[5:], id)
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	if len(data) == 0 {
		return nil
	}
	_, err := w.Write(data)
	return err
}

// CreditData is the data of a credit frame granting n bytes.
func CreditData(n int64) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(n))
	return b[:]
}

// chunkPool holds upload frame buffers (stream id and one chunk): an
// upload reuses a few instead of making the garbage collector run every
// few chunks.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, 4+FileChunk); return &b }}

// uploadBuffer gives the serve loop a pooled buffer for an upload frame.
func uploadBuffer(typ byte, n int) []byte {
	if typ != FrameFileData || n > 4+FileChunk || n < 4+64<<10 {
		return nil
	}
	return *chunkPool.Get().(*[]byte)
}

// recycle returns an upload frame's payload buffer to the pool.
func recycle(p []byte) {
	if cap(p) == 4+FileChunk {
		p = p[:cap(p)]
		chunkPool.Put(&p)
	}
}

// fstream is the guest's state of one stream. The serve loop fills it;
// the stream's own goroutine drains it.
type fstream struct {
	id   uint32
	mu   sync.Mutex
	cond *sync.Cond
	// upload: frame payloads (stream id, then data)
	queue  [][]byte
	queued int64
	eof    bool
	// download
	credit int64
	// gone: the host cancelled or broke the window; the stream stops.
	gone bool
}

// fileStreams are the agent's open streams.
type fileStreams struct {
	mu sync.Mutex
	m  map[uint32]*fstream
}

func (fs *fileStreams) get(id uint32) *fstream {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.m[id]
}

func (fs *fileStreams) remove(id uint32) {
	fs.mu.Lock()
	delete(fs.m, id)
	fs.mu.Unlock()
}

// abortAll stops every open stream (the host is gone).
func (fs *fileStreams) abortAll() {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, s := range fs.m {
		s.mu.Lock()
		s.gone = true
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// fileOpen registers a stream and starts serving it. It runs in the serve
// loop, so the stream exists before the host's next frame is read.
func (a *agent) fileOpen(p []byte) {
	var op FileOpen
	if err := json.Unmarshal(p, &op); err != nil || op.Stream == 0 {
		return // no stream to answer on
	}
	fail := func(code, msg string) {
		a.fileResult(op.Stream, FileResult{Code: code, Error: msg})
	}
	if op.UID <= 0 || op.GID <= 0 {
		fail(CodeInvalid, "file streams run as the sandbox user, not root")
		return
	}
	s := &fstream{id: op.Stream, credit: FileWindow}
	s.cond = sync.NewCond(&s.mu)
	a.files.mu.Lock()
	if a.files.m == nil {
		a.files.m = map[uint32]*fstream{}
	}
	_, dup := a.files.m[op.Stream]
	busy := len(a.files.m) >= MaxFileStreams+MaxWatches // the host keeps each below its own bound
	if !dup && !busy {
		a.files.m[op.Stream] = s
	}
	a.files.mu.Unlock()
	switch {
	case dup:
		return // the first stream of that id goes on; this one gets nothing
	case busy:
		fail(CodeIO, "too many file transfers at once")
		return
	}
	go a.serveStream(s, &op)
}

// fileData queues upload bytes (or the end of the upload). The queue
// keeps the whole payload p (its buffer goes back to the pool once
// written); the data is p[4:].
func (a *agent) fileData(p []byte) {
	id, data, err := StreamPayload(p)
	if err != nil {
		return
	}
	s := a.files.get(id)
	if s == nil {
		recycle(p)
		return // ended already: what the host sent before it knew is dropped
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.gone || s.eof:
		recycle(p)
	case len(data) == 0:
		s.eof = true
	case s.queued+int64(len(data)) > FileWindow:
		s.gone = true // over the window: the host is not playing by the rules
		recycle(p)
	default:
		s.queue = append(s.queue, p)
		s.queued += int64(len(data))
	}
	s.cond.Broadcast()
}

// fileCancel stops a stream.
func (a *agent) fileCancel(p []byte) {
	id, _, err := StreamPayload(p)
	if err != nil {
		return
	}
	if s := a.files.get(id); s != nil {
		s.mu.Lock()
		s.gone = true
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// fileWindow adds download credit.
func (a *agent) fileWindow(p []byte) {
	id, data, err := StreamPayload(p)
	if err != nil {
		return
	}
	n, err := Credit(data)
	s := a.files.get(id)
	if s == nil {
		return
	}
	s.mu.Lock()
	if err != nil || s.credit+n > FileWindow {
		s.gone = true
	} else {
		s.credit += n
	}
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (a *agent) sendStream(typ byte, id uint32, data []byte) {
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if WriteStreamFrame(a.out, typ, id, data) == nil {
		_ = a.out.Flush()
	}
}

func (a *agent) fileResult(id uint32, res FileResult) {
	b, _ := json.Marshal(res)
	a.sendStream(FrameFileResult, id, b)
}

// threadCreds sets the calling OS thread's effective uid and gid (and
// drops its supplementary groups when becoming the user). Linux and
// gVisor keep credentials per thread, so the raw syscalls (not
// syscall.Setresuid, which changes every thread of the process) touch
// this thread alone. The real and saved ids stay 0, which lets the thread
// go back to root. The caller has locked its goroutine to the thread.
func threadCreds(uid, gid int) error {
	const keep = ^uintptr(0) // -1: leave that id as it is
	if uid != 0 {
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Errorf("dropping groups: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(gid), keep); e != 0 {
			return fmt.Errorf("switching group: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
			return fmt.Errorf("switching user: %w", e)
		}
		return nil
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, 0, keep); e != 0 {
		return fmt.Errorf("switching back to root: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, 0, keep); e != 0 {
		return fmt.Errorf("switching back to root's group: %w", e)
	}
	return nil
}

// userRunner returns the asUser of a stream: it runs f with the thread's
// effective ids set to uid and gid, then sets them back to root. Only the
// steps that resolve names (the walk, opening, creating, renaming,
// listing) run as the user; the bytes are copied as root on descriptors
// already open. While a thread's effective uid is the user's, gVisor
// gives that user its /proc/1/task/<tid> folder (it does not apply
// PR_SET_DUMPABLE there, measured): the window is kept to those steps.
// Outside a sandbox's pid 1 (tests as another user) f runs as is.
func (h *host) userRunner(uid, gid int) func(func() error) error {
	if os.Geteuid() != 0 || os.Getpid() != 1 && !h.anyPID {
		return asIs
	}
	return func(f func() error) error {
		if err := threadCreds(uid, gid); err != nil {
			return err
		}
		ferr := f()
		if err := threadCreds(0, 0); err != nil {
			// The thread stays the user's: it ends with its goroutine.
			return errors.Join(ferr, err)
		}
		return ferr
	}
}

// serveStream serves one stream on a thread of its own that ends with it.
func (a *agent) serveStream(s *fstream, op *FileOpen) {
	runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
	defer a.files.remove(s.id)
	var res FileResult
	defer func() {
		if v := recover(); v != nil {
			a.fileResult(s.id, FileResult{Code: CodeIO, Error: fmt.Sprint("agent: ", v)})
		}
	}()
	asUser := a.host.userRunner(op.UID, op.GID)
	comps, err := CleanPath(op.Path)
	if err != nil {
		err = failf(CodeInvalid, "%v", err)
	}
	if err == nil {
		switch op.Op {
		case "put":
			res.Info, err = a.host.putFile(comps, func(w io.Writer, what string) error { return a.copyUpload(w, s, op.Max, what) }, asUser)
		case "get":
			a.serveDownload(s, comps, op.Max, asUser)
			return
		case "stat", "mkdir", "move", "remove", "list":
			res, err = a.host.fsOp(op.Op, comps, op.FSArgs, op.Max, asUser)
		case "watch":
			a.serveWatch(s, comps, op.Recursive, asUser)
			return
		default:
			err = failf(CodeInvalid, "unknown file operation %q", op.Op)
		}
	}
	if err != nil {
		res = fileFailure(err)
	}
	// Gone from the table before the host hears the end: it may open the
	// next stream at once, and must find a free place.
	a.files.remove(s.id)
	a.fileResult(s.id, res)
}

// fileFailure is the FileResult of a failed file operation.
func fileFailure(err error) FileResult {
	var ff *fileFail
	if !errors.As(err, &ff) {
		ff = &fileFail{code: CodeIO, msg: err.Error()}
	}
	return FileResult{Code: ff.code, Error: ff.msg}
}

// copyUpload writes the stream's upload to w until its end, granting the
// host credit for every chunk written.
func (a *agent) copyUpload(w io.Writer, s *fstream, max int64, what string) error {
	var total int64
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.eof && !s.gone {
			s.cond.Wait()
		}
		if s.gone {
			s.mu.Unlock()
			return failf(CodeAborted, "upload of %s was cancelled", what)
		}
		if len(s.queue) == 0 { // and eof
			s.mu.Unlock()
			return nil
		}
		frame := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.mu.Unlock()

		chunk := frame[4:]
		total += int64(len(chunk))
		if max > 0 && total > max {
			return failf(CodeTooLarge, "upload to %s is over the limit of %d bytes", what, max)
		}
		_, err := w.Write(chunk)
		recycle(frame)
		if err != nil {
			return classify(what, err)
		}
		s.mu.Lock()
		s.queued -= int64(len(chunk))
		s.mu.Unlock()
		a.sendStream(FrameFileCredit, s.id, CreditData(int64(len(chunk))))
	}
}

// serveDownload sends the file's result, then exactly its size in bytes
// as the host's credit allows, then the end. The file is read from one
// open descriptor; if it changes while it is sent (another size, change
// time or modification time at the end than at the start), the last
// chunk is held back and the download fails: a download is one version
// of the file or an error, never a mix of two.
func (a *agent) serveDownload(s *fstream, comps []string, max int64, asUser func(func() error) error) {
	var f *os.File
	var info *FileEntry
	err := asUser(func() error {
		var err error
		f, info, err = a.host.openRegular(comps, max)
		return err
	})
	if err != nil {
		a.files.remove(s.id)
		a.fileResult(s.id, fileFailure(err))
		return
	}
	defer f.Close()
	var before unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &before); err != nil {
		a.files.remove(s.id)
		a.fileResult(s.id, fileFailure(classify(info.Name, err)))
		return
	}
	if info.Size == 0 {
		a.files.remove(s.id)
	}
	a.fileResult(s.id, FileResult{Info: info})
	abort := func(msg string) {
		a.files.remove(s.id)
		a.sendStream(FrameFileAbort, s.id, []byte(msg))
	}
	buf := make([]byte, FileChunk)
	for remain := info.Size; remain > 0; {
		s.mu.Lock()
		for s.credit == 0 && !s.gone {
			s.cond.Wait()
		}
		if s.gone {
			s.mu.Unlock()
			return
		}
		n := min(remain, FileChunk, s.credit)
		s.mu.Unlock()
		if _, err := io.ReadFull(f, buf[:n]); err != nil {
			abort(fmt.Sprintf("reading %s: %v", JoinHome(comps), err))
			return
		}
		remain -= n
		if remain == 0 {
			var after unix.Stat_t
			if err := unix.Fstat(int(f.Fd()), &after); err != nil || after.Size != before.Size ||
				after.Mtim != before.Mtim || after.Ctim != before.Ctim {
				abort(JoinHome(comps) + " changed while it was being downloaded")
				return
			}
		}
		s.mu.Lock()
		s.credit -= n
		s.mu.Unlock()
		if remain == 0 {
			a.files.remove(s.id) // the host may be done once it has these bytes
		}
		a.sendStream(FrameFileChunk, s.id, buf[:n])
	}
	a.sendStream(FrameFileChunk, s.id, nil)
}
