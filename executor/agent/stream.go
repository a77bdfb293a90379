package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sandboxapi/sandboxapi/executor/guest"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// The host end of file streams over the agent channel (see
// executor/guest/filestream.go for the wire format and the flow control). A
// stream's state is filled by the channel's reader (deliver) and drained
// by the file call that opened it.

// ErrStreamProtocol marks a guest that broke the stream protocol.
var ErrStreamProtocol = errors.New("guest broke the file stream protocol")

// ErrDownloadAborted is a download the guest gave up after its result
// (a read error, or the file changed while it was sent).
var ErrDownloadAborted = errors.New("download aborted in the sandbox")

// chunkPool holds download frame buffers (stream id and one chunk), so a
// download reuses a few instead of making garbage of every chunk.
var chunkPool = sync.Pool{New: func() any { b := make([]byte, 4+guest.FileChunk); return &b }}

// chunkBuffer gives the reader a pooled buffer for a download frame.
func chunkBuffer(typ byte, n int) []byte {
	if typ != guest.FrameFileChunk || n > 4+guest.FileChunk || n < 4+64<<10 {
		return nil
	}
	return *chunkPool.Get().(*[]byte)
}

// recycleChunk returns a download frame's payload buffer to the pool.
func recycleChunk(p []byte) {
	if cap(p) == 4+guest.FileChunk {
		p = p[:cap(p)]
		chunkPool.Put(&p)
	}
}

// streamTable holds a channel's open streams. The zero value is ready.
type streamTable struct {
	mu     sync.Mutex
	m      map[uint32]*Stream
	nextID uint32
	failed error // the channel's failure: no new streams
	slots  chan struct{}
	init   sync.Once
	// watches counts open watch streams, which take no transfer slot
	// (at most guest.MaxWatches; watch.go).
	watches int
}

// Stream is one transfer or watch on a channel (Conn.OpenStream,
// Conn.OpenWatch); it is safe for concurrent use. Fields below mu are
// guarded by it.
type Stream struct {
	id      uint32
	a       *Conn
	isWatch bool // a watch: no transfer slot (streamTable.watches)
	mu      sync.Mutex
	cnd     *sync.Cond

	result *guest.FileResult
	// download frames not yet read (payloads: stream id, then data), and
	// whether the download's end has come
	data     [][]byte
	buffered int64
	eof      bool
	// upload credit: bytes the guest will take
	credit int64
	err    error // the stream failed (channel gone, download aborted)
}

// open makes a stream, waiting for a free slot (the guest serves at most
// guest.MaxFileStreams at once).
func (t *streamTable) open(ctx context.Context, a *Conn) (*Stream, error) {
	t.init.Do(func() { t.slots = make(chan struct{}, guest.MaxFileStreams) })
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.failed != nil {
		<-t.slots
		return nil, t.failed
	}
	if t.m == nil {
		t.m = map[uint32]*Stream{}
	}
	t.nextID++
	if t.nextID == 0 {
		t.nextID = 1
	}
	s := &Stream{id: t.nextID, a: a, credit: guest.FileWindow}
	s.cnd = sync.NewCond(&s.mu)
	t.m[s.id] = s
	return s, nil
}

// close forgets a stream and frees its slot; safe to call twice.
func (t *streamTable) close(s *Stream) {
	t.mu.Lock()
	_, ok := t.m[s.id]
	delete(t.m, s.id)
	if ok && s.isWatch {
		t.watches--
	}
	t.mu.Unlock()
	if ok && !s.isWatch {
		<-t.slots
	}
}

// failAll fails every open stream and refuses new ones.
func (t *streamTable) failAll(err error) {
	t.mu.Lock()
	if t.failed == nil {
		t.failed = err
	}
	streams := make([]*Stream, 0, len(t.m))
	for _, s := range t.m {
		streams = append(streams, s)
	}
	t.mu.Unlock()
	for _, s := range streams {
		s.fail(err)
	}
}

