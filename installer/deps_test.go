package installer

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// missingReqs returns n requirements of by: dep-0 ... dep-(n-1) at ^1.0.0,
// the mirror holding 1.0.0 of each.
func missingReqs(by string, n int) []requirement {
	var r []requirement
	for k := range n {
		r = append(r, requirement{By: by, Name: fmt.Sprintf("dep-%d", k), Range: "^1.0.0", Versions: []string{"1.0.0"}, admitted: []string{"1.0.0"}})
	}
	return r
}

// TestMissingFromJobNamesEvery: 1, 3, 20 and 20,000 missing requirements
// are each named with range and mirror versions, from a report read at
// the start of the output (the old reader took the last 300 bytes and
// failed from three missing dependencies on); present ones are left out;
// a report that cannot be read still rejects, naming every requirement.
func TestMissingFromJobNamesEvery(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 20, 20000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			t.Parallel()
			reqs := missingReqs("big@1.0.0", n)
			out := fmt.Sprintf(`{"ok": false, "requires": %q, "installed": {}}`+"\n", strings.Repeat("-", n))
			r := missingFromJob(out, reqs, nil)
			if len(r.Packages) != 1 || r.Packages[0].Status != "missing_dependencies" || len(r.Packages[0].MissingDependencies) != n {
				t.Fatalf("got %d packages", len(r.Packages))
			}
			for k, d := range r.Packages[0].MissingDependencies {
				if d.Name != fmt.Sprintf("dep-%d", k) || d.Range != "^1.0.0" || len(d.MirrorVersions) != 1 || d.Installed != "" {
					t.Fatalf("dependency %d: %+v", k, d)
				}
			}
			if reason := r.Packages[0].Reason; len(reason) > 4000 || strings.Contains(reason, "could not be checked") {
				t.Errorf("reason (%d bytes): %.300s", len(reason), reason)
			}
		})
	}
	t.Run("mixed marks", func(t *testing.T) {
		t.Parallel()
		reqs := append(missingReqs("a@1.0.0", 3), missingReqs("b@2.0.0", 2)...)
		r := missingFromJob(`{"ok":false,"requires":".v-.v","installed":{"1":"0.9.0","4":"<script>"}}`, reqs, nil)
		if len(r.Packages) != 2 || r.Packages[0].Package != "a@1.0.0" || r.Packages[1].Package != "b@2.0.0" {
			t.Fatalf("packages: %+v", r.Packages)
		}
		a, b := r.Packages[0].MissingDependencies, r.Packages[1].MissingDependencies
		if len(a) != 2 || a[0].Name != "dep-1" || a[0].Installed != "0.9.0" || a[1].Name != "dep-2" || a[1].Installed != "" {
			t.Errorf("a: %+v", a)
		}
		if len(b) != 1 || b[0].Name != "dep-1" || b[0].Installed != "another version" {
			t.Errorf("b: %+v (a hostile version is not echoed)", b)
		}
	})
	for _, tc := range []struct{ name, out string }{
		{"cut short", `{"ok": false, "requires": "--`},
		{"wrong length", `{"ok": false, "requires": "--", "installed": {}}`},
		{"bad mark", `{"ok": false, "requires": "-x-", "installed": {}}`},
		{"all present", `{"ok": false, "requires": "...", "installed": {}}`},
		{"ok", `{"ok": true, "requires": "-.-"}`},
		{"empty", ``},
		{"noise first", "noise\n" + `{"ok": false, "requires": "---", "installed": {}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := missingFromJob(tc.out, missingReqs("c@1.0.0", 3), nil)
			if len(r.Packages) != 1 || len(r.Packages[0].MissingDependencies) != 3 || !strings.Contains(r.Packages[0].Reason, "could not be checked") {
				t.Fatalf("got %+v", r.Packages)
			}
		})
	}
}

// TestCheckRequiresReportBounded runs install.py's check_requires with the
// host's python against a node_modules holding hostile package.json files
// (huge versions, non-strings, deep nesting, a symlink): the report is the
// first line, its size depends only on the number of requirements, and
// the host reads it back to the right marks.
func TestCheckRequiresReportBounded(t *testing.T) {
	t.Parallel()
	py, dir := hostPython(t)
	nm := filepath.Join(t.TempDir(), "node_modules")
	write := func(name, body string) {
		p := filepath.Join(nm, name, "package.json")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("dep-0", `{"version": "1.0.0"}`)                                      // present
	write("dep-1", `{"version": "0.9.0"}`)                                      // other version
	write("dep-2", fmt.Sprintf(`{"version": %q}`, strings.Repeat("9", 100000))) // huge version
	write("dep-3", `{"version": ["1.0.0"]}`)                                    // not a string
	write("dep-4", strings.Repeat("[", 100000)+strings.Repeat("]", 100000))     // deep nesting
	write("dep-5", `{"version": "1.0.0\u0000\n"}`)                              // control bytes
	if err := os.MkdirAll(filepath.Join(nm, "dep-6"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(nm, "dep-6", "package.json")); err != nil {
		t.Fatal(err)
	}
	const n = 20000
	reqs := missingReqs("big@1.0.0", n)
	jb, _ := json.Marshal(map[string]any{"manager": "npm", "requires": reqs})
	jobFile := filepath.Join(dir, "job.json")
	if err := os.WriteFile(jobFile, jb, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runScript(t, py, dir, "import json\ninstall.LIVE['npm'] = "+pyStr(nm)+"\ninstall.check_requires(json.load(open(sys.argv[1])))\n", nil, jobFile)
	var ee *exec.ExitError
	if err == nil || !asExit(err, &ee) || ee.ExitCode() != missingExit {
		t.Fatalf("check_requires: %v\n%.300s", err, out)
	}
	if strings.Count(out, "\n") != 1 || len(out) > n+64*80+100 {
		t.Fatalf("report of %d bytes in %d lines for %d requirements", len(out), strings.Count(out, "\n"), n)
	}
	rep, err := parseSessionReport(out, n)
	if err != nil {
		t.Fatal(err)
	}
	if got := rep.Requires[:8]; got != ".vv--v--" {
		t.Errorf("marks %q", got)
	}
	r := missingFromJob(out, reqs, nil)
	md := r.Packages[0].MissingDependencies
	if len(md) != n-1 || md[0].Name != "dep-1" || md[0].Installed != "0.9.0" || md[1].Installed != "another version" {
		t.Errorf("%d missing, first %+v %+v", len(md), md[0], md[1])
	}
}

func asExit(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// FuzzMissingFromJob: whatever the install job prints (it runs beside a
// session's files), the host's reading of it never panics, always
// rejects, names only requirements it sent, and echoes no installed
// version that is not plain.
func FuzzMissingFromJob(f *testing.F) {
	f.Add(`{"ok": false, "requires": "-.v", "installed": {"2": "1.0.0"}}`, 3)
	f.Add(`{"ok": false, "requires": "v", "installed": {"0": "<b>\u0000"}}`, 1)
	f.Add(`{"ok": false, "requires": "--`, 2)
	f.Add(`{"ok":false,"requires":"...","installed":{"-1":"1","9":"2"}}`+"\n{}", 3)
	f.Fuzz(func(t *testing.T, out string, n int) {
		n = 1 + (n%50+50)%50
		reqs := missingReqs("p@1.0.0", n)
		r := missingFromJob(out, reqs, nil)
		if len(r.Packages) != 1 {
			t.Fatalf("%d packages", len(r.Packages))
		}
		md := r.Packages[0].MissingDependencies
		if len(md) == 0 || len(md) > n {
			t.Fatalf("%d missing of %d", len(md), n)
		}
		for _, d := range md {
			if !strings.HasPrefix(d.Name, "dep-") || d.Range != "^1.0.0" {
				t.Fatalf("named %+v", d)
			}
			if d.Installed != "" && d.Installed != "another version" && !plainVersion(d.Installed) {
				t.Fatalf("echoed %q", d.Installed)
			}
		}
	})
}
