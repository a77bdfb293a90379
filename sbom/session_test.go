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
