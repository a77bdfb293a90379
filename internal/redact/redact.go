// Package redact removes credentials from URLs before they are stored,
// logged or shown: userinfo (user and password), query values and
// fragments. It is a leaf: no I/O, no state, safe for concurrent use.
//
// It works on the raw text, not on what net/url makes of it, so a URL
// that does not parse (a stray space, a bad port, a second "@") is cut
// just as one that does: the part a client library would send as
// userinfo is a subset of what is removed here.
package redact

import "strings"

// Mask replaces each redacted query value (and each bare query token).
const Mask = "REDACTED"

// keepQuery are query keys whose values are settings, never credentials,
// and say something useful in an operator's error message.
var keepQuery = map[string]bool{
	"sslmode":              true,
	"connect_timeout":      true,
	"target_session_attrs": true,
}

// URL returns raw without its userinfo and fragment, with the value of
// every query parameter except a few settings (sslmode, connect_timeout,
// target_session_attrs) replaced by Mask. The scheme, host, port and path
// are kept, so the result still says which server was meant.
func URL(raw string) string {
	s, _ := cutAny(stripUserinfo(raw), "#")
	s, query, hasQuery := cutQuery(s)
	if !hasQuery {
		return s
	}
	return s + "?" + redactQuery(query)
}

// Origin returns raw without userinfo, query and fragment: the form kept
// as an artifact's provenance.
func Origin(raw string) string {
	s, _ := cutAny(stripUserinfo(raw), "#")
	s, _, _ = cutQuery(s)
	return s
}

// Text returns s with every word in it that holds "://" (a URL, up to
// the white space or quotes around it) passed through URL: for error messages of
// libraries that quote the URL they were given (net/http's "Get \"...\"").
func Text(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	for {
		i := strings.Index(s, "://")
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		// The whole word around "://": what precedes the scheme (a
		// query, a path) may hold a credential too.
		start := i
		for start > 0 && !isURLEnd(s[start-1]) {
			start--
		}
		end := i + 3
		for end < len(s) && !isURLEnd(s[end]) {
			end++
		}
		b.WriteString(s[:start])
		b.WriteString(URL(s[start:end]))
		s = s[end:]
	}
}

func isURLEnd(c byte) bool {
	switch c {
	case ' ', '\t', '\n', '\r', '\v', '\f', '"', '\'', '`', '<', '>':
		return true
	}
	return false
}

// cutAny returns s before the first of seps and what follows it.
func cutAny(s, seps string) (string, string) {
	if i := strings.IndexAny(s, seps); i >= 0 {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// cutQuery splits s at its query. A "?" inside the authority starts the
// query too: net/url ends the authority there.
func cutQuery(s string) (string, string, bool) {
	i := strings.IndexByte(s, '?')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}

// stripUserinfo removes everything up to the last "@" of the authority:
// the part after the first "/" when that starts a "//" (or from the start
// when it does not) up to the next "/". A "?" or "#" before that "@" may
// be part of a password that was not escaped, and an authority with no
// "@" whose port is not a number may be "user:pa" of "user:pa/ss@host":
// then all of s after the "//" is replaced by Mask.
func stripUserinfo(s string) string {
	start := 0
	if i := strings.IndexByte(s, '/'); i >= 0 && strings.HasPrefix(s[i:], "//") {
		start = i + 2
	}
	end := len(s)
	if j := strings.IndexByte(s[start:], '/'); j >= 0 {
		end = start + j
	}
	at := strings.LastIndexByte(s[start:end], '@')
	if at < 0 {
		if !hostPortOK(s[start:end]) {
			return s[:start] + Mask
		}
		return s
	}
	if strings.ContainsAny(s[start:start+at], "?#") {
		// A query or fragment with an "@" in it, or a password with an
		// unescaped "?" or "#": which is which cannot be told.
		return s[:start] + Mask
	}
	return s[:start] + s[start+at+1:]
}

// hostPortOK reports whether a (before any "?" or "#") ends in no port or
// a numeric one.
func hostPortOK(a string) bool {
	a, _ = cutAny(a, "?#")
	if strings.HasPrefix(a, "[") {
		k := strings.IndexByte(a, ']')
		if k < 0 {
			return false
		}
		a = a[k+1:]
		if a == "" {
			return true
		}
		if a[0] != ':' {
			return false
		}
	}
	i := strings.LastIndexByte(a, ':')
	if i < 0 {
		return true
	}
	for _, c := range []byte(a[i+1:]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return !strings.Contains(a[:i], ":")
}

func redactQuery(q string) string {
	if q == "" {
		return ""
	}
	parts := strings.FieldsFunc(q, func(r rune) bool { return r == '&' || r == ';' })
	for i, p := range parts {
		k, _, ok := strings.Cut(p, "=")
		switch {
		case !ok:
			parts[i] = Mask
		case keepQuery[strings.ToLower(k)]:
		default:
			parts[i] = k + "=" + Mask
		}
	}
	return strings.Join(parts, "&")
}

// Err returns err with every URL in its text passed through URL, keeping
// it for errors.Is and errors.As; nil stays nil.
func Err(err error) error {
	if err == nil {
		return nil
	}
	return redacted{err}
}

type redacted struct{ err error }

func (r redacted) Error() string { return Text(r.err.Error()) }
func (r redacted) Unwrap() error { return r.err }
