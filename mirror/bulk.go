package mirror

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"sort"
	"strings"
	"unicode"
)

// Requirement is one line of a pip requirements file.
type Requirement struct {
	Line int    // 1-based line where the requirement starts
	Raw  string // the requirement as written, continuation lines joined
	Spec Spec   // pinned name==version (zero when Problem is set)
	// Hashes are the sha256 hex digests given with --hash=sha256:...; when
	// any are given, only wheels with one of them are admitted.
	Hashes []string
	// Problem says why the line cannot be curated (not pinned, a URL, an
	// option the mirror does not take).
	Problem string
}

// ParseRequirements reads a requirements file (pip's format): one
// requirement per line, "#" comments, "\" continuations, --hash options.
// Only pinned requirements (name==version, extras and environment markers
// allowed) can be curated; other lines come back with a Problem. Options
// that change where pip looks (-r, -c, --index-url, -e, ...) are problems
// too: the file is curated against the mirror's configured index.
func ParseRequirements(data []byte) ([]Requirement, error) {
	if len(data) > 4<<20 {
		return nil, fmt.Errorf("%w: requirements file over 4 MiB", ErrBadSpec)
	}
	var out []Requirement
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line, start := 0, 0
	var cur strings.Builder
	flush := func() {
		s := strings.TrimSpace(cur.String())
		cur.Reset()
		if s == "" {
			return
		}
		out = append(out, parseRequirement(start, s))
	}
	for sc.Scan() {
		line++
		t := sc.Text()
		if cur.Len() == 0 {
			start = line
		}
		// A comment runs to the end of the line when "#" starts it or
		// follows whitespace (pip's rule; "#" inside a URL stays).
		if i := commentStart(t); i >= 0 {
			t = t[:i]
		}
		if strings.HasSuffix(t, "\\") {
			cur.WriteString(strings.TrimSuffix(t, "\\"))
			cur.WriteByte(' ')
			continue
		}
		cur.WriteString(t)
		flush()
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: reading requirements: %v", ErrBadSpec, err)
	}
	flush()
	return out, nil
}

func commentStart(s string) int {
	for i, c := range s {
		if c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t') {
			return i
		}
	}
	return -1
}

func parseRequirement(line int, s string) Requirement {
	r := Requirement{Line: line, Raw: s}
	fields := strings.Fields(s)
	if strings.HasPrefix(fields[0], "-") {
		r.Problem = fmt.Sprintf("option %s is not curated: list pinned requirements only", fields[0])
		return r
	}
	req := fields[0]
	rest := fields[1:]
	if len(rest) > 0 && (rest[0] == "@" || strings.HasPrefix(rest[0], "@")) || strings.Contains(s, "://") {
		r.Problem = "a URL or direct reference: only pinned index packages are curated"
		return r
	}
	// Environment markers: "name==1.0; python_version >= '3.8'" (the
	// marker may contain spaces; everything up to the first --option).
	if i := strings.IndexByte(req, ';'); i >= 0 {
		req = req[:i]
	}
	for len(rest) > 0 && !strings.HasPrefix(rest[0], "--") {
		if strings.HasPrefix(rest[0], ";") || strings.ContainsAny(rest[0], "'\"<>=") || isMarkerWord(rest[0]) {
			rest = rest[1:]
			continue
		}
		break
	}
	for i := 0; i < len(rest); i++ {
		opt := rest[i]
		val := ""
		if k, v, ok := strings.Cut(opt, "="); ok {
			opt, val = k, v
		} else if i+1 < len(rest) {
			val = rest[i+1]
			i++
		}
		if opt != "--hash" {
			r.Problem = fmt.Sprintf("option %s is not curated", opt)
			return r
		}
		algo, hex, _ := strings.Cut(val, ":")
		hex = strings.ToLower(hex)
		if algo != "sha256" || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
			r.Problem = fmt.Sprintf("--hash %q: only sha256:<64 hex> is checked", val)
			return r
		}
		r.Hashes = append(r.Hashes, hex)
	}
	if strings.Contains(req, "://") || strings.Contains(req, "@") {
		r.Problem = "a URL or direct reference: only pinned index packages are curated"
		return r
	}
	name, version, ok := strings.Cut(req, "==")
	if !ok || strings.ContainsAny(version, "=<>!~*,") {
		r.Problem = "not pinned: write name==version"
		return r
	}
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i] // extras: the extras' own packages are other lines
	}
	spec, err := ParseSpec(Pip, name+"=="+version)
	if err != nil {
		r.Problem = err.Error()
		return r
	}
	r.Spec = spec
	return r
}

func isMarkerWord(s string) bool {
	switch strings.TrimFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && r != '_' }) {
	case "and", "or", "in", "not", "python_version", "python_full_version", "sys_platform", "platform_system",
		"platform_machine", "implementation_name", "platform_python_implementation", "os_name", "extra":
		return true
	}
	return false
}

