package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// basePath is PATH in every sandbox, after the folders of the version a
// call runs.
const basePath = "/usr/local/bin:/usr/bin:/bin"

// Runtime is one language at one version, as the executor runs it: its
// steps and environment with the version's placeholders filled in.
type Runtime struct {
	Name    string
	Aliases []string
	File    string
	Compile []string
	// InlineCompile: the run step compiles the code itself and says so on
	// fd 3 (guest.Request.InlineCompile); compile failures are still
	// compile_error.
	InlineCompile bool
	Run           []string
	// Env is the language's and the version's environment, PATH included.
	Env []string
	// Links are symlinks made beside the code (name -> absolute target).
	Links map[string]string
	// Series is the version as the runtimes file lists it ("22"); Version
	// the exact one the rootfs holds ("22.23.5"; the series when the
	// rootfs's versions file does not say).
	Series  string
	Version string
	Default bool
	// EOL is the upstream end of life (zero: none announced).
	EOL      time.Time
	Compiled bool
	// unavailable is set on the runtime of a session whose version the
	// runtimes file no longer lists (ErrUnsupportedVersion): it cannot
	// start a sandbox.
	unavailable error
}

// unavailableRuntime stands for the version series of lang that a stored
// session names and the table lacks (err says which are present).
func unavailableRuntime(lang, series string, err error) *Runtime {
	return &Runtime{Name: lang, Series: series, Version: series, unavailable: err}
}

// languageSpec is one language of runtimes.yaml.
type languageSpec struct {
	Aliases       []string          `yaml:"aliases"`
	File          string            `yaml:"file"`
	Compile       []string          `yaml:"compile"`
	InlineCompile bool              `yaml:"inline_compile"`
	Run           []string          `yaml:"run"`
	Env           []string          `yaml:"env"`
	Links         map[string]string `yaml:"links"`
	Packages      []string          `yaml:"packages"`
	Warm          string            `yaml:"warm"`
	Uses          string            `yaml:"uses"`
	Versions      []*versionSpec    `yaml:"versions"`
}

// versionSpec is one version of a language in runtimes.yaml.
type versionSpec struct {
	Version  string   `yaml:"version"`
	Default  bool     `yaml:"default"`
	EOL      string   `yaml:"eol"`
	Source   string   `yaml:"source"`
	Packages []string `yaml:"packages"`
	Prefix   string   `yaml:"prefix"`
	Path     []string `yaml:"path"`
	Env      []string `yaml:"env"`
	Prepare  string   `yaml:"prepare"`
	Probe    string   `yaml:"probe"`
}

// language is a loaded language: its versions newest first.
type language struct {
	name     string
	spec     *languageSpec
	versions []*Runtime
	def      *Runtime
}

// Runtimes is the language table. The zero value has no languages; it is
// read-only after LoadRuntimes and safe for concurrent use.
type Runtimes struct {
	byName   map[string]*language
	list     []*language
	env      []string
	versions map[string]map[string]string // from the versions file
	doc      runtimesDoc
}

type runtimesDoc struct {
	Version string `yaml:"version"`
	// Env is seen by every language (a bash program may run python3 with
	// the session's packages).
	Env      []string                 `yaml:"env"`
	Runtimes map[string]*languageSpec `yaml:"runtimes"`
}

var (
	seriesRe   = regexp.MustCompile(`^[0-9][0-9A-Za-z.+~-]{0,31}$`)
	prepareRe  = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)
	sourceRe   = regexp.MustCompile(`^(debian|npm:(@[a-z0-9._-]+/)?[a-z0-9._-]+@[0-9][0-9A-Za-z.+-]*|go:golang\.org/toolchain@v[0-9A-Za-z.+-]+)$`)
	langNameRe = regexp.MustCompile(`^[a-z][a-z0-9+_-]{0,31}$`)
	debPkgRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
)

