package api

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandboxapi/sandboxapi/internal/httperr"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// wireSchema ties one component schema of api/openapi.json to the Go type
// that is its single definition.
type wireSchema struct {
	typ reflect.Type
	// reply marks a shape the server writes: a property the schema
	// requires must then be a field the server always writes (no
	// omitempty).
	reply bool
	// notSent are fields of typ the schema leaves out on purpose, each
	// with the reason (a request type shared by two routes).
	notSent map[string]string
}

// wireSchemas maps every component schema to its Go type; a new schema
// needs a row, and so does a new wire type (or a line in wireNotComponents).
var wireSchemas = map[string]wireSchema{
	"Error":                 {typ: reflect.TypeFor[httperr.Body](), reply: true},
	"ErrorPayload":          {typ: reflect.TypeFor[httperr.Payload](), reply: true},
	"Health":                {typ: reflect.TypeFor[wire.Health](), reply: true},
	"CheckResult":           {typ: reflect.TypeFor[wire.CheckResult](), reply: true},
	"Ready":                 {typ: reflect.TypeFor[wire.Ready](), reply: true},
	"Network":               {typ: reflect.TypeFor[wire.Network]()},
	"Credential":            {typ: reflect.TypeFor[wire.Credential](), notSent: map[string]string{"sealed": "the stored form: refused in requests (400), never in replies"}},
	"File":                  {typ: reflect.TypeFor[wire.File]()},
	"ExecuteRequest":        {typ: reflect.TypeFor[wire.ExecuteRequest]()},
	"SessionExecuteRequest": {typ: reflect.TypeFor[wire.ExecuteRequest](), notSent: map[string]string{"language": "a session has its language: refused with 400", "version": "a session has its version: refused with 400", "files": "files go through PUT .../files: refused with 400"}},
	"ExecResult":            {typ: reflect.TypeFor[wire.ExecuteResult](), reply: true},
	"CreateSessionRequest":  {typ: reflect.TypeFor[wire.CreateSessionRequest]()},
	"Session":               {typ: reflect.TypeFor[wire.Session](), reply: true},
	"SessionList":           {typ: reflect.TypeFor[wire.SessionList](), reply: true},
	"Runtime":               {typ: reflect.TypeFor[wire.Runtime](), reply: true},
	"RuntimeVersion":        {typ: reflect.TypeFor[wire.RuntimeVersion](), reply: true},
	"RuntimeList":           {typ: reflect.TypeFor[wire.RuntimeList](), reply: true},
	"Usage":                 {typ: reflect.TypeFor[wire.Usage](), reply: true},
	"UsageTotal":            {typ: reflect.TypeFor[wire.UsageTotal](), reply: true},
	"EgressDecisions":       {typ: reflect.TypeFor[wire.EgressDecisions](), reply: true},
	"EgressDecision":        {typ: reflect.TypeFor[wire.EgressDecision](), reply: true},
	"CheckPackagesRequest":  {typ: reflect.TypeFor[wire.PackagesRequest]()},
	"PackageVerdict":        {typ: reflect.TypeFor[wire.PackageVerdict](), reply: true},
	"PackageVerdicts":       {typ: reflect.TypeFor[wire.PackageVerdicts](), reply: true},
	"InstallRequest":        {typ: reflect.TypeFor[wire.InstallRequest]()},
	"InstallReply":          {typ: reflect.TypeFor[wire.InstallReply](), reply: true},
	"InstalledPackage":      {typ: reflect.TypeFor[wire.InstalledPackage](), reply: true},
	"FileInfo":              {typ: reflect.TypeFor[wire.FileInfo](), reply: true},
	"FileListing":           {typ: reflect.TypeFor[wire.FileListing](), reply: true},
	"ForkRequest":           {typ: reflect.TypeFor[wire.ForkRequest]()},
	"MakeDirRequest":        {typ: reflect.TypeFor[wire.MakeDirRequest]()},
	"MoveRequest":           {typ: reflect.TypeFor[wire.MoveRequest]()},
	"FileEvent":             {typ: reflect.TypeFor[wire.FileEvent](), reply: true},
	"WatchEnd":              {typ: reflect.TypeFor[wire.WatchEnd](), reply: true},
	"CellResult":            {typ: reflect.TypeFor[wire.CellResult](), reply: true},
	"CellError":             {typ: reflect.TypeFor[wire.CellError](), reply: true},
	"StartProcessRequest":   {typ: reflect.TypeFor[wire.StartProcessRequest]()},
	"TermSize":              {typ: reflect.TypeFor[wire.TermSize]()},
	"SignalRequest":         {typ: reflect.TypeFor[wire.SignalRequest]()},
	"Process":               {typ: reflect.TypeFor[wire.Process](), reply: true},
	"ProcessList":           {typ: reflect.TypeFor[wire.ProcessList](), reply: true},
	"StdinReply":            {typ: reflect.TypeFor[wire.StdinReply](), reply: true},
}

