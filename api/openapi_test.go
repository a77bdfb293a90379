package api

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/api/openapicheck"
)

type openAPIDoc struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	CatchAll   map[string]string                     `json:"x-catch-all"`
	Components struct {
		Responses map[string]openAPIResponse `json:"responses"`
		Schemas   map[string]any             `json:"schemas"`
	} `json:"components"`
}

type openAPIOperation struct {
	RequestBody *struct {
		Content map[string]struct {
			Schema map[string]any `json:"schema"`
		} `json:"content"`
	} `json:"requestBody"`
	Responses map[string]openAPIResponse `json:"responses"`
	Security  []map[string][]string      `json:"security"`
}

type openAPIResponse struct {
	Ref     string `json:"$ref"`
	Content map[string]struct {
		Schema map[string]any `json:"schema"`
	} `json:"content"`
}

var httpMethods = []string{"get", "put", "post", "delete", "patch", "head", "options"}

func loadOpenAPI(t *testing.T) *openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("api/openapi.json: %v", err)
	}
	return &doc
}

// operations returns "METHOD /path" -> operation of the document.
func (d *openAPIDoc) operations(t *testing.T) map[string]openAPIOperation {
	t.Helper()
	ops := map[string]openAPIOperation{}
	for path, item := range d.Paths {
		for _, m := range httpMethods {
			raw, ok := item[m]
			if !ok {
				continue
			}
			var op openAPIOperation
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", m, path, err)
			}
			ops[strings.ToUpper(m)+" "+path] = op
		}
	}
	return ops
}

func (d *openAPIDoc) response(r openAPIResponse) openAPIResponse {
	if name, ok := strings.CutPrefix(r.Ref, "#/components/responses/"); ok {
		return d.Components.Responses[name]
	}
	return r
}

// parseSources parses the files that are not tests.
func parseSources(t *testing.T, fset *token.FileSet, files []string) []*ast.File {
	t.Helper()
	var out []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, af)
	}
	return out
}

// sourceRoutes finds every pattern mounted in the api package and in the
// wiring around it (internal/cli, internal/app, cluster) by reading the source: calls of handle, Handle or HandleFunc
// whose first argument is a string literal. It sees routes mounted through
// s.mux directly too, which the runtime registry cannot.
func sourceRoutes(t *testing.T) map[string]string {
	t.Helper()
	files, _ := filepath.Glob("*.go")
	for _, dir := range []string{"../internal/cli", "../internal/app", "../cluster"} {
		wire, _ := filepath.Glob(dir + "/*.go")
		files = append(files, wire...)
	}
	found := map[string]string{}
	fset := token.NewFileSet()
	for _, af := range parseSources(t, fset, files) {
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "handle" && sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			p, err := strconv.Unquote(lit.Value)
			if err == nil {
				found[p] = fset.Position(lit.Pos()).String()
			}
			return true
		})
	}
	return found
}

// TestOpenAPICoversRoutes checks that every route mounted in the source or
// registered at run time is in api/openapi.json, and every operation there
// is mounted somewhere, with the statuses every route of its kind can send.
func TestOpenAPICoversRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	ops := doc.operations(t)
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) {
		d.Usage, d.EgressLog, d.Packages = fakeUsage{}, fakeEgressLog{}, fakePackages{}
		d.Installer, d.Gate = fakeInstaller{}, &fakeGate{}
		d.Metrics, d.Mirror = http.NotFoundHandler(), http.NotFoundHandler()
	})

	mounted := sourceRoutes(t)
	for _, p := range srv.Routes() {
		if _, ok := mounted[p]; !ok {
			mounted[p] = "runtime registry"
		}
	}
	for p, where := range mounted {
		if !strings.Contains(p, " ") {
			if _, ok := doc.CatchAll[p]; !ok {
				t.Errorf("catch-all pattern %q (%s) is not in x-catch-all of api/openapi.json", p, where)
			}
			continue
		}
		if _, ok := ops[p]; !ok {
			t.Errorf("route %q (%s) is not in api/openapi.json", p, where)
		}
	}
	for key, op := range ops {
		if _, ok := mounted[key]; !ok {
			t.Errorf("api/openapi.json documents %q but nothing mounts it", key)
		}
		want := []string{}
		if strings.HasPrefix(strings.SplitN(key, " ", 2)[1], "/v1/") {
			want = append(want, "401", "403", "429", "500")
			if len(op.Security) == 0 {
				t.Errorf("%s: authenticated route without security", key)
			}
		}
		if op.RequestBody != nil {
			want = append(want, "400", "413")
		}
		if strings.Contains(key, "{id}") {
			want = append(want, "404")
		}
		hasSuccess := false
		for code := range op.Responses {
			if code[0] == '2' {
				hasSuccess = true
			}
		}
		if !hasSuccess {
			t.Errorf("%s: no 2xx response documented", key)
		}
		for _, code := range want {
			if _, ok := op.Responses[code]; !ok {
				t.Errorf("%s: status %s is not documented", key, code)
			}
		}
	}
	for p := range doc.CatchAll {
		if _, ok := mounted[p]; !ok {
			t.Errorf("x-catch-all lists %q but nothing mounts it", p)
		}
	}
}

