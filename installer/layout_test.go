package installer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// listCatalog is a catalog whose ranges are lists of exact versions
// ("1.0.0||2.0.0"); every package is admitted. Keys are "name@version".
type listCatalog map[string]map[string]string

func (c listCatalog) Lookup(_ context.Context, m Manager, name, version string) (Artifact, error) {
	deps, ok := c[name+"@"+version]
	if !ok {
		return Artifact{}, ErrNotFound
	}
	return Artifact{Name: name, Version: version, Filename: name + "-" + version + ".tgz", SHA256: hash,
		Integrity: "sha512-" + name + version, Status: "admitted", Dependencies: deps}, nil
}

func (c listCatalog) Satisfying(_ context.Context, name, rng string) (admitted, known []string, err error) {
	for _, v := range strings.Split(rng, "||") {
		if _, ok := c[name+"@"+v]; ok {
			known = append(known, v)
		}
	}
	slices.Sort(known)
	return known, known, nil
}

func (c listCatalog) Versions(context.Context, Manager, string) (admitted, known []string, err error) {
	return nil, nil, nil
}

// layout plans req against c and returns path -> name@version.
func layout(t *testing.T, c listCatalog, pkgs ...string) (map[string]string, []requirement, error) {
	t.Helper()
	inst := New(DefaultConfig(), c, nil, nil, nil, nil)
	plan, reqs, err := inst.plan(context.Background(), sandbox.InstallRequest{Manager: "npm", Packages: pkgs})
	if err != nil {
		return nil, nil, err
	}
	out := map[string]string{}
	for _, p := range plan {
		out[p.path] = p.a.Name + "@" + p.a.Version
	}
	return out, reqs, nil
}

// TestLayoutTree: the tree is npm's: hoisted where versions agree, nested
// under the dependent where another version holds the top, deduplicated
// when a copy above is in range; two versions wanted at the top are a
// conflict; what the request lacks is left to the session check.
func TestLayoutTree(t *testing.T) {
	t.Parallel()
	// An express-like tree: debug needs ms 2.0.0, send needs ms 2.1.3 and
	// encodeurl 1, the root package encodeurl 2; both need debug.
	c := listCatalog{
		"app@1.0.0":       {"debug": "2.6.9", "encodeurl": "2.0.0", "send": "0.19.0"},
		"debug@2.6.9":     {"ms": "2.0.0"},
		"ms@2.0.0":        nil,
		"ms@2.1.3":        nil,
		"send@0.19.0":     {"debug": "2.6.9", "ms": "2.1.3", "encodeurl": "1.0.2"},
		"encodeurl@1.0.2": nil,
		"encodeurl@2.0.0": nil,
		"a@1.0.0":         {"b": "1.0.0"},
		"b@1.0.0":         {"a": "1.0.0"},
		"c@1.0.0":         {"d": "1.0.0||2.0.0"},
		"d@1.0.0":         nil,
		"d@2.0.0":         nil,
		"x@1.0.0":         {"y": "1.0.0", "z": "1.0.0"},
		"y@1.0.0":         {"z": "2.0.0"},
		"z@1.0.0":         nil,
		"z@2.0.0":         nil,
	}
	got, reqs, err := layout(t, c, "app@1.0.0", "debug@2.6.9", "ms@2.0.0", "ms@2.1.3", "send@0.19.0", "encodeurl@1.0.2", "encodeurl@2.0.0")
	want := map[string]string{
		"node_modules/app":                         "app@1.0.0",
		"node_modules/debug":                       "debug@2.6.9",
		"node_modules/ms":                          "ms@2.0.0",
		"node_modules/encodeurl":                   "encodeurl@2.0.0",
		"node_modules/send":                        "send@0.19.0",
		"node_modules/send/node_modules/ms":        "ms@2.1.3",
		"node_modules/send/node_modules/encodeurl": "encodeurl@1.0.2",
	}
	if err != nil || len(reqs) != 0 || !maps.Equal(got, want) {
		t.Fatalf("express-like: %v %v %v", got, reqs, err)
	}
	// A root keeps the top even when a dependency placed first would
	// have taken it (express without debug: ms 2.0.0 is a root).
	got, _, err = layout(t, c, "app@1.0.0", "ms@2.0.0", "ms@2.1.3", "send@0.19.0", "encodeurl@1.0.2", "encodeurl@2.0.0")
	if err != nil || got["node_modules/ms"] != "ms@2.0.0" || got["node_modules/send/node_modules/ms"] != "ms@2.1.3" {
		t.Fatalf("root ms: %v %v", got, err)
	}
	// A cycle has no root: the first name goes to the top.
	if got, _, err := layout(t, c, "b@1.0.0", "a@1.0.0"); err != nil || !maps.Equal(got, map[string]string{"node_modules/a": "a@1.0.0", "node_modules/b": "b@1.0.0"}) {
		t.Fatalf("cycle: %v %v", got, err)
	}
	// The newest version in range is picked; the other has no dependent
	// and no room at the top.
	_, _, err = layout(t, c, "c@1.0.0", "d@1.0.0", "d@2.0.0")
	var rej *sandbox.RejectedError
	if !errors.As(err, &rej) || len(rej.Packages) != 1 || rej.Packages[0].Status != "conflict" || rej.Packages[0].Package != "d@1.0.0" {
		t.Fatalf("two roots of one name: %v", err)
	}
	if got, _, err := layout(t, c, "c@1.0.0", "d@2.0.0"); err != nil || got["node_modules/d"] != "d@2.0.0" {
		t.Fatalf("range of two: %v %v", got, err)
	}
	// x needs z 1 at the top; y (under x's reach) needs z 2 nested in y.
	got, _, err = layout(t, c, "x@1.0.0", "y@1.0.0", "z@1.0.0", "z@2.0.0")
	if err != nil || !maps.Equal(got, map[string]string{"node_modules/x": "x@1.0.0", "node_modules/y": "y@1.0.0",
		"node_modules/z": "z@1.0.0", "node_modules/y/node_modules/z": "z@2.0.0"}) {
		t.Fatalf("nested under a hoisted dependency: %v %v", got, err)
	}
	// What the request lacks is a requirement on the session's top.
	if _, reqs, err := layout(t, c, "send@0.19.0", "ms@2.1.3"); err != nil || len(reqs) != 2 || reqs[0].Name != "debug" || reqs[1].Name != "encodeurl" {
		t.Fatalf("send without debug and encodeurl: %+v %v", reqs, err)
	}
	// A copy the tree holds out of range is refused at once.
	_, _, err = layout(t, c, "debug@2.6.9", "ms@2.1.3")
	if !errors.As(err, &rej) || rej.Packages[0].Status != "missing_dependencies" || rej.Packages[0].MissingDependencies[0].Requested != "2.1.3" {
		t.Fatalf("ms out of range: %v", err)
	}
}

