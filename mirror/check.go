package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/google/osv-scalibr/semantic"
)

// Verdict is what the mirror says about one requested package (POST
// /v1/packages/check); api.PackageVerdict is its wire form, field for field.
type Verdict struct {
	Spec      string
	Name      string
	Version   string // asked for, else the newest admitted
	Available bool   // an install of Install would succeed
	// Status is admitted, refused, quarantined, removed, not_found or invalid.
	Status   string
	Versions []string // admitted versions, oldest first
	// OSV is clean, accepted (advisories accepted by the operator),
	// vulnerable or unknown.
	OSV         string
	Advisories  []string
	Reasons     []string
	OSVSnapshot string
	Install     string // exact spec for an install
	// Stripped is what the mirror took out of the published package;
	// empty when it is served as published.
	Stripped []string
	// Dependencies (npm) must be installed with it: name -> range.
	Dependencies map[string]string
}

// Verdict statuses that are not artifact statuses.
const (
	VerdictNotFound = "not_found"
	VerdictInvalid  = "invalid"
)

// Check says, for each of specs (NAME, NAME==VERSION for pip, NAME@VERSION
// for npm), whether the mirror serves it, its admitted versions, its OSV
// state and why not. A spec that does not parse gets status invalid, not
// an error; errors are those of the store. Safe for concurrent use.
func (m *Mirror) Check(ctx context.Context, manager string, specs []string) ([]Verdict, error) {
	mgr, err := ParseManager(manager)
	if err != nil {
		return nil, err
	}
	all, err := m.List(ctx, mgr)
	if err != nil {
		return nil, fmt.Errorf("listing the mirror: %w", err)
	}
	versions := map[string][]string{} // name key -> admitted versions
	for _, a := range all {
		if a.Status != StatusAdmitted {
			continue
		}
		k := NormalizeName(mgr, a.Name)
		if !slices.Contains(versions[k], a.Version) {
			versions[k] = append(versions[k], a.Version)
		}
	}
	for _, vs := range versions {
		sortVersions(mgr, vs)
	}
	out := make([]Verdict, 0, len(specs))
	for _, raw := range specs {
		v, err := m.checkOne(ctx, mgr, strings.TrimSpace(raw), versions)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (m *Mirror) checkOne(ctx context.Context, mgr Manager, raw string, versions map[string][]string) (Verdict, error) {
	v := Verdict{Spec: raw, OSV: "unknown", Versions: []string{}}
	name, version, problem := parsePackageSpec(mgr, raw)
	if problem != "" {
		v.Status, v.Reasons = VerdictInvalid, []string{problem}
		return v, nil
	}
	v.Name, v.Version = name, version
	if vs := versions[NormalizeName(mgr, name)]; vs != nil {
		v.Versions = vs
	}
	a, err := m.Lookup(ctx, mgr, name, version)
	switch {
	case err == nil:
		v.Name, v.Version, v.Available, v.Status = a.Name, a.Version, true, string(a.Status)
		v.OSV, v.Advisories, v.OSVSnapshot = "clean", a.Advisories, a.OSVSnapshot
		if len(a.Accepted) > 0 {
			v.OSV = "accepted"
		}
		v.Install = Spec{Manager: mgr, Name: a.Name, Version: a.Version}.String()
		v.Stripped, v.Dependencies = a.Stripped, a.Dependencies
	case errors.Is(err, ErrNotAdmitted):
		v.Name, v.Version, v.Status = a.Name, a.Version, string(a.Status)
		v.Reasons, v.Advisories, v.OSVSnapshot = a.Reasons, a.Advisories, a.OSVSnapshot
		v.Stripped, v.Dependencies = a.Stripped, a.Dependencies
		switch {
		case len(a.Advisories) > 0:
			v.OSV = "vulnerable"
		case a.OSVSnapshot != "":
			v.OSV = "clean"
		}
	case errors.Is(err, ErrNotFound):
		v.Status = VerdictNotFound
		if version != "" && len(v.Versions) > 0 {
			v.Reasons = []string{fmt.Sprintf("version %s is not in the mirror; admitted versions: %s", version, strings.Join(v.Versions, ", "))}
		} else {
			v.Reasons = []string{"not in the mirror; an operator can add it with `sandboxapi mirror add`"}
		}
	default:
		return v, fmt.Errorf("looking up %s in the mirror: %w", raw, err)
	}
	return v, nil
}

// parsePackageSpec accepts NAME, NAME==VERSION (pip) or NAME@VERSION (npm)
// and returns a problem text for anything else.
func parsePackageSpec(mgr Manager, raw string) (name, version, problem string) {
	want := "NAME or NAME==VERSION"
	hasVersion := strings.Contains(raw, "==")
	if mgr == NPM {
		want = "NAME or NAME@VERSION"
		hasVersion = strings.LastIndex(raw, "@") > 0
	}
	if hasVersion {
		s, err := ParseSpec(mgr, raw)
		if err != nil {
			return "", "", fmt.Sprintf("%q: want %s with an exact version", raw, want)
		}
		return s.Name, s.Version, ""
	}
	if !ValidName(mgr, raw) {
		return "", "", fmt.Sprintf("%q: want %s", raw, want)
	}
	return raw, "", ""
}

// sortVersions orders versions oldest first (PEP 440 or semver); versions
// that do not parse sort first, by text.
func sortVersions(mgr Manager, vs []string) {
	eco := mgr.Ecosystem()
	parse := func(s string) (v semantic.Version) {
		defer func() {
			if recover() != nil {
				v = nil
			}
		}()
		v, err := semantic.Parse(s, eco)
		if err != nil {
			return nil
		}
		return v
	}
	cmp := func(a, b string) (c int) {
		defer func() {
			if recover() != nil {
				c = strings.Compare(a, b)
			}
		}()
		pa, pb := parse(a), parse(b)
		switch {
		case pa == nil && pb == nil:
			return strings.Compare(a, b)
		case pa == nil:
			return -1
		case pb == nil:
			return 1
		}
		c, err := pa.Compare(pb)
		if err != nil {
			return strings.Compare(a, b)
		}
		return c
	}
	sort.SliceStable(vs, func(i, j int) bool { return cmp(vs[i], vs[j]) < 0 })
}