// wireNotComponents are wire types without a component schema of their
// own, each with where the document describes it.
var wireNotComponents = map[reflect.Type]string{
	reflect.TypeFor[wire.Build]():              "inline in Health.build",
	reflect.TypeFor[wire.Limits]():             "inline in RuntimeList.limits",
	reflect.TypeFor[wire.InstallPhases]():      "inline in InstallReply.phases_ms",
	reflect.TypeFor[wire.StreamChunk]():        "the stdout and stderr events of a stream, described in the execute responses' text",
	reflect.TypeFor[wire.NotReadyDetails]():    "an install's 503 details (ErrorPayload.details is free-form), described in the response's text",
	reflect.TypeFor[wire.RejectedDetails]():    "an install's 422 details, described in the response's text",
	reflect.TypeFor[wire.PackageRejection]():   "entries of RejectedDetails",
	reflect.TypeFor[wire.ProcessOutputChunk](): "the stdout, stderr and pty events of a process's output stream, described in its response's text",
	reflect.TypeFor[wire.ProcessOutputGap]():   "the dropped event of a process's output stream, described in its response's text",
}

// wireTypes are the struct types package wire declares (or names), to
// hold wireSchemas and wireNotComponents complete.
var wireTypes = []reflect.Type{
	reflect.TypeFor[wire.ExecuteResult](), reflect.TypeFor[wire.UsageTotal](), reflect.TypeFor[wire.Usage](),
	reflect.TypeFor[wire.EgressDecision](), reflect.TypeFor[wire.EgressDecisions](),
	reflect.TypeFor[wire.Network](), reflect.TypeFor[wire.File](), reflect.TypeFor[wire.ExecuteRequest](),
	reflect.TypeFor[wire.CreateSessionRequest](), reflect.TypeFor[wire.ForkRequest](), reflect.TypeFor[wire.PackagesRequest](),
	reflect.TypeFor[wire.Health](), reflect.TypeFor[wire.Build](), reflect.TypeFor[wire.CheckResult](), reflect.TypeFor[wire.Ready](),
	reflect.TypeFor[wire.NotReadyDetails](), reflect.TypeFor[wire.Runtime](), reflect.TypeFor[wire.Limits](),
	reflect.TypeFor[wire.RuntimeList](), reflect.TypeFor[wire.Session](), reflect.TypeFor[wire.SessionList](),
	reflect.TypeFor[wire.StreamChunk](), reflect.TypeFor[wire.FileInfo](), reflect.TypeFor[wire.FileListing](),
	reflect.TypeFor[wire.InstallReply](), reflect.TypeFor[wire.InstalledPackage](), reflect.TypeFor[wire.InstallPhases](),
	reflect.TypeFor[wire.PackageRejection](), reflect.TypeFor[wire.RejectedDetails](),
	reflect.TypeFor[wire.PackageVerdict](), reflect.TypeFor[wire.PackageVerdicts](), reflect.TypeFor[wire.InstallRequest](),
	reflect.TypeFor[wire.CellResult](), reflect.TypeFor[wire.CellError](),
	reflect.TypeFor[wire.StartProcessRequest](), reflect.TypeFor[wire.TermSize](), reflect.TypeFor[wire.SignalRequest](),
	reflect.TypeFor[wire.Process](), reflect.TypeFor[wire.ProcessList](), reflect.TypeFor[wire.StdinReply](),
	reflect.TypeFor[wire.ProcessOutputChunk](), reflect.TypeFor[wire.ProcessOutputGap](),
	reflect.TypeFor[wire.MakeDirRequest](), reflect.TypeFor[wire.MoveRequest](),
	reflect.TypeFor[wire.FileEvent](), reflect.TypeFor[wire.WatchEnd](),
}

