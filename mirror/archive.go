package mirror

import (
	"archive/zip"
	"bytes"
	"io"
	"io/fs"
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

// zipFile is one checked zip entry with its content read.
type zipFile struct {
	Name string
	Data []byte
	Mode fs.FileMode
}

// readZip opens data as a zip archive and reads every regular entry, under
// the limits. It refuses links and other special files, unsafe names,
// duplicate names, encrypted entries, and archives that exceed the entry
// count, the uncompressed total or the compression ratio.
func readZip(data []byte, l Limits) ([]zipFile, error) {
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
	var declared uint64
	for _, f := range zr.File {
		declared += f.UncompressedSize64
	}
	if declared > uint64(l.MaxUncompressedBytes) {
		return nil, refusef("archive unpacks to %d bytes, over the %d byte limit", declared, l.MaxUncompressedBytes)
	}
	seen := make(map[string]bool, len(zr.File))
	out := make([]zipFile, 0, len(zr.File))
	var total int64
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
		if f.FileInfo().IsDir() {
			continue
		}
		if f.UncompressedSize64 > 1<<20 && float64(f.UncompressedSize64) > l.MaxRatio*float64(f.CompressedSize64+1) {
			return nil, refusef("entry %q: compression ratio over %.0f (zip bomb?)", f.Name, l.MaxRatio)
		}
		rc, err := f.Open()
		if err != nil {
			return nil, refusef("entry %q: %v", f.Name, err)
		}
		// Read at most the declared size plus one byte: declared sizes can
		// lie, the bytes cannot, and the declared sizes are already bounded.
		b, err := io.ReadAll(io.LimitReader(rc, int64(min(f.UncompressedSize64, uint64(l.MaxUncompressedBytes)))+1))
		rc.Close()
		if err != nil {
			return nil, refusef("entry %q: %v", f.Name, err)
		}
		total += int64(len(b))
		if total > l.MaxUncompressedBytes {
			return nil, refusef("archive unpacks to more than %d bytes", l.MaxUncompressedBytes)
		}
		if uint64(len(b)) != f.UncompressedSize64 {
			return nil, refusef("entry %q: size %d differs from the declared %d", f.Name, len(b), f.UncompressedSize64)
		}
		out = append(out, zipFile{Name: f.Name, Data: b, Mode: f.Mode()})
	}
	if total > 1<<20 && float64(total) > l.MaxRatio*float64(len(data)) {
		return nil, refusef("archive compression ratio over %.0f (zip bomb?)", l.MaxRatio)
	}
	return out, nil
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