// LoadRuntimes parses a runtimes.yaml and attaches the exact versions read
// from the rootfs build (versions.json beside the rootfs folder), if
// present.
func LoadRuntimes(data []byte, versionsFile string) (*Runtimes, error) {
	var doc runtimesDoc
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("decoding runtimes: %w", err)
	}
	var errs []error
	if doc.Version != "v1" {
		errs = append(errs, fmt.Errorf("runtimes: version must be v1"))
	}
	versions := map[string]map[string]string{}
	if versionsFile != "" {
		if b, err := os.ReadFile(versionsFile); err == nil {
			v, err := parseVersionsFile(b)
			if err != nil {
				errs = append(errs, fmt.Errorf("decoding %s: %w", versionsFile, err))
			}
			versions = v
		}
	}
	rs := &Runtimes{byName: map[string]*language{}, env: doc.Env, versions: versions, doc: doc}
	names := make([]string, 0, len(doc.Runtimes))
	for n := range doc.Runtimes {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		l, err := loadLanguage(n, doc.Runtimes[n], versions[n])
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, key := range append([]string{n}, l.spec.Aliases...) {
			key = strings.ToLower(key)
			if _, dup := rs.byName[key]; dup {
				errs = append(errs, fmt.Errorf("runtimes: name %q used twice", key))
			}
			rs.byName[key] = l
		}
		rs.list = append(rs.list, l)
	}
	// A language that uses another runs on that one's default version:
	// its folders follow the language's own on PATH.
	for _, l := range rs.list {
		if l.spec.Uses == "" {
			continue
		}
		u, ok := rs.byName[l.spec.Uses]
		if !ok || u.spec.Uses != "" || u == l {
			errs = append(errs, fmt.Errorf("runtimes.%s: uses %q, which is not a language that uses none", l.name, l.spec.Uses))
			continue
		}
		for _, v := range l.versions {
			dirs := strings.Trim(pathOf(v.Env)+":"+pathOf(u.def.Env), ":")
			v.Env = withPath(withoutPath(v.Env), dirs)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// Every language's default version is on every program's PATH, after
	// the folders of the version the call runs: a bash program (or a
	// Python one shelling out) finds node, go and java as it did when
	// they lived in /usr/bin.
	var defaults []string
	for _, l := range rs.list {
		if l.def != nil {
			defaults = append(defaults, pathOf(l.def.Env))
		}
	}
	for _, l := range rs.list {
		for _, v := range l.versions {
			v.Env = withPath(withoutPath(v.Env), joinDirs(pathOf(v.Env), defaults))
		}
	}
	return rs, nil
}

// joinDirs is own followed by each of more's ":"-separated folders that
// is not already there, in order.
func joinDirs(own string, more []string) string {
	var dirs []string
	seen := map[string]bool{}
	for _, list := range append([]string{own}, more...) {
		for _, d := range strings.Split(list, ":") {
			if d != "" && !seen[d] {
				seen[d] = true
				dirs = append(dirs, d)
			}
		}
	}
	return strings.Join(dirs, ":")
}

// parseVersionsFile reads a rootfs's versions.json: language -> series ->
// exact version. A build older than versions per language wrote one
// string per language; it is kept as the language's only version.
func parseVersionsFile(b []byte) (map[string]map[string]string, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for lang, m := range raw {
		var one string
		if json.Unmarshal(m, &one) == nil {
			out[lang] = map[string]string{"": one}
			continue
		}
		var per map[string]string
		if err := json.Unmarshal(m, &per); err != nil {
			return nil, fmt.Errorf("language %s: %w", lang, err)
		}
		out[lang] = per
	}
	return out, nil
}

func loadLanguage(n string, spec *languageSpec, exact map[string]string) (*language, error) {
	if spec == nil {
		return nil, fmt.Errorf("runtimes.%s: empty", n)
	}
	var errs []error
	if !langNameRe.MatchString(n) {
		errs = append(errs, fmt.Errorf("runtimes.%s: a name is lower-case letters, digits, +, _ or -", n))
	}
	if spec.File == "" || filepath.Base(spec.File) != spec.File || len(spec.Run) == 0 {
		errs = append(errs, fmt.Errorf("runtimes.%s: needs a plain file name and a run step", n))
	}
	if len(spec.Versions) == 0 {
		errs = append(errs, fmt.Errorf("runtimes.%s: needs at least one version", n))
	}
	for _, p := range spec.Packages {
		if !debPkgRe.MatchString(p) {
			errs = append(errs, fmt.Errorf("runtimes.%s: package %q is not a Debian package name", n, p))
		}
	}
	l := &language{name: n, spec: spec}
	seen := map[string]bool{}
	for i, vs := range spec.Versions {
		if vs == nil {
			errs = append(errs, fmt.Errorf("runtimes.%s.versions[%d]: empty", n, i))
			continue
		}
		r, err := loadVersion(n, spec, vs, exact)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[vs.Version] {
			errs = append(errs, fmt.Errorf("runtimes.%s: version %q listed twice", n, vs.Version))
		}
		seen[vs.Version] = true
		if r.Default {
			if l.def != nil {
				errs = append(errs, fmt.Errorf("runtimes.%s: more than one default version", n))
			}
			l.def = r
		}
		l.versions = append(l.versions, r)
	}
	if l.def == nil && len(l.versions) > 0 {
		errs = append(errs, fmt.Errorf("runtimes.%s: no default version", n))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	sort.SliceStable(l.versions, func(i, j int) bool { return compareVersions(l.versions[i].Version, l.versions[j].Version) > 0 })
	return l, nil
}

func loadVersion(n string, spec *languageSpec, vs *versionSpec, exact map[string]string) (*Runtime, error) {
	where := fmt.Sprintf("runtimes.%s version %q", n, vs.Version)
	var errs []error
	if !seriesRe.MatchString(vs.Version) {
		errs = append(errs, fmt.Errorf("%s: a version starts with a digit and has at most 32 letters, digits and . + ~ -", where))
	}
	if !sourceRe.MatchString(vs.Source) {
		errs = append(errs, fmt.Errorf("%s: source must be debian, npm:NAME@VERSION or go:golang.org/toolchain@VERSION", where))
	}
	if vs.Source != "debian" && (vs.Prefix == "" || len(vs.Packages) > 0) {
		errs = append(errs, fmt.Errorf("%s: a source other than debian needs a prefix and no packages", where))
	}
	if vs.Prefix != "" && (!filepath.IsAbs(vs.Prefix) || filepath.Clean(vs.Prefix) != vs.Prefix || vs.Prefix == "/" || strings.ContainsAny(vs.Prefix, " '\"$`\\")) {
		errs = append(errs, fmt.Errorf("%s: prefix must be a clean absolute folder", where))
	}
	if vs.Prepare != "" && !prepareRe.MatchString(vs.Prepare) {
		errs = append(errs, fmt.Errorf("%s: prepare names a step of the rootfs build", where))
	}
	if strings.TrimSpace(vs.Probe) == "" {
		errs = append(errs, fmt.Errorf("%s: needs a probe (a command printing the exact version)", where))
	}
	for _, p := range vs.Packages {
		if !debPkgRe.MatchString(p) {
			errs = append(errs, fmt.Errorf("%s: package %q is not a Debian package name", where, p))
		}
	}
	var eol time.Time
	if vs.EOL != "" {
		t, err := time.Parse(time.DateOnly, vs.EOL)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: eol must be YYYY-MM-DD", where))
		}
		eol = t
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	fill := strings.NewReplacer("{prefix}", vs.Prefix, "{series}", vs.Version)
	fillAll := func(in []string) []string {
		if in == nil {
			return nil
		}
		out := make([]string, len(in))
		for i, s := range in {
			out[i] = fill.Replace(s)
		}
		return out
	}
	env := append(fillAll(spec.Env), fillAll(vs.Env)...)
	var path []string
	for _, p := range fillAll(vs.Path) {
		if !filepath.IsAbs(p) || strings.Contains(p, ":") {
			return nil, fmt.Errorf("%s: path %q must be an absolute folder without ':'", where, p)
		}
		path = append(path, p)
	}
	env = withPath(env, strings.Join(path, ":"))
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("%s: env %q is not NAME=VALUE", where, kv)
		}
	}
	ver := exact[vs.Version]
	if ver == "" && len(exact) == 1 && vs.Default {
		ver = exact[""] // an older build's one version per language
	}
	if ver == "" {
		ver = vs.Version
	}
	return &Runtime{
		Name: n, Aliases: spec.Aliases, File: spec.File, Compile: fillAll(spec.Compile), InlineCompile: spec.InlineCompile,
		Run: fillAll(spec.Run), Env: env, Links: spec.Links, Series: vs.Version, Version: ver, Default: vs.Default,
		EOL: eol, Compiled: len(spec.Compile) > 0 || spec.InlineCompile,
	}, nil
}

