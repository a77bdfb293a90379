package redact

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

// The secrets every hostile case plants; none may survive.
const (
	pw  = "Zq9PASSWORD"
	tok = "Zq9TOKEN"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in, want string
	}{
		{name: "plain", in: "https://pypi.org/simple/", want: "https://pypi.org/simple/"},
		{name: "empty", in: "", want: ""},
		{name: "user and password", in: "http://user:" + pw + "@127.0.0.1:8080/simple/", want: "http://127.0.0.1:8080/simple/"},
		{name: "user only", in: "https://" + tok + "@host/", want: "https://host/"},
		{name: "escaped password", in: "http://u:p%40" + pw + "@h/x", want: "http://h/x"},
		{name: "two at signs", in: "http://u:a@" + pw + "@h/x", want: "http://h/x"},
		{name: "unescaped slash in password", in: "http://u:a/" + pw + "@h/x", want: "http://" + Mask},
		{name: "unescaped question mark in password", in: "http://u:a?" + pw + "@h/x", want: "http://" + Mask},
		{name: "unescaped hash in password", in: "http://u:a#" + pw + "@h/x", want: "http://" + Mask},
		{name: "bad port", in: "http://u:" + pw + "@h:port/x", want: "http://h:port/x"},
		{name: "password as port", in: "http://h:" + pw + "/x", want: "http://" + Mask},
		{name: "ipv6", in: "http://u:" + pw + "@[::1]:3128/", want: "http://[::1]:3128/"},
		{name: "ipv6 no userinfo", in: "http://[::1]:3128/a", want: "http://[::1]:3128/a"},
		{name: "scheme relative", in: "//u:" + pw + "@h/x", want: "//h/x"},
		{name: "no scheme", in: "u:" + pw + "@h/x", want: "h/x"},
		{name: "opaque", in: "http:u:" + pw + "@h/x", want: "h/x"},
		{name: "postgres", in: "postgres://app:" + pw + "@db:5432/sb?sslmode=disable&password=" + tok, want: "postgres://db:5432/sb?sslmode=disable&password=" + Mask},
		{name: "query token", in: "https://h/simple/?token=" + tok + "&x=1", want: "https://h/simple/?token=" + Mask + "&x=" + Mask},
		{name: "bare query token", in: "https://h/?" + tok, want: "https://h/?" + Mask},
		{name: "semicolon query", in: "https://h/?a=1;key=" + tok, want: "https://h/?a=" + Mask + "&key=" + Mask},
		{name: "fragment", in: "https://h/x.whl#sha256=ab&token=" + tok, want: "https://h/x.whl"},
		{name: "path with at", in: "https://registry.example/@scope%2fpkg", want: "https://registry.example/@scope%2fpkg"},
		{name: "file path", in: "/root/wheels/x.whl", want: "/root/wheels/x.whl"},
		{name: "upper case scheme", in: "HTTP://U:" + pw + "@H/", want: "HTTP://H/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := URL(tc.in)
			if got != tc.want {
				t.Errorf("URL(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if strings.Contains(got, pw) || strings.Contains(got, tok) {
				t.Errorf("URL(%q) = %q keeps a secret", tc.in, got)
			}
			if o := Origin(tc.in); strings.Contains(o, pw) || strings.Contains(o, tok) || strings.ContainsAny(o, "?#") {
				t.Errorf("Origin(%q) = %q", tc.in, o)
			}
		})
	}
}

func TestOrigin(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"http://u:" + pw + "@127.0.0.1:1/files/a.whl?token=" + tok + "#sha256=x": "http://127.0.0.1:1/files/a.whl",
		"https://registry.npmjs.org/@s/p/-/p-1.0.0.tgz":                          "https://registry.npmjs.org/@s/p/-/p-1.0.0.tgz",
	} {
		if got := Origin(in); got != want {
			t.Errorf("Origin(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{name: "no url", in: "nothing here", want: "nothing here"},
		{name: "net/http error", in: `Get "http://user:***@127.0.0.1:9/simple/x/": dial tcp 127.0.0.1:9: connection refused`,
			want: `Get "http://127.0.0.1:9/simple/x/": dial tcp 127.0.0.1:9: connection refused`},
		{name: "two urls", in: "fetching http://a:" + pw + "@h/x and https://h2/?t=" + tok + " failed",
			want: "fetching http://h/x and https://h2/?t=" + Mask + " failed"},
		{name: "quoted", in: "index 'https://u:" + pw + "@h/simple/' (pip)", want: "index 'https://h/simple/' (pip)"},
		{name: "at end", in: "url postgres://u:" + pw + "@db", want: "url postgres://db"},
		{name: "schemeless separator", in: "x ://u:" + pw + "@h/", want: "x ://h/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Text(tc.in); got != tc.want {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzURL: whatever surrounds them, a password and a query value that
// net/url would find in a URL are never in what URL, Origin or Text
// return.
func FuzzURL(f *testing.F) {
	for _, s := range [][5]string{
		{"http", "user", "127.0.0.1:8080", "/simple/", "token"},
		{"postgres", "app", "db", "/x", "password"},
		{"https", "", "[::1]", "", "k"},
		{"http", "u@v", "h:1", "/@scope%2fp", "a b"},
		{"", "u", "h", "?", "#"},
	} {
		f.Add(s[0], s[1], s[2], s[3], s[4])
	}
	f.Fuzz(func(t *testing.T, scheme, user, host, path, key string) {
		for _, p := range []string{scheme, user, host, path, key} {
			if strings.Contains(p, "Zq9") {
				t.Skip()
			}
		}
		raw := scheme + "://" + user + ":" + pw + "@" + host + path + "?" + key + "=" + tok
		secrets := map[string]bool{}
		if u, err := url.Parse(raw); err == nil {
			if p, ok := u.User.Password(); ok && p != "" {
				secrets[p] = true
			}
			if u.User != nil && u.User.Username() != "" && strings.Contains(u.User.Username(), "Zq9") {
				secrets[u.User.Username()] = true
			}
			for k, vs := range u.Query() {
				if keepQuery[strings.ToLower(k)] {
					continue
				}
				for _, v := range vs {
					if strings.Contains(v, "Zq9") {
						secrets[v] = true
					}
				}
			}
		}
		outs := []string{URL(raw), Origin(raw)}
		if !strings.ContainsFunc(raw, func(r rune) bool { return r < 0x80 && isURLEnd(byte(r)) }) {
			// Text ends a URL at white space or a quote.
			outs = append(outs, Text("error: "+raw+" failed"))
		}
		for _, out := range outs {
			for s := range secrets {
				if strings.Contains(out, s) {
					t.Fatalf("%q -> %q keeps %q", raw, out, s)
				}
			}
			// A human meant pw as the password unless a "/" before it
			// makes it part of a path, or another "@" muddles it.
			if strings.Contains(out, pw) && !strings.Contains(scheme+user+host+path, "@") && !strings.Contains(scheme+user, "/") {
				t.Fatalf("%q -> %q keeps the password", raw, out)
			}
		}
	})
}

func TestErr(t *testing.T) {
	t.Parallel()
	if Err(nil) != nil {
		t.Fatal("Err(nil) is not nil")
	}
	inner := &url.Error{Op: "Get", URL: "http://u:" + pw + "@h/?t=" + tok, Err: context.DeadlineExceeded}
	err := Err(fmt.Errorf("fetching: %w", inner))
	if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), tok) {
		t.Fatalf("Err keeps a secret: %v", err)
	}
	var ue *url.Error
	if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ue) {
		t.Fatalf("Err loses the chain: %v", err)
	}
}
