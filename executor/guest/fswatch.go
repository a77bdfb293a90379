package guest

// Watches: a file stream of op "watch" reports changes under a folder of
// the home as they happen, with inotify (gVisor implements it for changes
// made inside the sandbox, which are the only ones a home sees while its
// sandbox runs). The folder (and, recursive, every folder below it, up to
// maxWatchDirs) is opened on the files API's walk as the user, so no
// symlink is followed; the inotify watch is then added on that open
// descriptor through /proc/self/fd (as root: pid 1 is not dumpable, so
// its /proc/self is root's), never by a path the sandbox could redirect.
//
// Wire: the stream's result (empty: the watch runs; or the failure), then
// download frames of JSON lines (WatchEvent), as credit allows, until the
// host cancels the stream, the watched folder goes (an empty frame ends
// the stream) or the channel fails. While the host grants no credit the
// kernel's queue fills; what it drops is reported as one "overflow".

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WatchEvent is one change under a watched folder.
type WatchEvent struct {
	// Name is the path relative to the watched folder ("" for the folder
	// itself).
	Name string `json:"name"`
	// Op is create, write, remove, rename (moved away), chmod, or
	// overflow (events were lost).
	Op string `json:"op"`
}

const (
	// MaxWatches is how many watches a sandbox serves at once, beside
	// MaxFileStreams transfers.
	MaxWatches = 4
	// maxWatchDirs bounds the folders one recursive watch follows (each
	// holds a descriptor); folders past it are not watched.
	maxWatchDirs = 256
	// watchFlush is how long events gather before they are sent.
	watchFlush = 50 * time.Millisecond
)

// watchMask has no IN_DONT_FOLLOW: the name given is /proc/self/fd/N,
// a magic link to the descriptor's own folder that must be followed
// (Linux refuses it as a link otherwise); nothing else is resolved.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// watchedDir is one folder a watch follows.
type watchedDir struct {
	fd  int
	rel string // "" for the watched folder, else "a/b"
}

type watcher struct {
	ifd       int
	dirs      map[int]*watchedDir // by watch descriptor
	recursive bool
	root      int // the root's watch descriptor
	asUser    func(func() error) error
	// parent is the watched folder's parent (-1 for the home) and
	// rootName its name there, to see it go (rootGone).
	parent   int
	rootName string
	rootIno  uint64
}

func (w *watcher) close() {
	for _, d := range w.dirs {
		unix.Close(d.fd)
	}
	if w.parent >= 0 {
		unix.Close(w.parent)
	}
	unix.Close(w.ifd)
}

// add watches the open folder fd (taking it over) at rel; with recursive,
// the folders below it too, as far as maxWatchDirs allows.
func (w *watcher) add(fd int, rel string) error {
	if len(w.dirs) >= maxWatchDirs {
		unix.Close(fd)
		return nil
	}
	wd, err := unix.InotifyAddWatch(w.ifd, fmt.Sprintf("/proc/self/fd/%d", fd), watchMask)
	if err != nil {
		unix.Close(fd)
		return classify(JoinHome(nil)+"/"+rel, err)
	}
	if old, ok := w.dirs[wd]; ok { // the same folder again (a hard link cannot be one; a move can)
		unix.Close(old.fd)
	}
	w.dirs[wd] = &watchedDir{fd: fd, rel: rel}
	if !w.recursive {
		return nil
	}
	var names []string
	_ = w.asUser(func() error {
		dup, err := unix.Dup(fd)
		if err != nil {
			return err
		}
		d := os.NewFile(uintptr(dup), rel)
		names, _ = d.Readdirnames(maxWatchDirs)
		d.Close()
		return nil
	})
	for _, n := range names {
		if strings.HasPrefix(n, StagingPrefix) {
			continue
		}
		w.addSub(fd, rel, n)
	}
	return nil
}

// addSub watches the folder name in the open folder fd, if it is one (a
// symlink is not).
func (w *watcher) addSub(fd int, rel, name string) {
	var st unix.Stat_t
	if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return
	}
	sub := joinRel(rel, name)
	var sfd int
	if w.asUser(func() error {
		var err error
		sfd, err = openDirAt(fd, name, sub, false)
		return err
	}) != nil {
		return
	}
	_ = w.add(sfd, sub)
}

func joinRel(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// events turns a read of the inotify descriptor into events; done says
// the watched folder itself went.
func (w *watcher) events(buf []byte) (out []WatchEvent, done bool) {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
		off += unix.SizeofInotifyEvent + int(ev.Len)
		name := strings.TrimRight(string(nameBytes), "\x00")
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			out = append(out, WatchEvent{Op: "overflow"})
			continue
		}
		d, ok := w.dirs[int(ev.Wd)]
		if !ok {
			continue
		}
		if ev.Mask&unix.IN_IGNORED != 0 {
			unix.Close(d.fd)
			delete(w.dirs, int(ev.Wd))
			if int(ev.Wd) == w.root {
				return out, true
			}
			continue
		}
		if strings.HasPrefix(name, StagingPrefix) {
			continue // an upload in progress: its rename is the event
		}
		rel := joinRel(d.rel, name)
		if name == "" {
			rel = d.rel
		}
		switch {
		case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0:
			if int(ev.Wd) == w.root {
				out = append(out, WatchEvent{Name: "", Op: "remove"})
				return out, true
			}
			continue // its parent reports it
		case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
			out = append(out, WatchEvent{Name: rel, Op: "create"})
			if w.recursive && ev.Mask&unix.IN_ISDIR != 0 {
				w.addSub(d.fd, d.rel, name)
			}
		case ev.Mask&(unix.IN_MODIFY|unix.IN_CLOSE_WRITE) != 0:
			out = append(out, WatchEvent{Name: rel, Op: "write"})
		case ev.Mask&unix.IN_DELETE != 0:
			out = append(out, WatchEvent{Name: rel, Op: "remove"})
			if ev.Mask&unix.IN_ISDIR != 0 {
				w.forget(rel)
			}
		case ev.Mask&unix.IN_MOVED_FROM != 0:
			out = append(out, WatchEvent{Name: rel, Op: "rename"})
			if ev.Mask&unix.IN_ISDIR != 0 {
				w.forget(rel)
			}
		case ev.Mask&unix.IN_ATTRIB != 0:
			out = append(out, WatchEvent{Name: rel, Op: "chmod"})
		}
	}
	return out, false
}

