package mirror

import (
	"slices"
	"testing"
)

func TestSortVersions(t *testing.T) {
	vs := []string{"1.10.0", "1.2.0", "1.2.0rc1", "0.9"}
	sortVersions(Pip, vs)
	if want := []string{"0.9", "1.2.0rc1", "1.2.0", "1.10.0"}; !slices.Equal(vs, want) {
		t.Fatalf("got %v", vs)
	}
}

func FuzzParsePackageSpec(f *testing.F) {
	for _, s := range []string{"requests", "requests==2.0", "@scope/x@1.0.0", "x>=1", "", "@", "a@", "==1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, mgr := range []Manager{Pip, NPM} {
			name, version, problem := parsePackageSpec(mgr, raw)
			if problem != "" {
				if name != "" || version != "" {
					t.Fatalf("%s %q: problem %q with name %q", mgr, raw, problem, name)
				}
				continue
			}
			if !ValidName(mgr, name) || (version != "" && !ValidVersion(mgr, version)) {
				t.Fatalf("%s %q: accepted bad name %q or version %q", mgr, raw, name, version)
			}
		}
	})
}
