package wire

import (
	"encoding/json"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Network is the network block of a session request (and of a session):
// whether the sandbox may reach the egress proxy, and the hosts it may
// reach through it. The executor carries it typed, so it is declared
// beside the sandbox types.
type Network = sandbox.NetworkRequest

// Credential is one entry of Network.Credentials.
type Credential = sandbox.Credential

// File is one file of a stateless execute, written before the code runs.
type File struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// ExecuteRequest is the body of POST /v1/execute and (without Language
// and Files, which the server refuses there) of
// POST /v1/sessions/{id}/execute. Code is a pointer so that a missing
// code tells apart from an empty one; the omitempty tags only shorten
// what a client sends.
type ExecuteRequest struct {
	Language string            `json:"language,omitempty"`
	Version  string            `json:"version,omitempty"`
	Code     *string           `json:"code"`
	Stdin    string            `json:"stdin,omitempty"`
	Timeout  *float64          `json:"timeout,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Stream   bool              `json:"stream,omitempty"`
	Files    []File            `json:"files,omitempty"`
}

// CreateSessionRequest is the body of POST /v1/sessions.
type CreateSessionRequest struct {
	Language string   `json:"language"`
	Version  string   `json:"version,omitempty"`
	IdleTTL  *float64 `json:"idle_ttl,omitempty"`
	Network  *Network `json:"network,omitempty"`
	// Kernel makes every execute a cell of one long-lived kernel
	// (python3 only).
	Kernel bool `json:"kernel,omitempty"`
}

// ForkRequest is the optional body of POST /v1/sessions/{id}/fork: an
// empty field keeps the source session's value.
type ForkRequest struct {
	Language string   `json:"language,omitempty"`
	Version  string   `json:"version,omitempty"`
	Network  *Network `json:"network,omitempty"`
}

// PackagesRequest is the body of POST /v1/packages/check
// (CheckPackagesRequest in the OpenAPI document): a manager and the
// package specs. The MCP tool check_packages takes it as its input.
type PackagesRequest struct {
	Manager  string   `json:"manager" jsonschema:"pip or npm"`
	Packages []string `json:"packages" jsonschema:"package specs: NAME or NAME==VERSION for pip, NAME or NAME@VERSION for npm"`
}

// InstallRequest is the body of POST /v1/sessions/{id}/install: a manager
// and either the package specs or, for npm, a package-lock.json
// (lockfileVersion 2 or 3) whose packages are installed at the paths it
// names.
type InstallRequest struct {
	Manager  string          `json:"manager" jsonschema:"pip or npm"`
	Packages []string        `json:"packages,omitempty" jsonschema:"package specs: NAME or NAME==VERSION for pip, NAME or NAME@VERSION for npm"`
	Lockfile json.RawMessage `json:"lockfile,omitempty" jsonschema:"npm only, instead of packages: a package-lock.json object (lockfileVersion 2 or 3)"`
}

// MakeDirRequest is the body of POST /v1/sessions/{id}/files/mkdir.
type MakeDirRequest struct {
	Path string `json:"path"`
	// Parents makes missing folders above Path too; Path itself must not
	// exist either way (409 file_exists).
	Parents bool `json:"parents,omitempty"`
}

// MoveRequest is the body of POST /v1/sessions/{id}/files/move.
type MoveRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Overwrite lets the move replace a file (or an empty folder, when
	// From is a folder) at To; without it an existing To is 409
	// file_exists.
	Overwrite bool `json:"overwrite,omitempty"`
}
