package archcheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// services are the top-level folders that never import one another.
var services = []string{"api", "executor", "egress", "mirror", "installer", "readiness", "mcp", "console", "sbom", "doctor", "tlsserve", "store", "cluster", "e2b"}

// shared are packages inside a service's folder (or a service) that any
// service may import, each with the reason. sharedImports
// keeps them from importing a service in turn.
var shared = map[string]string{
	"store":         "the one database: every service's tables and migrations live there (docs/architecture.md); services read and write through it, and it imports none of them",
	"egress/policy": "the allow-list grammar and IP vetting, a leaf without I/O (the role of smokescreen's acl/v1): the API validates a session's network request with the same rules the proxy enforces",
	"api/wire":      "the single definition of every request and reply of the API, shared with mcp, the benchmarks and the tests so that they send and decode what the server does",
}

// leaves are the shared packages that do no I/O (types, pure functions),
// so that any service, mcp included, may import them without taking on a
// file, socket or process; leafIO keeps them so, through every package of
// the module they import.
var leaves = map[string]string{
	"egress/policy": "the allow-list grammar and IP vetting: pure functions over names and addresses",
	"api/wire":      "the API's JSON shapes and their conversions from the sandbox types",
}

// ioPackages are the standard packages that reach files, sockets,
// processes or the process's own output; a path ending in "/" is a
// prefix.
var ioPackages = []string{"os", "os/", "io", "io/fs", "io/ioutil", "bufio", "net", "net/http", "net/http/", "net/rpc", "net/smtp",
	"database/sql", "database/sql/", "syscall", "log", "log/slog", "log/syslog", "path/filepath", "debug/buildinfo", "plugin", "unsafe"}

func isIOPackage(path string) bool {
	for _, p := range ioPackages {
		if path == p || (strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)) {
			return true
		}
	}
	return false
}

// testOnly are packages that hold process-wide state on purpose, each
// with the reason; testOnlyImports keeps the reason true.
var testOnly = map[string]string{
	"internal/testenv": "test support imported only by _test.go files: one PostgreSQL server, one guest build and one pool of network names per test binary, shared by its tests",
}

// statefulTypes are package-level variable types that exist to be mutated.
var statefulTypes = map[string]bool{
	"sync.Mutex": true, "sync.RWMutex": true, "sync.Map": true, "sync.Once": true, "sync.WaitGroup": true, "sync.Cond": true,
}

// textMatchers are the functions whose use on x.Error() classifies an error
// by its text.
var textMatchers = map[string]bool{
	"strings.Contains": true, "strings.ContainsAny": true, "strings.HasPrefix": true, "strings.HasSuffix": true,
	"strings.EqualFold": true, "strings.Index": true, "strings.LastIndex": true, "strings.Count": true,
	"strings.Cut": true, "strings.CutPrefix": true, "strings.CutSuffix": true,
}

// pkg is one folder's Go files.
type pkg struct {
	dir   string // slash path relative to the module root
	files map[string]*ast.File
	// tests are its _test.go files: they may not write the package's
	// variables either (a test hook belongs in a struct the test builds).
	tests map[string]*ast.File
}

// module is every Go file under a module root, by folder.
type module struct {
	root string // its folder
	path string // module path from go.mod
	fset *token.FileSet
	pkgs map[string]*pkg
}

