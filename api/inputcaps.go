package api

import (
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/sandboxapi/sandboxapi/egress/policy"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// The caps on what a client can store or have echoed are the constants of
// internal/sandbox/limits.go (sandbox.MaxAllowedDomains and the rest). The
// checks below run right after a body is decoded, before the plan, the
// egress configuration or capacity is asked: bad input is a 400 on every
// server, whatever its plans and whether its egress is on.

// maxDomainErrors is the most bad allowed_domains (or denied) entries one
// error message names; the rest are counted.
const maxDomainErrors = 8

// normalizeNetwork checks a request's network block against the caps and
// the entry syntax (domain patterns, IP addresses, CIDR prefixes), for
// allowed_domains and denied alike, and drops repeated entries of each
// list in place (the same canonical entry: a name ignoring case and a
// trailing dot, the same wildcard, "1.2.3.4" and "1.2.3.4/32"), keeping
// the first spelling of each and their order. A nil block is fine.
func normalizeNetwork(n *NetworkRequest) error {
	if err := normalizeDomains(n); err != nil {
		return err
	}
	return normalizeCredentials(n)
}

// normalizeDomains checks and de-duplicates allowed_domains and denied (see
// normalizeNetwork).
func normalizeDomains(n *NetworkRequest) error {
	if n == nil {
		return nil
	}
	allowed, err := normalizeList(policy.ListAllowed, "invalid_allowed_domains", n.AllowedDomains)
	if err != nil {
		return err
	}
	denied, err := normalizeList(policy.ListDenied, "invalid_denied", n.Denied)
	if err != nil {
		return err
	}
	n.AllowedDomains, n.Denied = allowed, denied
	return nil
}

// normalizeList is normalizeNetwork for one list; code is its error code.
func normalizeList(list policy.List, code string, entries []string) ([]string, error) {
	if len(entries) == 0 {
		return entries, nil
	}
	if len(entries) > sandbox.MaxAllowedDomains {
		return nil, &Error{Status: http.StatusBadRequest, Code: code,
			Message: string(list) + " holds " + strconv.Itoa(len(entries)) + " entries; at most " + strconv.Itoa(sandbox.MaxAllowedDomains) + " are allowed"}
	}
	var bad []string
	nbad := 0
	seen := make(map[policy.Entry]bool, len(entries))
	out := entries[:0:0]
	for _, entry := range entries {
		var e policy.Entry
		var err error
		if len(entry) > sandbox.MaxDomainEntryBytes {
			err = errors.New("over " + strconv.Itoa(sandbox.MaxDomainEntryBytes) + " bytes")
		} else if e, err = policy.ParseEntry(list, entry); err != nil {
			var pe *policy.PatternError
			if errors.As(err, &pe) {
				err = errors.New(pe.Reason)
			}
		}
		if err != nil {
			nbad++
			if len(bad) < maxDomainErrors {
				bad = append(bad, sandbox.Quote(entry)+": "+err.Error())
			}
			continue
		}
		if !seen[e] {
			seen[e] = true
			out = append(out, entry)
		}
	}
	if nbad > 0 {
		msg := "invalid " + string(list) + " entries: " + strings.Join(bad, "; ")
		if nbad > len(bad) {
			msg += "; and " + strconv.Itoa(nbad-len(bad)) + " more"
		}
		return nil, &Error{Status: http.StatusBadRequest, Code: code, Message: msg}
	}
	return out, nil
}

// errCredentials is the 400 for a bad network.credentials list; the
// message names the entry by index and never quotes a value.
func errCredentials(format string, args ...any) error {
	return apiErr(http.StatusBadRequest, "invalid_credentials", format, args...)
}

// normalizeCredentials checks a request's credentials: at most
// sandbox.MaxCredentials, each for one exact host the session may reach
// (allowed_domains, a wildcard match counts), a header name that is a
// token and not one the proxy or HTTP framing owns, a value without
// control bytes of at most sandbox.MaxCredentialValueBytes, one per host
// and header. It writes the canonical host and header names in place. A
// client cannot send a sealed value.
func normalizeCredentials(n *NetworkRequest) error {
	if n == nil || len(n.Credentials) == 0 {
		return nil
	}
	if !n.Enabled {
		return errCredentials("credentials need network.enabled")
	}
	if len(n.Credentials) > sandbox.MaxCredentials {
		return errCredentials("credentials holds %d entries; at most %d are allowed", len(n.Credentials), sandbox.MaxCredentials)
	}
	pol, err := policy.New(policy.Rules{Enabled: true, Allowed: n.AllowedDomains, Denied: n.Denied})
	if err != nil {
		return apiErr(http.StatusBadRequest, "invalid_allowed_domains", "%v", err)
	}
	seen := make(map[[2]string]bool, len(n.Credentials))
	out := make([]sandbox.Credential, len(n.Credentials))
	for i, c := range n.Credentials {
		if c.Sealed != "" {
			return errCredentials("credentials[%d]: sealed is not accepted; send value", i)
		}
		if len(c.Host) > sandbox.MaxDomainEntryBytes {
			return errCredentials("credentials[%d].host: over %d bytes", i, sandbox.MaxDomainEntryBytes)
		}
		if len(c.Header) > sandbox.MaxCredentialHeaderBytes {
			return errCredentials("credentials[%d].header: over %d bytes", i, sandbox.MaxCredentialHeaderBytes)
		}
		if len(c.Value) > sandbox.MaxCredentialValueBytes {
			return errCredentials("credentials[%d].value: over %d bytes", i, sandbox.MaxCredentialValueBytes)
		}
		host, err := pol.CheckCredentialHost(c.Host)
		if err == nil {
			c.Header, err = policy.CheckCredentialHeader(c.Header)
		}
		if err == nil {
			err = policy.CheckCredentialValue(c.Value)
		}
		if err != nil {
			var ce *policy.CredentialError
			if errors.As(err, &ce) {
				return errCredentials("credentials[%d].%s: %s", i, ce.Field, ce.Reason)
			}
			return errCredentials("credentials[%d]: invalid", i)
		}
		key := [2]string{host, c.Header}
		if seen[key] {
			return errCredentials("credentials[%d]: a second %s for %s", i, c.Header, host)
		}
		seen[key] = true
		out[i] = sandbox.Credential{Host: host, Header: c.Header, Value: c.Value}
	}
	n.Credentials = out
	return nil
}

// checkExecuteShape checks an execute's env and files against the caps.
func checkExecuteShape(req *wire.ExecuteRequest) error {
	if err := sandbox.CheckEnv(req.Env); err != nil {
		return err
	}
	if len(req.Files) > sandbox.MaxFiles {
		return apiErr(http.StatusBadRequest, "invalid_request", "files holds %d entries; at most %d are allowed", len(req.Files), sandbox.MaxFiles)
	}
	for _, f := range req.Files {
		if len(f.Path) > sandbox.MaxFilePathBytes {
			return apiErr(http.StatusBadRequest, "invalid_request", "file path %s is over %d bytes", sandbox.Quote(f.Path), sandbox.MaxFilePathBytes)
		}
	}
	return nil
}

// checkPackagesShape checks an install's or a check's package list: at
// least one, at most sandbox.MaxPackages, each at most
// sandbox.MaxPackageSpecBytes.
func checkPackagesShape(verb string, pkgs []string) error {
	if len(pkgs) == 0 {
		return apiErr(http.StatusBadRequest, "invalid_request", "packages must list at least one package")
	}
	if len(pkgs) > sandbox.MaxPackages {
		return apiErr(http.StatusBadRequest, "invalid_request", "at most %d packages per %s", sandbox.MaxPackages, verb)
	}
	for _, spec := range pkgs {
		if len(spec) > sandbox.MaxPackageSpecBytes {
			return apiErr(http.StatusBadRequest, "invalid_request", "package spec %s is over %d bytes", sandbox.Quote(spec), sandbox.MaxPackageSpecBytes)
		}
	}
	return nil
}
