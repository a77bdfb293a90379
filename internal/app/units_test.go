package app

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/lifecycle"
)

// TestUnitsOrder: serve's units order without a cycle or a missing need,
// on a single node and on a cluster node, in the order the docs give
// (docs/architecture.md, "Lifecycle").
func TestUnitsOrder(t *testing.T) {
	t.Parallel()
	single := []string{"store", "metrics", "auth", "usage", "mirror", "egress", "executor", "sessions", "installer", "readiness", "api", "http"}
	tests := []struct {
		name string
		node string
		want []string
	}{
		{name: "single node", want: single},
		{name: "cluster node", node: "a", want: slices.Insert(slices.Clone(single), 7, "cluster")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := &Config{}
			cfg.Cluster.Node = tt.node
			p := &parts{env: &Env{Config: cfg}}
			var sys lifecycle.System
			sys.Add(p.units()...)
			got, err := sys.Order()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("order\n%q\nwant\n%q", got, tt.want)
			}
			for name, needs := range sys.Graph() {
				if tt.node == "" && slices.Contains(needs, "cluster") {
					t.Errorf("%s needs cluster on a single node", name)
				}
			}
		})
	}
}

// TestUnitsNeedWhatTheyRead reads units.go and the files beside it: every
// field of parts is set by the Provision of one unit, and a unit that
// reads a field another unit sets names that unit in its needs (so the
// System has provisioned it first). A unit that reads what it does not
// declare would find it nil only on some orders: this catches it before.
func TestUnitsNeedWhatTheyRead(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	methods := map[string]*ast.FuncDecl{} // methods of *parts
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || len(fd.Recv.List) != 1 {
				continue
			}
			if star, ok := fd.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "parts" {
					methods[fd.Name.Name] = fd
				}
			}
		}
	}
	type unit struct {
		needs  []string
		reads  map[string]bool // fields of p read
		writes map[string]bool // fields of p assigned
	}
	units := map[string]*unit{}
	for name, fd := range methods {
		if !strings.HasSuffix(name, "Unit") {
			continue
		}
		u := &unit{reads: map[string]bool{}, writes: map[string]bool{}}
		uname := ""
		// Walk the method and every method of p it calls.
		seen := map[string]bool{}
		var walk func(n ast.Node)
		walk = func(n ast.Node) {
			ast.Inspect(n, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.KeyValueExpr:
					k, _ := n.Key.(*ast.Ident)
					switch {
					case k != nil && k.Name == "Name":
						if lit, ok := n.Value.(*ast.BasicLit); ok && uname == "" {
							uname, _ = strconv.Unquote(lit.Value)
						}
					case k != nil && k.Name == "Needs":
						u.needs = needsOf(t, n.Value)
					}
				case *ast.AssignStmt:
					for _, l := range n.Lhs {
						if f := partsField(l); f != "" {
							u.writes[f] = true
						}
					}
				case *ast.SelectorExpr:
					if f := partsField(n); f != "" {
						if m, ok := methods[f]; ok {
							if !seen[f] {
								seen[f] = true
								walk(m.Body)
							}
							return false
						}
						u.reads[f] = true
					}
				}
				return true
			})
		}
		walk(fd.Body)
		if uname == "" {
			t.Fatalf("%s: no unit name found", name)
		}
		units[uname] = u
	}
	if len(units) < 10 {
		t.Fatalf("found only %d units: %v", len(units), slices.Sorted(maps.Keys(units)))
	}
	setBy := map[string]string{}
	for name, u := range units {
		for f := range u.writes {
			if other, ok := setBy[f]; ok {
				t.Errorf("parts.%s is set by both %s and %s", f, other, name)
			}
			setBy[f] = name
		}
	}
	for name, u := range units {
		for f := range u.reads {
			if f == "env" {
				continue // given before any unit
			}
			by, ok := setBy[f]
			switch {
			case !ok:
				t.Errorf("%s reads parts.%s, which no unit sets", name, f)
			case by != name && !slices.Contains(u.needs, by):
				t.Errorf("%s reads parts.%s, which %s sets, but does not need %s (needs %q)", name, f, by, by, u.needs)
			}
		}
	}
}

// partsField is X for an expression p.X, else "".
func partsField(e ast.Expr) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	if id, ok := sel.X.(*ast.Ident); ok && id.Name == "p" {
		return sel.Sel.Name
	}
	return ""
}

// needsOf reads a Needs value: a []string literal, or p.withCluster(...),
// which adds "cluster" on a cluster node.
func needsOf(t *testing.T, e ast.Expr) []string {
	var args []ast.Expr
	var out []string
	switch e := e.(type) {
	case *ast.CompositeLit:
		args = e.Elts
	case *ast.CallExpr:
		if partsField(e.Fun) != "withCluster" {
			t.Fatalf("Needs: unknown call %v", e.Fun)
		}
		args, out = e.Args, []string{"cluster"}
	default:
		t.Fatalf("Needs: unknown expression %T", e)
	}
	for _, a := range args {
		lit, ok := a.(*ast.BasicLit)
		if !ok {
			t.Fatalf("Needs: not a string literal: %T", a)
		}
		s, _ := strconv.Unquote(lit.Value)
		out = append(out, s)
	}
	return out
}
