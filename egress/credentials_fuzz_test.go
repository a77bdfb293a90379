package egress

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/egress/policy"
)

// FuzzApplyCredentials: whatever request the sandbox sends, once the
// proxy has set a valid credential header and written the request out,
// the upstream reads exactly one value under that name, the credential,
// and the same Host and other headers as the sandbox sent.
func FuzzApplyCredentials(f *testing.F) {
	f.Add("GET / HTTP/1.1\r\nHost: api.example.com\r\nAuthorization: mine\r\n\r\n", "Authorization", "Bearer x")
	f.Add("POST /x HTTP/1.1\r\nHost: a.b\r\nauthorization: a\r\nAUTHORIZATION: b\r\nContent-Length: 3\r\n\r\nabc", "authorization", "k")
	f.Add("GET / HTTP/1.1\r\nHost: a.b\r\nX-Api-Key: 1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "x-api-key", "v\tw")
	f.Add("GET / HTTP/1.1\r\nHost: a.b\r\n\r\n", "X-A", "a\r\nX-Injected: 1")
	f.Fuzz(func(t *testing.T, raw, name, value string) {
		canon, err := policy.CheckCredentialHeader(name)
		if err != nil || policy.CheckCredentialValue(value) != nil {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
		if err != nil {
			return
		}
		host := req.Host
		others := map[string][]string{}
		for k, v := range req.Header {
			// Go writes no header whose name is not a token (the
			// sandbox's "H 00: 0" is dropped on the way out).
			if !strings.EqualFold(k, canon) && isToken(k) {
				others[k] = v
			}
		}
		applyCredentials(req.Header, []Header{{Name: canon, Value: value}})
		var out bytes.Buffer
		if err := req.Write(&out); err != nil {
			return // a body shorter than its length, say
		}
		got, err := http.ReadRequest(bufio.NewReader(&out))
		if err != nil {
			t.Fatalf("re-reading the forwarded request: %v\n%q", err, out.String())
		}
		if vs := got.Header.Values(canon); len(vs) != 1 || vs[0] != value {
			t.Fatalf("%s = %q, want exactly %q", canon, vs, value)
		}
		if got.Host != host {
			t.Fatalf("Host %q, want %q", got.Host, host)
		}
		for k, v := range others {
			if k == "User-Agent" || k == "Content-Length" || k == "Transfer-Encoding" {
				continue
			}
			if g := got.Header.Values(k); strings.Join(g, "\x00") != strings.Join(v, "\x00") {
				t.Fatalf("header %s = %q, want %q", k, g, v)
			}
		}
	})
}

// isToken says whether s is an HTTP token (RFC 9110), as a header name
// must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	return true
}