// wireField is one field of a struct as encoding/json writes it.
type wireField struct {
	name      string
	typ       reflect.Type
	omitempty bool
}

// jsonFields lists t's JSON fields (t a struct).
func wireFields(t reflect.Type) []wireField {
	var out []wireField
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			out = append(out, wireFields(deref(f.Type))...)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, wireField{name: name, typ: f.Type, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")})
	}
	return out
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// basicType is the JSON type encoding/json writes for t; "" for any value.
func basicType(t reflect.Type) string {
	t = deref(t)
	if t == reflect.TypeFor[time.Time]() {
		return "string"
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Marshaler]()) {
		return "" // writes its own JSON
	}
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "integer"
	case reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "string" // base64
		}
		return "array"
	case reflect.Array:
		return "array"
	case reflect.Struct, reflect.Map:
		return "object"
	case reflect.Interface:
		return ""
	}
	return "unsupported " + t.Kind().String()
}

// schemaTypes returns the JSON types a schema allows besides null (nil:
// any type).
func schemaTypes(s map[string]any) []string {
	switch v := s["type"].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			if x != "null" {
				out = append(out, fmt.Sprint(x))
			}
		}
		return out
	}
	return nil
}

// wireChecker compares schemas with Go types.
type wireChecker struct {
	schemas map[string]map[string]any
	// byType is each Go type's schema names, to check that a $ref names a
	// schema of the field's type.
	byType map[reflect.Type][]string
}

const schemaRefPrefix = "#/components/schemas/"

// compare checks the schema s at path against the Go type t and returns
// the differences. reply says whether the server writes the value.
func (c *wireChecker) compare(path string, s map[string]any, t reflect.Type, reply bool, notSent map[string]string) []string {
	t = deref(t)
	if ref, ok := s["$ref"].(string); ok {
		name, found := strings.CutPrefix(ref, schemaRefPrefix)
		if !found || c.schemas[name] == nil {
			return []string{fmt.Sprintf("%s: $ref %q names no component schema", path, ref)}
		}
		if !slices.Contains(c.byType[t], name) {
			return []string{fmt.Sprintf("%s: refers to %s, but the Go field is %s, the type of %v", path, name, t, c.byType[t])}
		}
		return nil // the component is compared on its own
	}
	want := basicType(t)
	types := schemaTypes(s)
	if want == "" || len(types) == 0 {
		if want != "" && len(s) > 0 {
			if _, described := s["description"]; !described || len(s) > 1 {
				return []string{fmt.Sprintf("%s: schema states no type; Go writes %s", path, want)}
			}
		}
		return nil
	}
	if !slices.Contains(types, want) || len(types) > 1 {
		return []string{fmt.Sprintf("%s: schema type %v, Go type %s writes %s", path, types, t, want)}
	}
	var bad []string
	switch want {
	case "array":
		if items, ok := s["items"].(map[string]any); ok {
			bad = append(bad, c.compare(path+"[]", items, t.Elem(), reply, nil)...)
		} else {
			bad = append(bad, path+": array schema without items")
		}
	case "object":
		if t.Kind() == reflect.Map {
			if t.Key().Kind() != reflect.String {
				bad = append(bad, fmt.Sprintf("%s: map key %s is not a string", path, t.Key()))
			}
			if ap, ok := s["additionalProperties"].(map[string]any); ok {
				bad = append(bad, c.compare(path+"{}", ap, t.Elem(), reply, nil)...)
			} else {
				bad = append(bad, path+": a map's schema needs additionalProperties with the value schema")
			}
			return bad
		}
		bad = append(bad, c.compareStruct(path, s, t, reply, notSent)...)
	}
	return bad
}

