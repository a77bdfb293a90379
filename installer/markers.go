package installer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/osv-scalibr/semantic"
)

// PythonEnv is what PEP 508 environment markers are evaluated against:
// the session's Python. Extra is the extra being installed ("" for none).
type PythonEnv struct {
	PythonVersion      string // "3.13"
	PythonFullVersion  string // "3.13.5"
	ImplementationName string // "cpython"
	ImplementationVer  string // "3.13.5"
	PlatformPythonImpl string // "CPython"
	SysPlatform        string // "linux"
	PlatformSystem     string // "Linux"
	PlatformMachine    string // "x86_64"
	PlatformRelease    string
	PlatformVersion    string
	OSName             string // "posix"
	Extra              string
}

// SessionPython is the Python of the runtime rootfs (Debian trixie on
// x86_64 Linux), which every session and the installer run.
func SessionPython() PythonEnv {
	return PythonEnv{
		PythonVersion: "3.13", PythonFullVersion: "3.13.5", ImplementationName: "cpython", ImplementationVer: "3.13.5",
		PlatformPythonImpl: "CPython", SysPlatform: "linux", PlatformSystem: "Linux", PlatformMachine: "x86_64", OSName: "posix",
	}
}

// Limits of a marker: longer or deeper ones are errors.
const (
	maxMarkerBytes = 2048
	maxMarkerDepth = 32
)

// ErrMarker means an environment marker does not parse.
var ErrMarker = errors.New("bad environment marker")

// EvalMarker evaluates a PEP 508 environment marker ("python_version <
// '3.11' and sys_platform == 'win32'") for env. It knows the PEP 508
// variables, and, or and parentheses, the version comparisons (PEP 440
// order for version variables, string comparison otherwise, as
// packaging does), in and not in. An empty marker is true.
func EvalMarker(marker string, env PythonEnv) (bool, error) {
	if len(marker) > maxMarkerBytes {
		return false, fmt.Errorf("%w: over %d bytes", ErrMarker, maxMarkerBytes)
	}
	toks, err := lexMarker(marker)
	if err != nil {
		return false, err
	}
	if len(toks) == 0 {
		return true, nil
	}
	p := &markerParser{toks: toks, env: env}
	v, err := p.or(0)
	if err != nil {
		return false, err
	}
	if p.i != len(p.toks) {
		return false, fmt.Errorf("%w: unexpected %q", ErrMarker, p.toks[p.i].s)
	}
	return v, nil
}

type markerTok struct {
	s   string
	str bool // a quoted string
}

func lexMarker(s string) ([]markerTok, error) {
	var out []markerTok
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(' || c == ')':
			out = append(out, markerTok{s: string(c)})
			i++
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("%w: unterminated string", ErrMarker)
			}
			out = append(out, markerTok{s: s[i+1 : i+1+j], str: true})
			i += j + 2
		case strings.ContainsRune("<>=!~", rune(c)):
			j := i
			for j < len(s) && strings.ContainsRune("<>=!~", rune(s[j])) {
				j++
			}
			op := s[i:j]
			switch op {
			case "<", "<=", ">", ">=", "==", "!=", "~=", "===":
			default:
				return nil, fmt.Errorf("%w: operator %q", ErrMarker, op)
			}
			out = append(out, markerTok{s: op})
			i = j
		case c == '_' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9':
			j := i
			for j < len(s) && (s[j] == '_' || s[j] == '.' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			out = append(out, markerTok{s: s[i:j]})
			i = j
		default:
			return nil, fmt.Errorf("%w: unexpected character %q", ErrMarker, c)
		}
	}
	return out, nil
}

type markerParser struct {
	toks []markerTok
	i    int
	env  PythonEnv
}

func (p *markerParser) peek(s string) bool {
	return p.i < len(p.toks) && !p.toks[p.i].str && p.toks[p.i].s == s
}

func (p *markerParser) or(depth int) (bool, error) {
	v, err := p.and(depth)
	if err != nil {
		return false, err
	}
	for p.peek("or") {
		p.i++
		w, err := p.and(depth)
		if err != nil {
			return false, err
		}
		v = v || w
	}
	return v, nil
}

func (p *markerParser) and(depth int) (bool, error) {
	v, err := p.expr(depth)
	if err != nil {
		return false, err
	}
	for p.peek("and") {
		p.i++
		w, err := p.expr(depth)
		if err != nil {
			return false, err
		}
		v = v && w
	}
	return v, nil
}

func (p *markerParser) expr(depth int) (bool, error) {
	if depth > maxMarkerDepth {
		return false, fmt.Errorf("%w: nested over %d deep", ErrMarker, maxMarkerDepth)
	}
	if p.peek("(") {
		p.i++
		v, err := p.or(depth + 1)
		if err != nil {
			return false, err
		}
		if !p.peek(")") {
			return false, fmt.Errorf("%w: missing )", ErrMarker)
		}
		p.i++
		return v, nil
	}
	lhs, lkind, err := p.value()
	if err != nil {
		return false, err
	}
	if p.i >= len(p.toks) || p.toks[p.i].str {
		return false, fmt.Errorf("%w: want an operator after %q", ErrMarker, lhs)
	}
	op := p.toks[p.i].s
	p.i++
	if op == "not" {
		if !p.peek("in") {
			return false, fmt.Errorf("%w: want \"not in\"", ErrMarker)
		}
		p.i++
		op = "not in"
	}
	rhs, rkind, err := p.value()
	if err != nil {
		return false, err
	}
	if lkind == kindExtra || rkind == kindExtra {
		// Extras compare normalised (PEP 685).
		lhs, rhs = normPipName(lhs), normPipName(rhs)
	}
	return compareMarker(lhs, op, rhs, lkind == kindVersion || rkind == kindVersion)
}

