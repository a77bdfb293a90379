package e2b

import (
	"errors"
	"path"
	"strings"
	"unicode/utf8"
)

// E2B's sandboxes run code as the user `user` with home /home/user; ours
// run it as `sandbox` with home /home/sandbox, the session's durable
// home. Paths that E2B code sends are mapped onto ours (guestPath) and
// paths we answer with are mapped back (e2bPath), so code written for
// E2B sees /home/user. Only the home is served: it is what a session
// keeps (across hibernation and restarts), and what our files API serves.
const (
	e2bHome = "/home/user"
	ourHome = "/home/sandbox"
	// e2bUser is E2B's default user, the owner reported of every file.
	e2bUser = "user"
	// maxPathBytes bounds a path (Linux's PATH_MAX).
	maxPathBytes = 4096
)

// errBadPath is a path the adapter refuses (InvalidArgument, 400).
var errBadPath = errors.New("invalid path")

type pathError struct{ msg string }

func (e *pathError) Error() string { return e.msg }
func (e *pathError) Unwrap() error { return errBadPath }

// guestPath maps an E2B path onto the session: a relative path is under
// the home, /home/user is /home/sandbox, and the result, cleaned, must be
// the home or under it. NUL bytes, invalid UTF-8 and over-long paths are
// refused. The sandbox applies its own user's permissions and resolves
// symlinks inside itself (the host never does): this check keeps calls
// to what a session keeps, not the host safe.
func guestPath(p string) (string, error) {
	switch {
	case p == "":
		return "", &pathError{"a path is required"}
	case len(p) > maxPathBytes:
		return "", &pathError{"path is longer than 4096 bytes"}
	case strings.IndexByte(p, 0) >= 0:
		return "", &pathError{"path holds a NUL byte"}
	case !utf8.ValidString(p):
		return "", &pathError{"path is not UTF-8"}
	}
	if !strings.HasPrefix(p, "/") {
		p = e2bHome + "/" + p
	}
	p = path.Clean(p)
	if rest, ok := underDir(p, e2bHome); ok {
		p = ourHome + rest
	}
	if _, ok := underDir(p, ourHome); !ok {
		return "", &pathError{"path " + p + " is outside the home (" + e2bHome + "); sandboxapi serves files in the home only"}
	}
	return p, nil
}

// underDir reports whether clean path p is dir or below it, and the rest
// ("" or "/...").
func underDir(p, dir string) (string, bool) {
	if p == dir {
		return "", true
	}
	if strings.HasPrefix(p, dir+"/") {
		return p[len(dir):], true
	}
	return "", false
}

// e2bPath maps a session path back to E2B's home.
func e2bPath(p string) string {
	if rest, ok := underDir(p, ourHome); ok {
		return e2bHome + rest
	}
	return p
}