// compareStruct checks properties against the fields of struct t, both ways.
func (c *wireChecker) compareStruct(path string, s map[string]any, t reflect.Type, reply bool, notSent map[string]string) []string {
	var bad []string
	props, _ := s["properties"].(map[string]any)
	fields := map[string]wireField{}
	for _, f := range wireFields(t) {
		fields[f.name] = f
		if _, skip := notSent[f.name]; skip {
			if _, in := props[f.name]; in {
				bad = append(bad, fmt.Sprintf("%s: %q is listed as left out (%s) but the schema has it", path, f.name, notSent[f.name]))
			}
			continue
		}
		ps, ok := props[f.name].(map[string]any)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s: Go field %q of %s is not in the schema's properties", path, f.name, t))
			continue
		}
		bad = append(bad, c.compare(path+"."+f.name, ps, f.typ, reply, nil)...)
	}
	for name := range props {
		if _, ok := fields[name]; !ok {
			bad = append(bad, fmt.Sprintf("%s: schema property %q has no field in Go type %s", path, name, t))
		}
	}
	if reply {
		req, _ := s["required"].([]any)
		for _, r := range req {
			name := fmt.Sprint(r)
			if f, ok := fields[name]; ok && f.omitempty {
				bad = append(bad, fmt.Sprintf("%s: %q is required by the schema but omitempty in Go: the server leaves it out when empty", path, name))
			}
		}
	}
	return bad
}

// loadComponentSchemas reads the component schemas of api/openapi.json.
func loadComponentSchemas(t *testing.T) map[string]map[string]any {
	t.Helper()
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Components.Schemas) == 0 {
		t.Fatal("openapi.json has no component schemas")
	}
	return doc.Components.Schemas
}

func newWireChecker(schemas map[string]map[string]any, table map[string]wireSchema) *wireChecker {
	c := &wireChecker{schemas: schemas, byType: map[reflect.Type][]string{}}
	for name, row := range table {
		c.byType[row.typ] = append(c.byType[row.typ], name)
	}
	return c
}

