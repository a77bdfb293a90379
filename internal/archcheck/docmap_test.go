package archcheck

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// mapRow is one row of the package map: a package and the imports of ours
// the doc gives it.
type mapRow struct {
	line    int
	imports []string // sorted; empty for "none"
}

// readPackageMap parses the table under "## Package map" in the markdown
// text: one package per row, in backticks in the first column, and in the
// last either "none" or the imports in backticks, separated by commas.
func readPackageMap(text string) (map[string]mapRow, error) {
	rows := map[string]mapRow{}
	in := false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Package map"
			continue
		}
		if !in || !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| package |") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 {
			return nil, fmt.Errorf("line %d: want 3 columns: %s", n, line)
		}
		pkg, ok := backticked(cells[0])
		if !ok {
			return nil, fmt.Errorf("line %d: the first column is not one package in backticks: %q", n, cells[0])
		}
		if _, dup := rows[pkg]; dup {
			return nil, fmt.Errorf("line %d: %s has a second row", n, pkg)
		}
		row := mapRow{line: n, imports: []string{}}
		if last := strings.TrimSpace(cells[len(cells)-1]); last != "none" {
			for _, c := range strings.Split(last, ",") {
				imp, ok := backticked(c)
				if !ok {
					return nil, fmt.Errorf("line %d: %s: the imports are not \"none\" or packages in backticks separated by commas: %q", n, pkg, last)
				}
				row.imports = append(row.imports, imp)
			}
		}
		sort.Strings(row.imports)
		rows[pkg] = row
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no rows under \"## Package map\"")
	}
	return rows, sc.Err()
}

// backticked returns s's one word between backticks.
func backticked(s string) (string, bool) {
	s = strings.TrimSpace(s)
	w, ok := strings.CutPrefix(s, "`")
	if !ok {
		return "", false
	}
	w, ok = strings.CutSuffix(w, "`")
	if !ok || w == "" || strings.ContainsAny(w, "` ") {
		return "", false
	}
	return w, true
}

// nestedModuleImports returns the packages of the main module mod that the
// non-test files in dir (a module of its own) import, by folder.
func nestedModuleImports(dir, mod string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	imports := []string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			return nil, err
		}
		for _, is := range af.Imports {
			path, _ := strconv.Unquote(is.Path.Value)
			if rel, ok := strings.CutPrefix(path, mod+"/"); ok && !slices.Contains(imports, rel) {
				imports = append(imports, rel)
			}
		}
	}
	sort.Strings(imports)
	return imports, nil
}

// comparePackageMap lists the differences between the map and the module:
// pkgs are the module's packages with their imports of ours, nested the
// folders that hold modules of their own with theirs.
func comparePackageMap(rows map[string]mapRow, pkgs, nested map[string][]string) (bad []string) {
	for dir, imports := range pkgs {
		row, ok := rows[dir]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("package %s is missing from the map", dir))
		case !slices.Equal(row.imports, imports):
			bad = append(bad, fmt.Sprintf("line %d: %s imports %s, the map says %s", row.line, dir, list(imports), list(row.imports)))
		}
	}
	for dir, imports := range nested {
		row, ok := rows[dir]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("module %s is missing from the map", dir))
		case !slices.Equal(row.imports, imports):
			bad = append(bad, fmt.Sprintf("line %d: %s (its own module) imports %s, the map says %s", row.line, dir, list(imports), list(row.imports)))
		}
	}
	for dir, row := range rows {
		if _, ok := pkgs[dir]; !ok && nested[dir] == nil {
			bad = append(bad, fmt.Sprintf("line %d: the map has %s, which is no package of the module", row.line, dir))
		}
	}
	sort.Strings(bad)
	return bad
}

func list(imports []string) string {
	if len(imports) == 0 {
		return "none"
	}
	return strings.Join(imports, ", ")
}

// TestPackageMap compares docs/architecture.md's package map with go list:
// every package of the module (and bench/egress, a module of its own) has
// a row, and the row's imports are its non-test imports of ours.
func TestPackageMap(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	text, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	rows, err := readPackageMap(string(text))
	if err != nil {
		t.Fatalf("docs/architecture.md: %v", err)
	}
	g := listModule(t, "../..")
	pkgs := map[string][]string{}
	for dir, n := range g.pkgs {
		pkgs[dir] = slices.Clone(n.imports)
	}
	nested := map[string][]string{}
	mods, err := filepath.Glob("../../*/*/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range mods {
		dir := filepath.Dir(m)
		rel, err := filepath.Rel("../..", dir)
		if err != nil {
			t.Fatal(err)
		}
		if nested[filepath.ToSlash(rel)], err = nestedModuleImports(dir, "github.com/sandboxapi/sandboxapi"); err != nil {
			t.Fatal(err)
		}
	}
	if nested["bench/egress"] == nil {
		t.Error("bench/egress is no longer a module of its own: say so in the map")
	}
	for _, b := range comparePackageMap(rows, pkgs, nested) {
		t.Errorf("docs/architecture.md: %s", b)
	}
}

// TestPackageMapCatchesDrift feeds the comparison a map that is wrong in
// every way it knows: a package missing, a row for no package, an import
// left out, one too many, "none" for a package that imports, a module of
// its own missing; and the parser rows it must refuse.
func TestPackageMapCatchesDrift(t *testing.T) {
	t.Parallel()
	doc := strings.Join([]string{
		"# x", "", "## Package map", "",
		"| package | owns | imports (of ours) |",
		"|---|---|---|",
		"| `api` | handlers | `store` |",
		"| `store` | the database | none |",
		"| `mcp` | tools | none |",
		"| `gone` | nothing | none |",
		"| `executor` | sandboxes | `store`, `internal/sandbox`, `rootfs` |",
		"", "## Next", "", "| `ignored` | not the map | none |",
	}, "\n")
	rows, err := readPackageMap(doc)
	if err != nil {
		t.Fatal(err)
	}
	pkgs := map[string][]string{
		"api":              {"api/wire", "store"},
		"store":            {},
		"mcp":              {"api/wire"},
		"executor":         {"internal/sandbox", "store"},
		"internal/sandbox": {},
		"rootfs":           {},
	}
	got := comparePackageMap(rows, pkgs, map[string][]string{"bench/egress": {"egress"}})
	want := []string{
		"line 10: the map has gone, which is no package of the module",
		"line 11: executor imports internal/sandbox, store, the map says internal/sandbox, rootfs, store",
		"line 7: api imports api/wire, store, the map says store",
		"line 9: mcp imports api/wire, the map says none",
		"module bench/egress is missing from the map",
		"package internal/sandbox is missing from the map",
		"package rootfs is missing from the map",
	}
	if !slices.Equal(got, want) {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range []string{
		"## Package map\n| `api`, `store` | two | none |",
		"## Package map\n| api | no backticks | none |",
		"## Package map\n| `api` | x | store |",
		"## Package map\n| `api` | x | `store` and `rootfs` |",
		"## Package map\n| `api` | x | none |\n| `api` | again | none |",
		"## Package map\n| `api` | two columns |",
		"## Other\n| `api` | x | none |",
	} {
		if _, err := readPackageMap(bad); err == nil {
			t.Errorf("readPackageMap accepted %q", bad)
		}
	}
}
