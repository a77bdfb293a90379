// Package sbom turns what the mirror admitted and what a session installed
// into CycloneDX 1.6 JSON (github.com/CycloneDX/cyclonedx-go). It is a leaf:
// it does no I/O beyond writing to the io.Writer it is given, and callers
// (internal/app) gather the rows from the store and the mirror.
package sbom

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// SpecVersion is the CycloneDX version every document is written in.
const SpecVersion = cdx.SpecVersion1_6

// Property names (the "sandboxapi:" namespace) put on components.
const (
	PropStatus      = "sandboxapi:mirror:status"
	PropOSVSnapshot = "sandboxapi:osv:snapshot"
	PropFilename    = "sandboxapi:mirror:filename"
	PropSource      = "sandboxapi:mirror:source"
	PropInstalledAt = "sandboxapi:installed_at"
	PropInstalledOn = "sandboxapi:osv:snapshot_at_install"
	PropReason      = "sandboxapi:mirror:reason"
	PropStripped    = "sandboxapi:mirror:stripped"
	PropSession     = "sandboxapi:session"
	PropCurrentOSV  = "sandboxapi:osv:current_snapshot"
)

// Package is one artifact: a catalogue entry or a package installed into a
// session. The zero value of a field leaves its part out.
type Package struct {
	// Manager is "pip" or "npm" (the ecosystem label is "pypi" or "npm").
	Manager  string
	Name     string
	Version  string
	Filename string
	// SHA256 is the hex sha256 of the file the mirror serves.
	SHA256 string
	// Integrity is npm's "sha512-<base64>".
	Integrity string
	// URLPath is where the mirror serves the file ("/mirror/...").
	URLPath string
	// Status is the artifact's mirror status now (admitted, refused,
	// quarantined, removed); "" when the mirror no longer knows it.
	Status  string
	Reasons []string
	// Stripped lists what admission took out of the published file (npm:
	// install scripts, dependency fields); empty when served as published.
	Stripped []string
	// Advisories are the OSV ids that matched; Accepted those an operator
	// accepted.
	Advisories []string
	Accepted   []string
	// OSVSnapshot is the snapshot the artifact was last judged against.
	OSVSnapshot string
	// InstalledSnapshot is the snapshot it had been judged against when it
	// was installed (session SBOMs).
	InstalledSnapshot string
	// Source is where the file came from: for an operator's catalogue
	// document the upstream URL (without credentials) or file path it was
	// added from; for a client's session document the mirror's URLPath.
	Source      string
	InstalledAt time.Time
}

// Subject is what the document describes (metadata.component).
type Subject struct {
	Name    string
	Version string
	// Properties are put on the document's metadata, in order.
	Properties [][2]string
}

// Tool names the program that wrote the document.
type Tool struct {
	Name    string
	Version string
}

// Ecosystem returns the label used for manager across metrics, purls and
// documents: "pypi" for pip, "npm" for npm, manager itself otherwise.
func Ecosystem(manager string) string {
	if manager == "pip" || manager == "pypi" {
		return "pypi"
	}
	return manager
}

// PURL returns the package URL of p (purl-spec): pkg:pypi/name@version
// with PEP 503 normalisation, pkg:npm/%40scope/name@version, and for
// wheels a file_name qualifier since one version has many files.
func PURL(p Package) string {
	var b strings.Builder
	b.WriteString("pkg:")
	switch Ecosystem(p.Manager) {
	case "pypi":
		b.WriteString("pypi/")
		b.WriteString(escape(pypiName(p.Name)))
	case "npm":
		b.WriteString("npm/")
		ns, name, ok := strings.Cut(p.Name, "/")
		if ok && strings.HasPrefix(ns, "@") {
			b.WriteString(escape(ns))
			b.WriteByte('/')
			b.WriteString(escape(name))
		} else {
			b.WriteString(escape(p.Name))
		}
	default:
		b.WriteString("generic/")
		b.WriteString(escape(p.Name))
	}
	if p.Version != "" {
		b.WriteByte('@')
		b.WriteString(escape(p.Version))
	}
	if Ecosystem(p.Manager) == "pypi" && p.Filename != "" {
		b.WriteString("?file_name=")
		b.WriteString(escape(p.Filename))
	}
	return b.String()
}

// escape percent-encodes everything but purl's unreserved characters
// (ALPHA, DIGIT, ".", "-", "_", "~").
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func b64hex(s string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(raw), nil
}

func pypiName(n string) string {
	n = strings.ToLower(n)
	var b strings.Builder
	dash := false
	for _, r := range n {
		if r == '-' || r == '_' || r == '.' {
			if !dash {
				b.WriteByte('-')
			}
			dash = true
			continue
		}
		dash = false
		b.WriteRune(r)
	}
	return b.String()
}

