package app

import (
	"bytes"
	"encoding"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sandboxapi/sandboxapi/internal/config"
)

var update = flag.Bool("update", false, "rewrite docs/config.md from the config structs")

const modulePath = "github.com/sandboxapi/sandboxapi"

// TestConfigReference renders docs/config.md from the Config structs (yaml
// tags, Go types, embedded defaults and the fields' doc comments) and fails
// when the file differs: the reference cannot drift from the code. Run
// `go test ./internal/app -run TestConfigReference -update` after
// changing a config struct.
func TestConfigReference(t *testing.T) {
	got := renderReference(t)
	path := filepath.Join("..", "..", "docs", "config.md")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("docs/config.md is out of date: run go test ./internal/app -run TestConfigReference -update")
	}
}

// fieldDocs maps "pkgpath.Type.Field" to the field's doc comment, read
// from the package sources.
type fieldDocs map[string]string

func (d fieldDocs) load(t *testing.T, pkgPath string) {
	if _, done := d["pkg:"+pkgPath]; done {
		return
	}
	d["pkg:"+pkgPath] = ""
	rel, ok := strings.CutPrefix(pkgPath, modulePath)
	if !ok {
		return
	}
	dir := filepath.Join("..", "..", filepath.FromSlash(strings.TrimPrefix(rel, "/")))
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range af.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fld := range st.Fields.List {
					text := ""
					if fld.Doc != nil {
						text = fld.Doc.Text()
					} else if fld.Comment != nil {
						text = fld.Comment.Text()
					}
					text = strings.Join(strings.Fields(text), " ")
					for _, n := range fld.Names {
						d[pkgPath+"."+ts.Name.Name+"."+n.Name] = text
					}
				}
			}
		}
	}
}

type refRow struct{ key, typ, def, doc string }

var (
	durationType = reflect.TypeOf(time.Duration(0))
	textMarshal  = reflect.TypeOf((*encoding.TextMarshaler)(nil)).Elem()
	yamlMarshal  = reflect.TypeOf((*yaml.Marshaler)(nil)).Elem()
)

func renderReference(t *testing.T) []byte {
	t.Helper()
	def, err := LoadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	docs := fieldDocs{}
	comments := yamlComments(t, config.DefaultYAML())
	var rows []refRow
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		typ := v.Type()
		docs.load(t, typ.PkgPath())
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			tag := f.Tag.Get("yaml")
			name, opts, _ := strings.Cut(tag, ",")
			if name == "-" || (!f.IsExported() && !f.Anonymous) {
				continue
			}
			fv := v.Field(i)
			if f.Anonymous && strings.Contains(opts, "inline") {
				walk(prefix, fv)
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			key := prefix + name
			doc := docs[typ.PkgPath()+"."+typ.Name()+"."+f.Name]
			if doc == "" {
				doc = comments[key]
			}
			if doc == "" {
				doc = fallbackDocs[key]
			}
			if isScalar(f.Type) {
				rows = append(rows, refRow{key: key, typ: typeName(f.Type), def: defaultOf(fv), doc: doc})
				continue
			}
			rows = append(rows, refRow{key: key, typ: "section", doc: doc})
			walk(key+".", fv)
		}
	}
	walk("", reflect.ValueOf(def).Elem())

	var b bytes.Buffer
	b.WriteString("# Configuration reference\n\n")
	b.WriteString("<!-- Generated from internal/app.Config by TestConfigReference; do not edit.\n")
	b.WriteString("     Regenerate: go test ./internal/app -run TestConfigReference -update -->\n\n")
	b.WriteString("`sandboxapi serve --config FILE` reads one YAML file decoded on top of the embedded\n")
	b.WriteString("defaults (`configs/sandboxapi.yaml`); unknown keys are errors, and `sandboxapi validate`\n")
	b.WriteString("checks a file without starting anything. Durations read `30s`, `5m` or a number of\n")
	b.WriteString("seconds; sizes read `256M`, `1G`. `--data-dir` and `--listen` (and `SANDBOXAPI_DATA_DIR`,\n")
	b.WriteString("`SANDBOXAPI_LISTEN`, `SANDBOXAPI_CONFIG`) override the file.\n\n")
	section := ""
	for _, r := range rows {
		top, _, nested := strings.Cut(r.key, ".")
		if r.typ == "section" && !nested {
			section = top
			fmt.Fprintf(&b, "\n## %s\n\n", top)
			if r.doc != "" {
				fmt.Fprintf(&b, "%s\n\n", r.doc)
			}
			b.WriteString("| key | type | default | description |\n|---|---|---|---|\n")
			continue
		}
		if !nested && section != "" {
			section = ""
			b.WriteString("\n## (top level)\n\n| key | type | default | description |\n|---|---|---|---|\n")
		}
		if section == "" && !nested && b.Len() > 0 && !strings.Contains(b.String(), "| key |") {
			b.WriteString("## (top level)\n\n| key | type | default | description |\n|---|---|---|---|\n")
		}
		if r.typ == "section" {
			fmt.Fprintf(&b, "| `%s` | section | | %s |\n", r.key, cell(r.doc))
			continue
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.key, r.typ, r.def, cell(r.doc))
	}
	return b.Bytes()
}

