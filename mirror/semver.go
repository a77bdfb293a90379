package mirror

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"
)

// ErrRange means an npm dependency range is not a semver range the mirror
// can check (a git URL, a file: or npm: alias, a dist-tag, a typo).
var ErrRange = errors.New("mirror: unsupported npm range")

// MaxNPMRangeBytes is the longest range ParseNPMRange reads (after
// trimming spaces); the mirror refuses packages with longer ones.
const MaxNPMRangeBytes = 256

// NPMRange is a parsed npm dependency range ("^1.2.0", "~2 || >=3.1 <4",
// "1.x", "1.0.0 - 2.0.0", "*"). The zero value matches nothing; use
// ParseNPMRange. It is immutable and safe for concurrent use.
type NPMRange struct {
	raw string
	any bool
	c   *semver.Constraints
}

func (r NPMRange) String() string { return r.raw }

// ParseNPMRange parses a range as npm writes it in "dependencies". Ranges
// that name no versions (URLs, paths, aliases, tags) wrap ErrRange.
func ParseNPMRange(raw string) (NPMRange, error) {
	s := strings.TrimSpace(raw)
	if len(s) > MaxNPMRangeBytes {
		return NPMRange{}, fmt.Errorf("%w: %q is over %d bytes", ErrRange, truncate(s, 40), MaxNPMRangeBytes)
	}
	switch s {
	case "", "*", "x", "X", "latest":
		// "latest" is a dist-tag; the mirror's newest is what an install
		// without a version gets, so any admitted version will do.
		return NPMRange{raw: raw, any: true}, nil
	}
	if strings.ContainsAny(s, ":/\\#") {
		return NPMRange{}, fmt.Errorf("%w: %q is a URL, path or alias, not a version range", ErrRange, s)
	}
	// npm accepts "v1.2.3" and "=1.2.3"; whitespace between an operator
	// and its version ("> = 1", ">= 1.2") is joined the way npm does.
	s = normalizeNPMRange(s)
	c, err := semver.NewConstraint(s)
	if err != nil {
		return NPMRange{}, fmt.Errorf("%w: %q: %v", ErrRange, raw, err)
	}
	return NPMRange{raw: raw, c: c}, nil
}

func normalizeNPMRange(s string) string {
	var b strings.Builder
	fields := strings.Fields(s)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		// An operator standing alone binds to the next field.
		if isOperator(f) && i+1 < len(fields) && !isOperator(fields[i+1]) && fields[i+1] != "||" && fields[i+1] != "-" {
			f += fields[i+1]
			i++
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f)
	}
	return b.String()
}

func isOperator(s string) bool {
	switch s {
	case "<", "<=", ">", ">=", "=", "~", "^", "~>":
		return true
	}
	return false
}

// Contains reports whether version (strict semver, as npm publishes)
// satisfies the range. Pre-releases satisfy only ranges that name a
// pre-release of the same major.minor.patch, as in npm.
func (r NPMRange) Contains(version string) bool {
	v, err := semver.StrictNewVersion(strings.TrimPrefix(version, "v"))
	if err != nil {
		return false
	}
	if r.any {
		return v.Prerelease() == ""
	}
	if r.c == nil {
		return false
	}
	return r.c.Check(v)
}

// Satisfying returns the versions of the npm package name that satisfy
// rng: those the mirror serves (admitted) and every version it has ever
// recorded in any state (known), each oldest first. An installed package
// came from the mirror, so known is what a session can hold that satisfies
// rng. A range the mirror cannot check wraps ErrRange.
func (m *Mirror) Satisfying(ctx context.Context, name, rng string) (admitted, known []string, err error) {
	r, err := ParseNPMRange(rng)
	if err != nil {
		return nil, nil, err
	}
	as, err := m.queryArtifacts(ctx, `WHERE manager='npm' AND name_key=?`, NormalizeName(NPM, name))
	if err != nil {
		return nil, nil, err
	}
	sortByVersion(NPM, as)
	seen := map[string]bool{}
	for _, a := range as {
		if !r.Contains(a.Version) {
			continue
		}
		if a.Status == StatusAdmitted {
			admitted = append(admitted, a.Version)
		}
		if !seen[a.Version] {
			seen[a.Version] = true
			known = append(known, a.Version)
		}
	}
	return admitted, known, nil
}