func loadModule(t *testing.T, dir string) *module {
	t.Helper()
	root, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := &module{root: root, fset: token.NewFileSet(), pkgs: map[string]*pkg{}}
	for line := range strings.SplitSeq(string(gomod), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			m.path = strings.TrimSpace(p)
		}
	}
	if m.path == "" {
		t.Fatal("go.mod names no module")
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(m.fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if m.pkgs[rel] == nil {
			m.pkgs[rel] = &pkg{dir: rel, files: map[string]*ast.File{}, tests: map[string]*ast.File{}}
		}
		if strings.HasSuffix(name, "_test.go") {
			m.pkgs[rel].tests[p] = f
		} else {
			m.pkgs[rel].files[p] = f
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.pkgs) == 0 {
		t.Fatal("no Go files found")
	}
	return m
}

func (m *module) sortedDirs() []string {
	dirs := make([]string, 0, len(m.pkgs))
	for d := range m.pkgs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}

func (m *module) pos(n ast.Node) string {
	p := m.fset.Position(n.Pos())
	if rel, err := filepath.Rel(m.root, p.Filename); err == nil {
		p.Filename = filepath.ToSlash(rel)
	}
	return fmt.Sprintf("%s:%d", p.Filename, p.Line)
}

// serviceOf returns the service a folder belongs to, or "".
func serviceOf(dir string) string {
	top, _, _ := strings.Cut(dir, "/")
	for _, s := range services {
		if top == s {
			return s
		}
	}
	return ""
}

// packageVars returns the names of a package's package-level variables
// (blank ones left out) and the specs that declare them.
func packageVars(p *pkg) map[string]*ast.ValueSpec {
	vars := map[string]*ast.ValueSpec{}
	for _, f := range p.files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for _, n := range vs.Names {
					if n.Name != "_" {
						vars[n.Name] = vs
					}
				}
			}
		}
	}
	return vars
}

// isPackageVar reports whether id refers to one of vars: the parser
// resolves names declared in the same file (a local shadowing one resolves
// to its own declaration); a name declared in another file of the package
// stays unresolved.
func isPackageVar(id *ast.Ident, vars map[string]*ast.ValueSpec) bool {
	spec, ok := vars[id.Name]
	if !ok {
		return false
	}
	if id.Obj == nil {
		return true
	}
	return id.Obj.Kind == ast.Var && id.Obj.Decl == spec
}

// root returns the variable an expression such as v, v.f, v[i] or *v
// writes into, with the package it names when the root is pkg.Var.
func root(e ast.Expr) (id *ast.Ident, qualifier *ast.Ident) {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			return x, nil
		case *ast.ParenExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.SelectorExpr:
			if q, ok := x.X.(*ast.Ident); ok && q.Obj == nil {
				// pkg.Var, or v.f with v declared in another file.
				return q, x.Sel
			}
			e = x.X
		default:
			return nil, nil
		}
	}
}

// processSetters change a default that the whole process shares.
var processSetters = map[string]bool{
	"slog.SetDefault": true, "slog.SetLogLoggerLevel": true, "log.SetOutput": true, "log.SetFlags": true, "log.SetPrefix": true,
	"http.Handle": true, "http.HandleFunc": true, "prometheus.MustRegister": true, "prometheus.Register": true,
	"os.Setenv": true, "os.Unsetenv": true, "os.Chdir": true, "debug.SetGCPercent": true, "debug.SetMemoryLimit": true,
}

// callName returns pkg.Func for a call of a package's function, else "".
func callName(fun ast.Expr) string {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	q, ok := sel.X.(*ast.Ident)
	if !ok || q.Obj != nil {
		return ""
	}
	return q.Name + "." + sel.Sel.Name
}

// mutatesFirstArg reports whether a call of fun changes its first argument
// in place: the builtins delete, clear and copy, sort's functions and
// slices' sorts.
func mutatesFirstArg(fun ast.Expr) bool {
	switch f := fun.(type) {
	case *ast.Ident:
		return f.Obj == nil && (f.Name == "delete" || f.Name == "clear" || f.Name == "copy")
	case *ast.SelectorExpr:
		q, ok := f.X.(*ast.Ident)
		if !ok {
			return false
		}
		switch q.Name {
		case "sort":
			return true
		case "slices":
			return strings.HasPrefix(f.Sel.Name, "Sort") || f.Sel.Name == "Reverse"
		}
	}
	return false
}

