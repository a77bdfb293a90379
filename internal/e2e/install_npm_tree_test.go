package e2e

import (
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/testenv"
)

// expressLockfile is the package-lock.json (v3) that
// `npm install --package-lock-only --ignore-scripts express@4.21.2` wrote
// against the public registry: 72 packages, with encodeurl 2.0.3 and ms
// 2.0.0 at the top and send's own encodeurl 1.0.4 and ms 2.1.3 nested
// under it.
func expressLockfile(t testing.TB) (path string, raw []byte, specs []string) {
	t.Helper()
	path = filepath.Join(testenv.ModuleRoot(), "internal", "e2e", "testdata", "express", "package-lock.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var lf struct {
		Packages map[string]struct {
			Version string `json:"version"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(raw, &lf); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, k := range slices.Sorted(maps.Keys(lf.Packages)) {
		if k == "" {
			continue
		}
		spec := k[strings.LastIndex(k, "node_modules/")+len("node_modules/"):] + "@" + lf.Packages[k].Version
		if !seen[spec] {
			seen[spec] = true
			specs = append(specs, spec)
		}
	}
	return path, raw, specs
}

// layoutJS prints node_modules under root as {path: "name@version"}, from
// each package's package.json, nested folders and scopes included.
const layoutJS = `
const fs = require('fs'), path = require('path'), out = {};
function walk(dir, rel) {
  let es; try { es = fs.readdirSync(dir) } catch { return }
  for (const e of es) {
    if (e.startsWith('.')) continue;
    if (e.startsWith('@')) { for (const f of fs.readdirSync(path.join(dir, e))) pkg(path.join(dir, e, f), rel + e + '/' + f); continue }
    pkg(path.join(dir, e), rel + e);
  }
}
function pkg(d, rel) {
  try { const j = JSON.parse(fs.readFileSync(path.join(d, 'package.json'))); out['node_modules/' + rel] = j.name + '@' + j.version } catch {}
  walk(path.join(d, 'node_modules'), rel + '/node_modules/');
}
walk(path.join(root, 'node_modules'), '');
console.log(JSON.stringify(out));
`

// filesJS prints every file under root's node_modules as {path: sha256
// prefix}, npm's own bookkeeping left out (.bin folders, the hidden
// lockfile). A package's own package.json is hashed in a canonical form
// (keys sorted) without the fields the installer strips (dependency
// fields, lifecycle scripts), so a host's and a session's copy compare
// equal when only those differ; a session's copy that still holds one is
// reported under "<path> (stripped fields left)".
const filesJS = `
const fs = require('fs'), path = require('path'), crypto = require('crypto'), out = {};
const LIFE = ['preinstall', 'install', 'postinstall', 'preuninstall', 'uninstall', 'postuninstall'];
const STRIP = ['dependencies', 'optionalDependencies', 'peerDependencies', 'peerDependenciesMeta',
  'bundleDependencies', 'bundledDependencies', 'gypfile', '_hasShrinkwrap', 'hasInstallScript'];
function canon(v) {
  if (Array.isArray(v)) return '[' + v.map(canon).join(',') + ']';
  if (v && typeof v === 'object') return '{' + Object.keys(v).sort().map(k => JSON.stringify(k) + ':' + canon(v[k])).join(',') + '}';
  return JSON.stringify(v);
}
function strip(m) {
  let n = 0;
  for (const f of STRIP) if (f in m) { delete m[f]; n++ }
  if ('scripts' in m) {
    if (!m.scripts || typeof m.scripts !== 'object' || Array.isArray(m.scripts)) { delete m.scripts; n++ }
    else { for (const s of LIFE) if (s in m.scripts) { delete m.scripts[s]; n++ } if (!Object.keys(m.scripts).length) delete m.scripts }
  }
  return n;
}
function walk(dir, rel) {
  for (const e of fs.readdirSync(dir, {withFileTypes: true})) {
    const r = rel + e.name, p = path.join(dir, e.name);
    if (/(^|\/)node_modules\/(\.bin|\.package-lock\.json)$/.test(r)) continue;
    if (e.isDirectory()) { walk(p, r + '/'); continue }
    if (!e.isFile()) { out[r] = 'not a regular file'; continue }
    let data = fs.readFileSync(p);
    if (/(^|\/)node_modules\/(@[^/]+\/)?[^/@][^/]*\/package\.json$/.test(r)) {
      try { const m = JSON.parse(data); if (strip(m) > 0) out[r + ' (stripped fields left)'] = 'yes'; data = canon(m) } catch (e) { out[r + ' (not JSON)'] = String(e) }
    }
    out[r] = crypto.createHash('sha256').update(data).digest('hex').slice(0, 16);
  }
}
walk(path.join(root, 'node_modules'), 'node_modules/');
console.log(JSON.stringify(out));
`

// expressJS serves one request with express inside the sandbox and
// fetches it from the same program.
const expressJS = `
const express = require('express'), http = require('http');
const app = express();
app.get('/hi', (req, res) => res.send('hello from express ' + require('express/package.json').version));
const srv = app.listen(0, '127.0.0.1', () => {
  http.get('http://127.0.0.1:' + srv.address().port + '/hi', res => {
    let b = ''; res.on('data', c => b += c);
    res.on('end', () => { console.log(res.statusCode + ' ' + b); srv.close() });
  });
});
`

// hostLayout runs npm ci --ignore-scripts of the lockfile in a temp
// folder on the host and returns its layout and its files (filesJS).
func hostLayout(t *testing.T, lockPath string) (layout, files map[string]string) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(lockPath), f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--prefer-offline")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("host npm ci: %v\n%s", err, out)
	}
	out, err := exec.Command("node", "-e", "const root = "+jsString(dir)+";"+layoutJS).Output()
	if err != nil {
		t.Fatalf("host layout: %v", err)
	}
	if err := json.Unmarshal(out, &layout); err != nil {
		t.Fatalf("host layout %s: %v", out, err)
	}
	out, err = exec.Command("node", "-e", "const root = "+jsString(dir)+";"+filesJS).Output()
	if err != nil {
		t.Fatalf("host files: %v", err)
	}
	if err := json.Unmarshal(out, &files); err != nil {
		t.Fatalf("host files %.1000s: %v", out, err)
	}
	return layout, files
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// sessionLayout is the layout of the session's /home/sandbox/node_modules.
func (s *server) sessionLayout(key, id string) map[string]string {
	s.t.Helper()
	res := s.exec(key, id, "const root = '/home/sandbox';"+layoutJS)
	var m map[string]string
	if err := json.Unmarshal([]byte(res["stdout"].(string)), &m); err != nil {
		s.t.Fatalf("session layout: %v %v", err, res)
	}
	return m
}

// sessionFiles is filesJS over the session's /home/sandbox/node_modules.
func (s *server) sessionFiles(key, id string) map[string]string {
	s.t.Helper()
	res := s.exec(key, id, "const root = '/home/sandbox';"+filesJS)
	var m map[string]string
	if err := json.Unmarshal([]byte(res["stdout"].(string)), &m); err != nil {
		s.t.Fatalf("session files: %v %.2000v", err, res)
	}
	return m
}

// withoutStripped returns files without the "(stripped fields left)"
// marks, and how many there were.
func withoutStripped(files map[string]string) (map[string]string, int) {
	out, n := map[string]string{}, 0
	for k, v := range files {
		if strings.HasSuffix(k, " (stripped fields left)") {
			n++
			continue
		}
		out[k] = v
	}
	return out, n
}

// installLockfile posts {"manager": "npm", "lockfile": raw}.
func (s *server) installLockfile(key, id string, raw []byte) reply {
	s.t.Helper()
	return s.do("POST", "/v1/sessions/"+id+"/install", key, map[string]any{"manager": "npm", "lockfile": json.RawMessage(raw)})
}

// layoutDiff lists the paths where two layouts differ.
func layoutDiff(a, b map[string]string) []string {
	var d []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if a[k] != b[k] {
			d = append(d, k+": "+a[k]+" vs "+b[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			d = append(d, k+": (none) vs "+b[k])
		}
	}
	return d
}

// TestInstallNPMExpressTree: express 4.21.2's whole tree (72 packages from
// the public registry, admitted with `mirror add --lockfile`, two versions
// each of encodeurl and ms) installs through the API in one call, from
// the package list and from its package-lock.json; in both sessions
// require('express') serves a request inside the sandbox, and node_modules
// holds the same packages at the same paths as the host's `npm ci
// --ignore-scripts` of the same lockfile, file for file (package.json
// compared without the fields the installer strips, none of which is
// left in the session). Installing it again into a
// session that holds it changes nothing; a forged integrity is a 422.
func TestInstallNPMExpressTree(t *testing.T) {
	t.Parallel()
	s, _, _ := installServer(t, "")
	s.importOSV()
	lockPath, raw, specs := expressLockfile(t)
	s.cliArgs([]string{"mirror", "add"}, "--lockfile", lockPath)
	want, hostFiles := hostLayout(t, lockPath)
	hostFiles, hostStripped := withoutStripped(hostFiles)
	// The host's npm keeps the dependency fields (most of the tree's
	// package.json files have them): the file comparison below is only
	// meaningful because those are left out of it.
	if hostStripped < 30 || len(hostFiles) < 600 {
		t.Fatalf("host files: %d, %d package.json with dependency fields or lifecycle scripts", len(hostFiles), hostStripped)
	}
	if len(want) != 72 || want["node_modules/send/node_modules/ms"] != "ms@2.1.3" || want["node_modules/ms"] != "ms@2.0.0" {
		t.Fatalf("host layout: %d packages %v", len(want), want)
	}
	key := s.key("ULTRA")
	s.waitReadyz(200, 90*time.Second)

	byList := s.session(key, "javascript")
	r := s.install(key, byList, "npm", specs...)
	if r.status != 200 {
		t.Fatalf("express by list: %d %.3000s", r.status, r.body)
	}
	inst := r.json(t)["installed"].([]any)
	paths := map[string]bool{}
	for _, p := range inst {
		paths[p.(map[string]any)["path"].(string)] = true
	}
	if len(inst) != 72 || !paths["node_modules/send/node_modules/encodeurl"] || !paths["node_modules/encodeurl"] {
		t.Errorf("installed: %d %v", len(inst), paths)
	}
	byLock := s.session(key, "javascript")
	if r := s.installLockfile(key, byLock, raw); r.status != 200 {
		t.Fatalf("express by lockfile: %d %.3000s", r.status, r.body)
	}
	for name, id := range map[string]string{"list": byList, "lockfile": byLock} {
		res := s.exec(key, id, expressJS)
		if got := strings.TrimSpace(res["stdout"].(string)); got != "200 hello from express 4.21.2" {
			t.Errorf("%s: express in the sandbox: %v", name, res)
		}
		if d := layoutDiff(want, s.sessionLayout(key, id)); len(d) > 0 {
			t.Errorf("%s: layout differs from npm ci's (host vs session):\n%s", name, strings.Join(d, "\n"))
		}
		// The same files in the same places, byte for byte but for the
		// stripped fields of each package.json, and none of those left.
		got, left := withoutStripped(s.sessionFiles(key, id))
		if d := layoutDiff(hostFiles, got); len(d) > 0 || left > 0 {
			t.Errorf("%s: files differ from npm ci's (host vs session), %d package.json with stripped fields left:\n%s", name, left, strings.Join(d, "\n"))
		}
	}
	// Real npm clients on the host against this server's mirror, where the
	// tree was admitted from the public registry: `npm ci` with the public
	// lockfile passes (every integrity is the registry's; the mirror's
	// repack failed it with EINTEGRITY at utils-merge) and lays out the
	// same tree; `npm install debug@2.6.9` without a lockfile brings
	// ms@2.0.0 from the packument's dependencies. The public registry is
	// reachable only through a proxy that does not exist, so every byte
	// came from the mirror.
	registry := s.url("/mirror/npm/")
	home := t.TempDir()
	npmEnv := []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "npm_config_update_notifier=false",
		"npm_config_userconfig=" + filepath.Join(home, ".npmrc"), "npm_config_cache=" + filepath.Join(home, "cache"),
		"npm_config_https_proxy=http://127.0.0.1:9", "npm_config_proxy=http://127.0.0.1:9", "npm_config_noproxy=127.0.0.1", "npm_config_registry=" + registry}
	npmRun := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("npm", args...)
		cmd.Dir, cmd.Env = dir, npmEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("npm %s against the mirror: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	ciDir := filepath.Join(home, "ci")
	os.MkdirAll(ciDir, 0o755)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(lockPath), f))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(ciDir, f), b, 0o644)
	}
	npmRun(ciDir, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	out, err := exec.Command("node", "-e", "const root = "+jsString(ciDir)+";"+layoutJS).Output()
	var ciLayout map[string]string
	if err != nil || json.Unmarshal(out, &ciLayout) != nil {
		t.Fatalf("npm ci layout: %v %s", err, out)
	}
	if d := layoutDiff(want, ciLayout); len(d) > 0 {
		t.Errorf("npm ci from the mirror vs from the public registry:\n%s", strings.Join(d, "\n"))
	}
	plain := filepath.Join(home, "plain")
	os.MkdirAll(plain, 0o755)
	os.WriteFile(filepath.Join(plain, "package.json"), []byte(`{"name":"plain","version":"1.0.0","private":true}`), 0o644)
	npmRun(plain, "install", "--no-audit", "--no-fund", "--loglevel=error", "debug@2.6.9")
	cmd := exec.Command("node", "-e", "console.log(require('ms/package.json').version, require('debug').humanize(7200000))")
	cmd.Dir = plain
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "2.0.0 2h" {
		t.Errorf("npm install debug@2.6.9 from the mirror: %v %s", err, out)
	}

	// Again, into a session that holds it: the same layout.
	if r := s.installLockfile(key, byList, raw); r.status != 200 {
		t.Fatalf("express again: %d %.2000s", r.status, r.body)
	}
	if d := layoutDiff(want, s.sessionLayout(key, byList)); len(d) > 0 {
		t.Errorf("after a second install:\n%s", strings.Join(d, "\n"))
	}
	// A lockfile whose integrity is not what the mirror serves.
	forged := strings.Replace(string(raw), `"integrity": "sha512-`, `"integrity": "sha512-AAAA`, 1)
	r = s.installLockfile(key, byLock, []byte(forged))
	if r.status != 422 || !strings.Contains(string(r.body), "integrity_mismatch") {
		t.Fatalf("forged integrity: %d %.2000s", r.status, r.body)
	}
	// A hostile path: 400 before anything runs.
	hostile := strings.Replace(string(raw), `"node_modules/vary"`, `"node_modules/../../.bashrc"`, 1)
	if r := s.installLockfile(key, byLock, []byte(hostile)); r.status != 400 || r.json(t)["error"].(map[string]any)["code"] != "invalid_lockfile" {
		t.Fatalf("hostile path: %d %s", r.status, r.body)
	}

	// Missing 1, 3 and 20 of the tree's packages, in a fresh session: a
	// 422 naming each of them (as a missing dependency of what needs it).
	fresh := s.session(key, "javascript")
	var single []string // names with one version, express aside
	names := map[string]int{}
	for _, sp := range specs {
		names[sp[:strings.LastIndexByte(sp, '@')]]++
	}
	for _, sp := range specs {
		if n := sp[:strings.LastIndexByte(sp, '@')]; names[n] == 1 && n != "express" {
			single = append(single, n)
		}
	}
	// What each package of the lockfile depends on, by name.
	var lf struct {
		Packages map[string]struct {
			Dependencies map[string]string `json:"dependencies"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(raw, &lf); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3, 20} {
		drop := map[string]bool{}
		for _, name := range single[:n] {
			drop[name] = true
		}
		// Named: every dropped package that a package still in the
		// request depends on.
		wantNamed := map[string]bool{}
		for path, e := range lf.Packages {
			if path == "" || drop[path[strings.LastIndex(path, "node_modules/")+len("node_modules/"):]] {
				continue
			}
			for d := range e.Dependencies {
				if drop[d] {
					wantNamed[d] = true
				}
			}
		}
		var req []string
		for _, sp := range specs {
			if !drop[sp[:strings.LastIndexByte(sp, '@')]] {
				req = append(req, sp)
			}
		}
		r := s.install(key, fresh, "npm", req...)
		if r.status != 422 {
			t.Fatalf("missing %d: %d %.2000s", n, r.status, r.body)
		}
		named := map[string]bool{}
		for _, p := range r.json(t)["error"].(map[string]any)["details"].(map[string]any)["packages"].([]any) {
			md, _ := p.(map[string]any)["missing_dependencies"].([]any)
			for _, d := range md {
				d := d.(map[string]any)
				if mv, _ := d["mirror_versions"].([]any); len(mv) == 0 || d["range"] == "" {
					t.Errorf("missing %d: %v without range or mirror versions", n, d)
				}
				named[d["name"].(string)] = true
			}
		}
		if !maps.Equal(named, wantNamed) || n < 20 && !maps.Equal(named, drop) || n == 20 && len(named) < 15 {
			t.Errorf("missing %d: named %v, want %v (dropped %v): %.3000s", n, slices.Sorted(maps.Keys(named)), slices.Sorted(maps.Keys(wantNamed)),
				slices.Sorted(maps.Keys(drop)), r.body)
		}
	}
}
