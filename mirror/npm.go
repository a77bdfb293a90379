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
	"fmt"
	"io"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// npmMTime is the fixed mtime of re-packed entries (the one npm pack uses).
var npmMTime = time.Date(1985, 10, 26, 8, 15, 0, 0, time.UTC)

// nativeTools are programs whose use in an install script, or presence as
// a dependency, means the package builds native code when installed.
var nativeTools = []string{
	"node-gyp", "node-pre-gyp", "@mapbox/node-pre-gyp", "prebuild-install", "cmake-js", "node-gyp-build",
	"prebuildify", "node-waf", "napi", "make", "cmake", "gcc", "g++", "cc", "clang", "cargo", "go build",
}

// NPMPackage is a checked npm package ready to store.
type NPMPackage struct {
	Name    string
	Version string
	// Manifest is package.json as published (served in the packument).
	Manifest []byte
	// Tarball is the published file, byte for byte, unless the archive
	// holds something the checks did not read (see Removed).
	Tarball []byte
	// Integrity is "sha512-<base64>" of Tarball; Shasum its sha1 hex.
	Integrity string
	Shasum    string
	// Removed lists why the archive was re-packed (data after its end,
	// odd top folders, special mode bits). When it is empty, Tarball is
	// the input itself, byte for byte, so lockfiles made against the
	// public registry keep their integrity. package.json is never
	// changed: lifecycle scripts and dependency fields are removed when
	// the installer extracts the package into a session.
	Removed []string
	// Dependencies are the manifest's "dependencies" (name -> range),
	// less those bundled in the tarball.
	Dependencies map[string]string
}

// SanitizeNPM checks an npm tarball. It refuses links, devices and other
// non-regular entries, unsafe or duplicate names, oversize content, a
// missing or malformed package.json, and packages that cannot work
// without a native build (see nativeBuild). The tarball is kept byte for
// byte, package.json with its scripts and dependency fields included,
// unless the archive holds something the checks did not read or npm
// could read differently: then the re-pack holds regular files only,
// under "package/", sorted, with fixed mtimes, owners and modes (0644, or
// 0755 when executable), gzip without name or time, and the same
// package.json.
func SanitizeNPM(data []byte, l Limits) (*NPMPackage, error) {
	if int64(len(data)) > l.MaxArtifactBytes {
		return nil, refusef("tarball is %d bytes, over the %d byte limit", len(data), l.MaxArtifactBytes)
	}
	src := bytes.NewReader(data)
	zr, err := gzip.NewReader(src)
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
	lr := io.LimitReader(zr, budget+slack)
	tr := tar.NewReader(lr)
	type entry struct {
		name string
		data []byte
		exec bool
	}
	var entries []entry
	seen := map[string]bool{}
	var total int64
	var n int
	var unusual []string // what npm could read differently from the checks here
	otherTop := false
	top := "" // the first entry's top folder
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
		// npm takes any first folder ("package/", or "node/" in @types
		// tarballs), and so does the installer, as long as every entry
		// shares it: a tarball with two top folders, or an odd one ("./"),
		// is re-packed under package/ rather than served as is.
		t, _, _ := strings.Cut(h.Name, "/")
		if top == "" {
			top = t
		}
		if (t != top || !plainTopFolder(t)) && !otherTop {
			otherTop = true
			unusual = append(unusual, fmt.Sprintf("top folder of %q is not the archive's one plain top folder (%s/)", h.Name, top))
		}
		if h.Mode&^0o777 != 0 {
			unusual = append(unusual, fmt.Sprintf("mode %o of %s", h.Mode, rest))
		}
		entries = append(entries, entry{name: rest, data: b, exec: h.Mode&0o111 != 0})
	}
	// Served as published, the file must hold nothing these checks did not
	// read: no data after the tar's end, no second gzip member.
	var tail zeroWriter
	if _, err := io.Copy(&tail, lr); err != nil {
		return nil, refusef("reading tarball: %v", err)
	}
	if tail.nonZero {
		unusual = append(unusual, "data after the end of the tar archive")
	}
	if src.Len() > 0 {
		unusual = append(unusual, "data after the gzip stream")
	}
	pkg := &NPMPackage{}
	var manifest []byte
	files := map[string]bool{}
	for _, e := range entries {
		files[e.name] = true
		if e.name == "package.json" {
			manifest = e.data
		}
	}
	if manifest == nil {
		return nil, refusef("package.json missing")
	}
	if err := checkManifest(manifest, pkg, files, l); err != nil {
		return nil, err
	}
	pkg.Manifest = manifest
	if len(unusual) == 0 {
		pkg.Tarball = data
		pkg.Integrity, pkg.Shasum = npmDigests(data)
		return pkg, nil
	}
	pkg.Removed = unusual
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	var buf bytes.Buffer
	gw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	tw := tar.NewWriter(gw)
	for _, e := range entries {
		b := e.data
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

// zeroWriter notes whether anything but zero bytes was written to it
// (tar pads its end with zero blocks; anything else is hidden data).
type zeroWriter struct{ nonZero bool }

func (z *zeroWriter) Write(p []byte) (int, error) {
	if !z.nonZero {
		for _, c := range p {
			if c != 0 {
				z.nonZero = true
				break
			}
		}
	}
	return len(p), nil
}

func npmDigests(b []byte) (integrity, shasum string) {
	s512 := sha512.Sum512(b)
	s1 := sha1.Sum(b)
	return "sha512-" + base64.StdEncoding.EncodeToString(s512[:]), hex.EncodeToString(s1[:])
}

// checkManifest reads package.json's name, version and dependencies into
// pkg; files are the tarball's paths (relative to the package folder). A
// package that needs a native build is refused. The manifest itself is
// not changed.
func checkManifest(b []byte, pkg *NPMPackage, files map[string]bool, l Limits) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return refusef("package.json: %v", err)
	}
	if err := json.Unmarshal(m["name"], &pkg.Name); err != nil || !ValidName(NPM, pkg.Name) {
		return refusef("package.json: missing or bad name")
	}
	if err := json.Unmarshal(m["version"], &pkg.Version); err != nil || !ValidVersion(NPM, pkg.Version) {
		return refusef("package.json: missing or bad version")
	}
	if why := nativeBuild(m, files); len(why) > 0 {
		return refusef("needs a native build or an install script that builds, which the mirror never runs: %s", strings.Join(why, "; "))
	}
	deps, err := dependencies(m, files, l)
	if err != nil {
		return err
	}
	pkg.Dependencies = deps
	return nil
}

