package installer

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"regexp"
	"strings"
)

var (
	pipName    = regexp.MustCompile(`^(?i:[a-z0-9]|[a-z0-9][a-z0-9._-]{0,198}[a-z0-9])$`)
	pipVersion = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+!_-]{0,63}$`)
	wheelFile  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+!-]{0,250}\.whl$`)
	npmName    = regexp.MustCompile(`^(@[a-z0-9~][a-z0-9._~-]{0,100}/)?[a-z0-9~][a-z0-9._~-]{0,213}$`)
	npmVersion = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.+-]{1,64})?$`)
)

// ParseSpec reads one requested package: pip "name==version" or "name",
// npm "name@version", "@scope/name@version" or a bare name. Ranges,
// extras, URLs and paths are refused: every package is pinned exactly or
// resolved to the newest admitted version.
func ParseSpec(m Manager, spec string) (name, version string, err error) {
	if spec == "" || len(spec) > 256 || strings.TrimSpace(spec) != spec {
		return "", "", errors.New("empty, too long or padded package spec")
	}
	switch m {
	case Pip:
		name, version, _ = strings.Cut(spec, "==")
		if !pipName.MatchString(name) {
			if strings.ContainsAny(spec, "<>~!=[];@ /:") {
				return "", "", errors.New("pin exactly with name==version (no ranges, extras, markers or URLs)")
			}
			return "", "", errors.New("not a valid pip package name")
		}
		if strings.Contains(spec, "==") && !pipVersion.MatchString(version) {
			return "", "", errors.New("not a valid exact version (use name==version)")
		}
		return name, version, nil
	case NPM:
		body := spec
		scope := ""
		if strings.HasPrefix(body, "@") {
			k := strings.IndexByte(body, '/')
			if k < 0 {
				return "", "", errors.New("not a valid npm package name")
			}
			scope, body = body[:k+1], body[k+1:]
		}
		n, v, hasV := strings.Cut(body, "@")
		name = scope + n
		if !npmName.MatchString(name) {
			return "", "", errors.New("not a valid npm package name")
		}
		if hasV {
			if !npmVersion.MatchString(v) {
				return "", "", errors.New("pin exactly with name@x.y.z (no ranges, tags or URLs)")
			}
			version = strings.TrimPrefix(v, "v")
		}
		return name, version, nil
	}
	return "", "", errors.New("unknown manager")
}

// normName is the key that makes two spellings of one package equal.
func normName(m Manager, name string) string {
	if m == Pip {
		return strings.NewReplacer("_", "-", ".", "-").Replace(strings.ToLower(name))
	}
	return name
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