// Kinds of marker values.
const (
	kindString = iota
	kindVersion
	kindExtra
)

// value reads a variable or a string and says its kind (a version
// variable compares in PEP 440 order).
func (p *markerParser) value() (string, int, error) {
	if p.i >= len(p.toks) {
		return "", 0, fmt.Errorf("%w: ends early", ErrMarker)
	}
	t := p.toks[p.i]
	p.i++
	if t.str {
		return t.s, kindString, nil
	}
	e := p.env
	switch t.s {
	case "python_version":
		return e.PythonVersion, kindVersion, nil
	case "python_full_version":
		return e.PythonFullVersion, kindVersion, nil
	case "implementation_version":
		return e.ImplementationVer, kindVersion, nil
	case "implementation_name":
		return e.ImplementationName, kindString, nil
	case "platform_python_implementation":
		return e.PlatformPythonImpl, kindString, nil
	case "sys_platform", "sys.platform":
		return e.SysPlatform, kindString, nil
	case "platform_system":
		return e.PlatformSystem, kindString, nil
	case "platform_machine":
		return e.PlatformMachine, kindString, nil
	case "platform_release":
		return e.PlatformRelease, kindString, nil
	case "platform_version":
		return e.PlatformVersion, kindString, nil
	case "os_name", "os.name":
		return e.OSName, kindString, nil
	case "extra":
		return e.Extra, kindExtra, nil
	}
	return "", 0, fmt.Errorf("%w: unknown variable %q", ErrMarker, truncateStr(t.s, 40))
}

func compareMarker(l, op, r string, version bool) (bool, error) {
	switch op {
	case "in":
		return strings.Contains(r, l), nil
	case "not in":
		return !strings.Contains(r, l), nil
	case "===":
		return l == r, nil
	}
	if version {
		if ok, err := matchSpecifier(l, op, r); err == nil {
			return ok, nil
		}
		// Not versions after all: packaging compares them as strings.
	}
	switch op {
	case "==":
		return l == r, nil
	case "!=":
		return l != r, nil
	case "<":
		return l < r, nil
	case "<=":
		return l <= r, nil
	case ">":
		return l > r, nil
	case ">=":
		return l >= r, nil
	}
	return false, fmt.Errorf("%w: operator %q on strings", ErrMarker, op)
}

func truncateStr(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// normPipName is a PEP 503 normalised name (also used for extras).
func normPipName(s string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(s) {
		if c == '-' || c == '_' || c == '.' {
			if !dash {
				b.WriteByte('-')
			}
			dash = true
			continue
		}
		dash = false
		b.WriteRune(c)
	}
	return b.String()
}

// matchSpecifier reports whether version satisfies one PEP 440 clause
// (op and its version, "1.2.*" wildcards with == and !=).
func matchSpecifier(version, op, want string) (ok bool, err error) {
	defer func() {
		if recover() != nil {
			ok, err = false, fmt.Errorf("%w: comparing %q %s %q", ErrMarker, version, op, want)
		}
	}()
	v, err := semantic.ParsePyPIVersion(version)
	if err != nil {
		return false, err
	}
	if op == "===" {
		return version == want, nil
	}
	if (op == "==" || op == "!=") && strings.HasSuffix(want, ".*") {
		pre := strings.TrimSuffix(want, ".*")
		if _, err := semantic.ParsePyPIVersion(pre); err != nil {
			return false, err
		}
		in := prefixMatch(version, pre)
		return in == (op == "=="), nil
	}
	c, err := v.CompareStr(want)
	if err != nil {
		return false, err
	}
	switch op {
	case "==":
		return c == 0, nil
	case "!=":
		return c != 0, nil
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	case ">=":
		return c >= 0, nil
	case "~=":
		// ~=X.Y.Z means >=X.Y.Z, ==X.Y.*
		parts := strings.Split(strings.SplitN(want, "+", 2)[0], ".")
		if len(parts) < 2 || c < 0 {
			return false, nil
		}
		return prefixMatch(version, strings.Join(parts[:len(parts)-1], ".")), nil
	}
	return false, fmt.Errorf("%w: operator %q", ErrMarker, op)
}

// prefixMatch reports whether version's release starts with prefix's
// components ("1.2.3" starts with "1.2"; "1.20" does not), zeros padded.
func prefixMatch(version, prefix string) bool {
	rel := func(s string) []string {
		s = strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "v")
		if _, after, ok := strings.Cut(s, "!"); ok {
			s = after
		}
		end := len(s)
		for i, c := range s {
			if !(c >= '0' && c <= '9' || c == '.') {
				end = i
				break
			}
		}
		return strings.Split(strings.Trim(s[:end], "."), ".")
	}
	v, p := rel(version), rel(prefix)
	for i, x := range p {
		y := "0"
		if i < len(v) {
			y = v[i]
		}
		if strings.TrimLeft(x, "0") != strings.TrimLeft(y, "0") {
			return false
		}
	}
	return true
}