// withPath sets PATH in env to dirs (":"-joined, may be empty) before
// whatever PATH env had, or before basePath.
func withPath(env []string, dirs string) []string {
	out := make([]string, 0, len(env)+1)
	rest := basePath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			rest = v
			continue
		}
		out = append(out, kv)
	}
	if dirs != "" {
		rest = dirs + ":" + rest
	}
	return append(out, "PATH="+rest)
}

// withoutPath is env without PATH.
func withoutPath(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PATH=") {
			out = append(out, kv)
		}
	}
	return out
}

// pathOf is the folders env puts before basePath.
func pathOf(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return strings.TrimSuffix(strings.TrimSuffix(v, basePath), ":")
		}
	}
	return ""
}

// Path is the folders of PATH when r runs, in order.
func (r Runtime) Path() []string { return strings.Split(pathOfEnv(r.Env), ":") }

// Programs are the commands r's steps start that come from the rootfs
// (not the program built from the code).
func (r Runtime) Programs() []string {
	var out []string
	for _, step := range [][]string{r.Compile, r.Run} {
		if len(step) > 0 && !strings.Contains(step[0], "{dir}") && !slices.Contains(out, step[0]) {
			out = append(out, step[0])
		}
	}
	return out
}

// Lookup finds a language's default version by name or alias, ignoring
// case.
func (rs *Runtimes) Lookup(name string) (*Runtime, error) {
	return rs.LookupVersion(name, "")
}

