package agent

import (
	"bytes"
	"testing"

	"github.com/sandboxapi/sandboxapi/executor/guest"
)

// FuzzStreamDeliver feeds arbitrary guest frames to the host's stream
// table, which reads what the other side of the sandbox boundary wrote: it
// never panics, never buffers more than a window of a stream's download,
// never grants itself more than a window of upload credit, and drops
// frames of streams it does not know.
func FuzzStreamDeliver(f *testing.F) {
	frame := func(typ byte, id uint32, data []byte) []byte {
		var b bytes.Buffer
		_ = guest.WriteStreamFrame(&b, typ, id, data)
		return b.Bytes()
	}
	f.Add(append(frame(guest.FrameFileResult, 1, []byte(`{"info":{"name":"x","size":3}}`)), frame(guest.FrameFileChunk, 1, []byte("abc"))...))
	f.Add(frame(guest.FrameFileCredit, 1, guest.CreditData(guest.FileWindow)))
	f.Add(frame(guest.FrameFileAbort, 1, []byte("changed")))
	f.Add(frame(guest.FrameFileChunk, 2, nil))
	f.Add([]byte{guest.FrameFileResult, 0, 0, 0, 2, 0, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		a := &Conn{}
		var streams []*Stream
		for i := 0; i < 2; i++ {
			s, err := a.streams.open(t.Context(), a)
			if err != nil {
				t.Fatal(err)
			}
			streams = append(streams, s)
		}
		r := bytes.NewReader(data)
		for {
			typ, p, err := guest.ReadFrame(r, 1<<20)
			if err != nil {
				break
			}
			if err := a.streams.deliver(typ, p); err != nil {
				break // the channel would be dropped here
			}
		}
		for _, s := range streams {
			s.mu.Lock()
			if s.buffered > guest.FileWindow || s.credit > guest.FileWindow || s.credit < 0 {
				t.Fatalf("stream %d: buffered %d, credit %d", s.id, s.buffered, s.credit)
			}
			var sum int64
			for _, d := range s.data {
				sum += int64(len(d) - 4)
			}
			if sum != s.buffered {
				t.Fatalf("stream %d: %d bytes queued, %d counted", s.id, sum, s.buffered)
			}
			s.mu.Unlock()
		}
	})
}
