package mirror

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/csv"
	"errors"
	"io"
	"path"
	"strconv"
	"strings"

	"github.com/google/osv-scalibr/semantic"
)

// Wheel is an inspected wheel that passed every admission check except the
// OSV gate.
type Wheel struct {
	File           WheelName
	Filename       string
	Name           string // as in METADATA
	Version        string // as in METADATA
	RequiresPython string
	Metadata       []byte // the .dist-info/METADATA file, served per PEP 658
}

// InspectWheel checks a wheel: the file name parses, the archive is safe
// (see readZip), there is exactly one .dist-info folder whose METADATA
// names the same project and version as the file name, a WHEEL file exists,
// and RECORD lists every file with a sha256 hash and size that match.
// Archive and consistency problems are returned as refusal reasons
// (IsArchiveProblem); an sdist is recognised and refused with its own reason.
func InspectWheel(filename string, data []byte, l Limits) (*Wheel, error) {
	if IsSdistFilename(filename) {
		return nil, refusef("%s is a source distribution: only wheels are admitted", filename)
	}
	wn, err := ParseWheelFilename(filename)
	if err != nil {
		return nil, refusef("%v", err)
	}
	if looksLikeTarball(data) {
		return nil, refusef("%s is a gzip/tar file, not a wheel (an sdist renamed to .whl?)", filename)
	}
	files, err := readZip(data, l, keepWheelFile)
	if err != nil {
		return nil, err
	}
	byName := make(map[string]zipFile, len(files))
	distInfos := map[string]bool{}
	for _, f := range files {
		byName[f.Name] = f
		top, _, _ := strings.Cut(f.Name, "/")
		if strings.HasSuffix(top, ".dist-info") {
			distInfos[top] = true
		}
	}
	if len(distInfos) != 1 {
		_, pkgInfo := byName["PKG-INFO"]
		_, setupPy := byName["setup.py"]
		if pkgInfo || setupPy {
			return nil, refusef("%s is a source distribution renamed to .whl", filename)
		}
		return nil, refusef("%s: want exactly one .dist-info folder, found %d", filename, len(distInfos))
	}
	var di string
	for k := range distInfos {
		di = k
	}
	mf, ok := byName[di+"/METADATA"]
	meta := mf.Data
	if !ok {
		return nil, refusef("%s: %s/METADATA missing", filename, di)
	}
	if _, ok := byName[di+"/WHEEL"]; !ok {
		return nil, refusef("%s: %s/WHEEL missing", filename, di)
	}
	hdr := parseMetadata(meta)
	w := &Wheel{File: wn, Filename: filename, Name: hdr["name"], Version: hdr["version"], RequiresPython: hdr["requires-python"], Metadata: meta}
	if w.Name == "" || w.Version == "" {
		return nil, refusef("%s: METADATA lacks Name or Version", filename)
	}
	if NormalizePyPI(w.Name) != NormalizePyPI(wn.Name) {
		return nil, refusef("%s: METADATA name %q does not match the file name", filename, w.Name)
	}
	if !sameVersion(w.Version, wn.Version) {
		return nil, refusef("%s: METADATA version %q does not match the file name", filename, w.Version)
	}
	// The .dist-info folder name must agree too (name_version.dist-info).
	dn, dv, _ := strings.Cut(strings.TrimSuffix(di, ".dist-info"), "-")
	if NormalizePyPI(dn) != NormalizePyPI(wn.Name) || !sameVersion(dv, wn.Version) {
		return nil, refusef("%s: folder %s does not match the file name", filename, di)
	}
	rec, ok := byName[di+"/RECORD"]
	if !ok {
		return nil, refusef("%s: %s/RECORD missing", filename, di)
	}
	if err := checkRecord(di, rec.Data, byName); err != nil {
		return nil, err
	}
	return w, nil
}

// keepWheelFile reports whether readZip must keep an entry's bytes: the
// METADATA, WHEEL and RECORD files of a top-level .dist-info folder.
func keepWheelFile(name string) bool {
	top, base, ok := strings.Cut(name, "/")
	if !ok || !strings.HasSuffix(top, ".dist-info") {
		return false
	}
	return base == "METADATA" || base == "WHEEL" || base == "RECORD"
}

func looksLikeTarball(b []byte) bool {
	return len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b ||
		len(b) > 262 && string(b[257:262]) == "ustar"
}

func sameVersion(a, b string) bool {
	if a == b {
		return true
	}
	va, err := semantic.ParsePyPIVersion(a)
	if err != nil {
		return false
	}
	c, err := va.CompareStr(b)
	return err == nil && c == 0
}

// parseMetadata reads the RFC 822 style header block of METADATA; keys are
// lower-cased, the first value wins.
func parseMetadata(b []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k = strings.ToLower(strings.TrimSpace(k))
		if _, dup := out[k]; !dup {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// checkRecord verifies RECORD: every file in the archive other than RECORD
// (and its signatures) is listed exactly once with a matching sha256 and
// size, and every listed file exists.
func checkRecord(di string, rec []byte, files map[string]zipFile) error {
	r := csv.NewReader(bytes.NewReader(rec))
	r.FieldsPerRecord = -1
	listed := map[string]bool{}
	for {
		row, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return refusef("%s/RECORD: %v", di, err)
		}
		if len(row) == 0 || (len(row) == 1 && row[0] == "") {
			continue
		}
		if len(row) != 3 {
			return refusef("%s/RECORD: row %q: want path,hash,size", di, strings.Join(row, ","))
		}
		p := row[0]
		if err := CheckEntryName(p); err != nil {
			return refusef("%s/RECORD: %v", di, err)
		}
		if path.Clean(p) != strings.TrimSuffix(p, "/") {
			return refusef("%s/RECORD: path %q is not clean", di, p)
		}
		if listed[p] {
			return refusef("%s/RECORD: %q listed twice", di, p)
		}
		listed[p] = true
		f, ok := files[p]
		if !ok {
			return refusef("%s/RECORD: lists %q, which is not in the wheel", di, p)
		}
		if p == di+"/RECORD" || p == di+"/RECORD.jws" || p == di+"/RECORD.p7s" {
			continue
		}
		algo, digest, _ := strings.Cut(row[1], "=")
		if algo != "sha256" {
			return refusef("%s/RECORD: %q has no sha256 hash", di, p)
		}
		if base64.RawURLEncoding.EncodeToString(f.SHA256[:]) != strings.TrimRight(digest, "=") {
			return refusef("%s/RECORD: sha256 of %q does not match", di, p)
		}
		if row[2] != "" {
			n, err := strconv.ParseInt(row[2], 10, 64)
			if err != nil || n != f.Size {
				return refusef("%s/RECORD: size of %q does not match", di, p)
			}
		}
	}
	for p := range files {
		if !listed[p] && p != di+"/RECORD.jws" && p != di+"/RECORD.p7s" {
			return refusef("%s/RECORD: %q is in the wheel but not listed", di, p)
		}
	}
	return nil
}
