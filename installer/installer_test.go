package installer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

func TestParseSpec(t *testing.T) {
	t.Parallel()
	cases := []struct {
		mgr           Manager
		spec          string
		name, version string
		bad           bool
	}{
		{Pip, "requests==2.32.4", "requests", "2.32.4", false},
		{Pip, "Alpha_Pkg", "Alpha_Pkg", "", false},
		{Pip, "a==1.0rc1", "a", "1.0rc1", false},
		{Pip, "requests>=2", "", "", true},
		{Pip, "requests~=2.0", "", "", true},
		{Pip, "requests[socks]==2.0", "", "", true},
		{Pip, "requests==", "", "", true},
		{Pip, "requests==1.0; python_version>'3'", "", "", true},
		{Pip, "https://evil/x.whl", "", "", true},
		{Pip, "./x.whl", "", "", true},
		{Pip, "-e .", "", "", true},
		{Pip, "--index-url=http://x", "", "", true},
		{Pip, " requests", "", "", true},
		{Pip, "", "", "", true},
		{NPM, "is-number@7.0.0", "is-number", "7.0.0", false},
		{NPM, "@scope/pkg@1.2.3", "@scope/pkg", "1.2.3", false},
		{NPM, "@scope/pkg", "@scope/pkg", "", false},
		{NPM, "left-pad", "left-pad", "", false},
		{NPM, "left-pad@^1.0.0", "", "", true},
		{NPM, "left-pad@latest", "", "", true},
		{NPM, "left-pad@1.x", "", "", true},
		{NPM, "git+https://x/y.git", "", "", true},
		{NPM, "../x", "", "", true},
		{NPM, "@scope", "", "", true},
		{NPM, "Left-Pad@1.0.0", "", "", true},
	}
	for _, tc := range cases {
		name, version, err := ParseSpec(tc.mgr, tc.spec)
		if (err != nil) != tc.bad || name != tc.name || version != tc.version {
			t.Errorf("ParseSpec(%s, %q) = %q %q %v", tc.mgr, tc.spec, name, version, err)
		}
	}
}

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"a==1", "@s/p@1.0.0", "x>=1", "p@^1", "../x", "a==1;b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		for _, m := range []Manager{Pip, NPM} {
			name, version, err := ParseSpec(m, spec)
			if err != nil {
				continue
			}
			// What passes is a plain name and an exact version: nothing a
			// package manager would read as an option, path, URL or range.
			for _, s := range []string{name, version} {
				if s == "" {
					continue
				}
				if strings.ContainsAny(s, " \t\n<>=^*|;:,\\\"'[]()") || strings.HasPrefix(s, "-") || strings.HasPrefix(s, ".") {
					t.Fatalf("%s %q passed as %q %q", m, spec, name, version)
				}
				for _, part := range strings.Split(s, "/") {
					if part == "" || part == "." || part == ".." {
						t.Fatalf("%s %q passed as path-like %q %q", m, spec, name, version)
					}
				}
			}
		}
	})
}

type fakeCatalog map[string]Artifact

func (f fakeCatalog) Lookup(_ context.Context, m Manager, name, version string) (Artifact, error) {
	a, ok := f[string(m)+":"+normName(m, name)+":"+version]
	if !ok {
		return Artifact{}, ErrNotFound
	}
	if a.Status != "admitted" {
		return a, ErrNotAdmitted
	}
	return a, nil
}

// Satisfying treats a range "^V" as exactly V (a fake: the real matcher
// is tested in the mirror).
func (f fakeCatalog) Satisfying(_ context.Context, name, rng string) (admitted, known []string, err error) {
	if strings.Contains(rng, ":") {
		return nil, nil, ErrRange
	}
	want := strings.TrimPrefix(rng, "^")
	for k, a := range f {
		if strings.HasPrefix(k, "npm:"+name+":") && a.Version == want && !slices.Contains(known, a.Version) {
			known = append(known, a.Version)
			if a.Status == "admitted" {
				admitted = append(admitted, a.Version)
			}
		}
	}
	return admitted, known, nil
}

func (f fakeCatalog) Versions(_ context.Context, m Manager, name string) (admitted, known []string, err error) {
	for k, a := range f {
		if strings.HasPrefix(k, string(m)+":"+normName(m, name)+":") && k != string(m)+":"+normName(m, name)+":" && !slices.Contains(known, a.Version) {
			known = append(known, a.Version)
			if a.Status == "admitted" {
				admitted = append(admitted, a.Version)
			}
		}
	}
	slices.Sort(known)
	slices.Sort(admitted)
	return admitted, known, nil
}

