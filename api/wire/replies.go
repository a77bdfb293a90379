package wire

import (
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Health is the reply of GET /healthz; Build is set when the server was
// given its build information.
type Health struct {
	Status string `json:"status"`
	Build  *Build `json:"build,omitempty"`
}

// Build describes the running binary. It has the fields of
// internal/buildinfo's Info, which converts to it (wire stays a leaf
// without that package's file reads).
type Build struct {
	Version    string `json:"version"`
	Revision   string `json:"revision"`
	Modified   bool   `json:"modified"`
	CommitTime string `json:"commit_time"`
	BuildTime  string `json:"build_time"`
	GoVersion  string `json:"go_version"`
	Runsc      string `json:"runsc,omitempty"`
}

// CheckResult is one readiness check as /readyz and the install gate
// (the details of its 503) show it.
type CheckResult struct {
	Name       string    `json:"name"`
	Status     string    `json:"status"`
	Detail     string    `json:"detail"`
	LastRun    time.Time `json:"last_run"`
	DurationMS int64     `json:"duration_ms"`
}

// Ready is the reply of GET /readyz: status ready (200) or not_ready
// (503, with Draining set, true while the server drains).
type Ready struct {
	Status   string        `json:"status"`
	Draining *bool         `json:"draining,omitempty"`
	Checks   []CheckResult `json:"checks"`
}

// NotReadyDetails are the details of an install's 503 not_ready: the
// failing checks.
type NotReadyDetails struct {
	Checks []CheckResult `json:"checks"`
}

// Runtime is one language the server runs, as GET /v1/runtimes lists it:
// Version is its default version, Versions every version (newest first),
// each with its series, whether it is the default and its upstream end of
// life. Aliases is null for a language without any. The executor reports
// the same shape, so it is defined once, in internal/sandbox.
type Runtime = sandbox.Runtime

// RuntimeVersion is one version of a language (see Runtime).
type RuntimeVersion = sandbox.RuntimeVersion

// Limits are the caller's plan limits, in GET /v1/runtimes.
type Limits struct {
	Plan        string `json:"plan"`
	MaxTimeout  int64  `json:"max_timeout" jsonschema:"largest timeout in seconds"`
	MemoryMB    int64  `json:"memory_mb"`
	Sessions    bool   `json:"sessions" jsonschema:"whether the plan has stateful sessions (create_session)"`
	MaxSessions int    `json:"max_sessions"`
}

// RuntimeList is the reply of GET /v1/runtimes (and the MCP tool
// list_runtimes' result).
type RuntimeList struct {
	Runtimes []Runtime `json:"runtimes"`
	Limits   Limits    `json:"limits"`
}

// Session is a session as POST, GET and the lifecycle calls of
// /v1/sessions report it.
type Session struct {
	ID        string    `json:"id"`
	Language  string    `json:"language"`
	Version   string    `json:"version,omitempty"`
	State     string    `json:"state"`
	IdleTTL   int64     `json:"idle_ttl"`
	Network   Network   `json:"network"`
	CreatedAt time.Time `json:"created_at"`
	LastUsed  time.Time `json:"last_used_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// HibernatedAt is when the session last hibernated (absent: never).
	HibernatedAt *time.Time `json:"hibernated_at,omitempty"`
	ForkedFrom   string     `json:"forked_from,omitempty"`
	DiskMB       int64      `json:"disk_mb,omitempty"`
	// Kernel: the session's executes run as cells of one kernel.
	Kernel bool `json:"kernel,omitempty"`
	// Live: the sandbox holds memory that hibernation checkpoints.
	Live bool `json:"live,omitempty"`
	// CheckpointMB is the size of the checkpoint a hibernated live
	// session waits in, rounded up to MiB.
	CheckpointMB int64 `json:"checkpoint_mb,omitempty"`
	// MemoryRestored and MemoryLostReason are the outcome of the latest
	// resume that had memory to bring back.
	MemoryRestored   *bool  `json:"memory_restored,omitempty"`
	MemoryLostReason string `json:"memory_lost_reason,omitempty"`
}

// SessionOf is s as the API reports it: times in UTC, the idle TTL in
// whole seconds, the disk limit in MiB.
func SessionOf(s sandbox.Session) Session {
	j := Session{ID: s.ID, Language: s.Language, Version: s.Version, State: string(s.State), IdleTTL: int64(s.IdleTTL / time.Second),
		Network: s.Network.Public(), CreatedAt: s.CreatedAt.UTC(), LastUsed: s.LastUsedAt.UTC(), ExpiresAt: s.ExpiresAt().UTC(),
		ForkedFrom: s.ForkedFrom, DiskMB: s.DiskBytes >> 20, Kernel: s.Kernel, Live: s.Live, CheckpointMB: (s.CheckpointBytes + 1<<20 - 1) >> 20}
	j.MemoryRestored, j.MemoryLostReason = memoryOf(s.Memory)
	if !s.HibernatedAt.IsZero() {
		t := s.HibernatedAt.UTC()
		j.HibernatedAt = &t
	}
	return j
}

// SessionList is the reply of GET /v1/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// StreamChunk is the data of a stream's stdout and stderr events.
type StreamChunk struct {
	Data string `json:"data"`
}

// EgressDecisions is the reply of GET /v1/sessions/{id}/egress.
type EgressDecisions struct {
	SessionID string           `json:"session_id"`
	Decisions []EgressDecision `json:"decisions"`
}

// The file and install shapes are the executor's own results, declared
// beside the sandbox types it fills; these names are their API spelling.
type (
	// FileInfo describes one file in a session's home (a PUT's reply and
	// a listing's entry).
	FileInfo = sandbox.FileInfo
	// InstallReply is the reply of POST /v1/sessions/{id}/install.
	InstallReply = sandbox.InstallReply
	// InstalledPackage is one entry of InstallReply.Installed.
	InstalledPackage = sandbox.InstalledPackage
	// InstallPhases is InstallReply.Phases.
	InstallPhases = sandbox.InstallPhases
	// PackageRejection is one entry of an install's 422 details.
	PackageRejection = sandbox.PackageRejection
)

// FileListing is the reply of GET /v1/sessions/{id}/files?dir=.
type FileListing struct {
	Path      string     `json:"path"`
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated"`
}

// RejectedDetails are the details of an install's 422 packages_rejected.
type RejectedDetails struct {
	Packages []PackageRejection `json:"packages"`
}

// FileEvent is the data of a "change" event of
// GET /v1/sessions/{id}/files/watch.
type FileEvent = sandbox.FileEvent

// WatchEnd is the data of a watch's "start" (empty) and "end" events.
type WatchEnd struct {
	// Reason is why the watch ended: removed (the folder went) or timeout
	// (it ran for its hour).
	Reason string `json:"reason,omitempty"`
}