// LockEntry is one package of a package-lock.json.
type LockEntry struct {
	Path      string // "node_modules/a/node_modules/b" (v2/v3) or the v1 path
	Name      string
	Version   string
	Resolved  string
	Integrity string
	// Problem says why the entry cannot be curated from the registry (a
	// git, file or URL dependency, a link, no version).
	Problem string
}

type lockV1Dep struct {
	Version      string               `json:"version"`
	Resolved     string               `json:"resolved"`
	Integrity    string               `json:"integrity"`
	Bundled      bool                 `json:"bundled"`
	Dependencies map[string]lockV1Dep `json:"dependencies"`
}

// ParseLockfile returns every package a package-lock.json (lockfile
// version 1, 2 or 3) resolves, once per name@version, sorted by name.
// registry is the upstream registry's URL: resolved URLs elsewhere are
// problems (the mirror fetches from its own registry only).
func ParseLockfile(data []byte, registry string) ([]LockEntry, error) {
	if len(data) > 64<<20 {
		return nil, fmt.Errorf("%w: lockfile over 64 MiB", ErrBadSpec)
	}
	var lf struct {
		LockfileVersion int `json:"lockfileVersion"`
		Packages        map[string]struct {
			Name      string `json:"name"`
			Version   string `json:"version"`
			Resolved  string `json:"resolved"`
			Integrity string `json:"integrity"`
			Link      bool   `json:"link"`
			Bundled   bool   `json:"inBundle"`
		} `json:"packages"`
		Dependencies map[string]lockV1Dep `json:"dependencies"`
	}
	if err := json.Unmarshal(data, &lf); err != nil {
		return nil, fmt.Errorf("%w: not a package-lock.json: %v", ErrBadSpec, err)
	}
	if lf.LockfileVersion == 0 || (lf.Packages == nil && lf.Dependencies == nil) {
		return nil, fmt.Errorf("%w: not a package-lock.json (no lockfileVersion, packages or dependencies)", ErrBadSpec)
	}
	var raw []LockEntry
	if lf.Packages != nil {
		for p, e := range lf.Packages {
			if p == "" {
				continue // the project itself
			}
			name := e.Name
			if i := strings.LastIndex(p, "node_modules/"); i >= 0 && name == "" {
				name = p[i+len("node_modules/"):]
			}
			le := LockEntry{Path: p, Name: name, Version: e.Version, Resolved: e.Resolved, Integrity: e.Integrity}
			switch {
			case e.Link:
				le.Problem = "a link to a local folder"
			case e.Bundled:
				continue // inside its parent's tarball
			case !strings.Contains(p, "node_modules/"):
				le.Problem = "a workspace or local folder"
			}
			raw = append(raw, le)
		}
	} else {
		var walk func(prefix string, deps map[string]lockV1Dep)
		walk = func(prefix string, deps map[string]lockV1Dep) {
			for name, d := range deps {
				p := prefix + "node_modules/" + name
				if !d.Bundled {
					raw = append(raw, LockEntry{Path: p, Name: name, Version: d.Version, Resolved: d.Resolved, Integrity: d.Integrity})
				}
				walk(p+"/", d.Dependencies)
			}
		}
		walk("", lf.Dependencies)
	}
	reg, _ := url.Parse(strings.TrimSuffix(registry, "/") + "/")
	seen := map[string]bool{}
	var out []LockEntry
	for _, e := range raw {
		if e.Problem == "" {
			e.Problem = lockProblem(e, reg)
		}
		key := e.Name + "@" + e.Version
		if e.Problem == "" {
			if seen[key] {
				continue
			}
			seen[key] = true
		}
		out = append(out, e)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Version < out[j].Version
	})
	return out, nil
}

func lockProblem(e LockEntry, reg *url.URL) string {
	switch {
	case !ValidName(NPM, e.Name):
		return fmt.Sprintf("bad package name %q", e.Name)
	case strings.HasPrefix(e.Version, "npm:"):
		return "an npm: alias"
	case strings.Contains(e.Version, ":") || strings.Contains(e.Version, "/"):
		return fmt.Sprintf("not from a registry (%s)", e.Version)
	case !ValidVersion(NPM, e.Version):
		return fmt.Sprintf("bad version %q", e.Version)
	}
	if e.Resolved == "" {
		return "" // lockfiles may omit registry URLs (omit-lockfile-registry-resolved)
	}
	u, err := url.Parse(e.Resolved)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Sprintf("not from a registry (%s)", e.Resolved)
	}
	// A tarball from the public registry or the configured one, at the
	// path npm uses: <registry>/<name>/-/<file>.tgz.
	hosts := []string{"registry.npmjs.org", "registry.yarnpkg.com"}
	if reg != nil {
		hosts = append(hosts, reg.Host)
	}
	okHost := false
	for _, h := range hosts {
		okHost = okHost || u.Host == h
	}
	if !okHost || !strings.Contains(u.Path, "/-/") || path.Ext(u.Path) != ".tgz" {
		return fmt.Sprintf("resolved from %s, not the registry", u.Host)
	}
	return ""
}

