package installer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// An npm tree is laid out the way npm (v7 and later) lays out
// node_modules: a package goes as high as it can, so that packages which
// agree on a version share one copy at the top, and goes under the
// package that needs it (node_modules/a/node_modules/b) when a copy of
// another version is in the way. Node resolves require('b') from a's
// folder by looking in a/node_modules, then in each folder above; the
// layout below is correct when, for every package and every dependency,
// the first copy found that way has a version in the dependency's range.
//
// Paths are the lockfile's: "node_modules/a", "node_modules/a/node_modules/@s/b";
// the root (the session's home) is "".

// treeNode is one package at one place in node_modules.
type treeNode struct {
	path string
	p    *planned
}

// tree is node_modules as laid out, by path.
type tree map[string]*treeNode

// childPath is where name goes in the node_modules folder of the package
// at parent ("" for the top).
func childPath(parent, name string) string {
	if parent == "" {
		return "node_modules/" + name
	}
	return parent + "/node_modules/" + name
}

// parentPath is the package whose node_modules holds path ("" for the
// top).
func parentPath(path string) string {
	k := strings.LastIndex(path, "/node_modules/")
	if k < 0 {
		return ""
	}
	return path[:k]
}

// resolve is the copy of name that require(name) finds from the package
// at from ("" for the top), or nil.
func (t tree) resolve(from, name string) *treeNode {
	for loc := from; ; loc = parentPath(loc) {
		if n := t[childPath(loc, name)]; n != nil {
			return n
		}
		if loc == "" {
			return nil
		}
	}
}

// under reports whether path is inside the node_modules of the package at
// loc ("" holds everything).
func under(path, loc string) bool {
	return loc == "" || strings.HasPrefix(path, loc+"/node_modules/")
}

// ranges answers whether a version satisfies a dependency's range, from
// the catalog, asking once per name and range.
type ranges struct {
	cat   Catalog
	known map[[2]string][]string
	adm   map[[2]string][]string
}

func (r *ranges) versions(ctx context.Context, name, rng string) (admitted, known []string, err error) {
	k := [2]string{name, rng}
	if v, ok := r.known[k]; ok {
		return r.adm[k], v, nil
	}
	admitted, known, err = r.cat.Satisfying(ctx, name, rng)
	if err != nil && !errors.Is(err, ErrRange) {
		return nil, nil, err
	}
	if r.known == nil {
		r.known, r.adm = map[[2]string][]string{}, map[[2]string][]string{}
	}
	r.known[k], r.adm[k] = nonNil(known), nonNil(admitted)
	return r.adm[k], r.known[k], nil
}

