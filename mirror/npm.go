package mirror

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"path"
	"sort"
	"strings"
	"time"
)

// npmMTime is the fixed mtime of re-packed entries (the one npm pack uses).
var npmMTime = time.Date(1985, 10, 26, 8, 15, 0, 0, time.UTC)

// lifecycleScripts are the package.json scripts npm runs on its own during
// install, publish or pack. They are removed; other scripts ("test",
// "start", ...) only run when a user asks for them by name.
var lifecycleScripts = []string{
	"preinstall", "install", "postinstall",
	"preuninstall", "uninstall", "postuninstall",
	"prepublish", "preprepare", "prepare", "postprepare",
	"prepublishOnly", "prepack", "postpack",
	"publish", "postpublish",
	"preversion", "version", "postversion",
	"dependencies", "prerestart", "restart", "postrestart",
}

// strippedFields are package.json fields removed from the manifest:
// dependency metadata (npm trusts the packument for these) and node-gyp
// hints.
var strippedFields = []string{
	"dependencies", "optionalDependencies", "peerDependencies", "peerDependenciesMeta",
	"bundleDependencies", "bundledDependencies", "devDependencies",
	"gypfile", "_hasShrinkwrap", "hasInstallScript",
}

// NPMPackage is a sanitised npm package ready to store.
type NPMPackage struct {
	Name    string
	Version string
	// Manifest is the sanitised package.json as written into Tarball.
	Manifest []byte
	// Tarball is the deterministic re-pack.
	Tarball []byte
	// Integrity is "sha512-<base64>" of Tarball; Shasum its sha1 hex.
	Integrity string
	Shasum    string
	// Removed lists what sanitising took out ("scripts.postinstall",
	// "dependencies", "binding.gyp", ...).
	Removed []string
}

