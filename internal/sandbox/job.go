package sandbox

import (
	"errors"
	"fmt"
	"time"
)

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

// InstallRequest is one POST /v1/sessions/{id}/install.
type InstallRequest struct {
	Manager  string   `json:"manager"`
	Packages []string `json:"packages"`
	// Lockfile (npm) is a package-lock.json (lockfileVersion 2 or 3), as
	// sent, in place of Packages: its packages are installed at the paths
	// it names.
	Lockfile []byte `json:"-"`
}

// InstalledPackage is one package an install put into a session.
type InstalledPackage struct {
	Requested string `json:"requested"`
	Name      string `json:"name"`
	Version   string `json:"version"`
	Filename  string `json:"filename"`
	SHA256    string `json:"sha256"`
	// Resolved is true when the request named no version and the newest
	// admitted one was chosen.
	Resolved bool `json:"resolved"`
	// Path (npm) is where the package went, relative to the home:
	// "node_modules/a", or "node_modules/a/node_modules/b" for a copy
	// nested under the package that needs it.
	Path string `json:"path,omitempty"`
	// Stripped lists what the mirror took out of the published package
	// (npm: "scripts.postinstall", "dependencies", ...); empty when it was
	// installed byte for byte as published.
	Stripped []string `json:"stripped,omitempty"`
}

// InstallReply is the outcome of a successful install.
type InstallReply struct {
	Manager    string             `json:"manager"`
	Installed  []InstalledPackage `json:"installed"`
	DurationMS int64              `json:"duration_ms"`
	// Phases splits DurationMS (nil when unknown).
	Phases *InstallPhases `json:"phases_ms,omitempty"`
}

// InstallPhases is where an install's time went, in milliseconds.
type InstallPhases struct {
	// Network: the installer's fenced network set up and torn down.
	Network int64 `json:"network"`
	// Sandbox: the installer sandbox started and destroyed.
	Sandbox int64 `json:"sandbox"`
	// Startup: the installer program's start and its leftover cleanup.
	Startup int64 `json:"startup"`
	// Stage: pip (or npm's fetch and unpack) staging the packages.
	Stage int64 `json:"stage"`
	// Commit: the staged packages swapped into the home.
	Commit int64 `json:"commit"`
}

// PackageRejection is why one requested package cannot be installed.
type PackageRejection struct {
	Package string `json:"package"`
	Reason  string `json:"reason"`
	Status  string `json:"status,omitempty"` // missing, refused, quarantined, removed, not_a_wheel, invalid, missing_dependencies, conflict, integrity_mismatch
	// MissingDependencies (status missing_dependencies) are what the
	// package needs that neither the request nor the session has.
	MissingDependencies []MissingDependency `json:"missing_dependencies,omitempty"`
}

// MissingDependency is one dependency an npm package needs installed next
// to it: its name, the range the package asks for, and the versions the
// mirror serves that satisfy the range (oldest first; empty when none).
type MissingDependency struct {
	Name           string   `json:"name"`
	Range          string   `json:"range"`
	MirrorVersions []string `json:"mirror_versions"`
	// Requested is the version the same request asked for, when it does
	// not satisfy Range.
	Requested string `json:"requested,omitempty"`
	// Installed is the version the session holds, when it does not
	// satisfy Range.
	Installed string `json:"installed,omitempty"`
}

// RejectedError means at least one package cannot be installed; nothing
// was installed. errors.Is(err, ErrRejected) holds.
type RejectedError struct {
	Packages []PackageRejection
}

func (e *RejectedError) Error() string {
	return fmt.Sprintf("%d of the requested packages cannot be installed", len(e.Packages))
}

// Is lets errors.Is(err, ErrRejected) hold.
func (e *RejectedError) Is(target error) bool { return target == ErrRejected }

// Install errors.
var (
	// ErrRejected is wrapped by RejectedError (422).
	ErrRejected = errors.New("packages rejected")
	// ErrInstallFailed means the installer ran and failed; nothing was
	// installed.
	ErrInstallFailed = errors.New("install failed; nothing was installed")
	// ErrBadLockfile means an install's lockfile is refused (400): a path
	// outside node_modules, a package not from a registry, a bound passed.
	ErrBadLockfile = errors.New("lockfile refused")
)
