package testenv

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"sort"
	"strings"
	"testing"
	"time"
)

// BuildWheel returns the file name and bytes of a valid pure wheel whose
// module NAME (dashes as underscores) has VERSION = version, with a RECORD
// that hashes every file, as pip and the mirror check it.
func BuildWheel(t testing.TB, name, version string) (string, []byte) {
	t.Helper()
	return BuildWheelRequires(t, name, version)
}

// BuildWheelRequires is BuildWheel with one Requires-Dist header per
// requires entry (PEP 508 strings, markers included).
func BuildWheelRequires(t testing.TB, name, version string, requires ...string) (string, []byte) {
	t.Helper()
	var reqs strings.Builder
	for _, r := range requires {
		reqs.WriteString("Requires-Dist: " + r + "\n")
	}
	dist := strings.ReplaceAll(name, "-", "_")
	di := dist + "-" + version + ".dist-info"
	files := map[string]string{
		dist + "/__init__.py": fmt.Sprintf("VERSION = %q\n", version),
		di + "/METADATA":      fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: test\n%s\n", name, version, reqs.String()),
		di + "/WHEEL":         "Wheel-Version: 1.0\nGenerator: sandboxapi-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	sort.Strings(names)
	var rows []string
	for _, n := range names {
		s := sha256.Sum256([]byte(files[n]))
		rows = append(rows, fmt.Sprintf("%s,sha256=%s,%d", n, base64.RawURLEncoding.EncodeToString(s[:]), len(files[n])))
	}
	rows = append(rows, di+"/RECORD,,")
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range names {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Deflate, Modified: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(w, files[n])
	}
	w, err := zw.Create(di + "/RECORD")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(w, strings.Join(rows, "\n")+"\n")
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return dist + "-" + version + "-py3-none-any.whl", buf.Bytes()
}
