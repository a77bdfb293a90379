package guest

import (
	"bytes"
	"strconv"
	"testing"
)

// FuzzReadRequest feeds arbitrary bytes to the guest's header reader: it
// never panics, never allocates past MaxHeader, and on success consumes
// exactly the length line and the header, leaving the rest of the stream
// (a file upload's body) unread.
func FuzzReadRequest(f *testing.F) {
	good, err := Encode(&Request{Argv: []string{"python3", "{dir}/main.py"}, Env: []string{"A=b"}, UID: 1000, GID: 1000})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(append(good, "trailing body"...))
	f.Add([]byte("2\n{}"))
	f.Add([]byte("0\n"))
	f.Add([]byte("999999999\n{"))
	f.Add([]byte("12a\n{}"))
	f.Add([]byte("5\n[1,2]"))
	f.Add([]byte("\n"))
	f.Add([]byte("4\nnull"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		req, err := ReadRequest(r)
		if err != nil {
			return
		}
		if req == nil {
			t.Fatal("nil request without an error")
		}
		nl := bytes.IndexByte(data, '\n')
		n, _ := strconv.Atoi(string(data[:nl]))
		if consumed := len(data) - r.Len(); consumed != nl+1+n {
			t.Fatalf("consumed %d bytes, header is %d", consumed, nl+1+n)
		}
	})
}

// FuzzReadFrame feeds arbitrary bytes to the agent's frame reader, which
// reads what the other side of the sandbox boundary wrote: it never
// panics, never returns more than the limit, and a frame it accepts
// re-encodes to exactly the bytes it consumed.
func FuzzReadFrame(f *testing.F) {
	var seed bytes.Buffer
	_ = WriteFrame(&seed, FrameStdout, []byte("hello"))
	_ = WriteFrame(&seed, FrameResult, []byte(`{"status":"ok"}`))
	f.Add(seed.Bytes())
	f.Add([]byte{'R', 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{'O', 0, 0, 0, 3, 'a'})
	var files bytes.Buffer
	_ = WriteStreamFrame(&files, FrameFileData, 1, []byte("chunk"))
	_ = WriteStreamFrame(&files, FrameFileWindow, 1, CreditData(FileChunk))
	_ = WriteStreamFrame(&files, FrameFileChunk, 2, nil)
	f.Add(files.Bytes())
	f.Add([]byte{FrameFileData, 0, 0, 0, 2, 0, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		const max = 1 << 10
		r := bytes.NewReader(data)
		for {
			before := r.Len()
			typ, p, err := ReadFrame(r, max)
			if err != nil {
				return
			}
			if len(p) > max {
				t.Fatalf("payload of %d over the %d limit", len(p), max)
			}
			var again bytes.Buffer
			_ = WriteFrame(&again, typ, p)
			consumed := data[len(data)-before : len(data)-r.Len()]
			if !bytes.Equal(again.Bytes(), consumed) {
				t.Fatalf("frame does not round-trip")
			}
		}
	})
}
