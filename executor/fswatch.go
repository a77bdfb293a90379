package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/sandboxapi/sandboxapi/executor/agent"
	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/executor/host"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Watches: the guest follows a folder of the home with inotify and sends
// its changes on a stream of the agent channel (guest/fswatch.go). A
// watch takes none of the four transfer slots (at most guest.MaxWatches
// of its own per session, more are ErrCapacity), does not keep the
// session busy (idle hibernation may stop the sandbox under it) and ends
// with the sandbox: hibernation, the session's end, a lost sandbox. A
// sandbox without a channel (adopted after a restart) has no watches.

// maxWatchLine bounds one event line from the guest.
const maxWatchLine = 16 << 10

// Watch is a running watch. Next and Close may be called from different
// goroutines; Next from one at a time.
type Watch struct {
	log *slog.Logger
	id  string
	st  *agent.Stream
	dir string

	partial []byte // an event line split across frames
	once    sync.Once
}

var _ sandbox.FileWatch = (*Watch)(nil)

// Watch starts watching the folder at path (recursive: and the folders
// below it) in owner's session. The watch runs until Close, until the
// folder goes (Next then answers io.EOF) or until the sandbox stops.
func (f *Files) Watch(ctx context.Context, owner, id, p string, recursive bool) (sandbox.FileWatch, error) {
	comps, err := checkFilePath(p)
	if err != nil {
		return nil, err
	}
	s, a, err := f.s.fileChannel(ctx, owner, id)
	if err != nil {
		return nil, err
	}
	if a == nil {
		return nil, fmt.Errorf("%w: the session's sandbox cannot be watched until it restarts", sandbox.ErrCapacity)
	}
	// Not busy while it runs: a watch does not keep a session awake.
	f.s.unuse(s)
	st, err := a.OpenWatch()
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(guest.FileOpen{Stream: st.ID(), Op: "watch", Path: guest.JoinHome(comps), UID: host.SandboxUID, GID: host.SandboxUID,
		FSArgs: guest.FSArgs{Recursive: recursive}})
	if err == nil {
		err = a.Send(guest.FrameFileOpen, b)
	}
	if err != nil {
		st.Close()
		return nil, f.streamError(ctx, id, err)
	}
	res, err := st.AwaitResult(ctx)
	if err == nil {
		err = f.fileError(ctx, id, res, nil, "")
	} else {
		err = f.streamError(ctx, id, err)
	}
	if err != nil {
		_ = st.Send(guest.FrameFileCancel, nil)
		st.Close()
		return nil, err
	}
	f.log.InfoContext(ctx, "file watch", "session", id, "path", guest.JoinHome(comps), "recursive", recursive)
	return &Watch{log: f.log, id: id, st: st, dir: guest.JoinHome(comps)}, nil
}

// Next waits for the next events. io.EOF: the watched folder went; any
// other error: the sandbox stopped, or ctx ended.
func (w *Watch) Next(ctx context.Context) ([]sandbox.FileEvent, error) {
	s := w.st
	for {
		frames, n, eof, serr := s.Take(ctx)
		if len(frames) == 0 {
			switch {
			case serr != nil:
				return nil, fmt.Errorf("watch of %s ended: %w", w.dir, serr)
			case eof:
				return nil, io.EOF
			default:
				return nil, ctx.Err()
			}
		}
		if err := s.Send(guest.FrameFileWindow, guest.CreditData(n)); err != nil {
			return nil, fmt.Errorf("granting credit: %w", err)
		}
		var out []sandbox.FileEvent
		for _, f := range frames {
			w.partial = append(w.partial, f[4:]...)
			agent.Recycle(f)
		}
		for {
			i := bytes.IndexByte(w.partial, '\n')
			if i < 0 {
				break
			}
			var ev guest.WatchEvent
			if err := json.Unmarshal(w.partial[:i], &ev); err != nil {
				return nil, fmt.Errorf("%w: a watch event: %v", agent.ErrStreamProtocol, err)
			}
			w.partial = w.partial[i+1:]
			p := w.dir
			if ev.Name != "" {
				p += "/" + ev.Name
			}
			out = append(out, sandbox.FileEvent{Path: p, Op: ev.Op})
		}
		if len(w.partial) > maxWatchLine {
			return nil, fmt.Errorf("%w: a watch event over %d bytes", agent.ErrStreamProtocol, maxWatchLine)
		}
		w.partial = append([]byte(nil), w.partial...)
		if len(out) > 0 {
			return out, nil
		}
	}
}

// Close stops the watch; safe to call more than once.
func (w *Watch) Close() error {
	w.once.Do(func() {
		_ = w.st.Send(guest.FrameFileCancel, nil)
		w.st.Close()
		w.log.Info("file watch ended", "session", w.id, "path", w.dir)
	})
	return nil
}
