package mirror

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

const (
	npmAbbreviated = "application/vnd.npm.install-v1+json"
	npmFull        = "application/json"
)

// abbreviatedFields are the manifest fields kept in an abbreviated
// packument (what npm needs to install), as the public registry keeps them.
var abbreviatedFields = []string{"name", "version", "bin", "directories", "engines", "os", "cpu", "libc", "deprecated", "funding", "license", "acceptDependencies",
	"dependencies", "optionalDependencies", "peerDependencies", "peerDependenciesMeta", "bundleDependencies", "bundledDependencies", "devDependencies",
	"_hasShrinkwrap", "hasInstallScript"}

// installScripts are the scripts npm runs when it installs a package from
// a registry; a packument says "hasInstallScript" when one is present.
var installScripts = []string{"preinstall", "install", "postinstall"}

// parseNPMPath splits the part after /mirror/npm/ into a package name and,
// for tarball requests, a file name. It accepts "name", "@scope%2fname",
// "@scope/name", and those followed by "/-/file.tgz".
func parseNPMPath(rest string) (name, file string, ok bool) {
	if pkg, f, cut := strings.Cut(rest, "/-/"); cut {
		rest, file = pkg, f
		if file, ok = unescape(file); !ok || file == "" || strings.Contains(file, "/") {
			return "", "", false
		}
	}
	name, ok = unescape(rest)
	if !ok || !ValidName(NPM, name) {
		return "", "", false
	}
	return name, file, true
}

func (m *Mirror) serveNPM(w http.ResponseWriter, r *http.Request, rest string) {
	name, file, ok := parseNPMPath(rest)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if file != "" {
		m.serveNPMTarball(w, r, name, file)
		return
	}
	abbrev := strings.Contains(r.Header.Get("Accept"), npmAbbreviated) &&
		negotiate(r.Header.Get("Accept"), []string{npmFull, npmAbbreviated}) == npmAbbreviated
	base := requestBase(r)
	key := fmt.Sprintf("npm|%t|%s|%s", abbrev, base, NormalizeName(NPM, name))
	body, err := m.cachedPage(r.Context(), key, func() ([]byte, error) {
		as, err := m.queryArtifacts(r.Context(), `WHERE manager='npm' AND name_key=? AND status='admitted'`, NormalizeName(NPM, name))
		if err != nil || len(as) == 0 {
			return nil, err
		}
		sortByVersion(NPM, as)
		return packument(as, base, abbrev)
	})
	if err != nil {
		m.internalError(r.Context(), w, "packument", err)
		return
	}
	if body == nil {
		w.Header().Set("Content-Type", npmFull)
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"not found"}`))
		return
	}
	ct := npmFull
	if abbrev {
		ct = npmAbbreviated
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Vary", "Accept, Host")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method == http.MethodHead {
		return
	}
	_, _ = w.Write(body)
}

// packument builds the registry document for as (one package, sorted by
// version), with tarball URLs under base.
func packument(as []Artifact, base string, abbrev bool) ([]byte, error) {
	name := as[len(as)-1].Name
	versions := map[string]map[string]json.RawMessage{}
	times := map[string]string{}
	var modified time.Time
	latest, latestPre := "", ""
	for _, a := range as {
		var man map[string]json.RawMessage
		if err := json.Unmarshal([]byte(a.manifest), &man); err != nil {
			return nil, fmt.Errorf("decoding manifest of %s: %w", a.Filename, err)
		}
		// Files admitted before the mirror served npm tarballs as
		// published were re-packed without their dependency fields; the
		// catalogue kept the dependencies, so clients still learn them.
		if _, ok := man["dependencies"]; !ok && len(a.Dependencies) > 0 {
			man["dependencies"], _ = json.Marshal(a.Dependencies)
		}
		if _, ok := man["hasInstallScript"]; !ok && hasInstallScript(man) {
			man["hasInstallScript"] = json.RawMessage("true")
		}
		if abbrev {
			keep := map[string]json.RawMessage{}
			for _, f := range abbreviatedFields {
				if v, ok := man[f]; ok {
					keep[f] = v
				}
			}
			man = keep
		}
		dist := map[string]string{
			"tarball":   base + a.URLPath,
			"integrity": a.Integrity,
			"shasum":    a.Shasum,
		}
		man["dist"], _ = json.Marshal(dist)
		man["name"], _ = json.Marshal(a.Name)
		man["version"], _ = json.Marshal(a.Version)
		if !abbrev {
			man["_id"], _ = json.Marshal(a.Name + "@" + a.Version)
		}
		versions[a.Version] = man
		// Upstream's publish time, so that minimum-release-age policies
		// (npm's --before, Renovate's minimumReleaseAge) see the truth;
		// the admission time only for files that came without one.
		published := a.PublishedAt
		if published.IsZero() {
			published = a.CreatedAt
		}
		times[a.Version] = published.Format(time.RFC3339Nano)
		if a.UpdatedAt.After(modified) {
			modified = a.UpdatedAt
		}
		if strings.Contains(a.Version, "-") {
			latestPre = a.Version
		} else {
			latest = a.Version
		}
	}
	if latest == "" {
		latest = latestPre
	}
	doc := map[string]any{
		"name":      name,
		"dist-tags": map[string]string{"latest": latest},
		"versions":  versions,
		"modified":  modified.Format(time.RFC3339Nano),
	}
	if !abbrev {
		doc["_id"] = name
		times["modified"] = modified.Format(time.RFC3339Nano)
		times["created"] = as[0].CreatedAt.Format(time.RFC3339Nano)
		doc["time"] = times
	}
	return json.Marshal(doc)
}

// hasInstallScript reports whether a manifest has a script npm runs on
// install.
func hasInstallScript(man map[string]json.RawMessage) bool {
	var scripts map[string]json.RawMessage
	if json.Unmarshal(man["scripts"], &scripts) != nil {
		return false
	}
	for _, s := range installScripts {
		if _, ok := scripts[s]; ok {
			return true
		}
	}
	return false
}

func (m *Mirror) serveNPMTarball(w http.ResponseWriter, r *http.Request, name, file string) {
	as, err := m.queryArtifacts(r.Context(), `WHERE manager='npm' AND name_key=? AND filename=? AND status='admitted'`, NormalizeName(NPM, name), file)
	if err != nil {
		m.internalError(r.Context(), w, "npm tarball", err)
		return
	}
	if len(as) == 0 {
		http.NotFound(w, r)
		return
	}
	m.serveBlob(w, r, as[0].SHA256, as[0].Filename, "application/octet-stream")
}