// LookupVersion finds a language by name or alias and picks the version
// the way Piston does: "" is the default, and a version picks the newest
// version present that is it or starts with it and a dot ("22" picks
// 22.23.5, "22.23" too, "22.23.5" itself). The series a version is listed
// under matches the same way. An unknown version is ErrUnsupportedVersion,
// whose text lists the versions present.
func (rs *Runtimes) LookupVersion(name, version string) (*Runtime, error) {
	l, ok := rs.byName[strings.ToLower(strings.TrimSpace(name))]
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownLanguage, name)
	}
	return l.pick(version)
}

func (l *language) pick(version string) (*Runtime, error) {
	v, err := sandbox.PickVersion(l.name, l.described(), version)
	if err != nil {
		return nil, err
	}
	for _, r := range l.versions {
		if r.Series == v.Series {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w: %s %s", ErrUnsupportedVersion, l.name, v.Series) // not reached
}

// described is the language's versions for clients, newest first.
func (l *language) described() []sandbox.RuntimeVersion {
	out := make([]sandbox.RuntimeVersion, len(l.versions))
	for i, v := range l.versions {
		out[i] = sandbox.RuntimeVersion{Version: v.Version, Series: v.Series, Default: v.Default}
		if !v.EOL.IsZero() {
			out[i].EOL = v.EOL.Format(time.DateOnly)
		}
	}
	return out
}

// compareVersions orders dotted versions by their numeric parts (then as
// text): -1, 0 or 1.
func compareVersions(a, b string) int {
	as, bs := strings.FieldsFunc(a, notAlnum), strings.FieldsFunc(b, notAlnum)
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, xerr := strconv.Atoi(as[i])
		y, yerr := strconv.Atoi(bs[i])
		switch {
		case xerr == nil && yerr == nil && x != y:
			if x < y {
				return -1
			}
			return 1
		case (xerr != nil || yerr != nil) && as[i] != bs[i]:
			return strings.Compare(as[i], bs[i])
		}
	}
	switch {
	case len(as) < len(bs):
		return -1
	case len(as) > len(bs):
		return 1
	}
	return 0
}

func notAlnum(r rune) bool {
	return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
}

// List returns every language's default version, sorted by name.
func (rs *Runtimes) List() []Runtime {
	out := make([]Runtime, len(rs.list))
	for i, l := range rs.list {
		out[i] = *l.def
	}
	return out
}

// Versions returns every language at every version: languages sorted by
// name, each's versions newest first.
func (rs *Runtimes) Versions() []Runtime {
	var out []Runtime
	for _, l := range rs.list {
		for _, v := range l.versions {
			out = append(out, *v)
		}
	}
	return out
}

// Env is the environment every language sees (after the sandbox's own).
func (rs *Runtimes) Env() []string { return rs.env }

// WarmUp is the shell command that starts each language's default
// version once (the languages that name a warm-up), with its PATH.
func (rs *Runtimes) WarmUp() string {
	var cmds []string
	for _, l := range rs.list {
		if l.spec.Warm == "" {
			continue
		}
		cmds = append(cmds, "PATH="+shellQuote(pathOfEnv(l.def.Env))+" "+l.spec.Warm)
	}
	return strings.Join(cmds, "; ")
}

func pathOfEnv(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			return v
		}
	}
	return basePath
}