// forget stops following the folder at rel and those below it (it went
// or moved away). Their descriptors would keep them alive otherwise, and
// gVisor reports a folder's own deletion only once the last one closes.
func (w *watcher) forget(rel string) {
	for wd, d := range w.dirs {
		if wd != w.root && (d.rel == rel || strings.HasPrefix(d.rel, rel+"/")) {
			_, _ = unix.InotifyRmWatch(w.ifd, uint32(wd))
			unix.Close(d.fd)
			delete(w.dirs, wd)
		}
	}
}

// rootGone reports whether the watched folder was removed or moved
// away: gVisor sends no IN_DELETE_SELF while a descriptor (the watch's
// own) holds it open (measured), so its parent is asked for its name.
func (w *watcher) rootGone() bool {
	if _, ok := w.dirs[w.root]; !ok {
		return true
	}
	if w.parent < 0 {
		return false // the home stays
	}
	var st unix.Stat_t
	var err error
	_ = w.asUser(func() error {
		err = unix.Fstatat(w.parent, w.rootName, &st, unix.AT_SYMLINK_NOFOLLOW)
		return nil
	})
	return errors.Is(err, unix.ENOENT) || err == nil && st.Ino != w.rootIno
}

// serveWatch runs a watch stream until the host cancels it or the folder
// goes.
func (a *agent) serveWatch(s *fstream, comps []string, recursive bool, asUser func(func() error) error) {
	fail := func(err error) {
		a.files.remove(s.id)
		a.fileResult(s.id, fileFailure(err))
	}
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		fail(failf(CodeIO, "starting a watch: %v", err))
		return
	}
	w := &watcher{ifd: ifd, dirs: map[int]*watchedDir{}, recursive: recursive, asUser: asUser, parent: -1}
	defer w.close()
	var fd int
	if err := asUser(func() error {
		if len(comps) == 0 {
			var err error
			fd, err = a.host.walk(nil, false)
			return err
		}
		pfd, err := a.host.walk(comps[:len(comps)-1], false)
		if err != nil {
			return err
		}
		w.parent, w.rootName = pfd, comps[len(comps)-1]
		fd, err = openDirAt(pfd, w.rootName, JoinHome(comps), false)
		return err
	}); err != nil {
		fail(err)
		return
	}
	var rst unix.Stat_t
	if err := unix.Fstat(fd, &rst); err != nil {
		unix.Close(fd)
		fail(classify(JoinHome(comps), err))
		return
	}
	w.rootIno = rst.Ino
	if err := w.add(fd, ""); err != nil {
		fail(err)
		return
	}
	for wd, d := range w.dirs {
		if d.rel == "" {
			w.root = wd
		}
	}
	a.fileResult(s.id, FileResult{})
	buf := make([]byte, 64<<10)
	var pending []byte
	for {
		s.mu.Lock()
		gone := s.gone
		s.mu.Unlock()
		if gone {
			a.files.remove(s.id)
			return
		}
		fds := []unix.PollFd{{Fd: int32(ifd), Events: unix.POLLIN}}
		_, _ = unix.Poll(fds, 200)
		n, rerr := unix.Read(ifd, buf)
		done := false
		if (rerr != nil || n <= 0) && w.rootGone() {
			b, _ := json.Marshal(WatchEvent{Op: "remove"})
			pending = append(append(pending, b...), '\n')
			done = true
		}
		if rerr == nil && n > 0 {
			var evs []WatchEvent
			evs, done = w.events(buf[:n])
			for _, ev := range evs {
				b, _ := json.Marshal(ev)
				pending = append(append(pending, b...), '\n')
			}
			if !done && len(pending) < FileChunk/2 {
				time.Sleep(watchFlush) // let a burst gather into one frame
				continue
			}
		}
		if len(pending) > 0 {
			if !a.sendWatchData(s, pending) {
				a.files.remove(s.id)
				return
			}
			pending = pending[:0]
		}
		if done {
			a.files.remove(s.id)
			a.sendStream(FrameFileChunk, s.id, nil)
			return
		}
	}
}

// sendWatchData sends p as download frames as credit allows; false: the
// stream is gone.
func (a *agent) sendWatchData(s *fstream, p []byte) bool {
	for len(p) > 0 {
		s.mu.Lock()
		for s.credit == 0 && !s.gone {
			s.cond.Wait()
		}
		if s.gone {
			s.mu.Unlock()
			return false
		}
		n := min(int64(len(p)), FileChunk, s.credit)
		s.credit -= n
		s.mu.Unlock()
		a.sendStream(FrameFileChunk, s.id, p[:n])
		p = p[n:]
	}
	return true
}
