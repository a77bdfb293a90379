package sandbox

import "time"

// Job is a one-off program run in its own short-lived sandbox (the
// installer, readiness canaries): not a session's, but optionally with a
// session's home mounted and a prepared network namespace.
type Job struct {
	// Owner and SessionID name the session whose home is mounted at
	// /home/sandbox; both empty for no home. The owner must match.
	Owner     string
	SessionID string
	// NetnsPath is a network namespace to join; "" means no network.
	NetnsPath string
	// Files are written into a private folder ({dir} in Argv).
	Files []File
	Argv  []string
	// Env is the complete environment (nothing is added).
	Env     []string
	Stdin   []byte
	Timeout time.Duration
	// MaxOutputBytes caps stdout and stderr each (0: the executor default).
	MaxOutputBytes int64
}