// TestOpenAPISchemasMatchWireTypes checks every component schema of the
// OpenAPI document against its Go type in package wire by reflection:
// each JSON field is a property and each property a field, with the same
// basic JSON type, nested objects and array items included; a $ref names
// a schema of the field's Go type; and a property a reply schema requires
// is never left out by omitempty.
func TestOpenAPISchemasMatchWireTypes(t *testing.T) {
	t.Parallel()
	schemas := loadComponentSchemas(t)
	c := newWireChecker(schemas, wireSchemas)
	for _, name := range sortedKeys(schemas) {
		row, ok := wireSchemas[name]
		if !ok {
			t.Errorf("component schema %s has no Go type in wireSchemas: declare its type in package wire and add a row", name)
			continue
		}
		for _, d := range c.compare(name, schemas[name], row.typ, row.reply, row.notSent) {
			t.Error(d)
		}
	}
	for _, name := range sortedKeys(wireSchemas) {
		if schemas[name] == nil {
			t.Errorf("wireSchemas names %s, which openapi.json does not have", name)
		}
	}
	for _, typ := range wireTypes {
		if len(c.byType[typ]) == 0 && wireNotComponents[typ] == "" {
			t.Errorf("wire type %s is in no component schema: add its schema to openapi.json and a row to wireSchemas, or say where it is described in wireNotComponents", typ)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestWireCheckerFindsMismatches holds the checker to finding each kind
// of drift between a schema and a Go type.
func TestWireCheckerFindsMismatches(t *testing.T) {
	t.Parallel()
	type inner struct {
		N int `json:"n"`
	}
	type shape struct {
		Name  string            `json:"name"`
		Count int64             `json:"count,omitempty"`
		Tags  []string          `json:"tags"`
		Deps  map[string]string `json:"deps,omitempty"`
		In    *inner            `json:"in,omitempty"`
		When  time.Time         `json:"when"`
		Any   any               `json:"any,omitempty"`
		Skip  string            `json:"-"`
	}
	good := func() map[string]any {
		return map[string]any{
			"type": "object", "required": []any{"name", "tags", "when"},
			"properties": map[string]any{
				"name":  map[string]any{"type": "string"},
				"count": map[string]any{"type": "integer"},
				"tags":  map[string]any{"type": []any{"array", "null"}, "items": map[string]any{"type": "string"}},
				"deps":  map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "string"}},
				"in":    map[string]any{"$ref": schemaRefPrefix + "Inner"},
				"when":  map[string]any{"type": "string", "format": "date-time"},
				"any":   map[string]any{},
			},
		}
	}
	props := func(s map[string]any) map[string]any { return s["properties"].(map[string]any) }
	tests := []struct {
		name string
		edit func(s map[string]any)
		want string // a substring of one difference; "" for none
	}{
		{name: "matching", edit: func(map[string]any) {}},
		{name: "field missing from the schema", edit: func(s map[string]any) { delete(props(s), "count") }, want: `Go field "count"`},
		{name: "property without a field", edit: func(s map[string]any) { props(s)["extra"] = map[string]any{"type": "string"} }, want: `"extra" has no field`},
		{name: "json:\"-\" field named in the schema", edit: func(s map[string]any) { props(s)["Skip"] = map[string]any{"type": "string"} }, want: `"Skip" has no field`},
		{name: "integer as string", edit: func(s map[string]any) { props(s)["count"] = map[string]any{"type": "string"} }, want: "schema type [string]"},
		{name: "number for an integer", edit: func(s map[string]any) { props(s)["count"] = map[string]any{"type": "number"} }, want: "writes integer"},
		{name: "time as integer", edit: func(s map[string]any) { props(s)["when"] = map[string]any{"type": "integer"} }, want: "writes string"},
		{name: "two types for one", edit: func(s map[string]any) { props(s)["name"] = map[string]any{"type": []any{"string", "integer"}} }, want: "schema type [string integer]"},
		{name: "items of the wrong type", edit: func(s map[string]any) {
			props(s)["tags"] = map[string]any{"type": "array", "items": map[string]any{"type": "integer"}}
		}, want: "tags[]"},
		{name: "array without items", edit: func(s map[string]any) { props(s)["tags"] = map[string]any{"type": "array"} }, want: "without items"},
		{name: "map without a value schema", edit: func(s map[string]any) { props(s)["deps"] = map[string]any{"type": "object"} }, want: "additionalProperties"},
		{name: "map values of the wrong type", edit: func(s map[string]any) {
			props(s)["deps"] = map[string]any{"type": "object", "additionalProperties": map[string]any{"type": "boolean"}}
		}, want: "deps{}"},
		{name: "ref to the wrong type", edit: func(s map[string]any) { props(s)["in"] = map[string]any{"$ref": schemaRefPrefix + "Other"} }, want: "refers to Other"},
		{name: "ref to no schema", edit: func(s map[string]any) { props(s)["in"] = map[string]any{"$ref": schemaRefPrefix + "Gone"} }, want: "names no component schema"},
		{name: "inline object drifted", edit: func(s map[string]any) {
			props(s)["in"] = map[string]any{"type": "object", "properties": map[string]any{"m": map[string]any{"type": "integer"}}}
		}, want: `Go field "n"`},
		{name: "required but omitempty", edit: func(s map[string]any) { s["required"] = []any{"name", "count"} }, want: `"count" is required by the schema but omitempty`},
		{name: "no type for a typed field", edit: func(s map[string]any) { props(s)["name"] = map[string]any{"enum": []any{"a"}} }, want: "schema states no type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := good()
			tt.edit(s)
			schemas := map[string]map[string]any{"Shape": s, "Inner": {"type": "object"}, "Other": {"type": "object"}}
			c := newWireChecker(schemas, map[string]wireSchema{
				"Shape": {typ: reflect.TypeFor[shape](), reply: true},
				"Inner": {typ: reflect.TypeFor[inner]()},
				"Other": {typ: reflect.TypeFor[string]()},
			})
			diffs := c.compare("Shape", s, reflect.TypeFor[shape](), true, nil)
			if tt.want == "" {
				if len(diffs) > 0 {
					t.Fatalf("differences in a matching schema: %q", diffs)
				}
				return
			}
			if !slices.ContainsFunc(diffs, func(d string) bool { return strings.Contains(d, tt.want) }) {
				t.Errorf("differences %q, want one with %q", diffs, tt.want)
			}
		})
	}
}