// Build returns the document for subject listing pkgs, each with its
// hashes, purl, mirror distribution URL and properties, and one
// vulnerability per OSV id that matched any of them.
func Build(subject Subject, tool Tool, pkgs []Package, now time.Time) *cdx.BOM {
	bom := cdx.NewBOM()
	bom.SerialNumber = "urn:uuid:" + uuid4()
	bom.Metadata = &cdx.Metadata{
		Timestamp: now.UTC().Format(time.RFC3339),
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication, Name: tool.Name, Version: tool.Version,
		}}},
		Component: &cdx.Component{BOMRef: "subject", Type: cdx.ComponentTypeApplication, Name: subject.Name, Version: subject.Version},
	}
	if len(subject.Properties) > 0 {
		props := make([]cdx.Property, 0, len(subject.Properties))
		for _, kv := range subject.Properties {
			props = append(props, cdx.Property{Name: kv[0], Value: kv[1]})
		}
		bom.Metadata.Properties = &props
	}
	comps := make([]cdx.Component, 0, len(pkgs))
	vulns := map[string]*cdx.Vulnerability{}
	refs := map[string]int{}
	for _, p := range pkgs {
		ref := ref(p)
		if n := refs[ref]; n > 0 {
			refs[ref] = n + 1
			ref = fmt.Sprintf("%s#%d", ref, n+1)
		} else {
			refs[ref] = 1
		}
		comps = append(comps, component(p, ref))
		for _, id := range p.Advisories {
			v := vulns[id]
			if v == nil {
				v = &cdx.Vulnerability{BOMRef: "vuln:" + id, ID: id,
					Source:  &cdx.Source{Name: "OSV", URL: "https://osv.dev/vulnerability/" + url.PathEscape(id)},
					Affects: &[]cdx.Affects{}}
				vulns[id] = v
			}
			*v.Affects = append(*v.Affects, cdx.Affects{Ref: ref})
			if slices.Contains(p.Accepted, id) {
				v.Analysis = &cdx.VulnerabilityAnalysis{
					Response: &[]cdx.ImpactAnalysisResponse{cdx.IARWillNotFix},
					Detail:   "accepted by a mirror operator (mirror add --accept)"}
			}
		}
	}
	bom.Components = &comps
	deps := []cdx.Dependency{{Ref: "subject", Dependencies: refsOf(comps)}}
	bom.Dependencies = &deps
	if len(vulns) > 0 {
		ids := make([]string, 0, len(vulns))
		for id := range vulns {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		out := make([]cdx.Vulnerability, 0, len(ids))
		for _, id := range ids {
			out = append(out, *vulns[id])
		}
		bom.Vulnerabilities = &out
	}
	return bom
}

func refsOf(cs []cdx.Component) *[]string {
	out := make([]string, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.BOMRef)
	}
	return &out
}

func ref(p Package) string {
	f := p.Filename
	if f == "" {
		f = p.Name + "@" + p.Version
	}
	return Ecosystem(p.Manager) + ":" + f
}

func component(p Package, ref string) cdx.Component {
	c := cdx.Component{BOMRef: ref, Type: cdx.ComponentTypeLibrary, Name: p.Name, Version: p.Version, PackageURL: PURL(p)}
	var hashes []cdx.Hash
	if p.SHA256 != "" {
		hashes = append(hashes, cdx.Hash{Algorithm: cdx.HashAlgoSHA256, Value: p.SHA256})
	}
	if h, ok := strings.CutPrefix(p.Integrity, "sha512-"); ok {
		if hx, err := b64hex(h); err == nil {
			hashes = append(hashes, cdx.Hash{Algorithm: cdx.HashAlgoSHA512, Value: hx})
		}
	}
	if len(hashes) > 0 {
		c.Hashes = &hashes
	}
	if p.URLPath != "" {
		c.ExternalReferences = &[]cdx.ExternalReference{{Type: cdx.ERTypeDistribution, URL: p.URLPath,
			Comment: "served by the sandboxapi mirror"}}
	}
	var props []cdx.Property
	add := func(name, value string) {
		if value != "" {
			props = append(props, cdx.Property{Name: name, Value: value})
		}
	}
	add(PropStatus, p.Status)
	add(PropFilename, p.Filename)
	add(PropOSVSnapshot, p.OSVSnapshot)
	add(PropInstalledOn, p.InstalledSnapshot)
	if !p.InstalledAt.IsZero() {
		add(PropInstalledAt, p.InstalledAt.UTC().Format(time.RFC3339))
	}
	add(PropSource, p.Source)
	for _, r := range p.Reasons {
		add(PropReason, r)
	}
	for _, r := range p.Stripped {
		add(PropStripped, r)
	}
	if len(props) > 0 {
		c.Properties = &props
	}
	return c
}

// Write encodes bom as CycloneDX 1.6 JSON, indented.
func Write(w io.Writer, bom *cdx.BOM) error {
	enc := cdx.NewBOMEncoder(w, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.EncodeVersion(bom, SpecVersion); err != nil {
		return fmt.Errorf("encoding CycloneDX: %w", err)
	}
	return nil
}

// MediaType is the Content-Type of a CycloneDX 1.6 JSON document.
const MediaType = "application/vnd.cyclonedx+json; version=1.6"

func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
