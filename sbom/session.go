package sbom

import "time"

// Installed is one package an install put into a session, as recorded
// then.
type Installed struct {
	Manager, Name, Version, Filename, SHA256 string
	// OSVSnapshot is the snapshot its artifact had been judged against
	// when it was installed.
	OSVSnapshot string
	InstalledAt time.Time
}

// SessionPackages joins a session's installs with the catalogue as it is
// now (matched by manager, filename and sha256): a package the catalogue
// still knows carries its current status and advisories beside the
// snapshot it was installed under; one it no longer knows keeps what was
// recorded, with no status. A session's document goes to an API client,
// so each package's Source is the mirror's own URL of it (URLPath), never
// the operator's upstream or a file path on the host.
func SessionPackages(installed []Installed, catalogue []Package) []Package {
	byFile := make(map[string]Package, len(catalogue))
	for _, p := range catalogue {
		byFile[p.Manager+"\x00"+p.Filename+"\x00"+p.SHA256] = p
	}
	out := make([]Package, 0, len(installed))
	for _, r := range installed {
		p := Package{Manager: r.Manager, Name: r.Name, Version: r.Version, Filename: r.Filename, SHA256: r.SHA256,
			InstalledSnapshot: r.OSVSnapshot, OSVSnapshot: r.OSVSnapshot, InstalledAt: r.InstalledAt}
		if c, ok := byFile[r.Manager+"\x00"+r.Filename+"\x00"+r.SHA256]; ok {
			p = c
			p.InstalledSnapshot, p.InstalledAt = r.OSVSnapshot, r.InstalledAt
		}
		p.Source = p.URLPath
		out = append(out, p)
	}
	return out
}

// SessionSubject describes session id; currentOSV, when known, is the
// snapshot the catalogue is judged against now.
func SessionSubject(id, currentOSV string) Subject {
	s := Subject{Name: "session " + id, Properties: [][2]string{{PropSession, id}}}
	if currentOSV != "" {
		s.Properties = append(s.Properties, [2]string{PropCurrentOSV, currentOSV})
	}
	return s
}
