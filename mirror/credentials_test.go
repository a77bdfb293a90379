package mirror

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The credential planted in the configured index URLs.
const (
	idxUser = "idxuserQ7"
	idxPass = "idxpassK3"
)

// systemWheel returns a real wheel shipped with the machine's Python
// (Debian's python3-setuptools-whl), its file name and bytes.
func systemWheel(t *testing.T) (string, []byte) {
	t.Helper()
	paths, _ := filepath.Glob("/usr/share/python-wheels/setuptools-*-py3-none-any.whl")
	if len(paths) == 0 {
		t.Skip("no wheel in /usr/share/python-wheels (Debian's python3-setuptools-whl)")
	}
	b, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Base(paths[0]), b
}

// authIndex is a PEP 691 index and npm registry on loopback that answers
// only requests carrying idxUser:idxPass (as a company proxy would) and
// lists files by relative URL, as many indexes do.
func authIndex(t *testing.T, wheelName string, wheel []byte, tgzName string, tgz []byte) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	project := strings.SplitN(wheelName, "-", 2)[0]
	mux.HandleFunc("/simple/"+NormalizePyPI(project)+"/", func(w http.ResponseWriter, r *http.Request) {
		s := sha256.Sum256(wheel)
		w.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
		json.NewEncoder(w).Encode(map[string]any{"meta": map[string]string{"api-version": "1.0"}, "name": project,
			"files": []map[string]any{{"filename": wheelName, "url": "../../files/" + wheelName + "#sha256=" + hex.EncodeToString(s[:]),
				"hashes": map[string]string{"sha256": hex.EncodeToString(s[:])}}}})
	})
	mux.HandleFunc("/files/", func(w http.ResponseWriter, r *http.Request) { w.Write(wheel) })
	// An npm packument whose tarball URL carries the credential too (some
	// private registries echo it), and whose bytes do not match.
	mux.HandleFunc("/npm/is-number", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"name": "is-number", "versions": map[string]any{"7.0.0": map[string]any{
			"dist": map[string]string{"tarball": "http://" + idxUser + ":" + idxPass + "@" + r.Host + "/npm/is-number/-/" + tgzName + "?token=" + idxPass,
				"integrity": "sha512-" + strings.Repeat("A", 86) + "=="}}}})
	})
	mux.HandleFunc("/npm/is-number/-/", func(w http.ResponseWriter, r *http.Request) { w.Write(tgz) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != idxUser || p != idxPass {
			w.Header().Set("WWW-Authenticate", `Basic realm="index"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func credURL(srv *httptest.Server, path string) string {
	return strings.Replace(srv.URL, "http://", "http://"+idxUser+":"+idxPass+"@", 1) + path
}

func assertNoCredential(t *testing.T, where, s string) {
	t.Helper()
	if strings.Contains(s, idxPass) || strings.Contains(s, idxUser) {
		t.Errorf("%s shows the index credential:\n%s", where, s)
	}
}

// TestIndexCredentialNotStored: a wheel fetched through a pip index URL
// with userinfo (a real wheel, from an index on loopback that demands the
// credential and lists relative file URLs) is stored, listed and logged
// without it; so are the errors of a failed add (unreachable index,
// missing project, npm tarball that does not match) and rows written by
// older code (scrubbed when the mirror opens, redacted when read).
func TestIndexCredentialNotStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	var logs bytes.Buffer
	m.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	wname, wheel := systemWheel(t)
	tgz, _, _ := recordedIsNumber(t)
	up := authIndex(t, wname, wheel, "is-number-7.0.0.tgz", tgz)
	m.cfg.PipIndexURL = credURL(up, "/simple/")
	m.cfg.NPMRegistryURL = credURL(up, "/npm")

	w, err := ParseWheelFilename(wname)
	if err != nil {
		t.Fatal(err)
	}
	// The test OSV records know two advisories for this setuptools; an
	// operator accepts them, as "mirror add --accept" would.
	as, err := m.AddPip(ctx, Spec{Manager: Pip, Name: w.Name, Version: w.Version}, []string{"GHSA-5rjg-fvgr-3xxf", "GHSA-cx63-2mw6-8hw5"})
	if err != nil || len(as) != 1 {
		t.Fatalf("AddPip %s through the authenticated index: %+v, %v", wname, as, err)
	}
	if want := up.URL + "/files/" + wname; as[0].Source != want {
		t.Errorf("returned source %q, want %q", as[0].Source, want)
	}
	list, err := m.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(list)
	assertNoCredential(t, "List", string(js))
	var raw string
	if err := m.db.QueryRowContext(ctx, `SELECT source FROM mirror_artifacts WHERE filename=?`, wname).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	assertNoCredential(t, "the stored source column", raw)
	if raw != up.URL+"/files/"+wname {
		t.Errorf("stored source %q", raw)
	}

	// Failures name the index without its credential.
	_, err = m.AddNPM(ctx, Spec{Manager: NPM, Name: "is-number", Version: "7.0.0"}, nil)
	if !errors.Is(err, ErrUpstream) {
		t.Fatalf("mismatching tarball: %v", err)
	}
	assertNoCredential(t, "npm mismatch error", err.Error())
	_, err = m.AddPip(ctx, Spec{Manager: Pip, Name: "absent", Version: "1.0"}, nil)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing project: %v", err)
	}
	assertNoCredential(t, "missing project error", err.Error())
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	m.cfg.PipIndexURL = credURL(closed, "/simple/?token="+idxPass)
	_, err = m.AddPip(ctx, Spec{Manager: Pip, Name: w.Name, Version: w.Version}, nil)
	if !errors.Is(err, ErrUpstream) {
		t.Fatalf("unreachable index: %v", err)
	}
	assertNoCredential(t, "unreachable index error", err.Error())
	audit, err := m.Audit(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	ajs, _ := json.Marshal(audit)
	assertNoCredential(t, "audit", string(ajs))
	assertNoCredential(t, "logs", logs.String())

	// A row an older version wrote with the credential: redacted when
	// read, and rewritten when the mirror opens.
	leaked := credURL(up, "/files/"+wname+"?token="+idxPass)
	if _, err := m.db.ExecContext(ctx, `UPDATE mirror_artifacts SET source=? WHERE filename=?`, leaked, wname); err != nil {
		t.Fatal(err)
	}
	a, err := m.Lookup(ctx, Pip, w.Name, w.Version)
	if err != nil {
		t.Fatal(err)
	}
	assertNoCredential(t, "an old row read back", a.Source)
	if _, err := New(ctx, m.cfg, m.db, nil); err != nil {
		t.Fatal(err)
	}
	if err := m.db.QueryRowContext(ctx, `SELECT source FROM mirror_artifacts WHERE filename=?`, wname).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if raw != up.URL+"/files/"+wname {
		t.Errorf("an old row after reopening: source %q", raw)
	}
}

func TestConfigValidateHidesCredential(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	c.PipIndexURL = "ftp://" + idxUser + ":" + idxPass + "@h/simple/"
	c.NPMRegistryURL = "http://" + idxUser + ":" + idxPass + "@h:bad/"
	c.ServeURL = "http://" + idxUser + ":" + idxPass + "@h/x?token=" + idxPass
	err := c.Validate()
	if err == nil {
		t.Fatal("bad URLs validated")
	}
	assertNoCredential(t, "Validate", err.Error())
}
