package app

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/store"
)

// fakeInstaller "installs" what it is told (the real one needs runsc).
type fakeInstaller struct {
	reply sandbox.InstallReply
	err   error
}

func (f fakeInstaller) Install(context.Context, string, string, sandbox.InstallRequest, time.Duration) (sandbox.InstallReply, error) {
	return f.reply, f.err
}

type cdxDoc struct {
	SpecVersion string `json:"specVersion"`
	Components  []struct {
		Name       string                          `json:"name"`
		Version    string                          `json:"version"`
		PURL       string                          `json:"purl"`
		Hashes     []struct{ Alg, Content string } `json:"hashes"`
		Properties []struct{ Name, Value string }  `json:"properties"`
		ExtRefs    []struct{ URL, Type string }    `json:"externalReferences"`
	} `json:"components"`
	Vulnerabilities []struct {
		ID string `json:"id"`
	} `json:"vulnerabilities"`
}

func (d cdxDoc) prop(i int, name string) string {
	for _, p := range d.Components[i].Properties {
		if p.Name == name {
			return p.Value
		}
	}
	return ""
}

// TestSBOMs: a session's SBOM lists what was installed into it with its
// hash, purl, mirror URL and the OSV snapshot it was checked against, and
// validates with the CycloneDX project's own validator (schema 1.6). Real
// SQLite, real mirror, real OSV import. (The catalogue's document, `mirror
// sbom`, is TestCatalogueSBOM in internal/cli.)
func TestSBOMs(t *testing.T) {
	modules := testenv.CycloneDXModules(t)
	ctx := context.Background()
	td := filepath.Join(testenv.ModuleRoot(), "mirror", "testdata")
	dd := t.TempDir()

	// A session's SBOM, from the install records.
	cfg, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = dd
	env := &Env{Config: cfg, Log: slog.New(slog.DiscardHandler)}
	st, err := env.OpenStore(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	mir, err := env.OpenMirror(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	defer mir.Close()
	if _, err := mir.ImportOSV(ctx, filepath.Join(td, "osv")); err != nil {
		t.Fatal(err)
	}
	if _, err := mir.AddFile(ctx, filepath.Join(td, "wheels", "wheel-0.43.0-py3-none-any.whl"), nil); err != nil {
		t.Fatal(err)
	}
	whl, err := mir.Lookup(ctx, mirror.Pip, "wheel", "0.43.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := st.InsertSession(ctx, store.SessionRow{ID: "sess_1", KeyID: "key_1", Language: "python3", State: "running", Network: "{}", CreatedAt: time.Now(), LastUsedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	rec := recordingInstaller{st: st, mir: mir, log: env.Log, next: fakeInstaller{reply: sandbox.InstallReply{Manager: "pip",
		Installed: []sandbox.InstalledPackage{{Name: whl.Name, Version: whl.Version, Filename: whl.Filename, SHA256: whl.SHA256}}}}}
	for range 2 { // installed twice, listed once
		if _, err := rec.Install(ctx, "key_1", "sess_1", sandbox.InstallRequest{Manager: "pip", Packages: []string{"wheel==0.43.0"}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	failing := recordingInstaller{st: st, mir: mir, log: env.Log, next: fakeInstaller{err: sandbox.ErrInstallFailed}}
	if _, err := failing.Install(ctx, "key_1", "sess_1", sandbox.InstallRequest{Manager: "npm", Packages: []string{"is-number@7.0.0"}}, 0); !errors.Is(err, sandbox.ErrInstallFailed) {
		t.Fatalf("failed install: %v", err)
	}
	doc, ct, err := sbomSource{st: st, mir: mir}.SessionSBOM(ctx, "key_1", "sess_1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ct, "application/vnd.cyclonedx+json") {
		t.Fatalf("content type %q", ct)
	}
	var sess cdxDoc
	if err := json.Unmarshal(doc, &sess); err != nil {
		t.Fatal(err)
	}
	if len(sess.Components) != 1 {
		t.Fatalf("session components: %+v", sess.Components)
	}
	c := sess.Components[0]
	if c.PURL != "pkg:pypi/wheel@0.43.0?file_name=wheel-0.43.0-py3-none-any.whl" || len(c.Hashes) == 0 || c.Hashes[0].Content != whl.SHA256 ||
		len(c.ExtRefs) != 1 || c.ExtRefs[0].URL != whl.URLPath {
		t.Fatalf("component %+v", c)
	}
	if got := sess.prop(0, "sandboxapi:osv:snapshot_at_install"); got == "" || got != whl.OSVSnapshot {
		t.Fatalf("snapshot at install %q, artifact's %q", got, whl.OSVSnapshot)
	}
	sessFile := filepath.Join(t.TempDir(), "session.cdx.json")
	if err := os.WriteFile(sessFile, doc, 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.ValidateWithCycloneDX(t, modules, sessFile)
}

// TestSessionSBOMShowsMirrorURLs: a client's session SBOM names where the
// mirror serves each package, never the host path it was added from nor
// the operator's upstream URL. Real SQLite, real mirror.
func TestSessionSBOMShowsMirrorURLs(t *testing.T) {
	ctx := context.Background()
	td := filepath.Join(testenv.ModuleRoot(), "mirror", "testdata")
	st, mir := openStoreMirror(t)
	if _, err := mir.ImportOSV(ctx, filepath.Join(td, "osv")); err != nil {
		t.Fatal(err)
	}
	whl, err := mir.AddFile(ctx, filepath.Join(td, "wheels", "wheel-0.43.0-py3-none-any.whl"), nil)
	if err != nil {
		t.Fatal(err)
	}
	tgz, err := mir.AddFile(ctx, filepath.Join(td, "npm", "is-number-7.0.0.tgz"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(whl.Source, "file:/") {
		t.Fatalf("operator's source %q: want the file it was added from", whl.Source)
	}
	if err := st.InsertSession(ctx, store.SessionRow{ID: "sess_1", KeyID: "key_1", Language: "python3", State: "running", Network: "{}", CreatedAt: time.Now(), LastUsedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []mirror.Artifact{whl, tgz} {
		rec := recordingInstaller{st: st, mir: mir, log: slog.New(slog.DiscardHandler), next: fakeInstaller{reply: sandbox.InstallReply{Manager: string(a.Manager),
			Installed: []sandbox.InstalledPackage{{Name: a.Name, Version: a.Version, Filename: a.Filename, SHA256: a.SHA256}}}}}
		if _, err := rec.Install(ctx, "key_1", "sess_1", sandbox.InstallRequest{Manager: string(a.Manager), Packages: []string{a.Name}}, 0); err != nil {
			t.Fatal(err)
		}
	}
	doc, _, err := sbomSource{st: st, mir: mir}.SessionSBOM(ctx, "key_1", "sess_1")
	if err != nil {
		t.Fatal(err)
	}
	var sess cdxDoc
	if err := json.Unmarshal(doc, &sess); err != nil {
		t.Fatal(err)
	}
	if len(sess.Components) != 2 {
		t.Fatalf("components %+v", sess.Components)
	}
	for i, c := range sess.Components {
		want := whl.URLPath
		if c.Name == tgz.Name {
			want = tgz.URLPath
		}
		if got := sess.prop(i, "sandboxapi:mirror:source"); got != want {
			t.Errorf("%s: source %q, want the mirror's %q", c.Name, got, want)
		}
	}
	if strings.Contains(string(doc), "file:") || strings.Contains(string(doc), td) {
		t.Errorf("a host path in a client's SBOM:\n%s", doc)
	}
}

// TestInstallsObserved: every install through the decorator is counted
// with its manager and outcome (sandboxapi_installs_total).
func TestInstallsObserved(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{nil, "ok"},
		{&sandbox.RejectedError{Packages: []sandbox.PackageRejection{{Package: "x", Status: "missing"}}}, "rejected"},
		{sandbox.ErrInvalid, "rejected"},
		{sandbox.ErrInstallFailed, "failed"},
		{context.DeadlineExceeded, "error"},
	}
	for _, tt := range tests {
		var got []string
		rec := recordingInstaller{log: slog.New(slog.DiscardHandler), next: fakeInstaller{err: tt.err},
			observe: func(manager, outcome string, d time.Duration) { got = append(got, manager+"/"+outcome) }}
		if tt.err == nil {
			// A successful install with nothing to record needs no store.
			rec.next = fakeInstaller{reply: sandbox.InstallReply{Manager: "npm"}}
			rec.st, rec.mir = openStoreMirror(t)
		}
		_, _ = rec.Install(context.Background(), "k", "s", sandbox.InstallRequest{Manager: "npm", Packages: []string{"ms@2.1.3"}}, 0)
		if len(got) != 1 || got[0] != "npm/"+tt.want {
			t.Errorf("%v: observed %v, want npm/%s", tt.err, got, tt.want)
		}
	}
}

func openStoreMirror(t *testing.T) (*store.Store, *mirror.Mirror) {
	t.Helper()
	cfg, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.DataDir = t.TempDir()
	env := &Env{Config: cfg, Log: slog.New(slog.DiscardHandler)}
	st, err := env.OpenStore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	mir, err := env.OpenMirror(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mir.Close() })
	return st, mir
}
