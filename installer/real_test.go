package installer

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/configs"
	"github.com/sandboxapi/sandboxapi/egress"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/internal/testenv"
	"github.com/sandboxapi/sandboxapi/mirror"
	"github.com/sandboxapi/sandboxapi/store"
)

// buildTarball returns an npm tarball whose main returns "hello from NAME".
func buildTarball(t testing.TB, name, version string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gw)
	for _, f := range []struct{ name, body string }{
		{"package/package.json", fmt.Sprintf(`{"name":%q,"version":%q,"main":"index.js","scripts":{"postinstall":"touch /home/sandbox/pwned"},"license":"MIT"}`, name, version)},
		{"package/index.js", fmt.Sprintf("module.exports = () => 'hello from %s %s';\n", name, version)},
		{"package/lib/util.js", "module.exports = 1;\n"},
	} {
		tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg, ModTime: time.Now()})
		io.WriteString(tw, f.body)
	}
	tw.Close()
	gw.Close()
	return buf.Bytes()
}

type rig struct {
	ex    *executor.Executor
	mir   *mirror.Mirror
	inst  *Installer
	owner string
}

// newRig starts a real executor, mirror (with the test OSV records) and an
// installer network of its own.
func newRig(t *testing.T) *rig {
	t.Helper()
	bin := testenv.Runsc(t)
	rootfs, versions, err := executor.FindRootfs(os.Getenv("SANDBOXAPI_ROOTFS"), "")
	if err != nil {
		testenv.Skip(t, "%v", err)
	}
	if os.Geteuid() != 0 {
		testenv.Skip(t, "installer test needs root")
	}
	ctx := context.Background()
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	st, err := store.Open(ctx, filepath.Join(dir, "sandboxapi.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	rt, err := executor.LoadRuntimes(configs.Runtimes, versions)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := executor.New(executor.Config{
		Runsc: bin, Platform: "systrap", Rootfs: rootfs, VersionsFile: versions, DataDir: dir,
		GuestBinary: testenv.Guest(t), MaxSandboxes: 8, HomeBytes: 64 << 20, MemoryBytes: 512 << 20,
		Pids: 256, CPUs: 1, TmpBytes: 64 << 20, DefaultTimeout: 20 * time.Second, MaxTimeout: 120 * time.Second,
		CompileTimeout: 60 * time.Second, MaxOutputBytes: 256 << 10, DefaultIdleTTL: 5 * time.Minute, MaxIdleTTL: time.Hour,
		ReapInterval: time.Second,
	}, rt, st, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := ex.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ex.Stop(context.Background()) })
	mcfg := mirror.DefaultConfig()
	mcfg.StoreDir = filepath.Join(dir, "mirror")
	mir, err := mirror.New(ctx, mcfg, st.DB(), log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mir.ImportOSV(ctx, filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "osv")); err != nil {
		t.Fatal(err)
	}
	icfg := DefaultConfig()
	tn := testenv.NewNet(t, 't')
	icfg.Pool, icfg.Table, icfg.Prefix = tn.Pool, tn.Table, tn.Prefix
	ec := egress.DefaultConfig()
	ec.ConnectPort, ec.TransparentPort, ec.DNSPort = icfg.Port, icfg.Port, icfg.Port
	ec.Resolvers = []string{"127.0.0.1"}
	ec.Network.Pool, ec.Network.Table, ec.Network.Prefix = icfg.Pool, icfg.Table, icfg.Prefix
	nw, err := egress.NewNetwork(ec, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := nw.Reconcile(ctx, nil); err != nil {
		testenv.Skip(t, "installer network: %v", err)
	}
	t.Cleanup(func() {
		_ = nw.Reconcile(context.Background(), nil)
	})
	inst := New(icfg, catalog{mir}, ex.Jobs(), netAdapter{nw}, mir.Handler(), log)
	inst.Start(ctx)
	t.Cleanup(func() {
		if err := inst.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return &rig{ex: ex, mir: mir, inst: inst, owner: "key_1"}
}

type netAdapter struct{ n *egress.Network }

func (n netAdapter) Setup(ctx context.Context, id string) (Endpoint, error) {
	a, err := n.n.Setup(ctx, id)
	if err != nil {
		return Endpoint{}, err
	}
	return Endpoint{NetnsPath: a.NetnsPath, HostAddr: a.HostAddr}, nil
}
func (n netAdapter) Teardown(ctx context.Context, id string) error { return n.n.Teardown(ctx, id) }

type catalog struct{ m *mirror.Mirror }

func (c catalog) Lookup(ctx context.Context, m Manager, name, version string) (Artifact, error) {
	a, err := c.m.Lookup(ctx, mirror.Manager(m), name, version)
	out := Artifact{Name: a.Name, Version: a.Version, Filename: a.Filename, SHA256: a.SHA256, Integrity: a.Integrity, Size: a.Size, URLPath: a.URLPath, Status: string(a.Status), Reasons: a.Reasons,
		Stripped: a.Stripped, Dependencies: a.Dependencies}
	switch {
	case err == nil:
		out.Requires, err = c.m.RequiresDist(ctx, a)
		return out, err
	case errors.Is(err, mirror.ErrNotFound):
		return out, fmt.Errorf("%w: %v", ErrNotFound, err)
	case errors.Is(err, mirror.ErrNotAdmitted):
		return out, fmt.Errorf("%w: %v", ErrNotAdmitted, err)
	}
	return out, err
}

func (c catalog) Versions(ctx context.Context, m Manager, name string) ([]string, []string, error) {
	return c.m.Versions(ctx, mirror.Manager(m), name)
}

func (c catalog) Satisfying(ctx context.Context, name, rng string) ([]string, []string, error) {
	admitted, known, err := c.m.Satisfying(ctx, name, rng)
	if errors.Is(err, mirror.ErrRange) {
		return nil, nil, fmt.Errorf("%w: %v", ErrRange, err)
	}
	return admitted, known, err
}

func (r *rig) addWheel(t *testing.T, name, version string) {
	t.Helper()
	fn, b := testenv.BuildWheel(t, name, version)
	if _, err := r.mir.AddWheel(context.Background(), fn, b, "test", nil); err != nil {
		t.Fatalf("admitting %s: %v", fn, err)
	}
}

func (r *rig) session(t *testing.T, lang string) string {
	t.Helper()
	s, err := r.ex.CreateSession(context.Background(), sandbox.SessionSpec{Language: lang, Owner: r.owner})
	if err != nil {
		t.Fatal(err)
	}
	return s.ID
}

func (r *rig) run(t *testing.T, id, code string) sandbox.Result {
	t.Helper()
	res, err := r.ex.Execute(context.Background(), r.owner, id, sandbox.ExecRequest{Code: code})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestRealInstallPipAndNPM(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.addWheel(t, "alpha-pkg", "1.0.0")
	r.addWheel(t, "alpha-pkg", "1.2.0")
	r.addWheel(t, "beta", "0.1")
	if _, err := r.mir.AddNPMTarball(ctx, buildTarball(t, "hello-npm", "1.0.0"), "test", nil); err != nil {
		t.Fatal(err)
	}
	py := r.session(t, "python3")
	reply, err := r.inst.Install(ctx, r.owner, py, sandbox.InstallRequest{Manager: "pip", Packages: []string{"alpha-pkg", "beta==0.1"}}, 0)
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	if reply.Installed[0].Version != "1.2.0" || !reply.Installed[0].Resolved || reply.Installed[1].Resolved || reply.Installed[0].SHA256 == "" {
		t.Fatalf("reply: %+v", reply)
	}
	res := r.run(t, py, "import alpha_pkg, beta; print(alpha_pkg.VERSION, beta.VERSION)")
	if strings.TrimSpace(res.Stdout) != "1.2.0 0.1" {
		t.Fatalf("import after install: %+v", res)
	}
	// A second install adds to the first (and pins an older version).
	if _, err := r.inst.Install(ctx, r.owner, py, sandbox.InstallRequest{Manager: "pip", Packages: []string{"alpha-pkg==1.0.0"}}, 0); err != nil {
		t.Fatal(err)
	}
	res = r.run(t, py, "import alpha_pkg, beta; print(alpha_pkg.VERSION, beta.VERSION)")
	if strings.TrimSpace(res.Stdout) != "1.0.0 0.1" {
		t.Fatalf("after second install: %+v", res)
	}

	js := r.session(t, "javascript")
	if _, err := r.inst.Install(ctx, r.owner, js, sandbox.InstallRequest{Manager: "npm", Packages: []string{"hello-npm@1.0.0"}}, 0); err != nil {
		t.Fatalf("npm install: %v", err)
	}
	res = r.run(t, js, "console.log(require('hello-npm')()); console.log(require('fs').existsSync('/home/sandbox/pwned'))")
	if res.Stdout != "hello from hello-npm 1.0.0\nfalse\n" {
		t.Fatalf("require after install: %+v", res)
	}

	// Another owner's session is not found.
	if _, err := r.inst.Install(ctx, "key_2", py, sandbox.InstallRequest{Manager: "pip", Packages: []string{"beta"}}, 0); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("other owner: %v", err)
	}
}

func TestRealAllOrNothing(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.addWheel(t, "one", "1.0")
	r.addWheel(t, "two", "1.0")
	id := r.session(t, "python3")
	// One of three refused: 422-style rejection, nothing installed.
	_, err := r.inst.Install(ctx, r.owner, id, sandbox.InstallRequest{Manager: "pip", Packages: []string{"one==1.0", "nope==1.0", "two"}}, 0)
	var rej *sandbox.RejectedError
	if !asRejected(err, &rej) || len(rej.Packages) != 1 || rej.Packages[0].Package != "nope==1.0" || rej.Packages[0].Status != "missing" {
		t.Fatalf("want one rejection, got %v %+v", err, rej)
	}
	res := r.run(t, id, "import os; print(os.path.exists('/home/sandbox/.local/python'))")
	if strings.TrimSpace(res.Stdout) != "False" {
		t.Fatalf("something was installed: %+v", res)
	}
	// The installer dies after staging: nothing becomes visible.
	r.inst.dieBeforeCommit = true
	_, err = r.inst.Install(ctx, r.owner, id, sandbox.InstallRequest{Manager: "pip", Packages: []string{"one==1.0", "two==1.0"}}, 0)
	r.inst.dieBeforeCommit = false
	if err == nil {
		t.Fatal("install that died succeeded")
	}
	res = r.run(t, id, "import importlib.util as u; print(u.find_spec('one') is None, u.find_spec('two') is None)")
	if strings.TrimSpace(res.Stdout) != "True True" {
		t.Fatalf("partial install visible: %+v", res)
	}
	// The next install works and cleans the leftovers.
	if _, err := r.inst.Install(ctx, r.owner, id, sandbox.InstallRequest{Manager: "pip", Packages: []string{"one"}}, 0); err != nil {
		t.Fatal(err)
	}
	res = r.run(t, id, "import os, one; print(one.VERSION, sorted(e.split('-')[0] for e in os.listdir('/home/sandbox/.local/.sandboxapi-pkgs')))")
	if strings.TrimSpace(res.Stdout) != "1.0 ['pip']" {
		t.Fatalf("after recovery: %+v", res)
	}
}

func TestRealInstallerReachesOnlyTheMirror(t *testing.T) {
	r := newRig(t)
	res, err := r.inst.ProbeDetail(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("probe: %v", res.Reached)
	if got := res.Reached[res.Mirror]; got != "status 200" {
		t.Fatalf("mirror: %q (all: %v)", got, res.Reached)
	}
	if len(res.Forbidden) < 3 {
		t.Fatalf("too few forbidden targets: %v", res.Forbidden)
	}
	loopback := 0
	for _, f := range res.Forbidden {
		if strings.HasPrefix(f, "127.0.0.1:") || strings.HasPrefix(f, "[::1]:") {
			loopback++
		}
	}
	if loopback != 4 {
		t.Fatalf("loopback targets: %d in %v", loopback, res.Forbidden)
	}
	for _, f := range res.Forbidden {
		if got := res.Reached[f]; got == "open" || strings.HasPrefix(got, "status") || got == "" {
			t.Errorf("%s: %q", f, got)
		}
	}
	if _, err := r.inst.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func asRejected(err error, out **sandbox.RejectedError) bool {
	return errors.As(err, out)
}

func runCmd(name string, args ...string) error { return osexec.Command(name, args...).Run() }

// plantHostile writes, from inside the session, everything a session user
// could leave in the home to take over or redirect the installer's pip: a
// "pip" package in the home folder (python -m pip run there would import
// it), site and user customisation hooks, a .pth file in the user site,
// and pip configuration in every per-user place pointing away from the
// mirror. Each planted program writes a marker file when it runs.
const plantHostile = `import os, site
H = "/home/sandbox"
# Hooks fire only in the installer's processes (install.py, pip): the
# session's own python runs them too, as it should.
hook = ("import os\nif any(w in open('/proc/self/cmdline', 'rb').read() for w in (b'install', b'pip')):\n"
        "    open('/home/sandbox/PWNED-%s', 'w').write('ran')\n")
fake_pip = hook % "pip" + "print('Successfully installed one-1.0'); raise SystemExit(0)\n"
files = {
    H + "/pip/__init__.py": "",
    H + "/pip/__main__.py": fake_pip,
    H + "/sitecustomize.py": hook % "sitecustomize",
    H + "/usercustomize.py": hook % "usercustomize",
    H + "/.local/python/sitecustomize.py": hook % "pythonpath",
    site.getusersitepackages() + "/usercustomize.py": hook % "usersite",
    site.getusersitepackages() + "/evil.pth": "import os; b'pip' in open('/proc/self/cmdline', 'rb').read() and open('/home/sandbox/PWNED-pth', 'w').write('ran')\n",
    H + "/.config/pip/pip.conf": "[global]\nno-index = true\nindex-url = http://127.0.0.1:9/simple\nfind-links = /home/sandbox/wheels\n[install]\nno-deps = false\n",
    H + "/.pip/pip.conf": "[global]\nno-index = true\nindex-url = http://127.0.0.1:9/simple\n",
    H + "/.pydistutils.cfg": "[install]\nprefix = /home/sandbox/evil\n",
    H + "/.profile": "export PIP_NO_INDEX=1 PIP_INDEX_URL=http://127.0.0.1:9/simple PYTHONPATH=/home/sandbox\n",
}
for p, body in files.items():
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, "w").write(body)
print("planted", len(files))
`

// TestRealInstallerIgnoresTheHome: what a session planted in its home
// neither runs inside the installer nor redirects pip; the install still
// comes from the mirror.
func TestRealInstallerIgnoresTheHome(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.addWheel(t, "one", "1.0")
	id := r.session(t, "python3")
	if res := r.run(t, id, plantHostile); !strings.HasPrefix(res.Stdout, "planted") {
		t.Fatalf("planting: %+v", res)
	}
	if _, err := r.inst.Install(ctx, r.owner, id, sandbox.InstallRequest{Manager: "pip", Packages: []string{"one==1.0"}}, 0); err != nil {
		t.Fatalf("install with a hostile home: %v", err)
	}
	// The session's own python still reads its home as usual (-I applies
	// to the installer only); the marker check runs isolated to not fire
	// the hooks itself.
	res := r.run(t, id, `import subprocess, sys
print(subprocess.run([sys.executable, "-I", "-c", "import glob; print(sorted(glob.glob('/home/sandbox/PWNED-*')))"], capture_output=True, text=True, cwd="/tmp").stdout.strip())`)
	if strings.TrimSpace(res.Stdout) != "[]" {
		t.Fatalf("planted code ran in the installer: %+v", res)
	}
	res = r.run(t, id, `import subprocess, sys
print(subprocess.run([sys.executable, "-I", "-c", "import sys; sys.path.insert(0, '/home/sandbox/.local/python'); import one; print(one.VERSION, one.__file__)"], capture_output=True, text=True, cwd="/tmp").stdout.strip())`)
	if !strings.HasPrefix(strings.TrimSpace(res.Stdout), "1.0 /home/sandbox/.local/python/one") {
		t.Fatalf("package not installed from the mirror: %+v", res)
	}
}

// wrongHash is a catalog whose recorded sha256 for one package is wrong.
type wrongHash struct {
	Catalog
	name string
}

func (w wrongHash) Lookup(ctx context.Context, m Manager, name, version string) (Artifact, error) {
	a, err := w.Catalog.Lookup(ctx, m, name, version)
	if err == nil && name == w.name {
		a.SHA256 = strings.Repeat("0", 64)
	}
	return a, err
}

// TestRealWrongRecordedHash: pip checks the served wheel against the hash
// the catalog recorded; a mismatch fails the whole install and leaves
// nothing installed (also not the package whose hash was right).
func TestRealWrongRecordedHash(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.addWheel(t, "one", "1.0")
	r.addWheel(t, "two", "1.0")
	r.inst.catalog = wrongHash{Catalog: r.inst.catalog, name: "two"}
	id := r.session(t, "python3")
	_, err := r.inst.Install(ctx, r.owner, id, sandbox.InstallRequest{Manager: "pip", Packages: []string{"one==1.0", "two==1.0"}}, 0)
	if !errors.Is(err, sandbox.ErrInstallFailed) {
		t.Fatalf("install with a wrong recorded hash: %v", err)
	}
	res := r.run(t, id, "import os, importlib.util as u; print(u.find_spec('one') is None, u.find_spec('two') is None, os.path.exists('/home/sandbox/.local/python'))")
	if strings.TrimSpace(res.Stdout) != "True True False" {
		t.Fatalf("something was installed: %+v", res)
	}
}

// TestRealNPMDependencies: debug@4.3.7 (as published) needs ms@^2.1.3. Alone
// in a fresh session it is refused with what to add, and nothing is
// installed; with ms in the same request, or with ms already in the
// session, it installs and works.
func TestRealNPMDependencies(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	for _, f := range []string{"debug-4.3.7.tgz", "ms-2.1.3.tgz"} {
		b, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(), "mirror", "testdata", "npm", f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.mir.AddNPMTarball(ctx, b, "test", nil); err != nil {
			t.Fatalf("admitting %s: %v", f, err)
		}
	}
	js := r.session(t, "javascript")
	_, err := r.inst.Install(ctx, r.owner, js, sandbox.InstallRequest{Manager: "npm", Packages: []string{"debug@4.3.7"}}, 0)
	var rej *sandbox.RejectedError
	if !errors.As(err, &rej) || len(rej.Packages) != 1 || rej.Packages[0].Status != "missing_dependencies" {
		t.Fatalf("debug alone: %v", err)
	}
	md := rej.Packages[0].MissingDependencies
	if len(md) != 1 || md[0].Name != "ms" || md[0].Range != "^2.1.3" || strings.Join(md[0].MirrorVersions, ",") != "2.1.3" {
		t.Fatalf("missing: %+v", rej.Packages[0])
	}
	if res := r.run(t, js, "console.log(require('fs').existsSync('/home/sandbox/node_modules/debug'))"); res.Stdout != "false\n" {
		t.Fatalf("a refused request installed something: %+v", res)
	}
	reply, err := r.inst.Install(ctx, r.owner, js, sandbox.InstallRequest{Manager: "npm", Packages: []string{"debug@4.3.7", "ms@2.1.3"}}, 0)
	if err != nil {
		t.Fatalf("debug with ms: %v", err)
	}
	if len(reply.Installed[0].Stripped) != 0 || len(reply.Installed[1].Stripped) != 0 {
		t.Errorf("stripped in reply: %+v (the mirror serves both as published)", reply.Installed)
	}
	// The mirror serves debug's package.json as published; extraction
	// into the session removes its dependency fields.
	if res := r.run(t, js, "const p = require('/home/sandbox/node_modules/debug/package.json'); console.log(p.dependencies === undefined, p.name)"); res.Stdout != "true debug\n" {
		t.Errorf("debug's package.json in the session: %+v", res)
	}
	code := "const d = require('debug'); d.enable('t'); d.log = (...a) => console.log(a.join(' ')); d('t')('hi'); console.log(require('ms')('2h'))"
	if res := r.run(t, js, code); !strings.Contains(res.Stdout, "hi") || !strings.Contains(res.Stdout, "7200000") {
		t.Fatalf("debug after install: %+v", res)
	}
	// ms already in the session: debug alone is enough.
	js2 := r.session(t, "javascript")
	if _, err := r.inst.Install(ctx, r.owner, js2, sandbox.InstallRequest{Manager: "npm", Packages: []string{"ms@2.1.3"}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.inst.Install(ctx, r.owner, js2, sandbox.InstallRequest{Manager: "npm", Packages: []string{"debug@4.3.7"}}, 0); err != nil {
		t.Fatalf("debug with ms in the session: %v", err)
	}
	if res := r.run(t, js2, "console.log(typeof require('debug'))"); res.Stdout != "function\n" {
		t.Fatalf("debug in second session: %+v", res)
	}
}

// TestRealPipTrimApplies: the parts of pip's HTTP session that install.py
// skips (pip fetches nothing itself) still exist in the rootfs' pip, so
// the trim is in effect and not silently gone after a pip upgrade.
func TestRealPipTrimApplies(t *testing.T) {
	r := newRig(t)
	driver := "import sys, json\nsys.path.insert(0, sys.argv[1])\nimport install\nprint(json.dumps(install.trim_pip()))\n"
	res, err := r.ex.Jobs().RunJob(context.Background(), sandbox.Job{
		Files:   []sandbox.File{{Path: "install.py", Content: installScript}, {Path: "driver.py", Content: []byte(driver)}},
		Argv:    []string{"/usr/bin/python3", "-I", "-B", "{dir}/driver.py", "{dir}"},
		Env:     []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(res.Stdout); got != `["user_agent", "truststore"]` {
		t.Fatalf("trimmed %q (stderr %s)", got, res.Stderr)
	}
}

// TestRealPipRequirements: a wheel declaring requirements with markers
// (built here) is refused alone with 422 naming the one it needs on the
// session's Python 3.13 on Linux x86_64, and nothing is installed; the
// ones for Windows, old Pythons and an extra are not demanded. With its
// requirement in the request, or already in the session, it installs.
func TestRealPipRequirements(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	for _, w := range []struct {
		name, version string
		requires      []string
	}{
		{"needs-dep", "1.0", []string{"dep-a (>=1.1)", `pywin32-ctypes; sys_platform == "win32"`, `backport-x>=1; python_version < "3.8"`, `docs-tool; extra == "docs"`}},
		{"dep-a", "1.0", nil},
		{"dep-a", "1.2", nil},
	} {
		fn, b := testenv.BuildWheelRequires(t, w.name, w.version, w.requires...)
		if _, err := r.mir.AddWheel(ctx, fn, b, "test", nil); err != nil {
			t.Fatalf("admitting %s: %v", fn, err)
		}
	}
	py := r.session(t, "python3")
	_, err := r.inst.Install(ctx, r.owner, py, sandbox.InstallRequest{Manager: "pip", Packages: []string{"needs-dep==1.0"}}, 0)
	var rej *sandbox.RejectedError
	if !errors.As(err, &rej) || len(rej.Packages) != 1 || rej.Packages[0].Status != "missing_dependencies" {
		t.Fatalf("needs-dep alone: %v", err)
	}
	md := rej.Packages[0].MissingDependencies
	if len(md) != 1 || md[0].Name != "dep-a" || md[0].Range != ">=1.1" || strings.Join(md[0].MirrorVersions, ",") != "1.2" ||
		!strings.Contains(rej.Packages[0].Reason, "dep-a>=1.1 (not in the request nor in the session; the mirror has 1.2)") {
		t.Fatalf("missing: %+v", rej.Packages[0])
	}
	if res := r.run(t, py, "import importlib.util; print(importlib.util.find_spec('needs_dep') is None)"); res.Stdout != "True\n" {
		t.Fatalf("a refused request installed something: %+v", res)
	}
	// The request names a version outside the range: refused before any job.
	if _, err := r.inst.Install(ctx, r.owner, py, sandbox.InstallRequest{Manager: "pip", Packages: []string{"needs-dep==1.0", "dep-a==1.0"}}, 0); !errors.As(err, &rej) ||
		rej.Packages[0].MissingDependencies[0].Requested != "1.0" {
		t.Fatalf("dep-a 1.0: %v", err)
	}
	if _, err := r.inst.Install(ctx, r.owner, py, sandbox.InstallRequest{Manager: "pip", Packages: []string{"needs-dep==1.0", "dep-a==1.2"}}, 0); err != nil {
		t.Fatalf("needs-dep with dep-a: %v", err)
	}
	if res := r.run(t, py, "import needs_dep, dep_a; print(needs_dep.VERSION, dep_a.VERSION)"); res.Stdout != "1.0 1.2\n" {
		t.Fatalf("import after install: %+v", res)
	}
	// dep-a already in the session: needs-dep alone is enough; an older
	// dep-a in the session is named with its version.
	py2 := r.session(t, "python3")
	if _, err := r.inst.Install(ctx, r.owner, py2, sandbox.InstallRequest{Manager: "pip", Packages: []string{"dep-a==1.0"}}, 0); err != nil {
		t.Fatal(err)
	}
	_, err = r.inst.Install(ctx, r.owner, py2, sandbox.InstallRequest{Manager: "pip", Packages: []string{"needs-dep==1.0"}}, 0)
	if !errors.As(err, &rej) || rej.Packages[0].MissingDependencies[0].Installed != "1.0" {
		t.Fatalf("needs-dep over dep-a 1.0: %v", err)
	}
	if _, err := r.inst.Install(ctx, r.owner, py2, sandbox.InstallRequest{Manager: "pip", Packages: []string{"dep-a==1.2"}}, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.inst.Install(ctx, r.owner, py2, sandbox.InstallRequest{Manager: "pip", Packages: []string{"needs-dep==1.0"}}, 0); err != nil {
		t.Fatalf("needs-dep with dep-a in the session: %v", err)
	}
	if res := r.run(t, py2, "import needs_dep, dep_a; print(needs_dep.VERSION, dep_a.VERSION)"); res.Stdout != "1.0 1.2\n" {
		t.Fatalf("second session: %+v", res)
	}

	// A real wheel this machine's Python ships (Debian's setuptools): its
	// Requires-Dist lines (dozens, TestRealWheelRequirements reads them)
	// are all for extras, so nothing is demanded and it installs alone.
	paths, _ := filepath.Glob("/usr/share/python-wheels/setuptools-*-py3-none-any.whl")
	if len(paths) != 1 {
		t.Fatalf("Debian's setuptools wheel (python3-setuptools-whl): %v", paths)
	}
	data, err := os.ReadFile(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	// The OSV snapshot the rig imports has two advisories for it (fixed
	// in 70.0 and 78.1.1), accepted as an operator would.
	st, err := r.mir.AddWheel(ctx, filepath.Base(paths[0]), data, "test", []string{"GHSA-5rjg-fvgr-3xxf", "GHSA-cx63-2mw6-8hw5"})
	if err != nil {
		t.Fatalf("admitting %s: %v", filepath.Base(paths[0]), err)
	}
	if _, err := r.inst.Install(ctx, r.owner, py, sandbox.InstallRequest{Manager: "pip", Packages: []string{"setuptools==" + st.Version}}, 0); err != nil {
		t.Fatalf("setuptools %s alone: %v", st.Version, err)
	}
	if res := r.run(t, py, "import setuptools; print(setuptools.__version__, '/.local/python/' in setuptools.__file__)"); res.Stdout != st.Version+" True\n" {
		t.Fatalf("setuptools in the session: %+v", res)
	}
}
