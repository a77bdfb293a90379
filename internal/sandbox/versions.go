package sandbox

import (
	"fmt"
	"strings"
)

// MaxVersionBytes bounds a requested runtime version.
const MaxVersionBytes = 32

// VersionMatches reports whether the version have answers a request for
// want, as Piston matches: want is have itself, or a prefix of have that
// ends where a dot follows ("22" and "22.23" match 22.23.5; "2" and
// "22.2" do not).
func VersionMatches(have, want string) bool {
	return want != "" && (have == want || (strings.HasPrefix(have, want) && have[len(want)] == '.'))
}

// PickVersion picks the version of a language a request names from its
// versions, newest first: "" is the default, any other the first (newest)
// whose exact version or series matches. A version none matches, or one
// too long or with characters no version has, is ErrUnsupportedVersion
// with the versions present in its text.
func PickVersion(language string, versions []RuntimeVersion, want string) (RuntimeVersion, error) {
	want = strings.TrimSpace(want)
	if want == "" {
		for _, v := range versions {
			if v.Default {
				return v, nil
			}
		}
	} else if len(want) <= MaxVersionBytes && plainVersion(want) {
		for _, v := range versions {
			if VersionMatches(v.Version, want) || VersionMatches(v.Series, want) {
				return v, nil
			}
		}
	}
	present := make([]string, len(versions))
	for i, v := range versions {
		present[i] = v.Version
	}
	return RuntimeVersion{}, fmt.Errorf("%w: %s has no version %s; present: %s", ErrUnsupportedVersion, language, Quote(want), strings.Join(present, ", "))
}

// plainVersion reports whether s has only the characters of a version:
// letters, digits and . + ~ - _.
func plainVersion(s string) bool {
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || strings.ContainsRune(".+~-_", r)) {
			return false
		}
	}
	return true
}