// Skipped is a newer version passed over when resolving a bare name.
type Skipped struct {
	Version    string
	Advisories []string
	Fixed      []string // fixed versions the advisories name, when known
}

// Resolution is the version a bare name resolved to.
type Resolution struct {
	Spec    Spec
	Skipped []Skipped // newer versions with open advisories, newest first
}

// ResolveNewest picks the newest stable version of name upstream that no
// advisory in the local OSV database affects (for npm: at most the
// registry's "latest" tag, deprecated versions skipped; for pip: versions
// with a wheel for the configured platforms, pre-releases skipped).
func (m *Mirror) ResolveNewest(ctx context.Context, mgr Manager, name string) (Resolution, error) {
	if !ValidName(mgr, name) {
		return Resolution{}, fmt.Errorf("%w: %q is not a %s package name", ErrBadSpec, name, mgr)
	}
	db, err := m.osvDB(ctx)
	if err != nil {
		return Resolution{}, fmt.Errorf("resolving %s: %w", name, err)
	}
	var versions []string
	switch mgr {
	case NPM:
		p, err := m.npmPackument(ctx, name)
		if err != nil {
			return Resolution{}, fmt.Errorf("resolving %s: %w", name, err)
		}
		latest := p.DistTags["latest"]
		for v, d := range p.Versions {
			if strings.Contains(v, "-") || d.Deprecated != nil && d.Deprecated != false && d.Deprecated != "" {
				continue
			}
			if latest != "" && newer(NPM, v, latest) {
				continue
			}
			versions = append(versions, v)
		}
	case Pip:
		proj, base, err := m.pipProject(ctx, name)
		if err != nil {
			return Resolution{}, fmt.Errorf("resolving %s: %w", name, err)
		}
		_ = base
		seen := map[string]bool{}
		for _, f := range proj.Files {
			w, err := ParseWheelFilename(path.Base(f.Filename))
			if err != nil || !m.platformWanted(w.Platform) || isYanked(f.Yanked) || seen[w.Version] || isPrerelease(w.Version) {
				continue
			}
			seen[w.Version] = true
			versions = append(versions, w.Version)
		}
	}
	as := make([]Artifact, len(versions))
	for i, v := range versions {
		as[i] = Artifact{Version: v}
	}
	sortByVersion(mgr, as)
	var res Resolution
	for i := len(as) - 1; i >= 0; i-- {
		v := as[i].Version
		found, err := db.Match(mgr.Ecosystem(), name, v)
		if err != nil {
			continue // an unparsable version is never picked
		}
		if len(found) == 0 {
			res.Spec = Spec{Manager: mgr, Name: name, Version: v}
			return res, nil
		}
		s := Skipped{Version: v, Advisories: findingIDs(found)}
		for _, f := range found {
			if f.Fixed != "" {
				s.Fixed = append(s.Fixed, f.Fixed)
			}
		}
		res.Skipped = append(res.Skipped, s)
	}
	if len(versions) == 0 {
		return res, fmt.Errorf("resolving %s: no stable version upstream: %w", name, ErrNotFound)
	}
	return res, fmt.Errorf("resolving %s: every one of its %d versions has an open advisory: %w", name, len(versions), ErrNotFound)
}

func newer(mgr Manager, a, b string) bool {
	return compareVersions(safeParse(a, mgr.Ecosystem()), safeParse(b, mgr.Ecosystem())) > 0
}

func isYanked(y any) bool {
	switch v := y.(type) {
	case bool:
		return v
	case string:
		return true
	}
	return false
}

// isPrerelease is true for PEP 440 pre-, post-dev and dev releases.
func isPrerelease(v string) bool {
	v = strings.ToLower(v)
	for _, s := range []string{"a", "b", "rc", "dev", "c", "pre", "alpha", "beta"} {
		if i := strings.Index(v, s); i > 0 && v[i-1] >= '0' && v[i-1] <= '9' || strings.Contains(v, "."+s) {
			return true
		}
	}
	return false
}

// DescribeAdvisories names ids with the fixed version each advisory gives
// for name at version in the loaded OSV database: "GHSA-x (fixed 4.20.0),
// MAL-y (malicious package)". It returns "" when ids is empty.
func (m *Mirror) DescribeAdvisories(ctx context.Context, mgr Manager, name, version string, ids []string) string {
	if len(ids) == 0 {
		return ""
	}
	fixed := map[string]string{}
	if db, err := m.osvDB(ctx); err == nil {
		if found, err := db.Match(mgr.Ecosystem(), name, version); err == nil {
			for _, f := range found {
				fixed[f.ID] = f.Fixed
			}
		}
	}
	parts := make([]string, 0, len(ids))
	for _, id := range ids {
		s := id
		switch {
		case strings.HasPrefix(id, "MAL-"):
			s += " (malicious package)"
		case fixed[id] != "":
			s += " (fixed " + fixed[id] + ")"
		default:
			s += " (no fixed version)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}
