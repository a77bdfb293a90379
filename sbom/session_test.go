package sbom

import (
	"reflect"
	"testing"
	"time"
)

func TestSessionPackages(t *testing.T) {
	t.Parallel()
	at := time.Unix(1700000000, 0).UTC()
	cat := []Package{
		{Manager: "pip", Name: "wheel", Version: "0.43.0", Filename: "wheel-0.43.0-py3-none-any.whl", SHA256: "aa", Status: "quarantined", Advisories: []string{"GHSA-x"}, OSVSnapshot: "new"},
		{Manager: "npm", Name: "wheel", Version: "0.43.0", Filename: "wheel-0.43.0-py3-none-any.whl", SHA256: "bb", Status: "admitted"},
		{Manager: "pip", Name: "up", Version: "1", Filename: "up-1-py3-none-any.whl", SHA256: "dd", Status: "admitted",
			URLPath: "/mirror/pypi/files/dd/up-1-py3-none-any.whl", Source: "https://index.corp.example/files/up-1-py3-none-any.whl"},
		{Manager: "npm", Name: "local", Version: "1.0.0", Filename: "local-1.0.0.tgz", SHA256: "ee", Status: "admitted",
			URLPath: "/mirror/npm/local/-/local-1.0.0.tgz", Source: "/root/incoming/local-1.0.0.tgz"},
	}
	tests := []struct {
		name string
		in   Installed
		want Package
	}{
		{name: "known: current view, install snapshot kept",
			in:   Installed{Manager: "pip", Name: "wheel", Version: "0.43.0", Filename: "wheel-0.43.0-py3-none-any.whl", SHA256: "aa", OSVSnapshot: "old", InstalledAt: at},
			want: Package{Manager: "pip", Name: "wheel", Version: "0.43.0", Filename: "wheel-0.43.0-py3-none-any.whl", SHA256: "aa", Status: "quarantined", Advisories: []string{"GHSA-x"}, OSVSnapshot: "new", InstalledSnapshot: "old", InstalledAt: at}},
		{name: "other hash: as recorded, no status",
			in:   Installed{Manager: "pip", Name: "wheel", Version: "0.43.0", Filename: "wheel-0.43.0-py3-none-any.whl", SHA256: "cc", OSVSnapshot: "old", InstalledAt: at},
			want: Package{Manager: "pip", Name: "wheel", Version: "0.43.0", Filename: "wheel-0.43.0-py3-none-any.whl", SHA256: "cc", OSVSnapshot: "old", InstalledSnapshot: "old", InstalledAt: at}},
		{name: "same file and hash under another manager does not match",
			in:   Installed{Manager: "npm", Name: "wheel", Version: "0.43.0", Filename: "wheel-0.43.0-py3-none-any.whl", SHA256: "aa", InstalledAt: at},
			want: Package{Manager: "npm", Name: "wheel", Version: "0.43.0", Filename: "wheel-0.43.0-py3-none-any.whl", SHA256: "aa", InstalledAt: at}},
		{name: "upstream source: the mirror's URL instead",
			in: Installed{Manager: "pip", Name: "up", Version: "1", Filename: "up-1-py3-none-any.whl", SHA256: "dd", InstalledAt: at},
			want: Package{Manager: "pip", Name: "up", Version: "1", Filename: "up-1-py3-none-any.whl", SHA256: "dd", Status: "admitted", InstalledAt: at,
				URLPath: "/mirror/pypi/files/dd/up-1-py3-none-any.whl", Source: "/mirror/pypi/files/dd/up-1-py3-none-any.whl"}},
		{name: "host path source: the mirror's URL instead",
			in: Installed{Manager: "npm", Name: "local", Version: "1.0.0", Filename: "local-1.0.0.tgz", SHA256: "ee", InstalledAt: at},
			want: Package{Manager: "npm", Name: "local", Version: "1.0.0", Filename: "local-1.0.0.tgz", SHA256: "ee", Status: "admitted", InstalledAt: at,
				URLPath: "/mirror/npm/local/-/local-1.0.0.tgz", Source: "/mirror/npm/local/-/local-1.0.0.tgz"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := SessionPackages([]Installed{tt.in}, cat)
			if len(got) != 1 || !reflect.DeepEqual(got[0], tt.want) {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
	if s := SessionSubject("s1", ""); len(s.Properties) != 1 || s.Name != "session s1" {
		t.Errorf("subject without OSV: %+v", s)
	}
	if s := SessionSubject("s1", "snap"); len(s.Properties) != 2 || s.Properties[1] != [2]string{PropCurrentOSV, "snap"} {
		t.Errorf("subject with OSV: %+v", s)
	}
}
