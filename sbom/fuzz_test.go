package sbom

import (
	"strings"
	"testing"
)

// FuzzPURL: whatever name and version a package declares, its purl is one
// well-formed token: pkg:TYPE/..., nothing outside purl's allowed set, no
// raw '@', '?' or '#' in the name part.
func FuzzPURL(f *testing.F) {
	for _, s := range [][3]string{{"pip", "Typing_Extensions", "4.12.2"}, {"npm", "@types/node", "20.1.0"}, {"npm", "a?b#c@d", "1/2"}, {"pip", "x", "1.0+local"}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, manager, name, version string) {
		p := PURL(Package{Manager: manager, Name: name, Version: version, Filename: name + ".whl"})
		if !strings.HasPrefix(p, "pkg:") {
			t.Fatalf("%q", p)
		}
		for _, r := range p {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_~%:/@?=", r)) {
				t.Fatalf("%q has %q", p, r)
			}
		}
		base, _, _ := strings.Cut(p, "?")
		if strings.Count(base, "@") > 1 || strings.Contains(base, "#") {
			t.Fatalf("%q", p)
		}
	})
}
