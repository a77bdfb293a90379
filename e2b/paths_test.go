package e2b

import (
	"errors"
	"strings"
	"testing"
)

// TestGuestPath: E2B's home maps onto ours, relative paths are under it,
// and every way out of the home (dot-dot, look-alike prefixes, other
// roots) and malformed paths are refused.
func TestGuestPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string // want "" = refused
	}{
		{"/home/user", "/home/sandbox"},
		{"/home/user/", "/home/sandbox"},
		{"/home/user/a.txt", "/home/sandbox/a.txt"},
		{"/home/user//a/./b/../c", "/home/sandbox/a/c"},
		{"a.txt", "/home/sandbox/a.txt"},
		{"dir/sub/f", "/home/sandbox/dir/sub/f"},
		{".", "/home/sandbox"},
		{"/home/sandbox/x", "/home/sandbox/x"},
		{"/home/user/ spaced name ", "/home/sandbox/ spaced name "},
		{"/home/user/ü.txt", "/home/sandbox/ü.txt"},
		// hostile and outside
		{"", ""},
		{"..", ""},
		{"../sandbox/x", "/home/sandbox/x"}, // /home/user/../sandbox/x is ours, by name
		{"../../etc/passwd", ""},
		{"/home/user/../../etc/passwd", ""},
		{"/home/user/../other", ""},
		{"/home/userx/a", ""},
		{"/home/sandboxx/a", ""},
		{"/home", ""},
		{"/", ""},
		{"/etc/passwd", ""},
		{"/tmp/x", ""},
		{"/proc/self/root/etc", ""},
		{"/home/user/a\x00b", ""},
		{"a\x00", ""},
		{"/home/user/\xff\xfe", ""},
		{"/home/user/" + strings.Repeat("a", maxPathBytes), ""},
		{"//home/user/a", "/home/sandbox/a"},
		{"/./home/user/../user/a", "/home/sandbox/a"},
	} {
		got, err := guestPath(tc.in)
		if tc.want == "" {
			if err == nil || !errors.Is(err, errBadPath) {
				t.Errorf("guestPath(%q) = %q, %v; want a refusal", tc.in, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("guestPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestE2BPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/home/sandbox": "/home/user", "/home/sandbox/a/b": "/home/user/a/b", "/home/sandboxx": "/home/sandboxx", "/tmp": "/tmp",
	} {
		if got := e2bPath(in); got != want {
			t.Errorf("e2bPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// FuzzGuestPath: whatever comes in, an accepted path is clean, absolute,
// the home or under it, holds no NUL, and maps back to E2B's home.
func FuzzGuestPath(f *testing.F) {
	for _, s := range []string{"a", "/home/user/x", "../..", "/home/user/../../etc", "/home/userx", "\x00", "/home/sandbox/./../sandbox"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := guestPath(in)
		if err != nil {
			if !errors.Is(err, errBadPath) {
				t.Fatalf("guestPath(%q): error %v is not errBadPath", in, err)
			}
			return
		}
		if got != ourHome && !strings.HasPrefix(got, ourHome+"/") {
			t.Fatalf("guestPath(%q) = %q: outside the home", in, got)
		}
		if strings.Contains(got, "/../") || strings.HasSuffix(got, "/..") || strings.Contains(got, "//") || strings.IndexByte(got, 0) >= 0 {
			t.Fatalf("guestPath(%q) = %q: not clean", in, got)
		}
		if back := e2bPath(got); back != e2bHome && !strings.HasPrefix(back, e2bHome+"/") {
			t.Fatalf("e2bPath(%q) = %q", got, back)
		}
	})
}

// FuzzMetadataFilter: a list's metadata query never panics, and is either
// refused as bad input (400) or parsed into pairs.
func FuzzMetadataFilter(f *testing.F) {
	for _, s := range []string{"a=b", "a%3Db%26c", "%zz", "a=b&a=c", "=", "&&", "k=%25"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		m, err := metadataFilter(in)
		if err != nil {
			var ce *e2bError
			if !errors.As(err, &ce) || ce.status != 400 {
				t.Fatalf("metadataFilter(%q): %v is not a 400", in, err)
			}
			return
		}
		if in == "" && m != nil {
			t.Fatalf("empty filter: %v", m)
		}
	})
}

// FuzzUnseal: only a sealing of the secret opens (no input is forged into
// another value), and none panics. (Each fuzz worker seals its own seed:
// the nonce differs, the plaintext does not.)
func FuzzUnseal(f *testing.F) {
	good, err := seal("sk_key", "sess", purposeKey, []byte("secret"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add("")
	f.Add("AAAA")
	f.Fuzz(func(t *testing.T, in string) {
		b, err := unseal("sk_key", "sess", purposeKey, in)
		if err == nil && string(b) != "secret" {
			t.Fatalf("%q opened to %q", in, b)
		}
	})
}
