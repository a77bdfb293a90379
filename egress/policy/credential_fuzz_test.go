package policy

import (
	"bufio"
	"net/textproto"
	"strings"
	"testing"
)

// FuzzCheckCredential: a header name and value the checks accept make
// exactly one header field when written as one, which no hop-by-hop,
// framing, Host or Proxy-* name is; and the error never quotes the value.
func FuzzCheckCredential(f *testing.F) {
	for _, s := range [][2]string{
		{"Authorization", "Bearer x"}, {"x-api-key", "k"}, {"Host", "a"}, {"Proxy-Authorization", "b"},
		{"Connection", "close"}, {"X-A", "a\r\nHost: evil"}, {"X\r\nHost", "a"}, {"X-A", "\x00"}, {"X-A", " lead"},
		{"Transfer-Encoding", "chunked"}, {"te", "trailers"}, {"X-A", "\x7f"}, {"X-A", "ü"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, value string) {
		canon, herr := CheckCredentialHeader(name)
		verr := CheckCredentialValue(value)
		if verr != nil && len(verr.Error()) > 64 {
			t.Fatalf("error %q is longer than its fixed reasons (does it quote the value?)", verr)
		}
		if herr != nil || verr != nil {
			return
		}
		if canon != CanonicalHeader(name) || !strings.EqualFold(canon, name) {
			t.Fatalf("canonical %q of %q", canon, name)
		}
		if _, bad := forbiddenCredentialHeaders[canon]; bad || strings.HasPrefix(canon, "Proxy-") {
			t.Fatalf("%q accepted", name)
		}
		r := textproto.NewReader(bufio.NewReader(strings.NewReader(name + ": " + value + "\r\n\r\n")))
		h, err := r.ReadMIMEHeader()
		if err != nil {
			t.Fatalf("accepted header does not parse: %v", err)
		}
		if len(h) != 1 || len(h[canon]) != 1 || h[canon][0] != value {
			t.Fatalf("accepted %q: %q parsed as %v", name, value, h)
		}
	})
}