// TestLayoutMatchesResolution: for random trees (a package and all it
// reaches, two versions of many names), the layout succeeds and every dependency the layout
// places resolves, as Node looks it up, to a copy in range.
func TestLayoutMatchesResolution(t *testing.T) {
	t.Parallel()
	for seed := range 200 {
		c := listCatalog{}
		var req []string
		r := uint32(seed*2654435761 + 1)
		next := func(n int) int { r ^= r << 13; r ^= r >> 17; r ^= r << 5; return int(r % uint32(n)) }
		for k := range 12 {
			for _, v := range []string{"1.0.0", "2.0.0"} {
				deps := map[string]string{}
				for range next(4) {
					d := next(12)
					if d > k { // a DAG: only later names
						deps[fmt.Sprintf("p%02d", d)] = []string{"1.0.0", "2.0.0"}[next(2)]
					}
				}
				c[fmt.Sprintf("p%02d@%s", k, v)] = deps
			}
		}
		// The request: p00@1.0.0 and everything it reaches.
		seen := map[string]bool{}
		var walk func(string)
		walk = func(nv string) {
			if seen[nv] {
				return
			}
			seen[nv] = true
			req = append(req, nv)
			for d, v := range c[nv] {
				walk(d + "@" + v)
			}
		}
		walk("p00@1.0.0")
		inst := New(DefaultConfig(), c, nil, nil, nil, nil)
		plan, reqs, err := inst.plan(context.Background(), sandbox.InstallRequest{Manager: "npm", Packages: req})
		if err != nil || len(reqs) != 0 {
			t.Fatalf("seed %d: %v %+v", seed, err, reqs)
		}
		tr := tree{}
		for k := range plan {
			tr[plan[k].path] = &treeNode{path: plan[k].path, p: &plan[k]}
		}
		for path, n := range tr {
			for dep, v := range n.p.a.Dependencies {
				if got := tr.resolve(path, dep); got == nil || got.p.a.Version != v {
					t.Fatalf("seed %d: %s needs %s@%s, finds %v", seed, path, dep, v, got)
				}
			}
		}
	}
}

