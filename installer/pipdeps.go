package installer

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// PipRequirement is one parsed Requires-Dist value (PEP 508).
type PipRequirement struct {
	Name      string
	Extras    []string
	Specifier string // "<2,>=1.26" as written, parentheses dropped; "" for any
	URL       string // "name @ url": the mirror cannot check it
	Marker    string
}

var (
	reqName  = regexp.MustCompile(`^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*`)
	specPart = regexp.MustCompile(`^\s*(~=|===|==|!=|<=|>=|<|>)\s*([A-Za-z0-9._+!*-]+)\s*$`)
)

// maxRequirementBytes bounds one Requires-Dist value.
const maxRequirementBytes = 4096

// ParseRequirement parses a PEP 508 requirement as wheels write it in
// Requires-Dist: "name[extra,...] (>=1,<2) ; marker", the specifier with
// or without parentheses, or "name @ url ; marker".
func ParseRequirement(s string) (PipRequirement, error) {
	var r PipRequirement
	if len(s) > maxRequirementBytes {
		return r, fmt.Errorf("requirement over %d bytes", maxRequirementBytes)
	}
	body, marker, _ := strings.Cut(s, ";")
	r.Marker = strings.TrimSpace(marker)
	body = strings.TrimSpace(body)
	m := reqName.FindStringSubmatch(body)
	if m == nil {
		return r, fmt.Errorf("requirement %q: no project name", truncateStr(s, 80))
	}
	r.Name = m[1]
	rest := body[len(m[0]):]
	if strings.HasPrefix(rest, "[") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return r, fmt.Errorf("requirement %q: unclosed extras", truncateStr(s, 80))
		}
		for _, e := range strings.Split(rest[1:end], ",") {
			if e = strings.TrimSpace(e); e != "" {
				r.Extras = append(r.Extras, e)
			}
		}
		rest = strings.TrimSpace(rest[end+1:])
	}
	if u, ok := strings.CutPrefix(rest, "@"); ok {
		r.URL = strings.TrimSpace(u)
		return r, nil
	}
	rest = strings.TrimSpace(rest)
	if strings.HasPrefix(rest, "(") {
		if !strings.HasSuffix(rest, ")") {
			return r, fmt.Errorf("requirement %q: unclosed (", truncateStr(s, 80))
		}
		rest = strings.TrimSpace(rest[1 : len(rest)-1])
	}
	if rest != "" {
		var clauses []string
		for _, c := range strings.Split(rest, ",") {
			cm := specPart.FindStringSubmatch(c)
			if cm == nil || !pep440.MatchString(cm[2]) {
				return r, fmt.Errorf("requirement %q: bad version specifier %q", truncateStr(s, 80), truncateStr(strings.TrimSpace(c), 40))
			}
			clauses = append(clauses, cm[1]+cm[2])
		}
		r.Specifier = strings.Join(clauses, ",")
	}
	return r, nil
}

// SatisfiesSpecifier reports whether version satisfies every clause of
// spec ("" is any version). Pre-releases satisfy only a specifier that
// names one, as pip does by default.
func SatisfiesSpecifier(version, spec string) bool { return satisfies(version, spec, false) }

// satisfies is SatisfiesSpecifier; anyPre lets a pre-release satisfy any
// specifier (a version the request pins exactly).
func satisfies(version, spec string, anyPre bool) bool {
	if spec == "" {
		return anyPre || !isPipPrerelease(version)
	}
	pre := false
	for _, c := range strings.Split(spec, ",") {
		cm := specPart.FindStringSubmatch(c)
		if cm == nil || !pep440.MatchString(cm[2]) {
			return false
		}
		if isPipPrerelease(cm[2]) {
			pre = true
		}
		ok, err := matchSpecifier(version, cm[1], cm[2])
		if err != nil || !ok {
			return false
		}
	}
	return anyPre || pre || !isPipPrerelease(version)
}

var (
	pipPre = regexp.MustCompile(`(?i)[0-9][._-]?(a|b|c|rc|alpha|beta|pre|preview|dev)[0-9]*`)
	// pep440 is a version as PEP 440 writes it (".*" allowed at the end,
	// for == and !=).
	pep440 = regexp.MustCompile(`(?i)^v?([0-9]+!)?[0-9]+(\.[0-9]+)*([-_.]?(a|b|c|rc|alpha|beta|pre|preview)[-_.]?[0-9]*)?(([-_.]?(post|rev|r)[-_.]?[0-9]*)|-[0-9]+)?([-_.]?dev[-_.]?[0-9]*)?(\+[a-z0-9]+([-_.][a-z0-9]+)*)?(\.\*)?$`)
)

func isPipPrerelease(v string) bool { return pipPre.MatchString(v) }

// checkPipRequirements refuses a pip request whose wheels need a
// requirement (Requires-Dist, its marker true for the session's Python)
// that the request names at a version outside the specifier, and returns
// those the request does not name: the session may hold them (checked by
// the install job). A requirement that cannot be read is named too, with
// what is wrong in its range: the installer fails closed.
func (i *Installer) checkPipRequirements(ctx context.Context, plan []planned) ([]planned, []requirement, error) {
	env := SessionPython()
	inReq := map[string]string{}
	for _, p := range plan {
		inReq[normPipName(p.a.Name)] = p.a.Version
	}
	var rej []sandbox.PackageRejection
	var reqs []requirement
	for _, p := range plan {
		var missing []sandbox.MissingDependency
		seen := map[string]bool{}
		for _, raw := range p.a.Requires {
			r, err := ParseRequirement(raw)
			if err == nil {
				var apply bool
				apply, err = EvalMarker(r.Marker, env)
				if err == nil && !apply {
					continue
				}
			}
			name, spec := r.Name, r.Specifier
			switch {
			case err != nil:
				if name == "" {
					name = truncateStr(strings.TrimSpace(raw), 64)
				}
				spec = "(unreadable: " + truncateStr(err.Error(), 120) + ")"
			case r.URL != "":
				spec = "@ " + truncateStr(r.URL, 120)
			}
			key := normPipName(name)
			if seen[key+"\x00"+spec] {
				continue
			}
			seen[key+"\x00"+spec] = true
			admitted, known, verr := i.catalog.Versions(ctx, Pip, name)
			if verr != nil {
				return nil, nil, fmt.Errorf("checking %s's requirement %s: %w", p.requested, name, verr)
			}
			admitted, known = filterSpec(admitted, spec, err == nil && r.URL == ""), filterSpec(known, spec, err == nil && r.URL == "")
			v, named := inReq[key]
			switch {
			case named && err == nil && r.URL == "" && satisfies(v, spec, true):
			case named:
				missing = append(missing, sandbox.MissingDependency{Name: name, Range: spec, MirrorVersions: nonNil(admitted), Requested: v})
			default:
				reqs = append(reqs, requirement{By: p.requested, Name: name, Range: spec, Versions: nonNil(known), admitted: nonNil(admitted), pip: true})
			}
		}
		if len(missing) > 0 {
			rej = append(rej, missingRejectionFor(Pip, p.requested, missing, false))
		}
	}
	if len(rej) > 0 {
		return nil, nil, &sandbox.RejectedError{Packages: rej}
	}
	return plan, reqs, nil
}

// filterSpec keeps the versions that satisfy spec; none when the
// requirement cannot be checked (ok false).
func filterSpec(versions []string, spec string, ok bool) []string {
	if !ok {
		return nil
	}
	var out []string
	for _, v := range versions {
		if SatisfiesSpecifier(v, spec) {
			out = append(out, v)
		}
	}
	return out
}
