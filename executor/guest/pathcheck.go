package guest

import (
	"errors"
	"fmt"
	"strings"
)

// Home is the sandbox user's home: the only tree the files API reaches.
const Home = "/home/sandbox"

// Limits on a files API path, as Linux has them (PATH_MAX, NAME_MAX).
const (
	MaxPathLen = 4096
	MaxNameLen = 255
)

// ErrBadPath is returned by CleanPath for any path it refuses.
var ErrBadPath = errors.New("bad path")

// CleanPath checks a caller's path and returns its components below Home
// (none for Home itself). It does no I/O: symlinks are the walker's job.
//
// Accepted: Home, anything below it written absolute, or a path relative
// to Home; repeated slashes and "." components are dropped. Refused: empty
// paths, NUL bytes, any ".." component (even one that would stay inside),
// absolute paths outside Home, names over 255 bytes and paths over 4096.
func CleanPath(p string) ([]string, error) {
	switch {
	case p == "":
		return nil, badPath("empty path")
	case len(p) > MaxPathLen:
		return nil, badPath("path longer than %d bytes", MaxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return nil, badPath("path contains a NUL byte")
	}
	rest := p
	if strings.HasPrefix(p, "/") {
		// Match Home component by component so "/home/sandboxes" and
		// "//home/sandbox" are judged on what they name.
		comps := split(p)
		if len(comps) < 2 || comps[0] != "home" || comps[1] != "sandbox" {
			return nil, badPath("only paths under %s are allowed", Home)
		}
		rest = strings.Join(comps[2:], "/")
	}
	comps := split(rest)
	for _, c := range comps {
		if c == ".." {
			return nil, badPath("path must not contain \"..\"")
		}
		if len(c) > MaxNameLen {
			return nil, badPath("a path component is longer than %d bytes", MaxNameLen)
		}
	}
	if len(Home)+len(rest)+1 > MaxPathLen {
		return nil, badPath("path longer than %d bytes", MaxPathLen)
	}
	return comps, nil
}

// split returns the non-empty components of p other than ".".
func split(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// JoinHome is the absolute path of components returned by CleanPath.
func JoinHome(comps []string) string {
	if len(comps) == 0 {
		return Home
	}
	return Home + "/" + strings.Join(comps, "/")
}

type pathError struct{ msg string }

func (e *pathError) Error() string { return e.msg }
func (e *pathError) Unwrap() error { return ErrBadPath }

func badPath(format string, args ...any) error {
	return &pathError{msg: fmt.Sprintf(format, args...)}
}