// FuzzLayout: for any catalogue of six names with three versions each
// (dependencies and ranges from the input) and any request of them, the
// plan is either a rejection (422) or a tree where every path is a chain
// of names under node_modules, every requested package is placed, and
// every dependency of every placed copy resolves, as Node looks it up,
// to a copy in range, or to nothing and is then a requirement on the
// session. Copies (a package nested under several dependents) stay
// within max_packages (here 18, the catalogue), or the request is refused as invalid.
func FuzzLayout(f *testing.F) {
	f.Add([]byte{1, 9, 2, 18, 0, 1, 27, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})
	f.Add([]byte{3, 9, 17, 26, 2, 10, 19, 1, 11, 0, 2, 12, 20, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 1})
	names := []string{"a", "b", "c", "@s/d", "e", "f"}
	versions := []string{"1.0.0", "2.0.0", "3.0.0"}
	f.Fuzz(func(t *testing.T, data []byte) {
		pos := 0
		next := func() byte {
			if pos >= len(data) {
				return 0
			}
			pos++
			return data[pos-1]
		}
		c := listCatalog{}
		for k, n := range names {
			for _, v := range versions {
				deps := map[string]string{}
				for range next() % 4 {
					b := next()
					d := int(b) % len(names)
					var rng []string
					for j, w := range versions {
						if b>>(3+j)&1 == 1 {
							rng = append(rng, w)
						}
					}
					if d != k && len(rng) > 0 {
						deps[names[d]] = strings.Join(rng, "||")
					}
				}
				c[n+"@"+v] = deps
			}
		}
		var req []string
		for _, n := range names {
			for _, v := range versions {
				if next()&1 == 1 {
					req = append(req, n+"@"+v)
				}
			}
		}
		if len(req) == 0 {
			return
		}
		cfg := DefaultConfig()
		cfg.MaxPackages = 18 // the whole catalogue fits in one request
		inst := New(cfg, c, nil, nil, nil, nil)
		plan, reqs, err := inst.plan(context.Background(), sandbox.InstallRequest{Manager: "npm", Packages: req})
		if err != nil {
			var rej *sandbox.RejectedError
			if errors.Is(err, sandbox.ErrInvalid) && strings.Contains(err.Error(), "copies") {
				return
			}
			if !errors.As(err, &rej) || len(rej.Packages) == 0 || len(rej.Packages) > len(req) {
				t.Fatalf("%v: not a rejection: %v", req, err)
			}
			return
		}
		if len(plan) > cfg.MaxPackages {
			t.Fatalf("%v: %d copies", req, len(plan))
		}
		tr := tree{}
		placed := map[string]bool{}
		for k := range plan {
			p := &plan[k]
			if tr[p.path] != nil || !strings.HasPrefix(p.path, "node_modules/") || !strings.HasSuffix(p.path, "node_modules/"+p.a.Name) {
				t.Fatalf("%v: path %q for %s", req, p.path, p.requested)
			}
			for _, part := range strings.Split(p.path, "/node_modules/") {
				if part = strings.TrimPrefix(part, "node_modules/"); !slices.Contains(names, part) {
					t.Fatalf("%v: path %q has %q", req, p.path, part)
				}
			}
			tr[p.path] = &treeNode{path: p.path, p: p}
			placed[p.requested] = true
		}
		for _, r := range req {
			if !placed[r] {
				t.Fatalf("%v: %s not placed: %v", req, r, slices.Sorted(maps.Keys(tr)))
			}
		}
		for path, n := range tr {
			if p := parentPath(path); p != "" && tr[p] == nil {
				t.Fatalf("%v: %s without its parent", req, path)
			}
			for dep, rng := range n.p.a.Dependencies {
				got := tr.resolve(path, dep)
				if got == nil {
					if !slices.ContainsFunc(reqs, func(r requirement) bool { return r.Name == dep && r.Range == rng && r.By == n.p.requested }) {
						t.Fatalf("%v: %s needs %s@%s, finds nothing and requires nothing of the session", req, path, dep, rng)
					}
					continue
				}
				if !slices.Contains(strings.Split(rng, "||"), got.p.a.Version) {
					t.Fatalf("%v: %s needs %s@%s, finds %s", req, path, dep, rng, got.p.a.Version)
				}
			}
		}
	})
}

