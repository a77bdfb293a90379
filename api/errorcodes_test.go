package api

import (
	"go/ast"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// errorCodeSources are the packages whose handlers answer on the API's
// listener: the API itself, the wiring around it (internal/app: the drain
// gate), the mirror front (a forward to a mirror served apart), the MCP
// handler and the cluster node's handler in front of the API.
var errorCodeSources = []string{"*.go", "../internal/cli/*.go", "../internal/app/*.go", "../mirror/remote.go", "../mcp/*.go", "../cluster/*.go"}

// sentCode is an error code found in the source, with its HTTP status
// when the source names it next to the code (0 when it does not).
type sentCode struct {
	status int
	where  string
}

// sentErrorCodes reads the non-test sources for the error codes the server
// can send: the code of apiErr(status, "code", ...), of an Error literal
// (Code and Status fields), of an errorTable row {sentinel, status,
// "code"}, of a map literal's "code" key, and of a JSON text holding
// "code":"...".
func sentErrorCodes(t *testing.T) map[string][]sentCode {
	t.Helper()
	var files []string
	for _, pat := range errorCodeSources {
		m, _ := filepath.Glob(pat)
		for _, f := range m {
			if !strings.HasSuffix(f, "_test.go") {
				files = append(files, f)
			}
		}
	}
	fset := token.NewFileSet()
	out := map[string][]sentCode{}
	add := func(code string, status int, pos token.Pos) {
		out[code] = append(out[code], sentCode{status: status, where: fset.Position(pos).String()})
	}
	str := func(e ast.Expr) (string, bool) {
		lit, ok := e.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING {
			return "", false
		}
		s, err := strconv.Unquote(lit.Value)
		return s, err == nil
	}
	status := func(e ast.Expr) int {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return 0
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "http" {
			return 0
		}
		return httpStatusNames[sel.Sel.Name]
	}
	codeRE := regexp.MustCompile(`^[a-z][a-z_]*[a-z]$`)
	jsonCodeRE := regexp.MustCompile(`"code"\s*:\s*"([a-z_]+)"`)
	for _, af := range parseSources(t, fset, files) {
		ast.Inspect(af, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				if id, ok := x.Fun.(*ast.Ident); ok && id.Name == "apiErr" && len(x.Args) >= 2 {
					if code, ok := str(x.Args[1]); ok {
						add(code, status(x.Args[0]), x.Pos())
					}
				}
			case *ast.CompositeLit:
				var code string
				st := 0
				var strs []string
				for _, el := range x.Elts {
					if kv, ok := el.(*ast.KeyValueExpr); ok {
						k, _ := kv.Key.(*ast.Ident)
						ks, _ := str(kv.Key)
						switch {
						case k != nil && k.Name == "Code", ks == "code":
							if s, ok := str(kv.Value); ok {
								code = s
							}
						case k != nil && k.Name == "Status":
							st = status(kv.Value)
						}
						continue
					}
					if s := status(el); s != 0 {
						st = s
					} else if s, ok := str(el); ok {
						strs = append(strs, s)
					}
				}
				// An errorTable row: {sentinel, http.StatusX, "code"}.
				if code == "" && st != 0 && len(strs) == 1 && codeRE.MatchString(strs[0]) {
					code = strs[0]
				}
				if code != "" {
					add(code, st, x.Pos())
				}
			case *ast.BasicLit:
				if s, ok := str(x); ok {
					for _, m := range jsonCodeRE.FindAllStringSubmatch(s, -1) {
						add(m[1], 0, x.Pos())
					}
				}
			}
			return true
		})
	}
	return out
}

// docErrorTable reads docs/api.md's error table: code -> status.
func docErrorTable(t *testing.T) map[string]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", "api.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| ([0-9]{3}) \\|.*\\| ((?:`[a-z_]+`(?:, )?)+) \\|$")
	code := regexp.MustCompile("`([a-z_]+)`")
	out := map[string]int{}
	for _, line := range strings.Split(string(b), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		st, _ := strconv.Atoi(m[1])
		for _, c := range code.FindAllStringSubmatch(m[2], -1) {
			out[c[1]] = st
		}
	}
	return out
}

// TestAPIDocListsEveryErrorCode checks that docs/api.md's error table
// lists every error code the server's source can send, under the status
// it is sent with, and no code that nothing sends.
func TestAPIDocListsEveryErrorCode(t *testing.T) {
	sent := sentErrorCodes(t)
	doc := docErrorTable(t)
	// The reader must see each way a code is written.
	for _, c := range []string{"internal", "permission_denied", "not_a_directory", "draining", "mirror_unavailable", "unknown_language", "install_failed", "method_not_allowed"} {
		if _, ok := sent[c]; !ok {
			t.Errorf("the source reader did not find code %q: it is broken", c)
		}
	}
	if len(doc) < 20 {
		t.Fatalf("read only %d codes from docs/api.md's error table: the table reader is broken", len(doc))
	}
	codes := make([]string, 0, len(sent))
	for c := range sent {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, c := range codes {
		docStatus, ok := doc[c]
		if !ok {
			t.Errorf("code %q (sent at %s) is not in docs/api.md's error table", c, sent[c][0].where)
			continue
		}
		for _, s := range sent[c] {
			if s.status != 0 && s.status != docStatus {
				t.Errorf("code %q is sent with status %d (%s), docs/api.md lists it under %d", c, s.status, s.where, docStatus)
			}
		}
	}
	for c := range doc {
		if _, ok := sent[c]; !ok {
			t.Errorf("docs/api.md lists code %q, which nothing sends", c)
		}
	}
}
