package mirror

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"crypto/sha256"
	"io"
	"io/fs"
	"math"
	"strings"
	"unicode/utf8"
)

// CheckEntryName refuses archive entry names that could escape the
// extraction folder or confuse tools: empty names, absolute paths (also
// Windows drive and UNC forms), backslashes, ".." segments, NUL and other
// control characters, and invalid UTF-8.
func CheckEntryName(name string) error {
	switch {
	case name == "":
		return refusef("empty entry name")
	case len(name) > 1024:
		return refusef("entry name longer than 1024 bytes")
	case !utf8.ValidString(name):
		return refusef("entry %q: name is not UTF-8", name)
	case strings.HasPrefix(name, "/"):
		return refusef("entry %q: absolute path", name)
	case strings.Contains(name, `\`):
		return refusef("entry %q: backslash in path", name)
	case len(name) >= 2 && name[1] == ':':
		return refusef("entry %q: drive-letter path", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return refusef("entry %q: control character in name", name)
		}
	}
	for _, seg := range strings.Split(strings.TrimSuffix(name, "/"), "/") {
		if seg == ".." {
			return refusef("entry %q: path escapes with ..", name)
		}
	}
	return nil
}

// zipFile is one checked regular zip entry. Data holds the content only
// for entries readZip was asked to keep; every entry has its size and
// sha256, computed while streaming.
type zipFile struct {
	Name   string
	Size   int64
	SHA256 [sha256.Size]byte
	Data   []byte
	Mode   fs.FileMode
}

// maxKeptBytes bounds one entry whose content readZip keeps in memory
// (wheel METADATA, WHEEL, RECORD).
const maxKeptBytes = 16 << 20

// readZip opens data as a zip archive and checks every entry under the
// limits, streaming each regular file through sha256 and keeping the bytes
// only of entries for which keep reports true. It refuses links and other
// special files, unsafe names, duplicate names, encrypted entries, folder
// entries with content or file entries with folder attributes (pip decides
// by the trailing '/' alone), and archives that exceed the entry count, the
// uncompressed total or the compression ratio. Sizes are counted as the
// bytes come out of the decompressor, not taken from the headers, so a
// bomb is refused after at most its allowed size has been read.
func readZip(data []byte, l Limits, keep func(name string) bool) ([]zipFile, error) {
	if int64(len(data)) > l.MaxArtifactBytes {
		return nil, refusef("archive is %d bytes, over the %d byte limit", len(data), l.MaxArtifactBytes)
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, refusef("not a zip archive: %v", err)
	}
	if len(zr.File) > l.MaxEntries {
		return nil, refusef("archive has %d entries, over the %d limit", len(zr.File), l.MaxEntries)
	}
	// Declared sizes first, overflow-safe: a cheap early refusal.
	var declared uint64
	limit := uint64(max(l.MaxUncompressedBytes, 0))
	for _, f := range zr.File {
		if f.UncompressedSize64 > limit-declared {
			return nil, refusef("archive unpacks to more than %d bytes, over the %d byte limit", l.MaxUncompressedBytes, l.MaxUncompressedBytes)
		}
		declared += f.UncompressedSize64
	}
	// The whole archive may unpack to at most budget bytes: the size limit,
	// and the ratio limit once past 1 MiB.
	budget := min(l.MaxUncompressedBytes, max(1<<20, ratioCap(l.MaxRatio, int64(len(data)))))
	seen := make(map[string]bool, len(zr.File))
	out := make([]zipFile, 0, len(zr.File))
	var total int64
	buf := make([]byte, 32<<10)
	for _, f := range zr.File {
		if err := CheckEntryName(f.Name); err != nil {
			return nil, err
		}
		if err := checkZipMode(f); err != nil {
			return nil, err
		}
		if f.Flags&0x1 != 0 {
			return nil, refusef("entry %q: encrypted", f.Name)
		}
		key := strings.TrimSuffix(f.Name, "/")
		if seen[key] {
			return nil, refusef("entry %q: duplicate name", f.Name)
		}
		seen[key] = true
		folder := strings.HasSuffix(f.Name, "/")
		if !folder && f.Mode().IsDir() {
			return nil, refusef("entry %q: folder attributes on a file entry (its name lacks the trailing /)", f.Name)
		}
		if folder {
			if err := checkEmptyFolder(f); err != nil {
				return nil, err
			}
			continue
		}
		csize := min(f.CompressedSize64, uint64(len(data)))
		if f.UncompressedSize64 > 1<<20 && float64(f.UncompressedSize64) > l.MaxRatio*float64(csize+1) {
			return nil, refusef("entry %q: compression ratio over %.0f (zip bomb?)", f.Name, l.MaxRatio)
		}
		// An entry may yield at most: its declared size (the bytes must
		// agree), what is left of the budget, and its own ratio cap.
		entryCap := max(1<<20, ratioCap(l.MaxRatio, int64(csize)+1))
		want := int64(min(f.UncompressedSize64, uint64(budget-total), uint64(entryCap)))
		rc, err := f.Open()
		if err != nil {
			return nil, refusef("entry %q: %v", f.Name, err)
		}
		h := sha256.New()
		var w io.Writer = h
		var kept *bytes.Buffer
		if keep != nil && keep(f.Name) {
			if want > maxKeptBytes {
				rc.Close()
				return nil, refusef("entry %q: over %d bytes", f.Name, maxKeptBytes)
			}
			kept = bytes.NewBuffer(make([]byte, 0, want))
			w = io.MultiWriter(h, kept)
		}
		n, err := io.CopyBuffer(w, io.LimitReader(rc, want+1), buf)
		rc.Close()
		if err != nil {
			return nil, refusef("entry %q: %v", f.Name, err)
		}
		total += n
		switch {
		case n <= want && uint64(n) == f.UncompressedSize64:
		case total > l.MaxUncompressedBytes:
			return nil, refusef("archive unpacks to more than %d bytes", l.MaxUncompressedBytes)
		case total > budget:
			return nil, refusef("archive compression ratio over %.0f (zip bomb?)", l.MaxRatio)
		case n > entryCap:
			return nil, refusef("entry %q: compression ratio over %.0f (zip bomb?)", f.Name, l.MaxRatio)
		default:
			return nil, refusef("entry %q: size differs from the declared %d", f.Name, f.UncompressedSize64)
		}
		zf := zipFile{Name: f.Name, Size: n, Mode: f.Mode()}
		h.Sum(zf.SHA256[:0])
		if kept != nil {
			zf.Data = kept.Bytes()
		}
		out = append(out, zf)
	}
	return out, nil
}

// checkEmptyFolder refuses a folder entry (name ending in '/') that holds
// data. pip skips such entries, but nothing may hide in an archive.
func checkEmptyFolder(f *zip.File) error {
	holding := refusef("entry %q: a folder entry holding data", f.Name)
	switch {
	case f.UncompressedSize64 != 0:
		return holding
	case f.CompressedSize64 == 0:
		return nil
	case f.Method != zip.Deflate || f.CompressedSize64 > 64:
		return holding
	}
	// Some writers deflate even an empty folder entry (a two-byte
	// stream); archive/zip will not open a folder with data, so the raw
	// stream is inflated here and must yield nothing.
	raw, err := f.OpenRaw()
	if err != nil {
		return refusef("entry %q: %v", f.Name, err)
	}
	fr := flate.NewReader(raw)
	defer fr.Close()
	n, err := io.Copy(io.Discard, io.LimitReader(fr, 1))
	if err != nil || n > 0 {
		return holding
	}
	return nil
}

// ratioCap is ratio*n as an int64, saturating instead of overflowing.
func ratioCap(ratio float64, n int64) int64 {
	c := ratio * float64(n)
	if c >= math.MaxInt64/2 {
		return math.MaxInt64 / 2
	}
	return int64(c)
}

// checkZipMode refuses symlinks and special files, read from the Unix mode
// in the external attributes (archive/zip decodes them into Mode()).
func checkZipMode(f *zip.File) error {
	m := f.Mode()
	const unixLink = 0o120000
	if m&fs.ModeSymlink != 0 || (f.ExternalAttrs>>16)&0o170000 == unixLink {
		return refusef("entry %q: symbolic link", f.Name)
	}
	if m&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket|fs.ModeIrregular) != 0 {
		return refusef("entry %q: special file (%v)", f.Name, m.Type())
	}
	return nil
}