// imported returns the names a file gives its imports, and their paths.
func imported(f *ast.File) map[string]string {
	names := map[string]string{}
	for _, is := range f.Imports {
		path, _ := strconv.Unquote(is.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if is.Name != nil {
			name = is.Name.Name
		}
		names[name] = path
	}
	return names
}

// mutableVars lists writes into package-level variables and package-level
// variables of stateful types.
func mutableVars(m *module) (bad []string) {
	for _, dir := range m.sortedDirs() {
		if testOnly[dir] != "" {
			continue
		}
		p := m.pkgs[dir]
		vars := packageVars(p)
		all := maps.Clone(p.files)
		maps.Copy(all, p.tests)
		for name, f := range all {
			if ast.IsGenerated(f) {
				// Generated code (protoc's descriptors, filled in its
				// init) is regenerated, never edited: its writes are
				// the generator's.
				continue
			}
			test := p.tests[name] != nil
			imports := imported(f)
			// write reports a write into e when it lands in a package-level
			// variable of this package or of an imported one.
			write := func(e ast.Expr, how string) {
				id, sel := root(e)
				if id == nil {
					return
				}
				switch {
				case isPackageVar(id, vars):
					bad = append(bad, fmt.Sprintf("%s: package-level variable %s %s", m.pos(e), id.Name, how))
				case sel != nil && imports[id.Name] != "" && (!test || strings.HasPrefix(imports[id.Name], m.path+"/")) && id.Obj == nil && vars[id.Name] == nil && ast.IsExported(sel.Name):
					bad = append(bad, fmt.Sprintf("%s: package-level variable %s.%s %s", m.pos(e), id.Name, sel.Name, how))
				}
			}
			for _, d := range f.Decls {
				if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.VAR && !test {
					for _, s := range g.Specs {
						vs := s.(*ast.ValueSpec)
						if sel, ok := vs.Type.(*ast.SelectorExpr); ok {
							if q, ok := sel.X.(*ast.Ident); ok && (q.Name == "atomic" || statefulTypes[q.Name+"."+sel.Sel.Name]) {
								bad = append(bad, fmt.Sprintf("%s: package-level variable %s is a %s.%s (state shared by the whole process)", m.pos(vs), vs.Names[0].Name, q.Name, sel.Sel.Name))
							}
						}
					}
				}
				// Every function body, including literals in initialisers.
				ast.Inspect(d, func(n ast.Node) bool {
					var body *ast.BlockStmt
					switch fn := n.(type) {
					case *ast.FuncDecl:
						body = fn.Body
					case *ast.FuncLit:
						body = fn.Body
					default:
						return true
					}
					if body == nil {
						return false
					}
					ast.Inspect(body, func(n ast.Node) bool {
						switch s := n.(type) {
						case *ast.AssignStmt:
							if s.Tok != token.DEFINE {
								for _, l := range s.Lhs {
									write(l, "is assigned in a function")
								}
							}
						case *ast.IncDecStmt:
							write(s.X, "is assigned in a function")
						case *ast.RangeStmt:
							if s.Tok == token.ASSIGN {
								for _, e := range []ast.Expr{s.Key, s.Value} {
									if e != nil {
										write(e, "is assigned in a function")
									}
								}
							}
						case *ast.UnaryExpr:
							if s.Op == token.AND {
								write(s.X, "has its address taken")
							}
						case *ast.CallExpr:
							if len(s.Args) > 0 && mutatesFirstArg(s.Fun) {
								write(s.Args[0], "is changed in place in a function")
							}
							if fn := callName(s.Fun); processSetters[fn] && !test {
								bad = append(bad, fmt.Sprintf("%s: %s changes state of the whole process", m.pos(s), fn))
							}
						}
						return true
					})
					return false
				})
			}
		}
	}
	return bad
}

// serviceImports lists imports of one service by another.
func serviceImports(m *module) (bad []string) {
	for _, dir := range m.sortedDirs() {
		from := serviceOf(dir)
		if from == "" {
			continue
		}
		for _, f := range m.pkgs[dir].files {
			for _, is := range f.Imports {
				path, _ := strconv.Unquote(is.Path.Value)
				rel, ok := strings.CutPrefix(path, m.path+"/")
				if !ok {
					continue
				}
				if to := serviceOf(rel); to != "" && to != from && shared[rel] == "" {
					bad = append(bad, fmt.Sprintf("%s: service %s imports service %s (%s); declare the interface it needs and let the composition pass it in", m.pos(is), from, to, path))
				}
			}
		}
	}
	return bad
}

// isErrorText reports whether e is a call x.Error().
func isErrorText(e ast.Expr) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok || len(c.Args) != 0 {
		return false
	}
	s, ok := c.Fun.(*ast.SelectorExpr)
	return ok && s.Sel.Name == "Error"
}

