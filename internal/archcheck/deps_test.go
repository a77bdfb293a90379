package archcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// roots are the composition root, the only packages that may import
// several services and wire them together, and the other main packages
// (cmd/sandboxapi-guest is the executor's guest agent). Nothing but a root
// imports a root.
var roots = map[string]bool{"cmd/sandboxapi": true, "cmd/sandboxapi-guest": true, "internal/app": true, "internal/cli": true}

// below are the service subpackages that sit under their service's own
// package: it uses them, they never reach it (the executor's host layer,
// agent transport, fence and guest agent know no session). The key is the subpackage's
// folder, the value its service's.
var below = map[string]string{
	"executor/agent": "executor",
	"executor/host":  "executor",
	"executor/fence": "executor",
	"executor/guest": "executor",
}

// allowedDeps are the imports that break a rule today, each with the
// reason. A key is "from -> import": from is a package folder, with
// " (tests)" for its test build (its _test.go files), and import is the
// direct import through which from reaches what the rule forbids (the
// forbidden package itself or one that leads to it). The test fails on a
// violation not listed here and on an entry that no longer happens, so the
// list can only shrink. A new forbidden package behind a listed import is
// caught at that import's own entry (a listed root aside).
var allowedDeps = map[string]string{
	// Tests against the real component (docs/architecture.md: every feature
	// has one): they build the neighbouring service itself, not a fake.
	"executor (tests) -> egress":    "create_faults_test.go runs sessions on a real egress.Network (netns, veth) to fault its setup",
	"executor (tests) -> cluster":   "pause_test.go runs a real cluster node (lease loop) over a real executor and stops its process",
	"installer (tests) -> egress":   "the installer's tests fence a real egress.Network around the install sandbox",
	"installer (tests) -> executor": "the installer's tests install into a real session's home made by a real executor",
	"installer (tests) -> mirror":   "the installer's tests install from a real mirror",
	"rootfs (tests) -> executor":    "the rootfs test runs a program of every runtime on the built rootfs in a real executor",

	// Tools and harnesses outside the services.
	"bench/mirror -> mirror":                       "the mirror benchmark drives the mirror package it measures",
	"internal/e2e (tests) -> api":                  "the end-to-end tests check every reply against api.OpenAPI",
	"internal/e2e (tests) -> executor":             "the end-to-end tests find the rootfs and the runtimes as the server does",
	"internal/e2e (tests) -> executor/host":        "the end-to-end tests count the sandboxes' cgroups as the host layer does",
	"internal/deploycheck (tests) -> internal/cli": "the deploy checks run the manifests' commands through cli.Run",
	"internal/deploycheck (tests) -> internal/app": "the deploy checks parse the manifests' configs with app.ParseConfig, the root document that composes every service's section",
	"internal/e2e (tests) -> api/openapicheck":     "the end-to-end tests validate every reply against the OpenAPI document",
}

// node is one package of ours, or the test build of one (its _test.go
// files, internal and external, taken together).
type node struct {
	dir     string   // folder relative to the module root
	test    bool     // the test build of dir
	imports []string // direct imports of ours, by folder
	deps    []string // every package of ours it builds with, by folder
}

func (n *node) label() string {
	if n.test {
		return n.dir + " (tests)"
	}
	return n.dir
}

// graph is a module's packages as go list reports them.
type graph struct {
	nodes []*node          // sorted by label
	pkgs  map[string]*node // the non-test nodes by folder
}

// listed is the part of go list's JSON that the checks read.
type listed struct {
	ImportPath string
	ForTest    string
	Imports    []string
	Deps       []string
	Error      *struct{ Err string }
}

// listModule runs go list over the module in dir, test builds included,
// and keeps the module's own packages.
func listModule(t *testing.T, dir string) *graph {
	t.Helper()
	root, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	modPath, err := exec.Command("go", "-C", root, "list", "-m").Output()
	if err != nil {
		t.Fatalf("go list -m in %s: %v", root, err)
	}
	cmd := exec.Command("go", "list", "-test", "-e", "-json=ImportPath,ForTest,Imports,Deps,Error", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in %s: %v\n%s", root, err, stderr.String())
	}
	g, err := parseList(strings.TrimSpace(string(modPath)), out)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// parseList builds the graph from go list's output for module mod.
func parseList(mod string, out []byte) (*graph, error) {
	// ours returns the folder of an import path of the module (a test
	// variant's " [p.test]" dropped), or "" for another module's package.
	ours := func(path string) string {
		path, _, _ = strings.Cut(path, " ")
		if path == mod {
			return "."
		}
		rel, ok := strings.CutPrefix(path, mod+"/")
		if !ok {
			return ""
		}
		return rel
	}
	g := &graph{pkgs: map[string]*node{}}
	tests := map[string]*node{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("decoding go list output: %w", err)
		}
		if p.Error != nil {
			return nil, fmt.Errorf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		if p.ForTest == "" && strings.HasSuffix(p.ImportPath, ".test") {
			continue // the generated main of a test binary
		}
		n := &node{dir: ours(p.ImportPath)}
		if p.ForTest != "" {
			dir := ours(p.ForTest)
			if tests[dir] == nil {
				tests[dir] = &node{dir: dir, test: true}
			}
			n = tests[dir]
		} else if n.dir == "" {
			continue
		} else {
			g.pkgs[n.dir] = n
		}
		add := func(list []string, to *[]string) {
			for _, path := range list {
				if d := ours(path); d != "" && d != n.dir && !slices.Contains(*to, d) {
					*to = append(*to, d)
				}
			}
		}
		add(p.Imports, &n.imports)
		add(p.Deps, &n.deps)
	}
	for _, n := range g.pkgs {
		g.nodes = append(g.nodes, n)
	}
	for _, n := range tests {
		g.nodes = append(g.nodes, n)
	}
	for _, n := range g.nodes {
		sort.Strings(n.imports)
		sort.Strings(n.deps)
	}
	sort.Slice(g.nodes, func(i, j int) bool { return g.nodes[i].label() < g.nodes[j].label() })
	return g, nil
}

// chain returns how n reaches dir: n's direct import first, dir last.
func (g *graph) chain(n *node, dir string) []string {
	prev := map[string]string{}
	queue := []string{}
	for _, d := range n.imports {
		if _, ok := prev[d]; !ok {
			prev[d] = ""
			queue = append(queue, d)
		}
	}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == dir {
			var path []string
			for p := cur; p != ""; p = prev[p] {
				path = append([]string{p}, path...)
			}
			return path
		}
		if next := g.pkgs[cur]; next != nil {
			for _, d := range next.imports {
				if _, ok := prev[d]; !ok {
					prev[d] = cur
					queue = append(queue, d)
				}
			}
		}
	}
	return []string{dir}
}