// schemaValidator validates bodies against the document's schemas (see
// package openapicheck, which the end-to-end suite uses on the real
// server's replies).
type schemaValidator struct{ c *openapicheck.Checker }

func newSchemaValidator(t *testing.T, _ *openAPIDoc) *schemaValidator {
	t.Helper()
	c, err := openapicheck.New(openAPI)
	if err != nil {
		t.Fatal(err)
	}
	return &schemaValidator{c: c}
}

// validate checks the JSON body against an inline schema (a $ref into the
// components, or a small literal).
func (v *schemaValidator) validate(schema map[string]any, body []byte) error {
	return v.c.Validate(schema, body)
}

// exchange is one sample request of the API and the status it must get.
type exchange struct {
	name, method, path, key, body string
	header                        map[string]string
	status                        int
}

// sampleExchanges walks the API as a client would: the happy paths and the
// errors each route can answer. "{sid}" is replaced by the session the
// third exchange creates.
func sampleExchanges() []exchange {
	pro, basic := "key-PRO", "key-BASIC"
	return []exchange{
		{name: "healthz", method: "GET", path: "/healthz", status: 200},
		{name: "readyz", method: "GET", path: "/readyz", status: 200},
		{name: "create session", method: "POST", path: "/v1/sessions", key: pro, body: `{"language":"python3","idle_ttl":60}`, status: 201},
		{name: "openapi", method: "GET", path: "/openapi.json", status: 200},
		{name: "runtimes", method: "GET", path: "/v1/runtimes", key: basic, status: 200},
		{name: "no key", method: "GET", path: "/v1/runtimes", status: 401},
		{name: "unknown key", method: "GET", path: "/v1/sessions", key: "nope", status: 401},
		{name: "execute", method: "POST", path: "/v1/execute", key: basic, body: `{"language":"python","code":"print(1)","files":[{"path":"a.txt","content":"x"}]}`, status: 200},
		{name: "execute error", method: "POST", path: "/v1/execute", key: basic, body: `{"language":"bash","code":"exit 1"}`, status: 200},
		{name: "execute timeout", method: "POST", path: "/v1/execute", key: basic, body: `{"language":"python3","code":"sleep","timeout":1}`, status: 200},
		{name: "execute stream", method: "POST", path: "/v1/execute", key: basic, body: `{"language":"python3","code":"print(2)","stream":true}`, status: 200},
		{name: "execute unknown language", method: "POST", path: "/v1/execute", key: basic, body: `{"language":"cobol","code":"x"}`, status: 400},
		{name: "execute bad json", method: "POST", path: "/v1/execute", key: basic, body: `{"language":`, status: 400},
		{name: "execute unknown field", method: "POST", path: "/v1/execute", key: basic, body: `{"language":"python3","code":"1","x":1}`, status: 400},
		{name: "execute code too large", method: "POST", path: "/v1/execute", key: basic, body: `{"language":"python3","code":"` + strings.Repeat("a", 1<<16+1) + `"}`, status: 413},
		{name: "basic session", method: "POST", path: "/v1/sessions", key: basic, body: `{"language":"python3"}`, status: 403},
		{name: "network domains on PRO", method: "POST", path: "/v1/sessions", key: pro, body: `{"language":"python3","network":{"enabled":true,"allowed_domains":["example.com"]}}`, status: 403},
		{name: "list sessions", method: "GET", path: "/v1/sessions", key: pro, status: 200},
		{name: "get session", method: "GET", path: "/v1/sessions/{sid}", key: pro, status: 200},
		{name: "get other's session", method: "GET", path: "/v1/sessions/{sid}", key: "key-ULTRA", status: 404},
		{name: "session execute", method: "POST", path: "/v1/sessions/{sid}/execute", key: pro, body: `{"code":"print(3)","env":{"A":"b"}}`, status: 200},
		{name: "session execute SSE", method: "POST", path: "/v1/sessions/{sid}/execute", key: pro, body: `{"code":"print(4)"}`, header: map[string]string{"Accept": "text/event-stream"}, status: 200},
		{name: "session execute language", method: "POST", path: "/v1/sessions/{sid}/execute", key: pro, body: `{"code":"1","language":"bash"}`, status: 400},
		{name: "session egress", method: "GET", path: "/v1/sessions/{sid}/egress", key: pro, status: 200},
		{name: "session egress bad limit", method: "GET", path: "/v1/sessions/{sid}/egress?limit=0", key: pro, status: 400},
		{name: "check packages", method: "POST", path: "/v1/packages/check", key: basic, body: `{"manager":"pip","packages":["numpy==2.1.0"]}`, status: 200},
		{name: "check packages bad manager", method: "POST", path: "/v1/packages/check", key: basic, body: `{"manager":"gem","packages":["x"]}`, status: 400},
		{name: "install", method: "POST", path: "/v1/sessions/{sid}/install", key: pro, body: `{"manager":"pip","packages":["six==1.16.0"]}`, status: 200},
		{name: "install rejected", method: "POST", path: "/v1/sessions/{sid}/install", key: pro, body: `{"manager":"pip","packages":["badpkg==1.0"]}`, status: 422},
		{name: "install bad manager", method: "POST", path: "/v1/sessions/{sid}/install", key: pro, body: `{"manager":"gem","packages":["x"]}`, status: 400},
		{name: "usage", method: "GET", path: "/v1/usage", key: pro, status: 200},
		{name: "delete session", method: "DELETE", path: "/v1/sessions/{sid}", key: pro, status: 204},
		{name: "delete again", method: "DELETE", path: "/v1/sessions/{sid}", key: pro, status: 404},
		{name: "no route", method: "GET", path: "/v1/nothing", key: pro, status: 404},
	}
}

