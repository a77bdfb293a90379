package reqid

import (
	"crypto/rand"
	"encoding/hex"
)

// Valid reports whether a client's X-Request-Id may be used as the
// request id: 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-', so it is safe in
// log lines, headers and error bodies.
func Valid(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// New returns a fresh random request id.
func New() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