// violation is one dependency that breaks a rule.
type violation struct {
	key  string // "from -> import", the allowedDeps key
	text string
}

// depViolations lists every dependency, direct or not, of every package
// and test build that breaks a rule of docs/architecture.md:
//
//   - a service (a subpackage counts as its service) reaches no other
//     service, the shared packages aside;
//   - a shared package reaches no service but another shared one;
//   - any other package (leaves under internal/, rootfs, configs, tools)
//     reaches no service but the shared ones: only the composition root
//     wires services;
//   - a layer below its service's package (below) never reaches it;
//   - nothing but a root reaches a root;
//   - nothing but a test build reaches a test-only package.
//
// One violation is reported per package and service (or root) reached,
// with the shortest path of imports; its key names the direct import that
// path starts with.
func depViolations(g *graph) []violation {
	var bad []violation
	for _, n := range g.nodes {
		from := serviceOf(n.dir)
		seen := map[string]bool{}
		for _, d := range n.deps {
			to, why := "", ""
			switch {
			case below[n.dir] != "" && d == below[n.dir]:
				to, why = d, "its service's own package, from a layer below it"
			case testOnly[d] != "" && !n.test && !strings.HasPrefix(n.dir, d):
				to, why = d, "a test-only package outside tests"
			case roots[d] && !roots[n.dir]:
				to, why = d, "the composition root, which only cmd/sandboxapi and the root itself import"
			case roots[n.dir] || shared[d] != "" || serviceOf(d) == "":
				continue
			case from == "":
				to, why = serviceOf(d), "a service, from a package that is neither a service nor the composition root"
			case shared[n.dir] != "":
				to, why = serviceOf(d), "a service, from a shared package"
			case serviceOf(d) != from:
				to, why = serviceOf(d), "another service"
			default:
				continue
			}
			chain := g.chain(n, d)
			key := n.label() + " -> " + chain[0]
			if seen[key+" "+to] {
				continue
			}
			seen[key+" "+to] = true
			bad = append(bad, violation{key, fmt.Sprintf("%s imports %s (%s): %s", n.label(), to, strings.Join(chain, " -> "), why)})
		}
	}
	return bad
}

// TestDependencies checks the rules on every import, direct or through
// other packages, of every package and every test build of the module.
func TestDependencies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	g := listModule(t, "../..")
	if g.pkgs["internal/config"] == nil || g.pkgs["api"] == nil {
		t.Fatalf("go list found %d packages, not the module's", len(g.pkgs))
	}
	found := map[string]bool{}
	for _, v := range depViolations(g) {
		found[v.key] = true
		if allowedDeps[v.key] == "" {
			t.Errorf("%s; declare the interface it needs in the importer and let the composition root pass it in", v.text)
		}
	}
	for key := range allowedDeps {
		if !found[key] {
			t.Errorf("allowedDeps lists %q, which no longer happens: drop it", key)
		}
	}
}

// TestDepChecksCatchViolations runs depViolations over testdata/bad, which
// breaks each dependency rule once: directly, through another package and
// from a test build.
func TestDepChecksCatchViolations(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over testdata/bad")
	}
	g := listModule(t, "testdata/bad")
	var got []string
	for _, v := range depViolations(g) {
		if !slices.Contains(got, v.key) {
			got = append(got, v.key)
		}
	}
	sort.Strings(got)
	want := []string{
		"api (tests) -> executor",       // a service's test build reaches another service
		"api -> executor",               // a service imports another
		"console -> internal/app",       // a service imports the composition root
		"egress -> internal/testenv",    // non-test code imports test support
		"executor/host -> executor",     // a layer reaches its service's package
		"installer (tests) -> executor", // only a test file imports another service
		"internal/leaf -> executor",     // a leaf imports a service
		"mirror -> internal/leaf",       // a service reaches another through a leaf
		"store -> executor",             // a shared package imports a service
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, v := range depViolations(g) {
		if v.key == "mirror -> internal/leaf" && !strings.Contains(v.text, "(internal/leaf -> executor)") {
			t.Errorf("mirror's violation does not show its path: %s", v.text)
		}
	}
}