// runExchanges sends the samples to ts and hands each reply to check.
func runExchanges(t *testing.T, ts *httptest.Server, check func(x exchange, reqBody []byte, resp *http.Response, body []byte)) {
	t.Helper()
	sid := ""
	for _, x := range sampleExchanges() {
		path := strings.ReplaceAll(x.path, "{sid}", sid)
		req, err := http.NewRequest(x.method, ts.URL+path, strings.NewReader(x.body))
		if err != nil {
			t.Fatal(err)
		}
		if x.key != "" {
			req.Header.Set("X-API-Key", x.key)
		}
		for k, v := range x.header {
			req.Header.Set(k, v)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != x.status {
			t.Errorf("%s: %s %s = %d, want %d: %s", x.name, x.method, path, resp.StatusCode, x.status, body)
			continue
		}
		if x.name == "create session" {
			var s struct{ ID string }
			_ = json.Unmarshal(body, &s)
			sid = s.ID
		}
		check(x, []byte(x.body), resp, body)
	}
}

// matchPath finds the document path that a concrete path matches.
func matchPath(doc *openAPIDoc, path string) string {
	keys := make([]string, 0, len(doc.Paths))
	for k := range doc.Paths {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		re := "^" + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(k), `[^/]+`) + "$"
		if regexp.MustCompile(re).MatchString(path) {
			return k
		}
	}
	return ""
}