// errorText lists comparisons and searches of the text of x.Error().
func errorText(m *module) (bad []string) {
	for _, dir := range m.sortedDirs() {
		for _, f := range m.pkgs[dir].files {
			ast.Inspect(f, func(n ast.Node) bool {
				switch x := n.(type) {
				case *ast.CallExpr:
					s, ok := x.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					q, ok := s.X.(*ast.Ident)
					if !ok {
						return true
					}
					fn := q.Name + "." + s.Sel.Name
					matcher := textMatchers[fn] || (strings.HasPrefix(s.Sel.Name, "Match") && q.Name != "regexp")
					if !matcher {
						return true
					}
					for _, a := range x.Args {
						if isErrorText(a) {
							bad = append(bad, fmt.Sprintf("%s: %s on the text of an error; classify it with errors.Is or errors.As", m.pos(x), fn))
						}
					}
				case *ast.BinaryExpr:
					if (x.Op == token.EQL || x.Op == token.NEQ) && (isErrorText(x.X) || isErrorText(x.Y)) {
						bad = append(bad, fmt.Sprintf("%s: comparing the text of an error; classify it with errors.Is or errors.As", m.pos(x)))
					}
				case *ast.SwitchStmt:
					if x.Tag != nil && isErrorText(x.Tag) {
						bad = append(bad, fmt.Sprintf("%s: switching on the text of an error; classify it with errors.Is or errors.As", m.pos(x)))
					}
				}
				return true
			})
		}
	}
	return bad
}

// testOnlyImports lists non-test imports of the test-only packages.
func testOnlyImports(m *module) (bad []string) {
	for _, dir := range m.sortedDirs() {
		for _, f := range m.pkgs[dir].files {
			for _, is := range f.Imports {
				path, _ := strconv.Unquote(is.Path.Value)
				if rel, ok := strings.CutPrefix(path, m.path+"/"); ok && testOnly[rel] != "" && !strings.HasPrefix(dir, rel) {
					bad = append(bad, fmt.Sprintf("%s: non-test code imports %s, which may hold process-wide state only because tests alone use it", m.pos(is), path))
				}
			}
		}
	}
	return bad
}

// sharedImports lists the services that shared packages import.
func sharedImports(m *module) (bad []string) {
	for dir := range shared {
		p := m.pkgs[dir]
		if p == nil {
			bad = append(bad, fmt.Sprintf("shared package %s does not exist; drop it from the list", dir))
			continue
		}
		for _, f := range p.files {
			for _, is := range f.Imports {
				path, _ := strconv.Unquote(is.Path.Value)
				if rel, ok := strings.CutPrefix(path, m.path+"/"); ok && serviceOf(rel) != "" && shared[rel] == "" {
					bad = append(bad, fmt.Sprintf("%s: shared package %s imports %s; a package every service may import must import no service", m.pos(is), dir, path))
				}
			}
		}
	}
	return bad
}