// fanoutTree is a request of k + 2 + 3b + 4c packages whose layout nests
// c packages under each of b packages nested under each of k roots: k*b*c
// copies from a request far smaller.
func fanoutTree(k, b, c int) (listCatalog, []string) {
	cat := listCatalog{}
	var req []string
	add := func(nv string, deps map[string]string) { cat[nv] = deps; req = append(req, nv) }
	aDeps, pDeps, bDeps := map[string]string{}, map[string]string{"a": "2.0.0"}, map[string]string{}
	for i := range b {
		aDeps[fmt.Sprintf("b%02d", i)], pDeps[fmt.Sprintf("b%02d", i)] = "2.0.0", "3.0.0"
	}
	for i := range c {
		ci := fmt.Sprintf("c%02d", i)
		bDeps[ci], pDeps[ci], aDeps[ci] = "2.0.0", "3.0.0", "4.0.0"
	}
	add("a@1.0.0", nil)
	add("a@2.0.0", aDeps)
	for i := range b {
		add(fmt.Sprintf("b%02d@1.0.0", i), nil)
		add(fmt.Sprintf("b%02d@2.0.0", i), bDeps)
		add(fmt.Sprintf("b%02d@3.0.0", i), nil)
	}
	for i := range c {
		for _, v := range []string{"1.0.0", "2.0.0", "3.0.0", "4.0.0"} {
			add(fmt.Sprintf("c%02d@%s", i, v), nil)
		}
	}
	for j := range k {
		add(fmt.Sprintf("p%03d@1.0.0", j), pDeps)
	}
	return cat, req
}

// TestLayoutCopiesBounded: a request built so that nesting multiplies
// copies (60*15*15 from 167 packages) is refused as invalid in well under
// a second, naming the cap (it took 20 s of the server's CPU, and counted
// 2,745 conflicts, before the cap); a chain nested under each of 128
// roots (8,384 copies from 256 packages) too. A real tree (express, 72
// packages, 72 copies) is far below it: TestLayoutTree and the e2e test.
func TestLayoutCopiesBounded(t *testing.T) {
	t.Parallel()
	cat, req := fanoutTree(60, 15, 15)
	chain := listCatalog{}
	var chainReq []string
	for i := range 64 {
		next := map[string]string{}
		if i+1 < 64 {
			next[fmt.Sprintf("x%03d", i+1)] = "2.0.0"
		}
		chain[fmt.Sprintf("x%03d@1.0.0", i)], chain[fmt.Sprintf("x%03d@2.0.0", i)] = nil, next
		chainReq = append(chainReq, fmt.Sprintf("x%03d@1.0.0", i), fmt.Sprintf("x%03d@2.0.0", i))
	}
	for j := range 128 {
		chain[fmt.Sprintf("p%03d@1.0.0", j)] = map[string]string{"x000": "2.0.0"}
		chainReq = append(chainReq, fmt.Sprintf("p%03d@1.0.0", j))
	}
	for name, tc := range map[string]struct {
		c   listCatalog
		req []string
	}{"fan-out": {cat, req}, "chain": {chain, chainReq}} {
		inst := New(DefaultConfig(), tc.c, nil, nil, nil, nil)
		t0 := time.Now()
		_, _, err := inst.plan(context.Background(), sandbox.InstallRequest{Manager: "npm", Packages: tc.req})
		if el := time.Since(t0); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "more than 256 copies") || el > 2*time.Second {
			t.Errorf("%s (%d packages): %v after %v", name, len(tc.req), err, el)
		}
	}
	// Below the cap the same shape lays out, each copy where Node finds it.
	cat, req = fanoutTree(3, 3, 3)
	inst := New(DefaultConfig(), cat, nil, nil, nil, nil)
	plan, _, err := inst.plan(context.Background(), sandbox.InstallRequest{Manager: "npm", Packages: req})
	paths := map[string]string{}
	for _, p := range plan {
		paths[p.path] = p.a.Version
	}
	if err != nil || paths["node_modules/p002/node_modules/a/node_modules/b01/node_modules/c02"] != "2.0.0" || paths["node_modules/p000/node_modules/c00"] != "3.0.0" {
		var rej *sandbox.RejectedError
		errors.As(err, &rej)
		t.Fatalf("3*3*3: %v %+v %v", err, rej.Packages, slices.Sorted(maps.Keys(paths)))
	}
}
