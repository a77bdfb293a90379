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
		// The reference is the same request written out untouched: Go's
		// writer has its own rules (a Host it cannot clean goes out
		// empty, a name that is not a token is dropped), and the
		// credential must change nothing but its own header.
		ref, ok := roundTrip(t, raw, nil)
		if !ok {
			return
		}
		got, ok := roundTrip(t, raw, []Header{{Name: canon, Value: value}})
		if !ok {
			t.Fatalf("the request was written without the credential but not with it\n%q", raw)
		}
		if vs := got.Header.Values(canon); len(vs) != 1 || vs[0] != value {
			t.Fatalf("%s = %q, want exactly %q", canon, vs, value)
		}
		if got.Host != ref.Host {
			t.Fatalf("Host %q, want %q as without the credential", got.Host, ref.Host)
		}
		for k := range req.Header {
			if strings.EqualFold(k, canon) || k == "Content-Length" || k == "Transfer-Encoding" {
				continue
			}
			if g, w := got.Header.Values(k), ref.Header.Values(k); strings.Join(g, "\x00") != strings.Join(w, "\x00") {
				t.Fatalf("header %s = %q, want %q as without the credential", k, g, w)
			}
		}
		// Nothing but the credential is new: no header the value or the
		// name could have smuggled in.
		for k := range got.Header {
			if _, ok := ref.Header[k]; !ok && !strings.EqualFold(k, canon) {
				t.Fatalf("header %s = %q appeared with the credential", k, got.Header.Values(k))
			}
		}
	})
}

// roundTrip reads raw as the sandbox's request, applies creds, writes
// it as the proxy would and reads back what the upstream gets; false
// when Go will not write it (a body shorter than its length, say).
func roundTrip(t *testing.T, raw string, creds []Header) (*http.Request, bool) {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
	if err != nil {
		t.Fatalf("second read of the same request failed: %v", err)
	}
	applyCredentials(req.Header, creds)
	var out bytes.Buffer
	if err := req.Write(&out); err != nil {
		return nil, false
	}
	got, err := http.ReadRequest(bufio.NewReader(&out))
	if err != nil {
		t.Fatalf("re-reading the forwarded request: %v\n%q", err, out.String())
	}
	return got, true
}