// yamlComments maps dotted keys of the embedded default YAML to the
// comments written beside or above them.
func yamlComments(t *testing.T, src []byte) map[string]string {
	t.Helper()
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(prefix string, n *yaml.Node)
	walk = func(prefix string, n *yaml.Node) {
		if n.Kind == yaml.DocumentNode {
			for _, c := range n.Content {
				walk(prefix, c)
			}
			return
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := prefix + k.Value
			text := k.LineComment
			if text == "" {
				text = v.LineComment
			}
			if text == "" && v.Kind == yaml.MappingNode {
				text = k.HeadComment
			}
			lines := []string{}
			for _, l := range strings.Split(text, "\n") {
				if l = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "#")); l != "" {
					lines = append(lines, l)
				}
			}
			if len(lines) > 0 {
				out[key] = strings.Join(lines, " ")
			}
			walk(key+".", v)
		}
	}
	walk("", &root)
	return out
}

func isScalar(t reflect.Type) bool {
	if t == durationType || t.Implements(textMarshal) || t.Implements(yamlMarshal) || reflect.PointerTo(t).Implements(textMarshal) {
		return true
	}
	return t.Kind() != reflect.Struct
}

func typeName(t reflect.Type) string {
	switch {
	case t == durationType || t == reflect.TypeOf(config.Duration(0)) || strings.HasSuffix(t.Name(), "Duration"):
		return "duration"
	case t.Kind() == reflect.Slice:
		return "list of " + typeName(t.Elem())
	case t.Kind() == reflect.Map:
		return "map of " + typeName(t.Elem())
	case t.Kind() == reflect.Bool:
		return "bool"
	case t.Kind() == reflect.String:
		return "string"
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return "integer"
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		return "number"
	}
	return t.String()
}

func defaultOf(v reflect.Value) string {
	if v.Type() == durationType {
		return "`" + time.Duration(v.Int()).String() + "`"
	}
	if v.Kind() == reflect.Slice && v.Len() == 0 {
		return "`[]`"
	}
	if v.Kind() == reflect.String && v.Len() == 0 {
		return "`\"\"`"
	}
	out, err := yaml.Marshal(v.Interface())
	if err != nil {
		return "?"
	}
	s := strings.TrimSpace(string(out))
	if v.Kind() == reflect.Slice {
		var items []string
		for i := 0; i < v.Len(); i++ {
			o, _ := yaml.Marshal(v.Index(i).Interface())
			items = append(items, strings.TrimSpace(string(o)))
		}
		s = "[" + strings.Join(items, ", ") + "]"
	}
	return "`" + strings.ReplaceAll(s, "\n", " ") + "`"
}