// SanitizeNPM checks an npm tarball and re-packs it. It refuses links,
// devices and other non-regular entries, unsafe or duplicate names,
// oversize content and a missing or malformed package.json. The re-pack
// holds regular files only, under "package/", sorted, with fixed mtimes,
// owners and modes (0644, or 0755 when executable), gzip without name or
// time; package.json loses lifecycle scripts and dependency fields, and
// binding.gyp files are dropped.
func SanitizeNPM(data []byte, l Limits) (*NPMPackage, error) {
	if int64(len(data)) > l.MaxArtifactBytes {
		return nil, refusef("tarball is %d bytes, over the %d byte limit", len(data), l.MaxArtifactBytes)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, refusef("not a gzip tarball: %v", err)
	}
	zr.Multistream(false)
	// The entries may unpack to at most budget bytes: the size limit, and
	// the ratio limit once past 1 MiB. Each entry is checked against what
	// is left before it is read, so a bomb is refused without buffering
	// it; the stream as a whole (headers and padding too) is capped so
	// that header-only tricks cannot make it run on.
	budget := min(l.MaxUncompressedBytes, max(1<<20, ratioCap(l.MaxRatio, int64(len(data)))))
	slack := int64(1<<20) + int64(max(l.MaxEntries, 0))*2048
	tr := tar.NewReader(io.LimitReader(zr, budget+slack))
	type entry struct {
		name string
		data []byte
		exec bool
	}
	var entries []entry
	seen := map[string]bool{}
	var total int64
	var n int
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, refusef("reading tarball: %v", err)
		}
		n++
		if n > l.MaxEntries {
			return nil, refusef("tarball has more than %d entries", l.MaxEntries)
		}
		if err := CheckEntryName(h.Name); err != nil {
			return nil, err
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeRegA:
		case tar.TypeDir:
			continue
		case tar.TypeSymlink:
			return nil, refusef("entry %q: symbolic link to %q", h.Name, h.Linkname)
		case tar.TypeLink:
			return nil, refusef("entry %q: hard link to %q", h.Name, h.Linkname)
		case tar.TypeChar, tar.TypeBlock:
			return nil, refusef("entry %q: device file", h.Name)
		case tar.TypeFifo:
			return nil, refusef("entry %q: named pipe", h.Name)
		default:
			return nil, refusef("entry %q: unsupported type %q", h.Name, h.Typeflag)
		}
		if h.Size < 0 || h.Size > l.MaxUncompressedBytes-total {
			return nil, refusef("entry %q: %d bytes, over the size limit", h.Name, h.Size)
		}
		if h.Size > budget-total {
			return nil, refusef("tarball compression ratio over %.0f (tar bomb?)", l.MaxRatio)
		}
		b, err := io.ReadAll(io.LimitReader(tr, h.Size+1))
		if err != nil {
			return nil, refusef("entry %q: %v", h.Name, err)
		}
		if int64(len(b)) != h.Size {
			return nil, refusef("entry %q: truncated", h.Name)
		}
		total += h.Size
		// npm strips the first path component, whatever it is called.
		_, rest, ok := strings.Cut(path.Clean(h.Name), "/")
		if !ok || rest == "" {
			return nil, refusef("entry %q: not inside a package folder", h.Name)
		}
		if seen[rest] {
			return nil, refusef("entry %q: duplicate name", h.Name)
		}
		seen[rest] = true
		entries = append(entries, entry{name: rest, data: b, exec: h.Mode&0o111 != 0})
	}
	pkg := &NPMPackage{}
	var manifest []byte
	kept := entries[:0]
	for _, e := range entries {
		switch {
		case e.name == "package.json":
			manifest = e.data
		case path.Base(e.name) == "binding.gyp":
			pkg.Removed = append(pkg.Removed, e.name)
			continue
		}
		kept = append(kept, e)
	}
	if manifest == nil {
		return nil, refusef("package.json missing")
	}
	clean, err := sanitizeManifest(manifest, pkg)
	if err != nil {
		return nil, err
	}
	pkg.Manifest = clean
	sort.Slice(kept, func(i, j int) bool { return kept[i].name < kept[j].name })
	var buf bytes.Buffer
	gw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gw)
	for _, e := range kept {
		b := e.data
		if e.name == "package.json" {
			b = clean
		}
		mode := int64(0o644)
		if e.exec {
			mode = 0o755
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: "package/" + e.name, Size: int64(len(b)), Mode: mode, ModTime: npmMTime, Format: tar.FormatPAX}
		if len(h.Name) <= 100 {
			h.Format = tar.FormatUSTAR
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, refusef("re-packing %q: %v", e.name, err)
		}
		if _, err := tw.Write(b); err != nil {
			return nil, refusef("re-packing %q: %v", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, refusef("re-packing: %v", err)
	}
	if err := gw.Close(); err != nil {
		return nil, refusef("re-packing: %v", err)
	}
	pkg.Tarball = buf.Bytes()
	pkg.Integrity, pkg.Shasum = npmDigests(pkg.Tarball)
	return pkg, nil
}

func npmDigests(b []byte) (integrity, shasum string) {
	s512 := sha512.Sum512(b)
	s1 := sha1.Sum(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(s512[:]), hex.EncodeToString(s1[:])
}

// sanitizeManifest removes lifecycle scripts and dependency fields and
// re-encodes package.json with sorted keys.
func sanitizeManifest(b []byte, pkg *NPMPackage) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, refusef("package.json: %v", err)
	}
	if err := json.Unmarshal(m["name"], &pkg.Name); err != nil || !ValidName(NPM, pkg.Name) {
		return nil, refusef("package.json: missing or bad name")
	}
	if err := json.Unmarshal(m["version"], &pkg.Version); err != nil || !ValidVersion(NPM, pkg.Version) {
		return nil, refusef("package.json: missing or bad version")
	}
	if raw, ok := m["scripts"]; ok {
		var scripts map[string]json.RawMessage
		if err := json.Unmarshal(raw, &scripts); err != nil {
			// Not an object: npm would ignore it, we drop it.
			delete(m, "scripts")
			pkg.Removed = append(pkg.Removed, "scripts")
		} else {
			for _, s := range lifecycleScripts {
				if _, ok := scripts[s]; ok {
					delete(scripts, s)
					pkg.Removed = append(pkg.Removed, "scripts."+s)
				}
			}
			if len(scripts) == 0 {
				delete(m, "scripts")
			} else {
				m["scripts"], _ = json.Marshal(scripts)
			}
		}
	}
	for _, f := range strippedFields {
		if _, ok := m[f]; ok {
			delete(m, f)
			pkg.Removed = append(pkg.Removed, f)
		}
	}
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, refusef("package.json: %v", err)
	}
	return append(out, '\n'), nil
}