const hash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// TestPlanDependencies: an npm request must bring what its packages need
// at versions in range; what it does not name goes to the job's session
// check, with every catalogue version that satisfies the range.
func TestPlanDependencies(t *testing.T) {
	t.Parallel()
	tgz := func(name, version string, deps map[string]string) Artifact {
		return Artifact{Name: name, Version: version, Filename: name + "-" + version + ".tgz", SHA256: hash, Integrity: "sha512-x", Status: "admitted",
			Dependencies: deps, Stripped: []string{"dependencies"}}
	}
	cat := fakeCatalog{
		"npm:debug:4.3.7":  tgz("debug", "4.3.7", map[string]string{"ms": "^2.1.3"}),
		"npm:ms:2.1.3":     tgz("ms", "2.1.3", nil),
		"npm:ms:2.0.0":     tgz("ms", "2.0.0", nil),
		"npm:gitdep:1.0.0": tgz("gitdep", "1.0.0", map[string]string{"x": "github:a/x"}),
	}
	inst := New(DefaultConfig(), cat, nil, nil, nil, nil)
	ctx := context.Background()
	// Alone: the session must hold ms in range.
	_, reqs, err := inst.plan(ctx, sandbox.InstallRequest{Manager: "npm", Packages: []string{"debug@4.3.7"}})
	if err != nil || len(reqs) != 1 || reqs[0].Name != "ms" || reqs[0].Range != "^2.1.3" || !slices.Equal(reqs[0].Versions, []string{"2.1.3"}) || reqs[0].By != "debug@4.3.7" {
		t.Fatalf("debug alone: %+v, %v", reqs, err)
	}
	// With ms in range: nothing left to check.
	if plan, reqs, err := inst.plan(ctx, sandbox.InstallRequest{Manager: "npm", Packages: []string{"debug@4.3.7", "ms@2.1.3"}}); err != nil || len(reqs) != 0 || len(plan) != 2 {
		t.Fatalf("debug with ms: %+v %+v, %v", plan, reqs, err)
	}
	// With ms out of range: 422 at once, naming the range and what the mirror has.
	_, _, err = inst.plan(ctx, sandbox.InstallRequest{Manager: "npm", Packages: []string{"ms@2.0.0", "debug@4.3.7"}})
	var rej *sandbox.RejectedError
	if !errors.As(err, &rej) || len(rej.Packages) != 1 {
		t.Fatalf("ms out of range: %v", err)
	}
	p := rej.Packages[0]
	if p.Package != "debug@4.3.7" || p.Status != "missing_dependencies" || len(p.MissingDependencies) != 1 ||
		p.MissingDependencies[0].Name != "ms" || p.MissingDependencies[0].Range != "^2.1.3" || p.MissingDependencies[0].Requested != "2.0.0" ||
		!slices.Equal(p.MissingDependencies[0].MirrorVersions, []string{"2.1.3"}) || !strings.Contains(p.Reason, "ms@^2.1.3") {
		t.Fatalf("rejection: %+v", p)
	}
	// A range the catalog cannot check is a requirement no version meets.
	if _, reqs, err := inst.plan(ctx, sandbox.InstallRequest{Manager: "npm", Packages: []string{"gitdep@1.0.0"}}); err != nil || len(reqs) != 1 || len(reqs[0].Versions) != 0 {
		t.Fatalf("git dependency: %+v, %v", reqs, err)
	}
	// The job's report becomes one rejection per package.
	r := missingFromJob(`{"ok": false, "requires": "v", "installed": {"0": "2.0.0"}}`+"\n", reqs0(nil), nil)
	if len(r.Packages) != 1 || r.Packages[0].MissingDependencies[0].Installed != "2.0.0" || !strings.Contains(r.Packages[0].Reason, "the session has 2.0.0") {
		t.Fatalf("job report: %+v", r)
	}
}

func reqs0(r []requirement) []requirement {
	return append(r, requirement{By: "debug@4.3.7", Name: "ms", Range: "^2.1.3", admitted: []string{"2.1.3"}})
}