// deliver hands one guest frame to its stream. Frames of streams that
// have ended are dropped; an error means the guest broke the protocol.
func (t *streamTable) deliver(typ byte, p []byte) error {
	id, data, err := guest.StreamPayload(p)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrStreamProtocol, err)
	}
	t.mu.Lock()
	s := t.m[id]
	t.mu.Unlock()
	if s == nil {
		recycleChunk(p)
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.cnd.Broadcast()
	switch typ {
	case guest.FrameFileResult:
		if s.result != nil {
			return fmt.Errorf("%w: a second result on stream %d", ErrStreamProtocol, id)
		}
		var res guest.FileResult
		if err := json.Unmarshal(data, &res); err != nil {
			return fmt.Errorf("%w: decoding result: %v", ErrStreamProtocol, err)
		}
		s.result = &res
	case guest.FrameFileChunk:
		switch {
		case s.result == nil || s.eof:
			return fmt.Errorf("%w: data out of place on stream %d", ErrStreamProtocol, id)
		case len(data) == 0:
			s.eof = true
		case s.buffered+int64(len(data)) > guest.FileWindow:
			return fmt.Errorf("%w: stream %d went over its window", ErrStreamProtocol, id)
		default:
			s.data = append(s.data, p)
			s.buffered += int64(len(data))
		}
	case guest.FrameFileAbort:
		if s.err == nil {
			s.err = fmt.Errorf("%w: %s", ErrDownloadAborted, data)
		}
	case guest.FrameFileCredit:
		n, err := guest.Credit(data)
		if err != nil || s.credit+n > guest.FileWindow {
			return fmt.Errorf("%w: bad credit on stream %d", ErrStreamProtocol, id)
		}
		s.credit += n
	}
	return nil
}

// ID is the stream's number on its channel (guest.FileOpen.Stream).
func (s *Stream) ID() uint32 { return s.id }

// Close forgets the stream and frees its slot; safe to call twice.
func (s *Stream) Close() { s.a.streams.close(s) }

// OpenStream makes a transfer stream on the channel, waiting for a free
// slot (the guest serves at most guest.MaxFileStreams at once). The
// caller sends its guest.FileOpen and closes it.
func (a *Conn) OpenStream(ctx context.Context) (*Stream, error) {
	return a.streams.open(ctx, a)
}

// OpenWatch makes a watch stream on the channel, refusing one over
// guest.MaxWatches.
func (a *Conn) OpenWatch() (*Stream, error) {
	return a.streams.openWatch(a)
}

func (s *Stream) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.cnd.Broadcast()
	s.mu.Unlock()
}

// watch wakes the stream's waiters when ctx ends; the returned func stops it.
func (s *Stream) watch(ctx context.Context) func() bool {
	return context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cnd.Broadcast()
		s.mu.Unlock()
	})
}

// AwaitResult waits for the guest's result. A nil result comes with the
// error that ended the stream first.
func (s *Stream) AwaitResult(ctx context.Context) (*guest.FileResult, error) {
	defer s.watch(ctx)()
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.result == nil && s.err == nil && ctx.Err() == nil {
		s.cnd.Wait()
	}
	if s.result != nil {
		return s.result, nil
	}
	if s.err != nil {
		return nil, s.err
	}
	return nil, ctx.Err()
}

// Send writes one frame of this stream.
func (s *Stream) Send(typ byte, data []byte) error {
	s.a.wmu.Lock()
	defer s.a.wmu.Unlock()
	return guest.WriteStreamFrame(s.a.w, typ, s.id, data)
}

// Upload sends r's bytes as the stream's upload: chunks as the guest's
// credit allows, then the end frame, but only after a clean io.EOF with
// the announced size (size < 0: unknown). Any other end cancels the
// stream, so the guest writes nothing. It stops early, without error,
// when the guest has answered (it refused the upload).
func (s *Stream) Upload(ctx context.Context, r io.Reader, size, max int64) (sent int64, err error) {
	defer s.watch(ctx)()
	// Two buffers: the next chunk is read from r (a network body comes in
	// pieces) while the last one crosses to the guest.
	type piece struct {
		buf []byte
		n   int
		err error
	}
	free := make(chan []byte, 2)
	var pooled [][]byte
	for range 2 {
		if size >= 0 && size < guest.FileChunk {
			free <- make([]byte, size+1) // room to see the end
			continue
		}
		b := *chunkPool.Get().(*[]byte)
		pooled = append(pooled, b)
		free <- b[:guest.FileChunk]
	}
	pieces := make(chan piece, 1)
	stop := make(chan struct{})
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			var b []byte
			select {
			case b = <-free:
			case <-stop:
				return
			}
			n, err := io.ReadAtLeast(r, b, len(b))
			select {
			case pieces <- piece{b, n, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		close(stop)
		select {
		case <-readerDone:
			for _, b := range pooled {
				recycleChunk(b)
			}
		case <-time.After(5 * time.Second): // a stalled client: its reader (and buffers) are abandoned
		}
	}()
	cancel := func(err error) (int64, error) {
		_ = s.Send(guest.FrameFileCancel, nil)
		return sent, err
	}
	for {
		var p piece
		select {
		case p = <-pieces:
		case <-ctx.Done():
			return cancel(ctx.Err())
		}
		n, rerr := p.n, p.err
		if n > 0 {
			sent += int64(n)
			if sent > max {
				return cancel(fmt.Errorf("%w: upload is over the limit of %d bytes", sandbox.ErrTooLarge, max))
			}
			s.mu.Lock()
			for s.credit < int64(n) && s.result == nil && s.err == nil && ctx.Err() == nil {
				s.cnd.Wait()
			}
			answered, serr := s.result != nil, s.err
			if !answered && serr == nil && ctx.Err() == nil {
				s.credit -= int64(n)
			}
			s.mu.Unlock()
			switch {
			case answered:
				return sent, nil
			case serr != nil:
				return sent, serr
			case ctx.Err() != nil:
				return cancel(ctx.Err())
			}
			if err := s.Send(guest.FrameFileData, p.buf[:n]); err != nil {
				return sent, fmt.Errorf("%w: sending upload: %w", ErrChannel, err)
			}
		}
		free <- p.buf
		switch {
		case errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF):
			if size >= 0 && sent != size {
				return cancel(fmt.Errorf("%w: upload ended after %d of %d bytes", sandbox.ErrInvalid, sent, size))
			}
			if err := s.Send(guest.FrameFileData, nil); err != nil {
				return sent, fmt.Errorf("%w: sending upload: %w", ErrChannel, err)
			}
			return sent, nil
		case rerr != nil:
			return cancel(fmt.Errorf("reading upload: %w", rerr))
		}
	}
}

