package sandbox

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// node is a language with three versions, newest first, as the executor
// lists them.
var nodeVersions = []RuntimeVersion{
	{Version: "26.12.1", Series: "26", Default: true},
	{Version: "24.22.3", Series: "24"},
	{Version: "22.23.5", Series: "22"},
	{Version: "22.9.0", Series: "22.9"},
}

func TestPickVersion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, want string
		got        string // exact version picked; "" for unsupported_version
	}{
		{name: "absent is the default", want: "", got: "26.12.1"},
		{name: "blank is the default", want: "  ", got: "26.12.1"},
		{name: "a major picks its newest", want: "22", got: "22.23.5"},
		{name: "a major and minor", want: "22.23", got: "22.23.5"},
		{name: "an exact version", want: "22.23.5", got: "22.23.5"},
		{name: "an older series of the same major", want: "22.9", got: "22.9.0"},
		{name: "spaces around", want: " 24 ", got: "24.22.3"},
		{name: "a digit prefix is not a version prefix", want: "2"},
		{name: "a partial minor", want: "22.2"},
		{name: "a trailing dot", want: "22."},
		{name: "a leading dot", want: ".22"},
		{name: "an unknown major", want: "99"},
		{name: "a wildcard", want: "22.x"},
		{name: "star", want: "*"},
		{name: "latest is no version", want: "latest"},
		{name: "a v prefix", want: "v22"},
		{name: "a path", want: "../../etc/passwd"},
		{name: "a NUL", want: "22\x00"},
		{name: "a newline", want: "22\n.23"},
		{name: "unicode digits", want: "２２"},
		{name: "a version of the right shape but too long", want: "22." + strings.Repeat("1", MaxVersionBytes)},
		{name: "a megabyte", want: strings.Repeat("2", 1<<20)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, err := PickVersion("javascript", nodeVersions, tc.want)
			if tc.got == "" {
				if !errors.Is(err, ErrUnsupportedVersion) {
					t.Fatalf("%q picked %+v, %v; want unsupported_version", tc.want, v, err)
				}
				for _, p := range nodeVersions {
					if !strings.Contains(err.Error(), p.Version) {
						t.Errorf("message %q does not list %s", err, p.Version)
					}
				}
				if len(err.Error()) > 400 {
					t.Errorf("message of %d bytes echoes the input", len(err.Error()))
				}
				return
			}
			if err != nil || v.Version != tc.got {
				t.Fatalf("%q picked %+v, %v; want %s", tc.want, v, err, tc.got)
			}
		})
	}
}

// FuzzPickVersion: any requested version picks a present version that it
// names (itself or a dotted prefix, of the version or its series), or is
// unsupported_version with a bounded message; never a panic.
func FuzzPickVersion(f *testing.F) {
	for _, s := range []string{"", "22", "22.23", "22.23.5", "2", "22.", "../x", "22\x00", "latest", strings.Repeat("9", 40)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, want string) {
		v, err := PickVersion("javascript", nodeVersions, want)
		if err != nil {
			if !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("%q: %v is not unsupported_version", want, err)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("%q: message of %d bytes", want, len(err.Error()))
			}
			return
		}
		w := strings.TrimSpace(want)
		if w == "" {
			if !v.Default {
				t.Fatalf("no version picked %+v, not the default", v)
			}
			return
		}
		if !utf8.ValidString(w) || len(w) > MaxVersionBytes || !(VersionMatches(v.Version, w) || VersionMatches(v.Series, w)) {
			t.Fatalf("%q picked %+v, which it does not name", want, v)
		}
		// The newest that matches: none before it in the list matches.
		for _, o := range nodeVersions {
			if o == v {
				break
			}
			if VersionMatches(o.Version, w) || VersionMatches(o.Series, w) {
				t.Fatalf("%q picked %+v, but the newer %+v matches", want, v, o)
			}
		}
	})
}
