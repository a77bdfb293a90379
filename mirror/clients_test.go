package mirror

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// needTool returns the path of a client binary; tests skip without it
// unless SANDBOXAPI_REQUIRE_CLIENTS=1 (CI), where they fail.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("SANDBOXAPI_REQUIRE_CLIENTS") == "1" {
			t.Fatalf("%s not found: %v", name, err)
		}
		t.Skipf("%s not found", name)
	}
	return p
}

// clientEnv keeps real clients away from user config and proxies.
func clientEnv(home string) []string {
	env := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "PIP_CONFIG_FILE=/dev/null", "PIP_NO_INPUT=1",
		"NO_PROXY=*", "npm_config_update_notifier=false", "npm_config_userconfig=" + filepath.Join(home, ".npmrc")}
	for _, k := range []string{"PYENV_ROOT", "PYENV_VERSION", "LANG"} {
		if v := os.Getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

func run(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestRealPipAgainstMirror installs with the pip in PATH and, when the
// machine has it, Debian's own (pip 23.0.1, which reads a JSON index's
// metadata field as a string only).
func TestRealPipAgainstMirror(t *testing.T) {
	t.Parallel()
	t.Run("path", func(t *testing.T) { testRealPip(t, needTool(t, "python3")) })
	t.Run("debian", func(t *testing.T) {
		const py = "/usr/bin/python3"
		if out, err := exec.Command(py, "-m", "pip", "--version").CombinedOutput(); err != nil {
			t.Skipf("no pip for %s: %s", py, out)
		}
		testRealPip(t, py)
	})
}

func testRealPip(t *testing.T, py string) {
	t.Parallel()
	ctx := context.Background()
	m := newTestMirror(t, true)
	for _, f := range []string{"testdata/wheels/wheel-0.43.0-py3-none-any.whl", "testdata/wheels/example-21.12-py3-none-any.whl"} {
		if _, err := m.AddFile(ctx, f, nil); err != nil {
			t.Fatalf("admitting %s: %v", f, err)
		}
	}
	fn, data := buildWheel(t, wheelSpec{name: "hello-mirror", version: "1.0.0", files: map[string]string{"hello_mirror/__init__.py": "GREETING = 'hi'\n"}})
	if _, err := m.AddWheel(ctx, fn, data, "test", nil); err != nil {
		t.Fatal(err)
	}
	// A refused real wheel (pip 24.2 is affected by GHSA-4xh5-x5gv-qwph),
	// when the machine has it; a built lookalike otherwise.
	refused := "urllib3==1.26.0"
	if p, _ := filepath.Glob("/root/.pyenv/versions/3.13.0/lib/python3.13/ensurepip/_bundled/pip-24.2-py3-none-any.whl"); len(p) == 1 {
		if _, err := m.AddFile(ctx, p[0], nil); err == nil {
			t.Fatal("pip 24.2 admitted")
		}
		refused = "pip==24.2"
	} else {
		fn, data := buildWheel(t, wheelSpec{name: "urllib3", version: "1.26.0"})
		if _, err := m.AddWheel(ctx, fn, data, "test", nil); err == nil {
			t.Fatal("urllib3 1.26.0 admitted")
		}
	}
	srv := serveMirror(t, m)
	home := t.TempDir()
	target := filepath.Join(home, "site")
	base := []string{"-m", "pip", "install", "--index-url", srv.URL + "/mirror/pypi/simple", "--only-binary=:all:", "--no-deps",
		"--no-cache-dir", "--disable-pip-version-check", "--target", target}
	out, err := run(t, home, clientEnv(home), py, append(base, "wheel==0.43.0", "example==21.12", "Hello_Mirror==1.0.0")...)
	if err != nil {
		t.Fatalf("pip install from mirror: %v\n%s", err, out)
	}
	for _, p := range []string{"wheel/__init__.py", "hello_mirror/__init__.py", "wheel-0.43.0.dist-info/RECORD"} {
		if _, err := os.Stat(filepath.Join(target, p)); err != nil {
			t.Errorf("pip did not install %s: %v\n%s", p, err, out)
		}
	}
	out, err = run(t, home, clientEnv(home), py, append(base, refused)...)
	if err == nil || !strings.Contains(out, "No matching distribution") {
		t.Errorf("pip installed refused %s: %v\n%s", refused, err, out)
	}
}

func TestRealNPMAgainstMirror(t *testing.T) {
	t.Parallel()
	npm := needTool(t, "npm")
	node := needTool(t, "node")
	ctx := context.Background()
	m := newTestMirror(t, true)
	data, err := os.ReadFile("testdata/npm/is-number-7.0.0.tgz")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddNPMTarball(ctx, data, "testdata", nil); err != nil {
		t.Fatal(err)
	}
	hello := buildTarball(t, []tarEntry{
		{name: "package/package.json", body: `{"name": "@acme/hello", "version": "1.0.0", "main": "index.js", "scripts": {"test": "node test.js"}, "devDependencies": {"mocha": "*"}}`},
		{name: "package/index.js", body: "module.exports = function hello() { return 'hello from @acme/hello'; };\n"},
	})
	if _, err := m.AddNPMTarball(ctx, hello, "test", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := m.AddNPMTarball(ctx, npmFixture(t, "axios", "1.5.0"), "test", nil); err == nil {
		t.Fatal("axios 1.5.0 admitted")
	}
	srv := serveMirror(t, m)
	home := t.TempDir()
	proj := filepath.Join(home, "proj")
	os.MkdirAll(proj, 0o755)
	os.WriteFile(filepath.Join(proj, "package.json"), []byte(`{"name":"proj","version":"1.0.0","private":true}`), 0o644)
	base := []string{"install", "--registry", srv.URL + "/mirror/npm/", "--cache", filepath.Join(home, "cache"),
		"--no-audit", "--no-fund", "--prefer-online"}
	out, err := run(t, proj, clientEnv(home), npm, append(base, "is-number@7.0.0", "@acme/hello@1.0.0")...)
	if err != nil {
		t.Fatalf("npm install from mirror: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(proj, "node_modules", "@acme", "hello", "package.json"))
	if err != nil {
		t.Fatalf("not installed: %v\n%s", err, out)
	}
	var man map[string]any
	json.Unmarshal(b, &man)
	if s, _ := man["scripts"].(map[string]any); s["test"] != "node test.js" {
		t.Errorf("installed manifest is not the published one: %s", b)
	}
	got, err := run(t, proj, clientEnv(home), node, "-e", "console.log(require('is-number')(5), require('@acme/hello')())")
	if err != nil || strings.TrimSpace(got) != "true hello from @acme/hello" {
		t.Errorf("node require = %q, %v", got, err)
	}
	out, err = run(t, proj, clientEnv(home), npm, append(base, "axios@1.5.0")...)
	if err == nil {
		t.Errorf("npm installed refused axios@1.5.0:\n%s", out)
	}
}

// publicTree serves, on a loopback registry, the packages of
// testdata/npm/tree: debug@4.3.7 with ms@2.1.3, and @types/debug@4.1.12
// with @types/ms@2.1.0, each tarball as registry.npmjs.org published it.
// tree/package-lock.json was made by the real npm against
// registry.npmjs.org (`npm install --package-lock-only debug@4.3.7
// @types/debug@4.1.12`).
func publicTree(t *testing.T) *npmRegistry {
	t.Helper()
	reg := newNPMRegistry(t)
	reg.addRecorded(t, "debug", "4.3.7")
	reg.addRecorded(t, "ms", "2.1.3")
	for name, file := range map[string]string{"@types/debug@4.1.12": "types-debug-4.1.12.tgz", "@types/ms@2.1.0": "types-ms-2.1.0.tgz"} {
		b, err := os.ReadFile(filepath.Join("testdata", "npm", "tree", file))
		if err != nil {
			t.Fatal(err)
		}
		n, v, _ := strings.Cut(name[1:], "@")
		reg.add("@"+n, v, regVersion{tarball: b, time: "2024-02-23T22:24:36.921Z"})
	}
	return reg
}

// TestRealNPMClientsPublicTree: a tree admitted through the mirror's own
// lockfile path (`mirror add --lockfile`) serves real npm clients as the
// public registry would: `npm ci` with the public lockfile passes (every
// integrity is the registry's), and `npm install debug` without a
// lockfile brings ms along from the packument's dependencies.
func TestRealNPMClientsPublicTree(t *testing.T) {
	t.Parallel()
	npm := needTool(t, "npm")
	node := needTool(t, "node")
	ctx := context.Background()
	reg := publicTree(t)
	m := newTestMirror(t, true)
	m.cfg.NPMRegistryURL = reg.URL
	lock, err := os.ReadFile("testdata/npm/tree/package-lock.json")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := LockfileJobs(lock, "https://registry.npmjs.org")
	if err != nil || len(jobs) != 4 {
		t.Fatalf("lockfile jobs %v, %v", jobs, err)
	}
	for _, row := range m.AddAll(ctx, jobs, nil) {
		if row.Outcome != OutcomeAdmitted {
			t.Fatalf("%s@%s: %s %s", row.Name, row.Version, row.Outcome, row.Detail)
		}
	}
	srv := serveMirror(t, m)
	registry := srv.URL + "/mirror/npm/"
	home := t.TempDir()
	env := clientEnv(home)

	ci := filepath.Join(home, "ci")
	os.MkdirAll(ci, 0o755)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, _ := os.ReadFile(filepath.Join("testdata", "npm", "tree", f))
		os.WriteFile(filepath.Join(ci, f), b, 0o644)
	}
	out, err := run(t, ci, env, npm, "ci", "--registry", registry, "--cache", filepath.Join(home, "cache-ci"), "--no-audit", "--no-fund")
	if err != nil {
		t.Fatalf("npm ci with the public lockfile: %v\n%s", err, out)
	}
	for _, p := range []string{"debug", "ms", "@types/debug", "@types/ms"} {
		if _, err := os.Stat(filepath.Join(ci, "node_modules", p, "package.json")); err != nil {
			t.Errorf("npm ci did not install %s: %v", p, err)
		}
	}
	got, err := run(t, ci, env, node, "-e", "const d = require('debug'); console.log(typeof d, require('ms')('1h'))")
	if err != nil || strings.TrimSpace(got) != "function 3600000" {
		t.Errorf("after npm ci: %q, %v", got, err)
	}

	plain := filepath.Join(home, "plain")
	os.MkdirAll(plain, 0o755)
	os.WriteFile(filepath.Join(plain, "package.json"), []byte(`{"name":"plain","version":"1.0.0","private":true}`), 0o644)
	out, err = run(t, plain, env, npm, "install", "debug", "@types/debug", "--registry", registry, "--cache", filepath.Join(home, "cache-plain"), "--no-audit", "--no-fund")
	if err != nil {
		t.Fatalf("npm install debug from the mirror: %v\n%s", err, out)
	}
	for _, p := range []string{"ms", "@types/ms"} {
		b, err := os.ReadFile(filepath.Join(plain, "node_modules", p, "package.json"))
		if err != nil {
			t.Errorf("npm install debug left %s out: %v\n%s", p, err, out)
			continue
		}
		// The installed copy is the published one, byte for byte.
		if !strings.Contains(string(b), `"name": "`+p+`"`) && !strings.Contains(string(b), `"name":"`+p+`"`) {
			t.Errorf("%s: %s", p, b)
		}
	}
}
