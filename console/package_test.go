package console

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/store"
)

// seedArtifact is one mirror_artifacts row as package mirror writes it.
type seedArtifact struct {
	manager, name, version, status      string
	reasons, advisories, stripped, deps string
}

func seedCatalogue(t *testing.T, st *store.Store, at time.Time, arts ...seedArtifact) {
	t.Helper()
	tx, err := st.DB().BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for i, a := range arts {
		key := strings.ToLower(a.name)
		if a.manager == "pip" {
			key = strings.ToLower(pep503Sep.ReplaceAllString(a.name, "-"))
		}
		for p, d := range map[*string]string{&a.reasons: "[]", &a.advisories: "[]", &a.stripped: "[]", &a.deps: "{}"} {
			if *p == "" {
				*p = d
			}
		}
		if _, err := tx.ExecContext(t.Context(), `INSERT INTO mirror_artifacts(manager,name_key,name,version,filename,sha256,status,reasons,advisories,stripped,dependencies,created_at,updated_at)
			VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)`, a.manager, key, a.name, a.version, a.name+"-"+a.version+".tgz", fmt.Sprintf("%064d", i), a.status,
			a.reasons, a.advisories, a.stripped, a.deps, at.UnixMilli(), at.Add(time.Duration(i)*time.Millisecond).UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func storeConsole(st *store.Store) *Console {
	return New(Deps{Admins: fakeAdmins{}, Readiness: fakeReadiness{}, Catalogue: fakeCatalogue{}, Sessions: NewStoreSessions(st, nil), Usage: fakeUsage{},
		Packages: NewStorePackages(st), Now: func() time.Time { return now }}, nil)
}

// TestConsolePackagePage reads a seeded package from a real SQLite
// store: its entries with status and reason, its advisories, the npm
// packages that depend on it and the sessions that installed it, with
// hostile text from the store escaped.
func TestConsolePackagePage(t *testing.T) {
	t.Parallel()
	st, at := storeWithKey(t, "PRO")
	seedCatalogue(t, st, at,
		seedArtifact{manager: "npm", name: "left-pad", version: "1.0.0", status: "admitted", stripped: `["scripts.postinstall"]`},
		seedArtifact{manager: "npm", name: "left-pad", version: "1.1.0", status: "refused", advisories: `["GHSA-aaaa-bbbb-cccc"]`,
			reasons: `["GHSA-aaaa-bbbb-cccc: <script>alert(1)</script>"]`},
		seedArtifact{manager: "npm", name: "uses-pad", version: "2.0.0", status: "admitted", deps: `{"left-pad":"^1.0.0"}`},
		seedArtifact{manager: "npm", name: "<img src=x>", version: "0.0.1", status: "refused", deps: `{"Left-Pad":"*"}`},
		seedArtifact{manager: "npm", name: "near-miss", version: "1.0.0", status: "admitted", deps: `{"left-pad-extra":"1","x":"left-pad"}`},
		seedArtifact{manager: "pip", name: "Six", version: "1.16.0", status: "admitted"},
	)
	if err := st.InsertInstalls(t.Context(), []store.InstallRow{
		{SessionID: "sess_one", KeyID: "key_a", Manager: "npm", Name: "left-pad", Version: "1.0.0", Filename: "left-pad-1.0.0.tgz", SHA256: "aa", InstalledAt: at},
		{SessionID: "sess_two", KeyID: "key_a", Manager: "npm", Name: "uses-pad", Version: "2.0.0", Filename: "uses-pad-2.0.0.tgz", SHA256: "bb", InstalledAt: at},
	}); err != nil {
		t.Fatal(err)
	}
	c := storeConsole(st)
	resp, body := get(t, c, "/console/mirror/npm/Left-Pad", "sk_admin")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %.300s", resp.StatusCode, body)
	}
	for _, w := range []string{">1.0.0<", ">1.1.0<", `class="refused">refused<`, `class="admitted">admitted<`, "stripped: scripts.postinstall",
		"&lt;script&gt;alert(1)&lt;/script&gt;", `id="advisories" class="mono"><a href="https://osv.dev/vulnerability/GHSA-aaaa-bbbb-cccc"`,
		`href="/console/mirror/npm/uses-pad">uses-pad</a>`, "&lt;img src=x&gt;", `href="/console/sessions/sess_one"`, "(2)"} {
		if !strings.Contains(body, w) {
			t.Errorf("missing %q", w)
		}
	}
	for _, n := range []string{"<script>alert", "<img src=x>", "near-miss", "sess_two"} {
		if strings.Contains(body, n) {
			t.Errorf("unexpected %q", n)
		}
	}
	if _, body := get(t, c, "/console/mirror/pip/six", "sk_admin"); !strings.Contains(body, ">1.16.0<") || !strings.Contains(body, "no session installed it") {
		t.Errorf("pip six (catalogued as Six): %.500s", body)
	}
	for _, tc := range []struct {
		name, path string
		status     int
	}{
		{"unknown", "/console/mirror/npm/no-such-package", http.StatusNotFound},
		{"unknown pip", "/console/mirror/pip/left-pad", http.StatusNotFound},
		{"dot dot", "/console/mirror/pip/../x", http.StatusBadRequest},
		{"dot dot encoded", "/console/mirror/npm/..%2Fx", http.StatusBadRequest},
		{"NUL", "/console/mirror/npm/left%00pad", http.StatusBadRequest},
		{"markup", "/console/mirror/npm/%3Cscript%3Ealert(1)%3C%2Fscript%3E", http.StatusBadRequest},
		{"300 bytes", "/console/mirror/npm/" + strings.Repeat("a", 300), http.StatusBadRequest},
		{"empty", "/console/mirror/npm/", http.StatusBadRequest},
		{"no name", "/console/mirror/npm", http.StatusBadRequest},
		{"unknown manager", "/console/mirror/cargo/serde", http.StatusBadRequest},
		{"space", "/console/mirror/pip/six%20x", http.StatusBadRequest},
		{"two scopes", "/console/mirror/npm/@a/@b/c", http.StatusBadRequest},
		{"bad page", "/console/mirror/npm/left-pad?page=0", http.StatusBadRequest},
	} {
		resp, body := get(t, c, tc.path, "sk_admin")
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %s: %d, want %d", tc.name, tc.path, resp.StatusCode, tc.status)
		}
		if strings.Contains(body, "<script>") {
			t.Errorf("%s: the page echoes markup", tc.name)
		}
	}
	for key, status := range map[string]int{"": 401, "sk_nope": 401, "sk_client": 403} {
		resp, body := get(t, c, "/console/mirror/npm/left-pad", key)
		if resp.StatusCode != status || strings.Contains(body, "GHSA-aaaa") || strings.Contains(body, "sess_one") {
			t.Errorf("key %q: %d, want %d without the package", key, resp.StatusCode, status)
		}
	}
}

// TestConsolePackageBounded: a package with 10,000 catalogue entries
// installed by 120 sessions makes one small page of entries with a link
// to the next, and lists the 50 latest sessions.
func TestConsolePackageBounded(t *testing.T) {
	t.Parallel()
	st, at := storeWithKey(t, "PRO")
	const versions, sessions = 10000, 120
	arts := make([]seedArtifact, versions)
	for i := range arts {
		arts[i] = seedArtifact{manager: "npm", name: "@big/pkg", version: fmt.Sprintf("1.0.%d", i), status: "admitted",
			advisories: fmt.Sprintf(`["GHSA-%04d"]`, i), reasons: `["` + strings.Repeat("r", 200) + `"]`}
	}
	seedCatalogue(t, st, at, arts...)
	var installs []store.InstallRow
	for i := range sessions {
		installs = append(installs, store.InstallRow{SessionID: fmt.Sprintf("sess_%04d", i), KeyID: "key_a", Manager: "npm", Name: "@big/pkg",
			Version: "1.0.0", Filename: "pkg.tgz", SHA256: "aa", InstalledAt: at.Add(time.Duration(i) * time.Second)})
	}
	if err := st.InsertInstalls(t.Context(), installs); err != nil {
		t.Fatal(err)
	}
	c := storeConsole(st)
	resp, body := get(t, c, "/console/mirror/npm/@big/pkg", "sk_admin")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %.300s", resp.StatusCode, body)
	}
	if len(body) > 256<<10 {
		t.Fatalf("a %d-byte page", len(body))
	}
	if n := strings.Count(body, `<tr class="version">`); n != versionsPerPage {
		t.Errorf("%d entries, want %d", n, versionsPerPage)
	}
	if n := strings.Count(body, `<tr class="install">`); n != maxPackageList {
		t.Errorf("%d sessions, want %d", n, maxPackageList)
	}
	if !strings.Contains(body, `href="/console/sessions/sess_0119"`) || strings.Contains(body, `href="/console/sessions/sess_0069"`) {
		t.Errorf("the sessions listed are not the latest")
	}
	if !strings.Contains(body, "(10000)") || !strings.Contains(body, `rel="next" href="/console/mirror/npm/@big/pkg?page=2"`) {
		t.Errorf("no count or next link")
	}
	if n := strings.Count(body, `id="advisories"`); n != 1 || !strings.Contains(body, "and more</span>") {
		t.Errorf("advisories not cut")
	}
	_, last := get(t, c, "/console/mirror/npm/@big/pkg?page=100", "sk_admin")
	if n := strings.Count(last, `<tr class="version">`); n != versionsPerPage || strings.Contains(last, `rel="next"`) {
		t.Errorf("last page: %d entries, next link %v", n, strings.Contains(last, `rel="next"`))
	}
}
