package testenv

import (
	"bytes"
	"sync"
)

// LogBuffer collects what a server's goroutines log (an slog handler's or
// a process's output) while the test reads it: its Write and String hold
// one lock.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String is everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
