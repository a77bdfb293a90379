package mirror

import (
	"fmt"
	"regexp"
	"strings"
)

// Manager names a package ecosystem served by the mirror.
type Manager string

const (
	// Pip is the Python ecosystem (wheels, PyPI in OSV).
	Pip Manager = "pip"
	// NPM is the JavaScript ecosystem (tarballs, npm in OSV).
	NPM Manager = "npm"
)

// Ecosystem returns the OSV ecosystem name.
func (m Manager) Ecosystem() string {
	switch m {
	case Pip:
		return "PyPI"
	case NPM:
		return "npm"
	}
	return ""
}

// ParseManager accepts "pip"/"pypi" and "npm".
func ParseManager(s string) (Manager, error) {
	switch strings.ToLower(s) {
	case "pip", "pypi", "python":
		return Pip, nil
	case "npm", "node":
		return NPM, nil
	}
	return "", &UnknownManagerError{Name: s}
}

var (
	pep503Sep = regexp.MustCompile(`[-_.]+`)
	// PEP 508 name: letters, digits, and . _ - inside.
	pypiName = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9._-]*[a-z0-9])?$`)
	// A PEP 440 version, loosely: the canonical parser checks it later.
	pypiVersion = regexp.MustCompile(`^(?i)v?[0-9a-z][0-9a-z.!+_-]{0,127}$`)
	npmName     = regexp.MustCompile(`^(?i)(@[a-z0-9-~][a-z0-9-._~]*/)?[a-z0-9-~][a-z0-9-._~]*$`)
	// semver 2.0 (npm's node-semver accepts a leading "v" or "=" which we do not).
	npmVersion = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)
)

// NormalizePyPI returns the PEP 503 normalised form of a project name.
func NormalizePyPI(name string) string {
	return strings.ToLower(pep503Sep.ReplaceAllString(name, "-"))
}

// NormalizeName returns the key under which a name is indexed and matched:
// PEP 503 for pip, lower case for npm.
func NormalizeName(m Manager, name string) string {
	if m == Pip {
		return NormalizePyPI(name)
	}
	return strings.ToLower(name)
}

// ValidName reports whether name is a well-formed package name for m.
func ValidName(m Manager, name string) bool {
	switch m {
	case Pip:
		return len(name) <= 200 && pypiName.MatchString(name)
	case NPM:
		return len(name) <= 214 && npmName.MatchString(name)
	}
	return false
}

// ValidVersion reports whether v looks like a version for m (PEP 440
// versions are also checked by the comparator before use).
func ValidVersion(m Manager, v string) bool {
	switch m {
	case Pip:
		return pypiVersion.MatchString(v)
	case NPM:
		return len(v) <= 256 && npmVersion.MatchString(v)
	}
	return false
}

// Spec is one requested package: a name and an exact version.
type Spec struct {
	Manager Manager
	Name    string
	Version string
}

func (s Spec) String() string {
	if s.Manager == NPM {
		return s.Name + "@" + s.Version
	}
	return s.Name + "==" + s.Version
}

// ParseSpec parses "name==1.2.3" (pip) or "name@1.2.3" / "@scope/name@1.2.3"
// (npm). The version must be exact.
func ParseSpec(m Manager, s string) (Spec, error) {
	var name, ver string
	switch m {
	case Pip:
		var ok bool
		name, ver, ok = strings.Cut(s, "==")
		if !ok || strings.Contains(ver, "=") {
			return Spec{}, fmt.Errorf("%w: %q: want NAME==VERSION", ErrBadSpec, s)
		}
	case NPM:
		i := strings.LastIndex(s, "@")
		if i <= 0 {
			return Spec{}, fmt.Errorf("%w: %q: want NAME@VERSION", ErrBadSpec, s)
		}
		name, ver = s[:i], s[i+1:]
	default:
		return Spec{}, &UnknownManagerError{Name: string(m)}
	}
	name, ver = strings.TrimSpace(name), strings.TrimSpace(ver)
	if !ValidName(m, name) {
		return Spec{}, fmt.Errorf("%w: %q: bad %s name", ErrBadSpec, s, m)
	}
	if !ValidVersion(m, ver) {
		return Spec{}, fmt.Errorf("%w: %q: bad %s version", ErrBadSpec, s, m)
	}
	return Spec{Manager: m, Name: name, Version: ver}, nil
}

// WheelName is a parsed wheel file name (PEP 427 / binary distribution format).
type WheelName struct {
	Name, Version, Build, Python, ABI, Platform string
}

// ParseWheelFilename parses "name-ver(-build)?-py-abi-plat.whl".
func ParseWheelFilename(fn string) (WheelName, error) {
	base, ok := strings.CutSuffix(fn, ".whl")
	if !ok || strings.ContainsAny(fn, "/\\\x00") {
		return WheelName{}, fmt.Errorf("%w: %q is not a wheel file name", ErrBadSpec, fn)
	}
	p := strings.Split(base, "-")
	var w WheelName
	switch len(p) {
	case 5:
		w = WheelName{Name: p[0], Version: p[1], Python: p[2], ABI: p[3], Platform: p[4]}
	case 6:
		w = WheelName{Name: p[0], Version: p[1], Build: p[2], Python: p[3], ABI: p[4], Platform: p[5]}
		if w.Build == "" || w.Build[0] < '0' || w.Build[0] > '9' {
			return WheelName{}, fmt.Errorf("%w: %q: build tag must start with a digit", ErrBadSpec, fn)
		}
	default:
		return WheelName{}, fmt.Errorf("%w: %q: want name-version-python-abi-platform.whl", ErrBadSpec, fn)
	}
	if !ValidName(Pip, w.Name) || !ValidVersion(Pip, w.Version) || w.Python == "" || w.ABI == "" || w.Platform == "" {
		return WheelName{}, fmt.Errorf("%w: %q: bad name or version", ErrBadSpec, fn)
	}
	return w, nil
}

// sdistSuffixes are source distribution file names; they are refused.
var sdistSuffixes = []string{".tar.gz", ".tgz", ".zip", ".tar.bz2", ".tar.xz", ".tar", ".egg"}

// IsSdistFilename reports whether fn names a Python source distribution.
func IsSdistFilename(fn string) bool {
	for _, s := range sdistSuffixes {
		if strings.HasSuffix(strings.ToLower(fn), s) {
			return true
		}
	}
	return false
}

// npmTarballName returns the file name npm uses for a tarball:
// "name-1.0.0.tgz" (the scope is dropped).
func npmTarballName(name, version string) string {
	if i := strings.LastIndex(name, "/"); i >= 0 {
		name = name[i+1:]
	}
	return name + "-" + version + ".tgz"
}
