package sandbox

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Limits on every list and string a client can send that the server
// stores, hands on or echoes back. They are here, in one place, so that the
// API (which checks them before anything else, as 400s), the executor
// (which checks again) and the documentation agree; docs/api.md lists them
// and api/openapi.json states them as maxItems and maxLength.
const (
	// MaxLanguageBytes bounds a language name or alias.
	MaxLanguageBytes = 64
	// MaxAllowedDomains bounds network.allowed_domains, and apart from it
	// network.denied, as sent (before duplicates are dropped).
	MaxAllowedDomains = 256
	// MaxDomainEntryBytes bounds one allowed_domains or denied entry: "*."
	// and a 253-byte name with its trailing dot (addresses and CIDR
	// prefixes are shorter).
	MaxDomainEntryBytes = 256
	// MaxCredentials bounds network.credentials; MaxCredentialHeaderBytes
	// and MaxCredentialValueBytes bound one credential's header name and
	// value.
	MaxCredentials           = 16
	MaxCredentialHeaderBytes = 128
	MaxCredentialValueBytes  = 8 << 10
	// MaxEnvVars, MaxEnvNameBytes and MaxEnvBytes bound an execute's env:
	// the number of variables, one name, and names plus values in all.
	MaxEnvVars      = 64
	MaxEnvNameBytes = 128
	MaxEnvBytes     = 64 << 10
	// MaxFiles and MaxFilePathBytes bound the files of a stateless
	// execute: how many, and one path.
	MaxFiles         = 64
	MaxFilePathBytes = 255
	// MaxPackages and MaxPackageSpecBytes bound an install's or a check's
	// packages (or a lockfile's): how many, and one spec. 256 holds a real
	// web project's whole npm tree (express 4 is 69 packages); the work of
	// each package is already bounded (unpacked size and entries per
	// package, the home's disk, the install's timeout).
	MaxPackages         = 256
	MaxPackageSpecBytes = 300
	// MaxErrorEcho is the most bytes of a client's string an error
	// message quotes back.
	MaxErrorEcho = 64
)

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// reservedEnv cannot be set by callers: they steer where code and packages
// come from.
var reservedEnv = map[string]bool{"PATH": true, "HOME": true, "USER": true, "LD_PRELOAD": true, "LD_LIBRARY_PATH": true}

// CheckEnv validates caller environment variables against the limits
// above: names of letters, digits and underscores, none reserved, no NUL in
// a value. Its errors wrap ErrInvalid and quote at most MaxErrorEcho bytes
// of a name.
func CheckEnv(env map[string]string) error {
	if len(env) > MaxEnvVars {
		return fmt.Errorf("%w: at most %d environment variables", ErrInvalid, MaxEnvVars)
	}
	size := 0
	for k, v := range env {
		if len(k) > MaxEnvNameBytes || !envName.MatchString(k) {
			return fmt.Errorf("%w: environment variable name %s must be letters, digits and underscores, at most %d bytes, not starting with a digit",
				ErrInvalid, Quote(k), MaxEnvNameBytes)
		}
		if reservedEnv[strings.ToUpper(k)] {
			return fmt.Errorf("%w: environment variable %s is reserved", ErrInvalid, k)
		}
		if strings.ContainsRune(v, 0) {
			return fmt.Errorf("%w: environment variable %s contains NUL", ErrInvalid, k)
		}
		size += len(k) + len(v)
		if size > MaxEnvBytes {
			return fmt.Errorf("%w: environment larger than %d KiB", ErrInvalid, MaxEnvBytes>>10)
		}
	}
	return nil
}

// Quote is s quoted for an error message, cut to MaxErrorEcho bytes (then
// marked with "..." and the full length).
func Quote(s string) string {
	if len(s) <= MaxErrorEcho {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:MaxErrorEcho]) + "... (" + strconv.Itoa(len(s)) + " bytes)"
}
