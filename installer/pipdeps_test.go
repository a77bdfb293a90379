package installer

import (
	"archive/zip"
	"bufio"
	"context"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

func TestEvalMarker(t *testing.T) {
	t.Parallel()
	env := SessionPython()
	tests := []struct {
		marker string
		want   bool
		bad    bool
	}{
		{marker: "", want: true},
		{marker: `python_version < "3.11"`, want: false},
		{marker: `python_version >= "3.8"`, want: true},
		{marker: `python_version >= "3.13"`, want: true},
		{marker: `python_version > "3.9"`, want: true},   // 3.13 > 3.9 in PEP 440 order, not as strings
		{marker: `python_version < "3.10"`, want: false}, // likewise
		{marker: `python_full_version >= "3.13.1"`, want: true},
		{marker: `python_version == "3.13.*"`, want: true},
		{marker: `python_version != "3.13.*"`, want: false},
		{marker: `python_version ~= "3.10"`, want: true},
		{marker: `python_version ~= "3.13.0"`, want: true},
		{marker: `sys_platform == "win32"`, want: false},
		{marker: `sys_platform == 'linux'`, want: true},
		{marker: `platform_system == "Darwin"`, want: false},
		{marker: `platform_machine == "x86_64"`, want: true},
		{marker: `platform_machine == "aarch64" or platform_machine == "arm64"`, want: false},
		{marker: `os_name == "nt"`, want: false},
		{marker: `implementation_name == "pypy"`, want: false},
		{marker: `platform_python_implementation != "PyPy"`, want: true},
		{marker: `extra == "docs"`, want: false},
		{marker: `extra == 'test' or python_version < "3.9"`, want: false},
		{marker: `python_version >= "3.8" and extra == "socks"`, want: false},
		{marker: `(python_version < "3.9" or sys_platform == "linux") and os_name == "posix"`, want: true},
		{marker: `"linux" in sys_platform`, want: true},
		{marker: `"win" not in sys_platform`, want: true},
		{marker: `"3.13" == python_version`, want: true},
		{marker: `python_version<'3.11'and sys_platform=='linux'`, want: false},
		// hostile or broken
		{marker: `python_version <`, bad: true},
		{marker: `python_version < "3.11`, bad: true},
		{marker: `(python_version < "3.11"`, bad: true},
		{marker: `python_version < "3.11")`, bad: true},
		{marker: `__import__("os") == "x"`, bad: true},
		{marker: `unknown_var == "x"`, bad: true},
		{marker: `python_version <> "3"`, bad: true},
		{marker: `python_version not "3"`, bad: true},
		{marker: `and`, bad: true},
		{marker: `python_version == "3" python_version == "3"`, bad: true},
		{marker: strings.Repeat("(", 40) + `os_name == "posix"` + strings.Repeat(")", 40), bad: true},
		{marker: strings.Repeat(`os_name == "posix" and `, 200) + `os_name == "posix"`, bad: true}, // over the byte limit
		{marker: "os_name == \"posix\" \x00", bad: true},
	}
	for _, tc := range tests {
		got, err := EvalMarker(tc.marker, env)
		if tc.bad {
			if err == nil || !errors.Is(err, ErrMarker) {
				t.Errorf("%q: got %v, %v; want an error", tc.marker, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q = %v, %v; want %v", tc.marker, got, err, tc.want)
		}
	}
}

func TestParseRequirement(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in               string
		name, spec, mark string
		extras           []string
		url              string
		bad              bool
	}{
		{in: "numpy>=1.26.0", name: "numpy", spec: ">=1.26.0"},
		{in: "python-dateutil>=2.8.2", name: "python-dateutil", spec: ">=2.8.2"},
		{in: "jaraco.packaging (>=9) ; extra == 'docs'", name: "jaraco.packaging", spec: ">=9", mark: "extra == 'docs'"},
		{in: "requests[socks, security] (<3,>=2.0)", name: "requests", extras: []string{"socks", "security"}, spec: "<3,>=2.0"},
		{in: "tzdata>=2022.7", name: "tzdata", spec: ">=2022.7"},
		{in: "pytz", name: "pytz"},
		{in: "foo == 1.*", name: "foo", spec: "==1.*"},
		{in: "pip @ https://example.com/pip.whl ; python_version < '3'", name: "pip", url: "https://example.com/pip.whl", mark: "python_version < '3'"},
		{in: "", bad: true},
		{in: "-bad", bad: true},
		{in: "x (>=1", bad: true},
		{in: "x[a", bad: true},
		{in: "x >>1", bad: true},
		{in: "x >=1 <2", bad: true},
		{in: strings.Repeat("a", maxRequirementBytes+1), bad: true},
	}
	for _, tc := range tests {
		r, err := ParseRequirement(tc.in)
		if tc.bad {
			if err == nil {
				t.Errorf("%q parsed: %+v", tc.in, r)
			}
			continue
		}
		if err != nil || r.Name != tc.name || r.Specifier != tc.spec || r.Marker != tc.mark || r.URL != tc.url || !slices.Equal(r.Extras, tc.extras) {
			t.Errorf("%q = %+v, %v", tc.in, r, err)
		}
	}
}

func TestSatisfiesSpecifier(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec    string
		yes, no []string
	}{
		{spec: "", yes: []string{"1.0", "2.0.post1"}, no: []string{"2.0rc1", "1.0.dev0"}},
		{spec: ">=1.26.0", yes: []string{"1.26.0", "1.26.4", "2.0.0"}, no: []string{"1.25.2", "1.9", "2.1.0rc1"}},
		{spec: "<3,>=2.0", yes: []string{"2.0", "2.31.0"}, no: []string{"3.0", "1.9"}},
		{spec: "~=2.2", yes: []string{"2.2", "2.9"}, no: []string{"3.0", "2.1"}},
		{spec: "~=1.4.5", yes: []string{"1.4.5", "1.4.9"}, no: []string{"1.5.0", "1.4.4"}},
		{spec: "==1.*", yes: []string{"1.0", "1.99.1"}, no: []string{"2.0", "10.0"}},
		{spec: "!=1.5", yes: []string{"1.4", "1.5.1"}, no: []string{"1.5", "1.5.0"}},
		{spec: ">=2.0rc1", yes: []string{"2.0rc2", "2.0"}, no: []string{"2.0b1"}},
		{spec: "===1.0", yes: []string{"1.0"}, no: []string{"1.0.0"}},
		{spec: ">=x", no: []string{"1.0"}},
	}
	for _, tc := range tests {
		for _, v := range tc.yes {
			if !SatisfiesSpecifier(v, tc.spec) {
				t.Errorf("%s does not satisfy %q", v, tc.spec)
			}
		}
		for _, v := range tc.no {
			if SatisfiesSpecifier(v, tc.spec) {
				t.Errorf("%s satisfies %q", v, tc.spec)
			}
		}
	}
}

// TestPlanPipRequirements: a pip request must bring the requirements its
// wheels declare for the session's Python, at versions in range; those it
// does not name go to the job's session check; requirements for another
// Python, platform or an extra are not demanded.
func TestPlanPipRequirements(t *testing.T) {
	t.Parallel()
	whl := func(name, version string, requires ...string) Artifact {
		return Artifact{Name: name, Version: version, Filename: strings.ReplaceAll(name, "-", "_") + "-" + version + "-py3-none-any.whl",
			SHA256: hash, Status: "admitted", Requires: requires}
	}
	cat := fakeCatalog{
		"pip:pandas:2.2.3": whl("pandas", "2.2.3",
			`numpy>=1.26.0; python_version >= "3.12"`, `numpy>=1.22.4; python_version < "3.11"`,
			"python-dateutil>=2.8.2", "pytz>=2020.1", "tzdata>=2022.7",
			`pyarrow>=10.0.1; extra == "pyarrow"`, `pywin32; sys_platform == "win32"`, `appnope; platform_system == "Darwin"`),
		"pip:numpy:2.1.0":           whl("numpy", "2.1.0"),
		"pip:numpy:1.25.0":          whl("numpy", "1.25.0"),
		"pip:python-dateutil:2.9.0": whl("python-dateutil", "2.9.0", "six>=1.5"),
		"pip:six:1.16.0":            whl("six", "1.16.0"),
		"pip:pytz:2024.1":           whl("pytz", "2024.1"),
		"pip:tzdata:2024.1":         whl("tzdata", "2024.1"),
		"pip:weird:1.0":             whl("weird", "1.0", `other; bogus_var == "x"`, "url-dep @ https://example.com/x.whl"),
	}
	inst := New(DefaultConfig(), cat, nil, nil, nil, nil)
	ctx := context.Background()
	plan := func(pkgs ...string) ([]planned, []requirement, error) {
		return inst.plan(ctx, sandbox.InstallRequest{Manager: "pip", Packages: pkgs})
	}

	// Alone: every requirement for this Python goes to the session check,
	// with the mirror's versions in range; the rest is not demanded.
	_, reqs, err := plan("pandas==2.2.3")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range reqs {
		got = append(got, r.Name+r.Range+"="+strings.Join(r.Versions, "|"))
		if !r.pip || r.By != "pandas==2.2.3" {
			t.Errorf("requirement %+v", r)
		}
	}
	want := "numpy>=1.26.0=2.1.0 python-dateutil>=2.8.2=2.9.0 pytz>=2020.1=2024.1 tzdata>=2022.7=2024.1"
	if strings.Join(got, " ") != want {
		t.Errorf("requirements = %s\nwant %s", strings.Join(got, " "), want)
	}

	// The whole tree: nothing left to check.
	_, reqs, err = plan("pandas==2.2.3", "numpy==2.1.0", "python-dateutil==2.9.0", "six==1.16.0", "pytz==2024.1", "tzdata==2024.1")
	if err != nil || len(reqs) != 0 {
		t.Fatalf("whole tree: %v %+v", err, reqs)
	}

	// A requested version outside the range is refused at once.
	_, _, err = plan("pandas==2.2.3", "numpy==1.25.0", "python-dateutil==2.9.0", "six==1.16.0", "pytz==2024.1", "tzdata==2024.1")
	var rej *sandbox.RejectedError
	if !errors.As(err, &rej) || len(rej.Packages) != 1 || rej.Packages[0].Status != "missing_dependencies" {
		t.Fatalf("numpy 1.25: %v", err)
	}
	md := rej.Packages[0].MissingDependencies
	if len(md) != 1 || md[0].Name != "numpy" || md[0].Range != ">=1.26.0" || md[0].Requested != "1.25.0" || strings.Join(md[0].MirrorVersions, ",") != "2.1.0" ||
		!strings.Contains(rej.Packages[0].Reason, "numpy>=1.26.0 (the request names 1.25.0") {
		t.Errorf("numpy 1.25: %+v", rej.Packages[0])
	}

	// Unreadable markers and URL requirements are named, not skipped.
	_, reqs, err = plan("weird==1.0")
	if err != nil || len(reqs) != 2 || !strings.Contains(reqs[0].Range, "unreadable") || !strings.HasPrefix(reqs[1].Range, "@ ") {
		t.Errorf("weird: %v %+v", err, reqs)
	}

	// The job's report names every missing requirement, pip-spelled.
	r := missingFromJob(`{"ok":false,"requires":"-.v-","installed":{"2":"2019.1"}}`, reqs4(t, inst), nil)
	if len(r.Packages) != 1 {
		t.Fatalf("report: %+v", r)
	}
	reason := r.Packages[0].Reason
	for _, s := range []string{"numpy>=1.26.0 (not in the request nor in the session; the mirror has 2.1.0)", "pytz>=2020.1 (the session has 2019.1", "tzdata>=2022.7"} {
		if !strings.Contains(reason, s) {
			t.Errorf("reason %q lacks %q", reason, s)
		}
	}
}

func reqs4(t *testing.T, inst *Installer) []requirement {
	t.Helper()
	_, reqs, err := inst.plan(context.Background(), sandbox.InstallRequest{Manager: "pip", Packages: []string{"pandas==2.2.3"}})
	if err != nil || len(reqs) != 4 {
		t.Fatalf("%v %+v", err, reqs)
	}
	return reqs
}

// TestRealWheelRequirements: the wheels this machine's Python
// installations ship (pip, setuptools) declare only requirements for
// extras, or none: nothing is demanded of a session, and every line
// parses.
func TestRealWheelRequirements(t *testing.T) {
	t.Parallel()
	var wheels []string
	for _, g := range []string{"/usr/share/python-wheels/*.whl", "/root/.pyenv/versions/*/lib/python3*/ensurepip/_bundled/*.whl", "/usr/lib/python3*/ensurepip/_bundled/*.whl"} {
		m, _ := filepath.Glob(g)
		wheels = append(wheels, m...)
	}
	if len(wheels) == 0 {
		t.Skip("no wheels on this machine")
	}
	lines := 0
	for _, w := range wheels {
		zr, err := zip.OpenReader(w)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range zr.File {
			if !strings.HasSuffix(f.Name, ".dist-info/METADATA") || strings.Count(f.Name, "/") != 1 {
				continue
			}
			rc, _ := f.Open()
			sc := bufio.NewScanner(io.LimitReader(rc, 4<<20))
			for sc.Scan() && sc.Text() != "" {
				v, ok := strings.CutPrefix(sc.Text(), "Requires-Dist:")
				if !ok {
					continue
				}
				lines++
				r, err := ParseRequirement(strings.TrimSpace(v))
				if err != nil {
					t.Errorf("%s: %v", filepath.Base(w), err)
					continue
				}
				apply, err := EvalMarker(r.Marker, SessionPython())
				if err != nil || apply {
					t.Errorf("%s: %q demanded (%v)", filepath.Base(w), v, err)
				}
			}
			rc.Close()
		}
		zr.Close()
	}
	t.Logf("%d wheels, %d Requires-Dist lines", len(wheels), lines)
	if lines == 0 {
		t.Error("no Requires-Dist line read: setuptools declares some")
	}
}

// FuzzEvalMarker: no marker panics, and a marker that evaluates does so
// the same way twice and within its bounds.
func FuzzEvalMarker(f *testing.F) {
	for _, s := range []string{`python_version < "3.11"`, `(os_name == "posix" or extra == 'x') and "linux" in sys_platform`,
		`python_version ~= "3.10"`, `python_full_version == "3.13.*"`, `(((`, `"a" not in "b"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, errA := EvalMarker(s, SessionPython())
		b, errB := EvalMarker(s, SessionPython())
		if a != b || (errA == nil) != (errB == nil) {
			t.Fatalf("%q: not deterministic", s)
		}
		if errA != nil && !errors.Is(errA, ErrMarker) {
			t.Fatalf("%q: error %v does not wrap ErrMarker", s, errA)
		}
		if r, err := ParseRequirement("x; " + s); err == nil && r.Marker != strings.TrimSpace(s) && !strings.Contains(s, ";") {
			t.Fatalf("%q: marker read as %q", s, r.Marker)
		}
	})
}