// leafIO lists the I/O packages that a leaf imports, itself or through
// the module's packages it imports.
func leafIO(m *module, leaves map[string]string) (bad []string) {
	for _, leaf := range slices.Sorted(maps.Keys(leaves)) {
		if m.pkgs[leaf] == nil {
			bad = append(bad, fmt.Sprintf("leaf package %s does not exist; drop it from the list", leaf))
			continue
		}
		seen := map[string]bool{leaf: true}
		queue := []string{leaf}
		for len(queue) > 0 {
			dir := queue[0]
			queue = queue[1:]
			p := m.pkgs[dir]
			if p == nil {
				continue
			}
			for _, name := range slices.Sorted(maps.Keys(p.files)) {
				for _, is := range p.files[name].Imports {
					path, _ := strconv.Unquote(is.Path.Value)
					if rel, ok := strings.CutPrefix(path, m.path+"/"); ok {
						if !seen[rel] {
							seen[rel] = true
							queue = append(queue, rel)
						}
						continue
					}
					if isIOPackage(path) {
						via := ""
						if dir != leaf {
							via = " through " + dir
						}
						bad = append(bad, fmt.Sprintf("%s: leaf package %s imports %s%s; a leaf does no I/O", m.pos(is), leaf, path, via))
					}
				}
			}
		}
	}
	return bad
}

// TestArchitecture runs every check over the module.
func TestArchitecture(t *testing.T) {
	m := loadModule(t, "../..")
	checks := []struct {
		name  string
		check func(*module) []string
		fix   string
	}{
		{"no mutable package-level variables", mutableVars, "make it a field of the struct that uses it (a Config or Options field, or the service), which tests set"},
		{"services do not import each other", serviceImports, "declare the interface it needs and let the composition pass it in"},
		{"errors are classified by type", errorText, "classify it with errors.Is or errors.As"},
		{"test-only packages stay in tests", testOnlyImports, "move the state into a struct"},
		{"shared packages are leaves", sharedImports, "keep the shared package free of services"},
		{"leaf packages do no I/O", func(m *module) []string { return leafIO(m, leaves) }, "keep the I/O in the service and pass the leaf plain values"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			bad := c.check(m)
			for _, b := range bad {
				t.Error(b)
			}
			if len(bad) > 0 {
				t.Log(c.fix)
			}
		})
	}
}

// TestChecksCatchViolations runs the checks over testdata/bad, a module
// that breaks each rule once in every way the checks know.
func TestChecksCatchViolations(t *testing.T) {
	m := loadModule(t, "testdata/bad")
	got := map[string][]string{
		"mutableVars":    mutableVars(m),
		"serviceImports": serviceImports(m),
		"errorText":      errorText(m),
		"leafIO":         leafIO(m, map[string]string{"api/wire": "a leaf in name only", "gone": "no such package"}),
	}
	want := map[string][]string{
		"mutableVars": {
			"api/state.go:12: package-level variable hits is a atomic.Int64",
			"api/state.go:14: package-level variable mu is a sync.Mutex",
			"api/state.go:19: package-level variable counter is assigned",
			"api/state.go:20: package-level variable counter is assigned",
			"api/state.go:21: package-level variable table is assigned",
			"api/state.go:22: package-level variable names is changed in place",
			"api/state.go:23: package-level variable table is changed in place",
			"api/state.go:24: package-level variable limit has its address taken",
			"api/state.go:25: package-level variable http.DefaultClient is assigned",
			"api/state.go:55: slog.SetDefault changes state of the whole process",
			"api/state_test.go:6: package-level variable limit is assigned",
		},
		"serviceImports": {
			"api/state.go:5: service api imports service executor",
			"store/store.go:4: service store imports service executor",
		},
		"errorText": {
			"api/state.go:31: strings.Contains on the text of an error",
			"api/state.go:34: comparing the text of an error",
			"api/state.go:37: switching on the text of an error",
		},
		"leafIO": {
			"api/wire/wire.go:5: leaf package api/wire imports net/http;",
			"internal/disk/disk.go:4: leaf package api/wire imports os through internal/disk;",
			"leaf package gone does not exist",
		},
	}
	for name, lines := range want {
		problems := got[name]
		sort.Strings(problems)
		if len(problems) != len(lines) {
			t.Errorf("%s found %d problems, want %d:\n%s", name, len(problems), len(lines), strings.Join(problems, "\n"))
			continue
		}
		for i, w := range lines {
			if !strings.HasPrefix(problems[i], w) {
				t.Errorf("%s problem %d = %q, want it to start %q", name, i, problems[i], w)
			}
		}
	}
}
