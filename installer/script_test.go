package installer

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// hostPython returns the host's python3 for running install.py's functions
// outside a sandbox, and a folder holding install.py.
func hostPython(t testing.TB) (py, dir string) {
	t.Helper()
	py = "/usr/bin/python3" // the rootfs' kind of python; pyenv shims are slow
	if _, err := os.Stat(py); err != nil {
		if py, err = exec.LookPath("python3"); err != nil {
			testenv.Skip(t, "no python3 on the host")
		}
	}
	dir = t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "install.py"), installScript, 0o644); err != nil {
		t.Fatal(err)
	}
	return py, dir
}

// runScript runs code with install.py importable as "install" and returns
// its stdout.
func runScript(t *testing.T, py, dir, code string, env []string, args ...string) (string, error) {
	t.Helper()
	prelude := "import sys; sys.path.insert(0, " + pyStr(dir) + "); import install\n"
	cmd := exec.Command(py, append([]string{"-I", "-B", "-c", prelude + code}, args...)...)
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Logf("stderr: %s", stderr.String())
	}
	return string(out), err
}

func pyStr(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestPipArgv pins the exact pip command line: wheels only, no
// dependencies, no index (only the files fetched from the mirror), the
// recorded hashes required, pip's isolated mode; pip's environment; and
// the requirements, each name pinned to its fetched file and hash.
func TestPipArgv(t *testing.T) {
	t.Parallel()
	py, dir := hostPython(t)
	job := map[string]any{
		"manager": "pip", "base_url": "http://10.201.0.1:3141",
		"packages": []map[string]any{
			{"name": "alpha-pkg", "version": "1.2.0", "filename": "alpha_pkg-1.2.0-py3-none-any.whl", "sha256": hash, "size": 10, "url_path": "/mirror/pypi/files/x/alpha_pkg-1.2.0-py3-none-any.whl"},
			{"name": "beta", "version": "0.1", "filename": "beta-0.1-py3-none-any.whl", "sha256": strings.Repeat("b", 64), "size": 10, "url_path": "/mirror/pypi/files/y/beta-0.1-py3-none-any.whl"},
		},
	}
	jb, _ := json.Marshal(job)
	out, err := runScript(t, py, dir, `import json
job = json.loads(sys.argv[1])
print(json.dumps({"argv": install.pip_argv("/st", "/w/req.txt"), "env": install.pip_env("/w"),
                  "req": install.requirements(job, "/w/wheels")}))`, nil, string(jb))
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Argv []string          `json:"argv"`
		Env  map[string]string `json:"env"`
		Req  string            `json:"req"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := []string{"install", "--isolated", "--no-input", "--no-index",
		"--only-binary=:all:", "--no-deps", "--no-build-isolation", "--require-hashes",
		"--no-cache-dir", "--no-compile", "--progress-bar", "off", "--disable-pip-version-check",
		"--target", "/st", "-r", "/w/req.txt"}
	if strings.Join(got.Argv, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("pip argv\n got %q\nwant %q", got.Argv, want)
	}
	for _, a := range got.Argv {
		for _, bad := range []string{"--index-url", "-i", "--extra-index-url", "--find-links", "-f", "--pre", "--user", "--no-binary", "--src", "-e", "--editable", "-c", "--constraint"} {
			if a == bad || strings.HasPrefix(a, bad+"=") {
				t.Errorf("pip argv holds %s", a)
			}
		}
	}
	wantEnv := map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/w", "LANG": "C.UTF-8", "TMPDIR": "/w",
		"PIP_CONFIG_FILE": os.DevNull, "PIP_NO_INPUT": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
	if len(got.Env) != len(wantEnv) {
		t.Errorf("pip env %v, want %v", got.Env, wantEnv)
	}
	for k, v := range wantEnv {
		if got.Env[k] != v {
			t.Errorf("pip env %s = %q, want %q", k, got.Env[k], v)
		}
	}
	wantReq := "alpha-pkg @ file:///w/wheels/alpha_pkg-1.2.0-py3-none-any.whl --hash=sha256:" + hash + "\n" +
		"beta @ file:///w/wheels/beta-0.1-py3-none-any.whl --hash=sha256:" + strings.Repeat("b", 64) + "\n"
	if got.Req != wantReq {
		t.Errorf("requirements\n got %q\nwant %q", got.Req, wantReq)
	}
}

// TestRequirementsRefuseHostileRecords: a package record that could add a
// line or an option to pip's requirements file, or put a wheel outside
// the installer's folder, stops the install.
func TestRequirementsRefuseHostileRecords(t *testing.T) {
	t.Parallel()
	py, dir := hostPython(t)
	good := map[string]any{"name": "ok", "filename": "ok-1.0-py3-none-any.whl", "sha256": hash}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for a, b := range good {
			m[a] = b
		}
		m[k] = v
		return m
	}
	cases := []struct {
		name string
		pkg  map[string]any
	}{
		{"option in the name", with("name", "ok --index-url http://evil/")},
		{"new line in the name", with("name", "ok\n--find-links /home/sandbox")},
		{"marker in the name", with("name", "ok; python_version>'0'")},
		{"url in the name", with("name", "ok@http://evil/x.whl")},
		{"option in the hash", with("sha256", hash+" --no-deps")},
		{"short hash", with("sha256", "abc")},
		{"upper-case hash", with("sha256", strings.ToUpper(hash))},
		{"file name with a folder", with("filename", "../ok-1.0-py3-none-any.whl")},
		{"file name with a slash", with("filename", "x/ok-1.0-py3-none-any.whl")},
		{"hidden file name", with("filename", ".ok-1.0-py3-none-any.whl")},
		{"file name with a space", with("filename", "ok-1.0 -r x.whl")},
		{"file name with a new line", with("filename", "ok-1.0\n-r x.whl")},
		{"not a wheel", with("filename", "ok-1.0.tar.gz")},
		{"no file name", with("filename", "")},
	}
	for _, tc := range cases {
		jb, _ := json.Marshal(map[string]any{"packages": []map[string]any{good, tc.pkg}})
		out, err := runScript(t, py, dir, `import json
try:
    print(install.requirements(json.loads(sys.argv[1]), "/w/wheels"))
except install.Failure as e:
    print("refused:", e)`, nil, string(jb))
		if err != nil || !strings.HasPrefix(out, "refused:") {
			t.Errorf("%s: err %v, out %q", tc.name, err, out)
		}
	}
}

// TestCheckIsolated: the installer refuses to run when the home could be
// imported from (not started with -I, or a home path on sys.path).
func TestCheckIsolated(t *testing.T) {
	t.Parallel()
	py, dir := hostPython(t)
	cases := []struct {
		name string
		code string
		ok   bool
	}{
		{"isolated", `install.check_isolated(); print("ok")`, true},
		{"home on path", `sys.path.append("/home/sandbox"); install.check_isolated()`, false},
		{"home subfolder on path", `sys.path.append("/home/sandbox/.local/python"); install.check_isolated()`, false},
		{"dotdot into home", `sys.path.append("/tmp/../home/sandbox/x"); install.check_isolated()`, false},
		{"similar prefix", `sys.path.append("/home/sandboxer"); install.check_isolated(); print("ok")`, true},
	}
	for _, tc := range cases {
		out, err := runScript(t, py, dir, tc.code, nil)
		if (err == nil) != tc.ok || tc.ok && strings.TrimSpace(out) != "ok" {
			t.Errorf("%s: err %v out %q", tc.name, err, out)
		}
	}
	// Without -I, or without -B, it refuses too.
	for _, flags := range [][]string{{"-B"}, {"-I"}, nil} {
		cmd := exec.Command(py, append(flags, "-c", "import sys; sys.path.insert(0, "+pyStr(dir)+"); import install; install.check_isolated()")...)
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "python3 -I -B") {
			t.Errorf("flags %q: err %v: %s", flags, err, out)
		}
	}
}

// TestCommitDeathKeepsUserFolder: the installer dies after moving a
// user-made node_modules aside and before the new link takes its place;
// the next run puts the user's folder back (it used to delete it), and a
// completed install keeps the user's files in the new generation.
func TestCommitDeathKeepsUserFolder(t *testing.T) {
	t.Parallel()
	py, dir := hostPython(t)
	home := t.TempDir()
	setup := `home = sys.argv[1]
install.HOME = home
install.STORE = home + "/.local/.sandboxapi-pkgs"
install.LIVE = {"pip": home + "/.local/python", "npm": home + "/node_modules"}
os = install.os
os.makedirs(install.STORE, exist_ok=True)
`
	live := filepath.Join(home, "node_modules")
	if err := os.MkdirAll(filepath.Join(live, "mine"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(live, "mine", "index.js"), []byte("user's own"), 0o644); err != nil {
		t.Fatal(err)
	}
	commit := setup + `stage = install.new_dir("stage-")
os.makedirs(stage + "/newpkg")
open(stage + "/newpkg/index.js", "w").write("new")
install.commit({"manager": "npm", "packages": [{"name": "newpkg"}]}, stage, ["newpkg"])
print("committed")`
	out, err := runScript(t, py, dir, commit, []string{"SANDBOXAPI_INSTALL_DIE_AFTER_MOVE_ASIDE=1"}, home)
	if err == nil || strings.Contains(out, "committed") {
		t.Fatalf("the commit did not die: %v %q", err, out)
	}
	if _, err := os.Lstat(live); !os.IsNotExist(err) {
		t.Fatalf("live folder still there after dying in the window: %v", err)
	}
	aside, _ := filepath.Glob(filepath.Join(home, ".local", ".sandboxapi-pkgs", "old-npm-*"))
	if len(aside) != 1 {
		t.Fatalf("moved-aside folder: %v", aside)
	}

	// The next run's cleanup restores it.
	if _, err := runScript(t, py, dir, setup+"install.clean_leftovers()", nil, home); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(live, "mine", "index.js")); err != nil || string(b) != "user's own" {
		t.Fatalf("user's folder not restored: %q %v", b, err)
	}
	if fi, _ := os.Lstat(live); fi == nil || !fi.IsDir() {
		t.Fatalf("live is not the user's folder again: %v", fi)
	}
	if links, _ := filepath.Glob(filepath.Join(home, ".link-*")); len(links) != 0 {
		t.Fatalf("stale commit links left: %v", links)
	}

	// A commit that completes: the user's files are in the new generation
	// and nothing is left aside.
	out, err = runScript(t, py, dir, commit+"\ninstall.clean_leftovers()", nil, home)
	if err != nil || !strings.Contains(out, "committed") {
		t.Fatalf("commit: %v %q", err, out)
	}
	for f, want := range map[string]string{"mine/index.js": "user's own", "newpkg/index.js": "new"} {
		if b, err := os.ReadFile(filepath.Join(live, f)); err != nil || string(b) != want {
			t.Errorf("%s after commit: %q %v", f, b, err)
		}
	}
	if fi, _ := os.Lstat(live); fi == nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("live is not the generation link: %v", fi)
	}
	left, _ := filepath.Glob(filepath.Join(home, ".local", ".sandboxapi-pkgs", "*"))
	if len(left) != 1 || !strings.Contains(filepath.Base(left[0]), "npm-") {
		t.Fatalf("store after a completed commit: %v", left)
	}

	// A moved-aside folder whose place something else took is kept.
	if err := os.Remove(live); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(live, 0o755)
	kept := filepath.Join(home, ".local", ".sandboxapi-pkgs", "old-npm-0000")
	os.MkdirAll(filepath.Join(kept, "x"), 0o755)
	if _, err := runScript(t, py, dir, setup+"install.clean_leftovers()", nil, home); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(kept, "x")); err != nil {
		t.Fatalf("a user's moved-aside folder was deleted: %v", err)
	}
}
