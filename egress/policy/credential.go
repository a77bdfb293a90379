package policy

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidCredential is wrapped by every error about a malformed
// network.credentials entry.
var ErrInvalidCredential = errors.New("invalid credential")

// CredentialError says which part of a credential was rejected and why. It
// wraps ErrInvalidCredential and never quotes the value.
type CredentialError struct {
	Field  string // "host", "header" or "value"
	Reason string
}

func (e *CredentialError) Error() string {
	return fmt.Sprintf("invalid credential %s: %s", e.Field, e.Reason)
}

// Unwrap returns ErrInvalidCredential.
func (e *CredentialError) Unwrap() error { return ErrInvalidCredential }

// forbiddenCredentialHeaders are the header names a credential may not
// set, in canonical form: those that frame the message or the connection
// (the proxy relies on them to forward requests one by one), that route it
// (Host), that talk to a proxy, and cookies, which a client manages
// itself and a replaced value would silently discard.
var forbiddenCredentialHeaders = map[string]string{
	"Host":                "routes the request",
	"Content-Length":      "frames the message",
	"Transfer-Encoding":   "frames the message",
	"Trailer":             "frames the message",
	"Te":                  "a hop-by-hop header",
	"Connection":          "a hop-by-hop header",
	"Keep-Alive":          "a hop-by-hop header",
	"Upgrade":             "a hop-by-hop header",
	"Expect":              "the proxy answers it",
	"Cookie":              "cookies belong to the client",
	"Set-Cookie":          "a response header",
	"Forwarded":           "describes the proxy path",
	"Via":                 "describes the proxy path",
	"Max-Forwards":        "describes the proxy path",
	"Http2-Settings":      "a hop-by-hop header",
	"Alt-Svc":             "a response header",
	"Authentication-Info": "a response header",
}

// CanonicalHeader returns the canonical form of an HTTP header name
// ("authorization" -> "Authorization"), as net/http keys headers.
func CanonicalHeader(name string) string {
	b := []byte(strings.ToLower(name))
	upper := true
	for i, c := range b {
		if upper && c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
		upper = c == '-'
	}
	return string(b)
}

// isTokenChar reports whether c may appear in an RFC 9110 token.
func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// CheckCredentialHeader checks a credential's header name: an RFC 9110
// token that is neither a hop-by-hop or framing header, Host, a Proxy-*
// header nor a cookie. It returns the canonical name.
func CheckCredentialHeader(name string) (string, error) {
	if name == "" {
		return "", &CredentialError{Field: "header", Reason: "empty"}
	}
	for i := 0; i < len(name); i++ {
		if !isTokenChar(name[i]) {
			return "", &CredentialError{Field: "header", Reason: fmt.Sprintf("byte %#02x at %d is not allowed in a header name", name[i], i)}
		}
	}
	c := CanonicalHeader(name)
	if why, bad := forbiddenCredentialHeaders[c]; bad {
		return "", &CredentialError{Field: "header", Reason: c + " cannot be set (" + why + ")"}
	}
	if strings.HasPrefix(c, "Proxy-") {
		return "", &CredentialError{Field: "header", Reason: c + " cannot be set (talks to a proxy)"}
	}
	return c, nil
}

// CheckCredentialValue checks a credential's value: not empty, no control
// bytes (CR, LF, NUL and the rest, DEL included; tab only inside) and no
// leading or trailing white space, so that it is one header field value
// exactly as given. The error never quotes the value.
func CheckCredentialValue(v string) error {
	if v == "" {
		return &CredentialError{Field: "value", Reason: "empty"}
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if (c < 0x20 && c != '\t') || c == 0x7f {
			return &CredentialError{Field: "value", Reason: fmt.Sprintf("control byte at %d", i)}
		}
	}
	if v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t' {
		return &CredentialError{Field: "value", Reason: "leading or trailing white space"}
	}
	return nil
}

// CheckCredentialHost checks a credential's host against the session's
// policy: a canonical DNS name (no wildcard, no address, no port) that
// the policy allows. It returns the canonical name.
func (p Policy) CheckCredentialHost(host string) (string, error) {
	if strings.Contains(host, "*") {
		return "", &CredentialError{Field: "host", Reason: "must be one exact name, not a wildcard"}
	}
	c, err := CanonicalHost(host)
	if err != nil {
		var he *HostError
		if errors.As(err, &he) {
			return "", &CredentialError{Field: "host", Reason: he.Reason}
		}
		return "", &CredentialError{Field: "host", Reason: "not a host name"}
	}
	if !p.mayReachName(c) {
		return "", &CredentialError{Field: "host", Reason: c + " is not a host the session may reach (allowed_domains, denied)"}
	}
	return c, nil
}

// mayReachName reports whether the canonical host name h passes the
// policy's entries: no denied entry matches it, and an allowed entry does
// (or there are none). Addresses it resolves to are vetted per connection.
func (p Policy) mayReachName(h string) bool {
	for _, e := range p.Deny {
		if e.matchHost(h) {
			return false
		}
	}
	if len(p.Allow) == 0 {
		return true
	}
	for _, e := range p.Allow {
		if e.matchHost(h) {
			return true
		}
	}
	return false
}