// PastEOL lists the versions whose upstream end of life is before now.
func (rs *Runtimes) PastEOL(now time.Time) []Runtime {
	var out []Runtime
	for _, r := range rs.Versions() {
		if !r.EOL.IsZero() && now.After(r.EOL.Add(24*time.Hour)) {
			out = append(out, r)
		}
	}
	return out
}

// CheckVersionsFile compares a rootfs's versions file with the table:
// every language and version listed must be there, and nothing else.
func (rs *Runtimes) CheckVersionsFile(b []byte) error {
	got, err := parseVersionsFile(b)
	if err != nil {
		return fmt.Errorf("decoding versions file: %w", err)
	}
	var errs []error
	for _, l := range rs.list {
		have := got[l.name]
		for _, v := range l.versions {
			if have[v.Series] == "" {
				errs = append(errs, fmt.Errorf("%s %s: not in the rootfs", l.name, v.Series))
			}
		}
		for s := range have {
			if _, err := l.pick(s); s == "" || err != nil || !listed(l, s) {
				errs = append(errs, fmt.Errorf("%s %q: in the rootfs but not in the runtimes file", l.name, s))
			}
		}
	}
	for lang := range got {
		if _, ok := rs.byName[lang]; !ok {
			errs = append(errs, fmt.Errorf("%s: in the rootfs but not in the runtimes file", lang))
		}
	}
	return errors.Join(errs...)
}

func listed(l *language, series string) bool {
	for _, v := range l.versions {
		if v.Series == series {
			return true
		}
	}
	return false
}

// RuntimeList describes every language and its versions for clients.
func (e *Executor) RuntimeList() []sandbox.Runtime {
	out := make([]sandbox.Runtime, 0, len(e.rt.list))
	for _, l := range e.rt.list {
		aliases := l.spec.Aliases
		if aliases == nil {
			aliases = []string{}
		}
		r := sandbox.Runtime{Language: l.name, Aliases: aliases, Version: l.def.Version, Compiled: l.def.Compiled, Versions: l.described()}
		out = append(out, r)
	}
	return out
}