func cell(s string) string {
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

// fallbackDocs describe keys whose struct fields carry no doc comment and
// whose default YAML line has none. Prefer a doc comment on the field.
var fallbackDocs = map[string]string{
	"version":                  "Config format version; must be v1.",
	"listen":                   "host:port of the API (and the mirror and /metrics). Keep it on loopback unless tls is on or a TLS proxy fronts it.",
	"data_dir":                 "State: the SQLite store, session homes, runsc state, the mirror, TLS certificates. Absolute path.",
	"log_level":                "debug, info, warn or error. Logs are JSON lines on stderr.",
	"server":                   "HTTP server settings.",
	"server.max_body_bytes":    "Largest request body accepted (413 above).",
	"server.read_timeout":      "Time allowed to read a whole request, body included (a slow upload past it fails).",
	"server.shutdown_grace":    "On SIGTERM: readiness goes red, running calls get this long to finish, then the rest are killed (each answered 503 draining with Retry-After, or a stream's error event) and every sandbox is cleaned up. A second signal exits at once.",
	"server.drain_delay":       "On SIGTERM: how long /readyz answers 503 (draining) and new work is refused with 503 while the listener stays open, so a load balancer sees it before connections close; then the grace period starts.",
	"server.reap_interval":     "How often idle sessions past their idle_ttl are reaped.",
	"executor":                 "Sandbox runtime settings (gVisor runsc).",
	"executor.runsc":           "runsc binary (name on PATH or path); must be a static build.",
	"executor.platform":        "runsc platform: systrap (default), ptrace or kvm.",
	"executor.max_sandboxes":   "Host-wide ceiling of sandboxes (sessions, stateless calls, installers); 503 no_capacity above it.",
	"executor.home_size":       "Disk quota of one session home (a loop-mounted ext4 image).",
	"executor.hibernate_after": "Hibernate a session idle this long (sandbox, network and mount released; home and plan slot kept; the next call resumes it). 0s never hibernates.",
	"executor.max_disk":        "Cap on the sum of all homes' sizes (sessions running or hibernated, warm sandboxes); create and fork past it answer 507 insufficient_storage. Empty or 0: no cap.",
	"executor.memory_mb":       "Memory limit of one sandbox.",
	"executor.pids":            "Process limit of one sandbox.",
	"executor.cpus":            "CPU limit of one sandbox.",
	"executor.tmp_size_mb":     "Size of the sandbox's /tmp (tmpfs).",
	"executor.create_timeout":  "Time allowed to create and start a sandbox.",
	"executor.compile_timeout": "Time allowed for a compile step (go, java, c, cpp, typescript).",
	"limits":                   "Per-call and per-session limits (plans may lower them).",
	"limits.default_timeout":   "Execution timeout when a call gives none.",
	"limits.max_timeout":       "Largest timeout a call may ask for.",
	"limits.default_idle_ttl":  "Idle time after which a session is reaped, when the request gives none.",
	"limits.max_idle_ttl":      "Largest idle_ttl a request may ask for.",
	"limits.max_code_bytes":    "Largest code field.",
	"limits.max_stdin_bytes":   "Largest stdin field.",
	"api":                      "Authentication and plans.",
	"api.plans_file":           "Plan table file; empty: the embedded configs/plans.yaml.",
	"mirror":                   "The curated package mirror (pip wheels, npm tarballs).",
	"egress":                   "The egress proxy and per-session sandbox networks.",
	"egress.enabled":           "Turn on network for sessions that ask for it (paid plans); needs root, ip and nft, and resolvers.",
	"installer":                "The package installer job.",
	"installer.max_entries":    "Most entries in one unpacked npm package.",
	"installer.table":          "nftables table of the installer networks.",
	"installer.prefix":         "Name prefix of installer netns and veth.",
	"tls.key_file":             "PEM private key of cert_file (mode files).",
}