// TestOpenAPIValidatesExchanges sends the sample requests through a server
// built on fakes and checks that each request body, status and reply body
// is what api/openapi.json says.
func TestOpenAPIValidatesExchanges(t *testing.T) {
	doc := loadOpenAPI(t)
	ops := doc.operations(t)
	v := newSchemaValidator(t, doc)
	gate := &fakeGate{}
	ready := &switchedReadiness{}
	srv, _ := newFakeServerDeps(t, nil, func(d *Deps) {
		d.Usage, d.EgressLog, d.Packages = fakeUsage{}, fakeEgressLog{}, fakePackages{}
		d.Installer, d.Gate, d.Readiness = fakeInstaller{}, gate, ready
	})
	ts := httptest.NewServer(srv)
	defer ts.Close()
	checked := 0
	check := func(x exchange, reqBody []byte, resp *http.Response, body []byte) {
		p := matchPath(doc, resp.Request.URL.Path)
		if p == "" {
			if resp.StatusCode == http.StatusNotFound && strings.HasPrefix(resp.Request.URL.Path, "/v1/") {
				if err := v.validate(map[string]any{"$ref": "#/components/schemas/Error"}, body); err != nil {
					t.Errorf("%s: 404 body: %v", x.name, err)
				}
				return
			}
			t.Errorf("%s: %s is not in the document", x.name, resp.Request.URL.Path)
			return
		}
		op, ok := ops[x.method+" "+p]
		if !ok {
			t.Errorf("%s: %s %s is not in the document", x.name, x.method, p)
			return
		}
		if op.RequestBody != nil && x.status < 300 {
			if err := v.validate(op.RequestBody.Content["application/json"].Schema, reqBody); err != nil {
				t.Errorf("%s: request does not match the document: %v", x.name, err)
			}
		}
		r, ok := op.Responses[strconv.Itoa(resp.StatusCode)]
		if !ok {
			t.Errorf("%s: status %d of %s %s is not documented", x.name, resp.StatusCode, x.method, p)
			return
		}
		r = doc.response(r)
		ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
		if len(r.Content) == 0 {
			if len(body) != 0 {
				t.Errorf("%s: documented without a body, got %q", x.name, body)
			}
			return
		}
		media, ok := r.Content[ct]
		if !ok {
			t.Errorf("%s: content type %q is not documented (have %v)", x.name, ct, keysOf(r.Content))
			return
		}
		checked++
		if ct == "text/event-stream" {
			checkSSE(t, x.name, v, body)
			return
		}
		if ct != "application/json" {
			return
		}
		if err := v.validate(media.Schema, body); err != nil {
			t.Errorf("%s: reply does not match the document: %v\n%s", x.name, err, body)
		}
	}
	runExchanges(t, ts, check)

	// The fail-closed replies: readiness red, the install gate closed.
	gate.down = true
	ready.on.Store(true)
	sid := ""
	for _, x := range []exchange{
		{name: "session for the gate", method: "POST", path: "/v1/sessions", key: "key-PRO", body: `{"language":"bash"}`, status: 201},
		{name: "install gate closed", method: "POST", path: "/v1/sessions/{sid}/install", key: "key-PRO", body: `{"manager":"pip","packages":["six==1.16.0"]}`, status: 503},
		{name: "readyz red", method: "GET", path: "/readyz", status: 503},
		{name: "readyz red, all", method: "GET", path: "/readyz?scope=all", status: 503},
		// A failing check gates installs; the load balancer's probe stays green.
		{name: "readyz serving", method: "GET", path: "/readyz?scope=serving", status: 200},
		{name: "readyz bad scope", method: "GET", path: "/readyz?scope=nope", status: 400},
	} {
		req, _ := http.NewRequest(x.method, ts.URL+strings.ReplaceAll(x.path, "{sid}", sid), strings.NewReader(x.body))
		req.Header.Set("X-API-Key", x.key)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != x.status {
			t.Fatalf("%s: %d, want %d: %s", x.name, resp.StatusCode, x.status, body)
		}
		if sid == "" {
			var s struct{ ID string }
			_ = json.Unmarshal(body, &s)
			sid = s.ID
		}
		if x.status == 503 && resp.Header.Get("Retry-After") == "" && !strings.HasPrefix(x.path, "/readyz") {
			t.Errorf("%s: 503 without Retry-After", x.name)
		}
		check(x, []byte(x.body), resp, body)
	}
	if checked < 20 {
		t.Errorf("only %d replies validated", checked)
	}
}

