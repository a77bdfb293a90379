package guest

import (
	"bytes"
	"strconv"
	"testing"
)

// FuzzParseStat feeds arbitrary /proc/<pid>/stat text (its comm is the
// user's choice: any bytes but NUL, up to 15 of them): it never panics,
// and the session it reads is the 4th field after the last ')'.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("42 (sleep) S 1 42 42 0 -1"))
	f.Add([]byte("42 (a) S 1 2 3) S 1 5 6 0"))
	f.Add([]byte("42 () Z 1 1 1"))
	f.Add([]byte(")))))"))
	f.Add([]byte("42 (x) S 1 1 99999999999999999999999"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, ok := parseStat(42, b)
		if !ok {
			return
		}
		i := bytes.LastIndexByte(b, ')')
		f := bytes.Fields(b[i+1:])
		if sid, err := strconv.Atoi(string(f[3])); st.pid != 42 || err != nil || sid != st.sid {
			t.Fatalf("parseStat(%q) = %+v", b, st)
		}
	})
}

// FuzzOutLog writes and reads a log at fuzzed sizes and offsets: reads
// never return bytes before the kept start or after the end, chunks are
// contiguous, the log stays within its bound, and what is read is what
// was written at those offsets.
func FuzzOutLog(f *testing.F) {
	f.Add([]byte{3, 200, 7, 1}, int64(0), 16)
	f.Add([]byte{255, 255, 255}, int64(300), 1)
	f.Add([]byte{}, int64(-9), 0)
	f.Fuzz(func(t *testing.T, sizes []byte, from int64, max int) {
		if max < 0 || max > 1<<20 {
			return
		}
		l := outLog{max: 1024}
		var all []byte
		for i, n := range sizes {
			chunk := bytes.Repeat([]byte{byte(i)}, int(n))
			l.add(StreamStdout, chunk)
			all = append(all, chunk...)
			if l.size > l.max && len(l.chunks) > 1 {
				t.Fatalf("log of %d bytes over its %d bound", l.size, l.max)
			}
		}
		chunks, next, dropped := l.read(from, max)
		start := max64(from, 0) + dropped
		if from < l.base && start != l.base && from >= 0 {
			t.Fatalf("read from %d with %d dropped starts at %d, base %d", from, dropped, start, l.base)
		}
		n := 0
		off := int64(-1)
		for _, c := range chunks {
			if c.Offset < l.base || c.Offset+int64(len(c.Data)) > l.end || (off >= 0 && c.Offset != off) {
				t.Fatalf("chunk at %d of %d bytes, base %d end %d, expected at %d", c.Offset, len(c.Data), l.base, l.end, off)
			}
			if !bytes.Equal(c.Data, all[c.Offset:c.Offset+int64(len(c.Data))]) {
				t.Fatalf("chunk at %d holds other bytes than were written there", c.Offset)
			}
			off = c.Offset + int64(len(c.Data))
			n += len(c.Data)
		}
		if n > max || next > l.end || (off >= 0 && next != off) {
			t.Fatalf("read %d bytes (max %d), next %d, end %d", n, max, next, l.end)
		}
	})
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}