// layoutTree places every planned package. Packages that no other package
// of the request depends on go to the top; then, breadth first and in
// name order like npm, each dependency goes to the highest folder where it
// neither meets another version of itself on the way up nor changes what
// an already placed package resolves to a version out of its range. Two
// versions of one package that both end up wanted at the top are a
// conflict (422): npm would need a root package.json to choose.
//
// The tree holds at most max copies, as a lockfile holds at most max
// entries: nesting can place one package under many dependents, and a
// request built for it (each level of nesting multiplying the copies)
// would otherwise cost the server time quadratic in a number of copies
// far above the request's size.
func layoutTree(ctx context.Context, rs *ranges, plan []planned, max int) (tree, []planned, error) {
	byName := map[string][]*planned{}
	for k := range plan {
		byName[plan[k].a.Name] = append(byName[plan[k].a.Name], &plan[k])
	}
	// wanted: packages some other package of the request can use.
	wanted := map[*planned]bool{}
	for k := range plan {
		p := &plan[k]
		for dep, rng := range p.a.Dependencies {
			_, known, err := rs.versions(ctx, dep, rng)
			if err != nil {
				return nil, nil, fmt.Errorf("checking %s's dependency %s@%s: %w", p.requested, dep, rng, err)
			}
			for _, q := range byName[dep] {
				if q != p && slices.Contains(known, q.a.Version) {
					wanted[q] = true
				}
			}
		}
	}
	t := tree{}
	placed := map[*planned]bool{}
	var conflicts []sandbox.PackageRejection
	conflicted := map[*planned]bool{} // one conflict per requested package
	conflict := func(p *planned, reason string) {
		if !conflicted[p] {
			conflicted[p] = true
			conflicts = append(conflicts, sandbox.PackageRejection{Package: p.requested, Status: "conflict", Reason: reason})
		}
	}
	var queue []*treeNode
	tooMany := fmt.Errorf("%w: the tree needs more than %d copies in node_modules (packages nested under several dependents); install it in parts",
		sandbox.ErrInvalid, max)
	place := func(path string, p *planned) {
		n := &treeNode{path: path, p: p}
		t[path] = n
		placed[p] = true
		queue = append(queue, n)
	}
	// run places the dependencies of everything queued, breadth first.
	run := func() error {
		for len(queue) > 0 {
			if len(t) > max {
				return tooMany
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			n := queue[0]
			queue = queue[1:]
			for _, dep := range slices.Sorted(maps.Keys(n.p.a.Dependencies)) {
				rng := n.p.a.Dependencies[dep]
				_, known, err := rs.versions(ctx, dep, rng)
				if err != nil {
					return fmt.Errorf("checking %s's dependency %s@%s: %w", n.p.requested, dep, rng, err)
				}
				var pick *planned
				if r := t.resolve(n.path, dep); r != nil && slices.Contains(known, r.p.a.Version) {
					continue // already met from here
				}
				// The newest version of the request in range (known is
				// oldest first).
				for _, v := range slices.Backward(known) {
					for _, q := range byName[dep] {
						if q.a.Version == v && pick == nil {
							pick = q
						}
					}
				}
				if pick == nil {
					continue // not in the request: checked later against the session
				}
				if loc, ok := t.placeFor(ctx, rs, n.path, pick); ok {
					place(childPath(loc, dep), pick)
				} else {
					conflict(pick, fmt.Sprintf("no place in node_modules for %s@%s under %s", dep, pick.a.Version, n.path))
				}
			}
		}
		return nil
	}
	// Roots first, then anything left (a cycle, or a version no package
	// picked), each at the top when its name is free there.
	order := make([]*planned, 0, len(plan))
	for k := range plan {
		order = append(order, &plan[k])
	}
	// placeTop puts p at the top, or records a conflict when another
	// version is there.
	placeTop := func(p *planned) bool {
		top := childPath("", p.a.Name)
		if other := t[top]; other != nil {
			conflict(p, fmt.Sprintf("%s@%s and %s@%s both belong at the top of node_modules: no package of the request uses %s, so drop one of them",
				p.a.Name, p.a.Version, other.p.a.Name, other.p.a.Version, p.a.Version))
			return false
		}
		place(top, p)
		return true
	}
	slices.SortStableFunc(order, func(a, b *planned) int {
		if wanted[a] != wanted[b] {
			if wanted[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a.a.Name, b.a.Name)
	})
	// Every root goes to the top before any dependency is placed, so a
	// dependency never takes a root's place.
	for _, p := range order {
		if wanted[p] {
			break
		}
		placeTop(p)
	}
	if err := run(); err != nil {
		return nil, nil, err
	}
	for _, p := range order {
		if !wanted[p] || placed[p] || !placeTop(p) {
			continue
		}
		if err := run(); err != nil {
			return nil, nil, err
		}
	}
	if len(t) > max {
		return nil, nil, tooMany
	}
	if len(conflicts) > 0 {
		return nil, nil, &sandbox.RejectedError{Packages: conflicts}
	}
	// Every placed copy, in path order: a package placed twice (nested
	// under two dependents) is installed twice.
	var out []planned
	for _, path := range slices.Sorted(maps.Keys(t)) {
		p := *t[path].p
		p.path = path
		out = append(out, p)
	}
	return t, out, nil
}

// placeFor is the highest folder (a package's path, "" for the top) where
// p can go for the package at from: from itself or one of the packages
// above it, below any other version of p's name on the way up, and where
// no placed package that would then find p instead of what it finds now
// needs another range.
func (t tree) placeFor(ctx context.Context, rs *ranges, from string, p *planned) (string, bool) {
	name := p.a.Name
	var levels []string // from, then upwards, while the name is free
	for loc := from; ; loc = parentPath(loc) {
		if t[childPath(loc, name)] != nil {
			break
		}
		levels = append(levels, loc)
		if loc == "" {
			break
		}
	}
	for _, loc := range slices.Backward(levels) {
		if t.shadowsNothing(ctx, rs, loc, p) {
			return loc, true
		}
	}
	return "", false
}

// shadowsNothing reports whether putting p in loc's node_modules leaves
// every placed package under loc that depends on p's name with a copy in
// range.
func (t tree) shadowsNothing(ctx context.Context, rs *ranges, loc string, p *planned) bool {
	name := p.a.Name
	for path, n := range t {
		rng, ok := n.p.a.Dependencies[name]
		if !ok || !under(path, loc) && path != loc {
			continue
		}
		r := t.resolve(path, name)
		if r == nil || under(r.path, loc) && r.path != childPath(loc, name) {
			// Not placed yet (its turn comes, and it nests if need be),
			// or finds a copy below loc: unchanged.
			continue
		}
		_, known, err := rs.versions(ctx, name, rng)
		if err != nil {
			return false
		}
		if !slices.Contains(known, r.p.a.Version) {
			// Finds a copy out of its range now (above loc): not yet
			// placed for, and its turn comes (as npm, only a dependency
			// met now is protected).
			continue
		}
		if !slices.Contains(known, p.a.Version) {
			return false
		}
	}
	return true
}

// checkTree checks every dependency of every placed package as Node would
// resolve it: a copy in the tree out of range is refused at once (the
// request or the lockfile put it there); a name the tree does not hold on
// the way up must be in the session, at the top of its node_modules
// (returned as requirements for the install job to check).
func checkTree(ctx context.Context, rs *ranges, t tree) ([]requirement, error) {
	var rej []sandbox.PackageRejection
	var reqs []requirement
	// A package placed twice is reported once.
	seenReq, seenRej := map[[3]string]bool{}, map[string]bool{}
	for _, path := range slices.Sorted(maps.Keys(t)) {
		n := t[path]
		var missing []sandbox.MissingDependency
		for _, dep := range slices.Sorted(maps.Keys(n.p.a.Dependencies)) {
			rng := n.p.a.Dependencies[dep]
			admitted, known, err := rs.versions(ctx, dep, rng)
			if err != nil {
				return nil, fmt.Errorf("checking %s's dependency %s@%s: %w", n.p.requested, dep, rng, err)
			}
			r := t.resolve(path, dep)
			switch {
			case r != nil && slices.Contains(known, r.p.a.Version):
			case r != nil:
				missing = append(missing, sandbox.MissingDependency{Name: dep, Range: rng, MirrorVersions: admitted, Requested: r.p.a.Version})
			case !seenReq[[3]string{n.p.requested, dep, rng}]:
				seenReq[[3]string{n.p.requested, dep, rng}] = true
				reqs = append(reqs, requirement{By: n.p.requested, Name: dep, Range: rng, Versions: known, admitted: admitted})
			}
		}
		if len(missing) > 0 && !seenRej[n.p.requested] {
			seenRej[n.p.requested] = true
			rej = append(rej, missingRejection(n.p.requested, missing, false))
		}
	}
	if len(rej) > 0 {
		return nil, &sandbox.RejectedError{Packages: rej}
	}
	return reqs, nil
}
