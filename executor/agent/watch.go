package agent

import (
	"context"
	"fmt"
	"sync"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// A watch's events come on a stream of the channel that takes none of
// the transfer slots (guest/fswatch.go); the session service reads them
// with Take and parses the lines.

// openWatch makes a watch stream, refusing one over guest.MaxWatches.
func (t *streamTable) openWatch(a *Conn) (*Stream, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed != nil {
		return nil, t.failed
	}
	if t.watches >= guest.MaxWatches {
		return nil, fmt.Errorf("%w: at most %d watches per session", sandbox.ErrCapacity, guest.MaxWatches)
	}
	if t.m == nil {
		t.m = map[uint32]*Stream{}
	}
	t.nextID++
	if t.nextID == 0 {
		t.nextID = 1
	}
	s := &Stream{id: t.nextID, a: a, isWatch: true}
	s.cnd = sync.NewCond(&s.mu)
	t.m[s.id] = s
	t.watches++
	return s, nil
}

// Take waits until the stream has data, has ended or failed, or ctx
// ends, and takes every frame it holds (payloads: stream id, then data;
// give each back with Recycle), with the count of their data bytes, for
// which the caller grants credit. eof and err say how the stream ended
// (err: it failed); a wait that ctx ended takes nothing and says neither.
func (s *Stream) Take(ctx context.Context) (frames [][]byte, n int64, eof bool, err error) {
	stop := s.watch(ctx)
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.data) == 0 && !s.eof && s.err == nil && ctx.Err() == nil {
		s.cnd.Wait()
	}
	frames = s.data
	s.data = nil
	for _, f := range frames {
		n += int64(len(f) - 4)
	}
	s.buffered -= n
	return frames, n, s.eof, s.err
}

// Recycle gives a frame taken from a stream back to the channel's pool.
func Recycle(frame []byte) { recycleChunk(frame) }
