package guest

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"
)

func TestCleanPath(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("d/", 2050) + "f"
	tests := []struct {
		name string
		in   string
		want string // JoinHome of the components; "" for a refusal
	}{
		{name: "home", in: "/home/sandbox", want: "/home/sandbox"},
		{name: "home slash", in: "/home/sandbox/", want: "/home/sandbox"},
		{name: "file", in: "/home/sandbox/x.csv", want: "/home/sandbox/x.csv"},
		{name: "nested", in: "/home/sandbox/a/b/c.txt", want: "/home/sandbox/a/b/c.txt"},
		{name: "relative", in: "x.csv", want: "/home/sandbox/x.csv"},
		{name: "relative nested", in: "a/b", want: "/home/sandbox/a/b"},
		{name: "dot", in: ".", want: "/home/sandbox"},
		{name: "dot components", in: "/home/sandbox/./a/./b", want: "/home/sandbox/a/b"},
		{name: "double slashes", in: "//home//sandbox//a//", want: "/home/sandbox/a"},
		{name: "dotfile", in: "/home/sandbox/.bashrc", want: "/home/sandbox/.bashrc"},
		{name: "three dots is a name", in: "/home/sandbox/...", want: "/home/sandbox/..."},
		{name: "dotdot prefix is a name", in: "/home/sandbox/..x", want: "/home/sandbox/..x"},
		{name: "spaces and unicode", in: "/home/sandbox/my file ü.txt", want: "/home/sandbox/my file ü.txt"},
		{name: "backslash is a name byte", in: `/home/sandbox/..\..\etc`, want: `/home/sandbox/..\..\etc`},
		{name: "name of 255", in: "/home/sandbox/" + strings.Repeat("n", 255), want: "/home/sandbox/" + strings.Repeat("n", 255)},

		{name: "empty", in: ""},
		{name: "dotdot relative", in: "../etc/passwd"},
		{name: "dotdot alone", in: ".."},
		{name: "etc passwd", in: "/etc/passwd"},
		{name: "root", in: "/"},
		{name: "home parent", in: "/home"},
		{name: "escape from home", in: "/home/sandbox/../../etc/shadow"},
		{name: "escape to sibling", in: "/home/sandbox/../other/x"},
		{name: "dotdot that stays inside", in: "/home/sandbox/a/../b"},
		{name: "trailing dotdot", in: "/home/sandbox/a/.."},
		{name: "sibling with prefix", in: "/home/sandboxes/x"},
		{name: "shorter sibling", in: "/home/sandbo/x"},
		{name: "case", in: "/HOME/sandbox/x"},
		{name: "proc", in: "/proc/self/root/home/sandbox/x"},
		{name: "dev", in: "/dev/null"},
		{name: "tmp", in: "/tmp/x"},
		{name: "NUL", in: "/home/sandbox/x\x00.txt"},
		{name: "NUL only", in: "\x00"},
		{name: "name of 256", in: "/home/sandbox/" + strings.Repeat("n", 256)},
		{name: "path over 4096", in: "/home/sandbox/" + long},
		{name: "relative over 4096 once joined", in: strings.Repeat("r/", 2045)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			comps, err := CleanPath(tc.in)
			if tc.want == "" {
				if err == nil || !errors.Is(err, ErrBadPath) {
					t.Fatalf("CleanPath(%q) = %q, %v; want a refusal", tc.in, comps, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("CleanPath(%q): %v", tc.in, err)
			}
			if got := JoinHome(comps); got != tc.want {
				t.Fatalf("CleanPath(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzCleanPath checks what every accepted path must be: under Home,
// already clean, free of NUL and "..", within the length limits, and
// accepted again unchanged.
func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/home/sandbox/x", "x", "../etc/passwd", "/home/sandbox/../../etc/shadow", "/etc/passwd",
		"//home//sandbox/./a", "/home/sandboxx", "a/../b", "\x00", "/home/sandbox/a\x00b", "...", strings.Repeat("a/", 3000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		comps, err := CleanPath(in)
		if err != nil {
			if !errors.Is(err, ErrBadPath) {
				t.Fatalf("error %v does not wrap ErrBadPath", err)
			}
			return
		}
		p := JoinHome(comps)
		if p != Home && !strings.HasPrefix(p, Home+"/") {
			t.Fatalf("%q -> %q is outside %s", in, p, Home)
		}
		if path.Clean(p) != p {
			t.Fatalf("%q -> %q is not clean", in, p)
		}
		if len(p) > MaxPathLen || strings.IndexByte(p, 0) >= 0 {
			t.Fatalf("%q -> %q: bad length or NUL", in, p)
		}
		for _, c := range comps {
			if c == "" || c == "." || c == ".." || strings.Contains(c, "/") || len(c) > MaxNameLen {
				t.Fatalf("%q -> bad component %q", in, c)
			}
		}
		if strings.Contains(in, "..") && slices.Contains(strings.Split(in, "/"), "..") {
			t.Fatalf("%q has a .. component but was accepted", in)
		}
		again, err := CleanPath(p)
		if err != nil || !slices.Equal(again, comps) {
			t.Fatalf("%q -> %q -> %q, %v: not stable", in, p, again, err)
		}
	})
}
