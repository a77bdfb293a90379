package sandbox

import (
	"context"
	"errors"
	"time"
)

// Errors of the files API, told apart with errors.Is. A missing session is
// still ErrNotFound; an oversize file is ErrTooLarge; a bad path ErrInvalid.
var (
	ErrFileNotFound = errors.New("file not found")
	ErrNotRegular   = errors.New("not a regular file")
	ErrNotDir       = errors.New("not a directory")
	ErrSymlink      = errors.New("symbolic links are not followed")
	ErrPermission   = errors.New("permission denied in the sandbox")
	// ErrFileExists is a make-folder or move whose target is already
	// there (or a folder that is not empty where an empty one would do).
	ErrFileExists = errors.New("file exists")
)

// FileInfo describes one file in a session's home, as the sandbox sees it;
// symlinks are described, never followed.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path,omitempty"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"` // octal permission bits, e.g. "0644"
	ModTime time.Time `json:"mtime"`
	Type    string    `json:"type"` // file, dir, symlink, fifo, socket, char_device, block_device
	// Target is a symlink's text as stored, never resolved (stat, move and
	// listings with a depth report it).
	Target string `json:"target,omitempty"`
}

// Listing is one directory listing: its entries, sorted by name, and
// whether the folder holds more than the listing's limit (the entries are
// then the first ones by name).
type Listing struct {
	Entries   []FileInfo `json:"entries"`
	Truncated bool       `json:"truncated"`
}

// FileEvent is one change under a watched folder of a session's home.
type FileEvent struct {
	// Path is the changed file's absolute path in the sandbox.
	Path string `json:"path"`
	// Op is create, write, remove, rename (moved away), chmod, or
	// overflow (events were lost; Path is the watched folder).
	Op string `json:"op"`
}

// FileWatch is a running watch of a folder in a session's home.
type FileWatch interface {
	// Next waits for the next events; io.EOF when the folder went, any
	// other error when the sandbox stopped or ctx ended.
	Next(ctx context.Context) ([]FileEvent, error)
	// Close stops the watch.
	Close() error
}
