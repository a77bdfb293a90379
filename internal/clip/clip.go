// Package clip shortens program output for log lines and error messages:
// the end of a stream, or its last line, is what says why a program failed.
package clip

import "strings"

// LastLineMax is the most bytes LastLine keeps.
const LastLineMax = 300

// Tail returns the last n bytes of s (all of s when it is shorter).
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// LastLine returns the last non-blank line of s, at most LastLineMax bytes
// of its end.
func LastLine(s string) string {
	s = strings.TrimSpace(s)
	if k := strings.LastIndexByte(s, '\n'); k >= 0 {
		s = s[k+1:]
	}
	return Tail(s, LastLineMax)
}
