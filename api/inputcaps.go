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