// checkSSE validates the events of a streamed execution.
func checkSSE(t *testing.T, name string, v *schemaValidator, body []byte) {
	t.Helper()
	events := strings.Split(strings.TrimSpace(string(body)), "\n\n")
	last := ""
	for _, ev := range events {
		var event, data string
		for _, line := range strings.Split(ev, "\n") {
			if s, ok := strings.CutPrefix(line, "event: "); ok {
				event = s
			}
			if s, ok := strings.CutPrefix(line, "data: "); ok {
				data = s
			}
		}
		last = event
		switch event {
		case "stdout", "stderr":
			var d struct{ Data *string }
			if err := json.Unmarshal([]byte(data), &d); err != nil || d.Data == nil {
				t.Errorf("%s: bad %s event %q", name, event, data)
			}
		case "result":
			if err := v.validate(map[string]any{"$ref": "#/components/schemas/ExecResult"}, []byte(data)); err != nil {
				t.Errorf("%s: result event: %v", name, err)
			}
		case "error":
			if err := v.validate(map[string]any{"$ref": "#/components/schemas/ErrorPayload"}, []byte(data)); err != nil {
				t.Errorf("%s: error event: %v", name, err)
			}
		default:
			t.Errorf("%s: unknown event %q", name, event)
		}
	}
	if last != "result" && last != "error" {
		t.Errorf("%s: stream ended with %q, want result or error", name, last)
	}
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestOpenAPIServed checks that GET /openapi.json needs no key and is the
// embedded document.
func TestOpenAPIServed(t *testing.T) {
	srv, _ := newFakeServer(t)
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/openapi.json", nil))
	if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), openAPI) {
		t.Fatalf("GET /openapi.json = %d", rec.Code)
	}
	var v map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || v["openapi"] != "3.1.0" {
		t.Fatalf("not an OpenAPI 3.1 document: %v", err)
	}
}

// httpStatusNames maps the net/http status constants the api package uses
// to their codes, for reading statuses out of the source.
var httpStatusNames = map[string]int{
	"StatusOK": 200, "StatusCreated": 201, "StatusNoContent": 204,
	"StatusBadRequest": 400, "StatusUnauthorized": 401, "StatusForbidden": 403, "StatusNotFound": 404, "StatusMethodNotAllowed": 405,
	"StatusConflict": 409, "StatusGone": 410, "StatusRequestEntityTooLarge": 413,
	"StatusUnprocessableEntity": 422, "StatusTooManyRequests": 429,
	"StatusInternalServerError": 500, "StatusBadGateway": 502, "StatusServiceUnavailable": 503, "StatusInsufficientStorage": 507,
}