var nativeToolRE = func() *regexp.Regexp {
	alts := make([]string, len(nativeTools))
	for i, t := range nativeTools {
		alts[i] = regexp.QuoteMeta(t)
	}
	return regexp.MustCompile(`(?:^|[\s;&|()'"/=])(` + strings.Join(alts, "|") + `)(?:$|[\s;&|()'"])`)
}()

// nativeBuild says why a package cannot work without building native code
// at install time (nothing when it can): a binding.gyp at its root (npm
// then runs node-gyp itself), "gypfile": true, a node-pre-gyp "binary"
// section, a dependency on a build tool, or an install, preinstall or
// postinstall script that runs one.
func nativeBuild(m map[string]json.RawMessage, files map[string]bool) []string {
	var why []string
	if files["binding.gyp"] {
		why = append(why, "binding.gyp (node-gyp)")
	}
	var gyp bool
	if json.Unmarshal(m["gypfile"], &gyp) == nil && gyp {
		why = append(why, `"gypfile": true`)
	}
	var binary map[string]json.RawMessage
	if json.Unmarshal(m["binary"], &binary) == nil && binary["module_path"] != nil {
		why = append(why, `a node-pre-gyp "binary" section`)
	}
	for _, f := range []string{"dependencies", "optionalDependencies"} {
		var deps map[string]json.RawMessage
		_ = json.Unmarshal(m[f], &deps)
		for _, t := range []string{"node-pre-gyp", "@mapbox/node-pre-gyp", "prebuild-install", "node-gyp", "cmake-js"} {
			if _, ok := deps[t]; ok && f == "dependencies" {
				why = append(why, "depends on "+t)
			}
		}
	}
	var scripts map[string]json.RawMessage
	_ = json.Unmarshal(m["scripts"], &scripts)
	for _, s := range []string{"preinstall", "install", "postinstall"} {
		var cmd string
		if json.Unmarshal(scripts[s], &cmd) != nil {
			continue
		}
		if t := nativeToolRE.FindStringSubmatch(cmd); t != nil {
			why = append(why, fmt.Sprintf("scripts.%s runs %s (%q)", s, t[1], truncate(cmd, 80)))
		}
	}
	return why
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// dependencies returns the "dependencies" a package needs next to it at
// run time (name -> npm range), less those bundled in the tarball. More
// than l.MaxDependencies entries, or a range longer than l.MaxRangeBytes,
// is refused: the installer checks every dependency of a package on each
// install and names each one it misses.
func dependencies(m map[string]json.RawMessage, files map[string]bool, l Limits) (map[string]string, error) {
	raw, ok := m["dependencies"]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	var deps map[string]any
	if err := json.Unmarshal(raw, &deps); err != nil {
		return nil, refusef("package.json: dependencies is not an object")
	}
	if len(deps) > l.MaxDependencies {
		return nil, refusef("package.json: %d dependencies, over the limit of %d (mirror.limits.max_dependencies)", len(deps), l.MaxDependencies)
	}
	out := make(map[string]string, len(deps))
	for _, name := range slices.Sorted(maps.Keys(deps)) {
		r, ok := deps[name].(string)
		if !ok || !ValidName(NPM, name) {
			return nil, refusef("package.json: bad dependency %q", truncate(name, 80))
		}
		if n := len(r); n > l.MaxRangeBytes {
			return nil, refusef("package.json: dependency %q has a range of %d bytes, over the limit of %d (mirror.limits.max_range_bytes)", name, n, l.MaxRangeBytes)
		}
		if files["node_modules/"+name+"/package.json"] {
			continue // bundled
		}
		out[name] = r
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// plainTopFolder reports whether name is a top folder the installer takes
// as it is: letters, digits, '-', '_' and '.', not "." or "..".
func plainTopFolder(name string) bool {
	if name == "" || name == "." || name == ".." || len(name) > 100 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