// Reader is a download's body: exactly size bytes, read from the
// stream's buffer, with credit granted back as the caller reads. Make it
// with NewReader; one goroutine reads it at a time.
type Reader struct {
	s       *Stream
	ctx     context.Context
	remain  int64
	granted int64  // read since the last credit frame
	frame   []byte // the payload r.cur is part of
	cur     []byte
	done    func(complete bool)
	closed  bool
}

// NewReader reads the download of s, size bytes, until ctx ends; done
// runs once at Close, saying whether every byte was read.
func NewReader(ctx context.Context, s *Stream, size int64, done func(complete bool)) *Reader {
	return &Reader{s: s, ctx: ctx, remain: size, done: done}
}

// Remaining is how many bytes of the download are not read yet.
func (r *Reader) Remaining() int64 { return r.remain }

func (r *Reader) Read(p []byte) (int, error) {
	if r.remain <= 0 {
		return 0, io.EOF
	}
	if err := r.fill(); err != nil {
		return 0, err
	}
	n := copy(p, r.cur)
	if err := r.consumed(n); err != nil {
		return n, err
	}
	if r.remain == 0 {
		return n, io.EOF
	}
	return n, nil
}

// WriteTo writes the rest of the download to w a whole chunk at a time
// (io.Copy uses it: no 32 KiB copy loop between the stream and w).
func (r *Reader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for r.remain > 0 {
		if err := r.fill(); err != nil {
			return total, err
		}
		n, err := w.Write(r.cur)
		total += int64(n)
		if cerr := r.consumed(n); err == nil {
			err = cerr
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// fill makes r.cur the next chunk of the download, waiting for it.
func (r *Reader) fill() error {
	if len(r.cur) > 0 {
		return nil
	}
	s := r.s
	stop := s.watch(r.ctx)
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.data) == 0 && !s.eof && s.err == nil && r.ctx.Err() == nil {
		s.cnd.Wait()
	}
	switch {
	case len(s.data) > 0:
		r.frame = s.data[0]
		r.cur = r.frame[4:]
		s.data[0] = nil
		s.data = s.data[1:]
		s.buffered -= int64(len(r.cur))
	case s.err != nil:
		return s.err
	case s.eof:
		return io.ErrUnexpectedEOF
	default:
		return r.ctx.Err()
	}
	if int64(len(r.cur)) > r.remain {
		return fmt.Errorf("%w: more bytes than the file's size", ErrStreamProtocol)
	}
	return nil
}

// consumed drops n bytes of r.cur and grants the guest credit for them.
func (r *Reader) consumed(n int) error {
	r.cur = r.cur[n:]
	if len(r.cur) == 0 && r.frame != nil {
		recycleChunk(r.frame)
		r.frame, r.cur = nil, nil
	}
	r.remain -= int64(n)
	r.granted += int64(n)
	if r.granted >= guest.FileChunk && r.remain > 0 {
		if err := r.s.Send(guest.FrameFileWindow, guest.CreditData(r.granted)); err != nil {
			return fmt.Errorf("granting credit: %w", err)
		}
		r.granted = 0
	}
	return nil
}

// Close ends the download; one closed early cancels the guest's side.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	complete := r.remain == 0
	if !complete {
		_ = r.s.Send(guest.FrameFileCancel, nil)
	}
	r.s.Close()
	r.done(complete)
	return nil
}