func TestPlanRejections(t *testing.T) {
	t.Parallel()
	cat := fakeCatalog{
		"pip:good:":       {Name: "good", Version: "2.0", Filename: "good-2.0-py3-none-any.whl", SHA256: hash, Status: "admitted"},
		"pip:good:1.0":    {Name: "good", Version: "1.0", Filename: "good-1.0-py3-none-any.whl", SHA256: hash, Status: "admitted"},
		"pip:sdist:1.0":   {Name: "sdist", Version: "1.0", Filename: "sdist-1.0.tar.gz", SHA256: hash, Status: "admitted"},
		"pip:vuln:1.0":    {Name: "vuln", Version: "1.0", Filename: "vuln-1.0-py3-none-any.whl", Status: "refused", Reasons: []string{"affected by GHSA-x"}},
		"pip:quar:1.0":    {Name: "quar", Version: "1.0", Filename: "quar-1.0-py3-none-any.whl", Status: "quarantined", Reasons: []string{"stored file failed verification"}},
		"pip:nohash:1.0":  {Name: "nohash", Version: "1.0", Filename: "nohash-1.0-py3-none-any.whl", Status: "admitted"},
		"pip:slash:1.0":   {Name: "slash", Version: "1.0", Filename: "../../slash-1.0-py3-none-any.whl", SHA256: hash, Status: "admitted"},
		"pip:sub:1.0":     {Name: "sub", Version: "1.0", Filename: "x/sub-1.0-py3-none-any.whl", SHA256: hash, Status: "admitted"},
		"pip:dot:1.0":     {Name: "dot", Version: "1.0", Filename: ".dot-1.0-py3-none-any.whl", SHA256: hash, Status: "admitted"},
		"pip:nul:1.0":     {Name: "nul", Version: "1.0", Filename: "nul\x00-1.0-py3-none-any.whl", SHA256: hash, Status: "admitted"},
		"pip:space:1.0":   {Name: "space", Version: "1.0", Filename: "space -1.0-py3-none-any.whl", SHA256: hash, Status: "admitted"},
		"npm:left-pad:":   {Name: "left-pad", Version: "1.3.0", Filename: "left-pad-1.3.0.tgz", SHA256: hash, Integrity: "sha512-x", Status: "admitted"},
		"npm:noint:1.0.0": {Name: "noint", Version: "1.0.0", Filename: "noint-1.0.0.tgz", SHA256: hash, Status: "admitted"},
	}
	inst := New(DefaultConfig(), cat, nil, nil, nil, nil)
	cases := []struct {
		name   string
		req    sandbox.InstallRequest
		status []string // per rejected package, in order; nil means accepted
	}{
		{"pinned and bare", sandbox.InstallRequest{Manager: "pip", Packages: []string{"good==1.0"}}, nil},
		{"bare resolves", sandbox.InstallRequest{Manager: "pip", Packages: []string{"good"}}, nil},
		{"npm bare", sandbox.InstallRequest{Manager: "npm", Packages: []string{"left-pad"}}, nil},
		{"missing", sandbox.InstallRequest{Manager: "pip", Packages: []string{"nope==1.0"}}, []string{"missing"}},
		{"refused", sandbox.InstallRequest{Manager: "pip", Packages: []string{"vuln==1.0"}}, []string{"refused"}},
		{"quarantined", sandbox.InstallRequest{Manager: "pip", Packages: []string{"quar==1.0"}}, []string{"quarantined"}},
		{"not a wheel", sandbox.InstallRequest{Manager: "pip", Packages: []string{"sdist==1.0"}}, []string{"not_a_wheel"}},
		{"file name with ..", sandbox.InstallRequest{Manager: "pip", Packages: []string{"slash==1.0"}}, []string{"not_a_wheel"}},
		{"file name with a folder", sandbox.InstallRequest{Manager: "pip", Packages: []string{"sub==1.0"}}, []string{"not_a_wheel"}},
		{"hidden file name", sandbox.InstallRequest{Manager: "pip", Packages: []string{"dot==1.0"}}, []string{"not_a_wheel"}},
		{"file name with NUL", sandbox.InstallRequest{Manager: "pip", Packages: []string{"nul==1.0"}}, []string{"not_a_wheel"}},
		{"file name with a space", sandbox.InstallRequest{Manager: "pip", Packages: []string{"space==1.0"}}, []string{"not_a_wheel"}},
		{"no hash", sandbox.InstallRequest{Manager: "pip", Packages: []string{"nohash==1.0"}}, []string{"invalid"}},
		{"no integrity", sandbox.InstallRequest{Manager: "npm", Packages: []string{"noint@1.0.0"}}, []string{"invalid"}},
		{"twice", sandbox.InstallRequest{Manager: "pip", Packages: []string{"good==1.0", "Good"}}, []string{"invalid"}},
		{"one of three", sandbox.InstallRequest{Manager: "pip", Packages: []string{"good", "vuln==1.0", "other==1.0"}}, []string{"refused", "missing"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			plan, _, err := inst.plan(context.Background(), tc.req)
			if tc.status == nil {
				if err != nil || len(plan) != len(tc.req.Packages) {
					t.Fatalf("plan: %v %v", plan, err)
				}
				if plan[0].resolved != !strings.ContainsAny(tc.req.Packages[0], "=@") {
					t.Fatalf("resolved flag: %+v", plan[0])
				}
				return
			}
			var rej *sandbox.RejectedError
			if !errors.As(err, &rej) || !errors.Is(err, sandbox.ErrRejected) || plan != nil {
				t.Fatalf("want rejection, got %v", err)
			}
			var got []string
			for _, p := range rej.Packages {
				got = append(got, p.Status)
				if p.Reason == "" || p.Package == "" {
					t.Fatalf("rejection without reason: %+v", p)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.status, ",") {
				t.Fatalf("statuses %v, want %v", got, tc.status)
			}
		})
	}
	for _, req := range []sandbox.InstallRequest{{Manager: "gem", Packages: []string{"x"}}, {Manager: "pip"}} {
		if _, _, err := inst.plan(context.Background(), req); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%+v: %v", req, err)
		}
	}
}
