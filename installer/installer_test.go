package installer

import (
	"context"
	"errors"
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

const hash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

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
			plan, err := inst.plan(context.Background(), tc.req)
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
		if _, err := inst.plan(context.Background(), req); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%+v: %v", req, err)
		}
	}
}