// handlerStatuses reads, for each route the api package mounts, the
// statuses its handler can send by name: http.Status constants given to
// apiErr, writeJSON or WriteHeader, or set as the Status of an Error
// literal, in the handler and in every package function or Server method it
// refers to, transitively. Statuses that come from the error table (the
// sandboxes' sentinels) are not seen here.
func handlerStatuses(t *testing.T) map[string]map[int]string {
	t.Helper()
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	funcs := map[string]*ast.FuncDecl{}   // package functions
	methods := map[string]*ast.FuncDecl{} // methods of *Server
	parsed := parseSources(t, fset, files)
	for _, af := range parsed {
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			switch {
			case fd.Recv == nil:
				funcs[fd.Name.Name] = fd
			case recvName(fd) == "Server":
				methods[fd.Name.Name] = fd
			}
		}
	}
	status := func(e ast.Expr) (int, bool) {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok {
			return 0, false
		}
		if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "http" || !strings.HasPrefix(sel.Sel.Name, "Status") {
			return 0, false
		}
		code, ok := httpStatusNames[sel.Sel.Name]
		if !ok {
			t.Errorf("%s: add http.%s to httpStatusNames", fset.Position(sel.Pos()), sel.Sel.Name)
		}
		return code, ok
	}
	// collect walks n and everything it refers to, adding statuses to out.
	var collect func(n ast.Node, out map[int]string, seen map[ast.Node]bool)
	collect = func(n ast.Node, out map[int]string, seen map[ast.Node]bool) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		var visit func(ast.Node) bool
		visit = func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.CallExpr:
				name := ""
				switch f := x.Fun.(type) {
				case *ast.Ident:
					name = f.Name
				case *ast.SelectorExpr:
					name = f.Sel.Name
				}
				arg := -1
				switch name {
				case "apiErr":
					arg = 0
				case "writeJSON":
					arg = 1
				case "WriteHeader":
					arg = 0
				}
				if arg >= 0 && arg < len(x.Args) {
					if code, ok := status(x.Args[arg]); ok {
						out[code] = fset.Position(x.Pos()).String()
					}
				}
			case *ast.CompositeLit:
				if id, ok := x.Type.(*ast.Ident); ok && id.Name == "Error" {
					for _, el := range x.Elts {
						if kv, ok := el.(*ast.KeyValueExpr); ok {
							if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Status" {
								if code, ok := status(kv.Value); ok {
									out[code] = fset.Position(x.Pos()).String()
								}
							}
						}
					}
				}
			case *ast.SelectorExpr:
				if id, ok := x.X.(*ast.Ident); ok && id.Name == "s" {
					if fd, ok := methods[x.Sel.Name]; ok {
						collect(fd.Body, out, seen)
					}
				}
				// x.Sel names a field or another package's function
				// (slog.New), never one of this package's functions.
				ast.Inspect(x.X, visit)
				return false
			case *ast.Ident:
				if fd, ok := funcs[x.Name]; ok && (x.Obj == nil || x.Obj.Kind == ast.Fun) {
					collect(fd.Body, out, seen)
				}
				// A local handler variable: follow what it was set to.
				if x.Obj != nil && x.Obj.Kind == ast.Var {
					if as, ok := x.Obj.Decl.(*ast.AssignStmt); ok {
						collect(as, out, seen)
					}
				}
			}
			return true
		}
		ast.Inspect(n, visit)
	}
	routes := map[string]map[int]string{}
	for _, af := range parsed {
		ast.Inspect(af, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "handle" && sel.Sel.Name != "Handle") {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			p, err := strconv.Unquote(lit.Value)
			if err != nil || !strings.Contains(p, " ") {
				return true
			}
			out := map[int]string{}
			collect(call.Args[1], out, map[ast.Node]bool{})
			routes[p] = out
			return true
		})
	}
	return routes
}

func recvName(fd *ast.FuncDecl) string {
	t := fd.Recv.List[0].Type
	if st, ok := t.(*ast.StarExpr); ok {
		t = st.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// TestOpenAPIStatusesFromHandlers checks that every status a route's
// handler sends by name is documented for that route.
func TestOpenAPIStatusesFromHandlers(t *testing.T) {
	ops := loadOpenAPI(t).operations(t)
	routes := handlerStatuses(t)
	for _, want := range []string{"POST /v1/sessions", "POST /v1/sessions/{id}/install", "GET /readyz", "DELETE /v1/sessions/{id}"} {
		if len(routes[want]) == 0 {
			t.Errorf("found no statuses for %s: the source reader is broken", want)
		}
	}
	// The reader must see through the middleware, the handler and helpers.
	for route, code := range map[string]int{"POST /v1/sessions": 429, "POST /v1/sessions/{id}/install": 422, "GET /readyz": 503, "DELETE /v1/sessions/{id}": 204, "POST /v1/execute": 413,
		"GET /v1/sessions/{id}/egress": 400, "GET /v1/sessions/{id}/files": 400} {
		if _, ok := routes[route][code]; !ok {
			t.Errorf("the source reader missed status %d of %s (saw %v)", code, route, routes[route])
		}
	}
	for route, codes := range routes {
		op, ok := ops[route]
		if !ok {
			continue // TestOpenAPICoversRoutes reports it
		}
		for code, where := range codes {
			if _, ok := op.Responses[strconv.Itoa(code)]; !ok {
				t.Errorf("%s sends %d (%s), which api/openapi.json does not document", route, code, where)
			}
		}
	}
}
