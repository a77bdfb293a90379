package installer

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"path"
	"slices"
	"strings"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Bounds on a lockfile install beyond the request's package cap.
const (
	// MaxLockfileBytes bounds the lockfile as sent.
	MaxLockfileBytes = 4 << 20
	// maxLockPathBytes and maxLockDepth bound one packages key.
	maxLockPathBytes = 1024
	maxLockDepth     = 32
	// maxLockFieldBytes bounds a resolved URL or an integrity string.
	maxLockFieldBytes = 2048
)

// lockEntry is one package a lockfile places: its path
// ("node_modules/a/node_modules/b"), name, exact version and the sha512
// integrity it pins ("sha512-<base64>").
type lockEntry struct {
	Path      string
	Name      string
	Version   string
	Integrity string
}

// parseLockfile reads a package-lock.json of lockfileVersion 2 or 3 and
// returns its packages, sorted by path. Everything it cannot install
// exactly from the mirror is refused: a path that is not a chain of
// node_modules/<valid npm name> (absolute paths, "..", backslashes, empty
// or dotted parts, workspaces and folders outside node_modules), a
// nested package whose parent the lockfile does not list, links, bundled
// packages, aliases, versions that are not exact, resolved URLs that are
// not https registry tarballs, a missing sha512 integrity, more than max
// packages. Its errors wrap sandbox.ErrBadLockfile and quote at most
// sandbox.MaxErrorEcho bytes of the lockfile.
func parseLockfile(data []byte, max int) ([]lockEntry, error) {
	if len(data) > MaxLockfileBytes {
		return nil, fmt.Errorf("%w: over %d MiB", sandbox.ErrBadLockfile, MaxLockfileBytes>>20)
	}
	var lf struct {
		LockfileVersion int                        `json:"lockfileVersion"`
		Packages        map[string]json.RawMessage `json:"packages"`
	}
	if err := json.Unmarshal(data, &lf); err != nil {
		return nil, fmt.Errorf("%w: not a package-lock.json object", sandbox.ErrBadLockfile)
	}
	if lf.LockfileVersion != 2 && lf.LockfileVersion != 3 {
		return nil, fmt.Errorf("%w: lockfileVersion must be 2 or 3 (npm 7 or later), not %d", sandbox.ErrBadLockfile, lf.LockfileVersion)
	}
	delete(lf.Packages, "") // the project itself
	if len(lf.Packages) == 0 {
		return nil, fmt.Errorf("%w: packages lists no package", sandbox.ErrBadLockfile)
	}
	if len(lf.Packages) > max {
		return nil, fmt.Errorf("%w: %d packages; at most %d per install", sandbox.ErrBadLockfile, len(lf.Packages), max)
	}
	out := make([]lockEntry, 0, len(lf.Packages))
	for _, key := range slices.Sorted(maps.Keys(lf.Packages)) {
		e, err := lockEntryOf(key, lf.Packages[key])
		if err != nil {
			return nil, fmt.Errorf("%w: packages[%s]: %s", sandbox.ErrBadLockfile, sandbox.Quote(key), err)
		}
		if parent := parentPath(key); parent != "" {
			if _, ok := lf.Packages[parent]; !ok {
				return nil, fmt.Errorf("%w: packages[%s]: nested under %s, which the lockfile does not list", sandbox.ErrBadLockfile, sandbox.Quote(key), sandbox.Quote(parent))
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// lockPathName checks a packages key and returns the name of the package
// it places (its last node_modules/<name>).
func lockPathName(key string) (string, error) {
	if len(key) > maxLockPathBytes {
		return "", fmt.Errorf("path over %d bytes", maxLockPathBytes)
	}
	rest, ok := strings.CutPrefix(key, "node_modules/")
	if !ok {
		return "", fmt.Errorf("not under node_modules (workspaces and local folders are not installed)")
	}
	var name string
	for depth := 1; ; depth++ {
		if depth > maxLockDepth {
			return "", fmt.Errorf("nested deeper than %d", maxLockDepth)
		}
		// One name: "a" or "@scope/a".
		n := strings.IndexByte(rest, '/')
		if strings.HasPrefix(rest, "@") && n >= 0 {
			if m := strings.IndexByte(rest[n+1:], '/'); m >= 0 {
				n += 1 + m
			} else {
				n = -1
			}
		}
		if n < 0 {
			name, rest = rest, ""
		} else {
			name, rest = rest[:n], rest[n:]
		}
		if !npmName.MatchString(name) {
			return "", fmt.Errorf("%s is not an npm package name", sandbox.Quote(name))
		}
		if rest == "" {
			return name, nil
		}
		if rest, ok = strings.CutPrefix(rest, "/node_modules/"); !ok || rest == "" {
			return "", fmt.Errorf("not a chain of node_modules/<name>")
		}
	}
}

// lockEntryOf checks one packages entry.
func lockEntryOf(key string, raw json.RawMessage) (lockEntry, error) {
	name, err := lockPathName(key)
	if err != nil {
		return lockEntry{}, err
	}
	var e struct {
		Name      *string `json:"name"`
		Version   string  `json:"version"`
		Resolved  string  `json:"resolved"`
		Integrity string  `json:"integrity"`
		Link      bool    `json:"link"`
		InBundle  bool    `json:"inBundle"`
		Bundled   any     `json:"bundleDependencies"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return lockEntry{}, fmt.Errorf("not an object of the lockfile's fields")
	}
	switch {
	case e.Link:
		return lockEntry{}, fmt.Errorf("a link to a local folder")
	case e.InBundle:
		return lockEntry{}, fmt.Errorf("bundled inside another package (bundled packages are not installed)")
	case e.Bundled != nil && e.Bundled != false:
		return lockEntry{}, fmt.Errorf("bundles other packages (bundled packages are not installed)")
	case e.Name != nil && *e.Name != name:
		return lockEntry{}, fmt.Errorf("an alias of %s (aliases are not installed)", sandbox.Quote(*e.Name))
	case len(e.Version) > 80 || !npmVersion.MatchString(e.Version) || strings.HasPrefix(e.Version, "v"):
		return lockEntry{}, fmt.Errorf("version %s is not an exact registry version", sandbox.Quote(e.Version))
	case len(e.Resolved) > maxLockFieldBytes || len(e.Integrity) > maxLockFieldBytes:
		return lockEntry{}, fmt.Errorf("resolved or integrity over %d bytes", maxLockFieldBytes)
	}
	if e.Resolved != "" {
		if err := checkResolved(e.Resolved, name); err != nil {
			return lockEntry{}, err
		}
	}
	integ := ""
	for _, f := range strings.Fields(e.Integrity) {
		if strings.HasPrefix(f, "sha512-") && integ == "" {
			integ = f
		}
	}
	if integ == "" {
		return lockEntry{}, fmt.Errorf("no sha512 integrity")
	}
	return lockEntry{Path: key, Name: name, Version: e.Version, Integrity: integ}, nil
}

// checkResolved accepts a registry tarball: https://<host>/<name>/-/<file>.tgz.
// Links, files, git, plain http and anything else are refused; the
// tarball itself always comes from the mirror, by name and version.
func checkResolved(resolved, name string) error {
	u, err := url.Parse(resolved)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("resolved %s is not an https registry tarball", sandbox.Quote(resolved))
	}
	dir, file := path.Split(u.Path)
	if path.Ext(file) != ".tgz" || !strings.HasSuffix(dir, "/"+name+"/-/") {
		return fmt.Errorf("resolved %s is not a registry tarball of %s", sandbox.Quote(resolved), name)
	}
	return nil
}
