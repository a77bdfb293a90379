// Package openapicheck validates replies of the API against its OpenAPI
// document (api/openapi.json): the path and method are documented, the
// status is one of the operation's, the content type one of the status's,
// and a JSON body (or each event of a Server-Sent Events stream) matches
// the schema. Objects are checked closed: a field the document does not
// name fails, so a renamed or misspelt field shows at once. Tests of the
// api package and the end-to-end suite (against the real server) use it;
// it does no I/O.
package openapicheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrUndocumented is wrapped when the reply's route, status or content
// type is not in the document.
var ErrUndocumented = errors.New("not in the OpenAPI document")

type document struct {
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Responses map[string]response `json:"responses"`
		Schemas   map[string]any      `json:"schemas"`
	} `json:"components"`
}

type operation struct {
	Responses map[string]response `json:"responses"`
}

type response struct {
	Ref     string `json:"$ref"`
	Content map[string]struct {
		Schema map[string]any `json:"schema"`
	} `json:"content"`
}

type route struct {
	re   *regexp.Regexp
	path string
}

// Checker validates replies. Build it with New; it is safe for concurrent
// use.
type Checker struct {
	doc    document
	ops    map[string]operation // "METHOD /path"
	routes []route

	mu    sync.Mutex
	c     *jsonschema.Compiler
	cache map[string]*jsonschema.Schema
	n     int
}

const base = "https://sandboxapi.local/openapi.json"

// New parses an OpenAPI document.
func New(doc []byte) (*Checker, error) {
	k := &Checker{ops: map[string]operation{}, cache: map[string]*jsonschema.Schema{}}
	if err := json.Unmarshal(doc, &k.doc); err != nil {
		return nil, fmt.Errorf("decoding the OpenAPI document: %w", err)
	}
	paths := make([]string, 0, len(k.doc.Paths))
	for p, item := range k.doc.Paths {
		paths = append(paths, p)
		for m, raw := range item {
			var op operation
			if err := json.Unmarshal(raw, &op); err != nil || op.Responses == nil {
				continue // parameters, summary and the like
			}
			k.ops[strings.ToUpper(m)+" "+p] = op
		}
	}
	sort.Strings(paths)
	for _, p := range paths {
		re := "^" + regexp.MustCompile(`\\\{[^}]+\\\}`).ReplaceAllString(regexp.QuoteMeta(p), `[^/]+`) + "$"
		k.routes = append(k.routes, route{re: regexp.MustCompile(re), path: p})
	}
	k.c = jsonschema.NewCompiler()
	k.c.DefaultDraft(jsonschema.Draft2020)
	var root any
	b, _ := json.Marshal(map[string]any{"components": map[string]any{"schemas": k.doc.Components.Schemas}})
	if err := json.Unmarshal(b, &root); err != nil {
		return nil, err
	}
	closeObjects(root)
	if err := k.c.AddResource(base, root); err != nil {
		return nil, err
	}
	return k, nil
}

// Path returns the document's path that a concrete path matches, or "".
func (k *Checker) Path(path string) string {
	for _, r := range k.routes {
		if r.re.MatchString(path) {
			return r.path
		}
	}
	return ""
}

// Reply checks one reply. A path the document does not hold answers
// ErrUndocumented, except a 404 under /v1/ (the catch-all), whose body
// must be the Error schema.
func (k *Checker) Reply(method, path string, status int, contentType string, body []byte) error {
	p := k.Path(path)
	if p == "" {
		if status == 404 && strings.HasPrefix(path, "/v1/") {
			return k.Schema("#/components/schemas/Error", body)
		}
		return fmt.Errorf("%w: path %s", ErrUndocumented, path)
	}
	op, ok := k.ops[method+" "+p]
	if !ok {
		return fmt.Errorf("%w: %s %s", ErrUndocumented, method, p)
	}
	r, ok := op.Responses[strconv.Itoa(status)]
	if !ok {
		return fmt.Errorf("%w: status %d of %s %s", ErrUndocumented, status, method, p)
	}
	if name, ok := strings.CutPrefix(r.Ref, "#/components/responses/"); ok {
		r = k.doc.Components.Responses[name]
	}
	if len(r.Content) == 0 {
		if len(body) != 0 {
			return fmt.Errorf("%s %s %d: documented without a body, got %q", method, p, status, body)
		}
		return nil
	}
	ct, _, _ := strings.Cut(contentType, ";")
	media, ok := r.Content[ct]
	if !ok {
		return fmt.Errorf("%w: content type %q of %s %s %d", ErrUndocumented, ct, method, p, status)
	}
	switch ct {
	case "text/event-stream":
		if strings.HasSuffix(p, "/processes/{pid}/output") {
			return k.processEvents(body)
		}
		return k.events(body)
	case "application/json":
		if err := k.validate(media.Schema, body); err != nil {
			return fmt.Errorf("%s %s %d: %w", method, p, status, err)
		}
	}
	return nil
}

// Schema validates body against a component ("#/components/schemas/X").
func (k *Checker) Schema(ref string, body []byte) error {
	return k.validate(map[string]any{"$ref": ref}, body)
}

// events validates a streamed execution: output events (stdout, stderr,
// a kernel cell's display), then one result or error event.
func (k *Checker) events(body []byte) error {
	last := ""
	for _, ev := range strings.Split(strings.TrimSpace(string(body)), "\n\n") {
		var event, data string
		comment := true
		for _, line := range strings.Split(ev, "\n") {
			if !strings.HasPrefix(line, ":") {
				comment = false
			}
			if s, ok := strings.CutPrefix(line, "event: "); ok {
				event = s
			}
			if s, ok := strings.CutPrefix(line, "data: "); ok {
				data = s
			}
		}
		if comment {
			continue // a heartbeat
		}
		last = event
		switch event {
		case "stdout", "stderr":
			var d struct{ Data *string }
			if err := json.Unmarshal([]byte(data), &d); err != nil || d.Data == nil {
				return fmt.Errorf("bad %s event %q", event, data)
			}
		case "display":
			// A kernel cell's rich output, as it comes.
			if err := k.Schema("#/components/schemas/CellResult", []byte(data)); err != nil {
				return fmt.Errorf("display event: %w", err)
			}
		case "result":
			if err := k.Schema("#/components/schemas/ExecResult", []byte(data)); err != nil {
				return fmt.Errorf("result event: %w", err)
			}
		case "error":
			if err := k.Schema("#/components/schemas/ErrorPayload", []byte(data)); err != nil {
				return fmt.Errorf("error event: %w", err)
			}
		default:
			return fmt.Errorf("unknown event %q", event)
		}
	}
	if last != "result" && last != "error" {
		return fmt.Errorf("stream ended with %q, want result or error", last)
	}
	return nil
}

// processEvents validates a process's output stream: output events
// (stdout, stderr, pty: data and offset) and dropped events (dropped and
// offset) with an id line each, at most one exit event (a Process) and
// nothing after it, or an error event that ends it. A stream may end
// without exit (a running process, without follow) and may be empty.
func (k *Checker) processEvents(body []byte) error {
	last := ""
	for _, ev := range strings.Split(strings.TrimSpace(string(body)), "\n\n") {
		if strings.TrimSpace(ev) == "" {
			continue
		}
		var event, data string
		hasID, comment := false, true
		for _, line := range strings.Split(ev, "\n") {
			if !strings.HasPrefix(line, ":") {
				comment = false
			}
			if s, ok := strings.CutPrefix(line, "event: "); ok {
				event = s
			}
			if s, ok := strings.CutPrefix(line, "data: "); ok {
				data = s
			}
			if s, ok := strings.CutPrefix(line, "id: "); ok {
				if _, err := strconv.ParseInt(s, 10, 64); err != nil {
					return fmt.Errorf("event id %q is not an offset", s)
				}
				hasID = true
			}
		}
		if comment {
			continue
		}
		if last == "exit" || last == "error" {
			return fmt.Errorf("event %q after %q", event, last)
		}
		last = event
		switch event {
		case "stdout", "stderr", "pty":
			var d struct {
				Data   *string
				Offset *int64
			}
			if err := json.Unmarshal([]byte(data), &d); err != nil || d.Data == nil || d.Offset == nil || !hasID {
				return fmt.Errorf("bad %s event %q", event, ev)
			}
		case "dropped":
			var d struct{ Dropped, Offset *int64 }
			if err := json.Unmarshal([]byte(data), &d); err != nil || d.Dropped == nil || d.Offset == nil || !hasID {
				return fmt.Errorf("bad dropped event %q", ev)
			}
		case "exit":
			if err := k.Schema("#/components/schemas/Process", []byte(data)); err != nil {
				return fmt.Errorf("exit event: %w", err)
			}
		case "error":
			if err := k.Schema("#/components/schemas/ErrorPayload", []byte(data)); err != nil {
				return fmt.Errorf("error event: %w", err)
			}
		default:
			return fmt.Errorf("unknown event %q", event)
		}
	}
	return nil
}

// Validate checks body against schema: a $ref into the document's
// components ({"$ref": "#/components/schemas/X"}) or a small literal
// schema (a request body's), with objects closed as everywhere.
func (k *Checker) Validate(schema map[string]any, body []byte) error { return k.validate(schema, body) }

func (k *Checker) validate(schema map[string]any, body []byte) error {
	k.mu.Lock()
	sch, err := k.compile(schema)
	k.mu.Unlock()
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// compile returns the compiled schema (a $ref into the components or a
// small literal); k.mu is held.
func (k *Checker) compile(schema map[string]any) (*jsonschema.Schema, error) {
	if ref, ok := schema["$ref"].(string); ok && len(schema) == 1 {
		loc := base + ref
		if sch, ok := k.cache[loc]; ok {
			return sch, nil
		}
		sch, err := k.c.Compile(loc)
		if err == nil {
			k.cache[loc] = sch
		}
		return sch, err
	}
	key, _ := json.Marshal(schema)
	if sch, ok := k.cache[string(key)]; ok {
		return sch, nil
	}
	k.n++
	loc := "https://sandboxapi.local/inline/" + strconv.Itoa(k.n) + ".json"
	var s any
	_ = json.Unmarshal(key, &s)
	closeObjects(s)
	if err := k.c.AddResource(loc, s); err != nil {
		return nil, err
	}
	sch, err := k.c.Compile(loc)
	if err == nil {
		k.cache[string(key)] = sch
	}
	return sch, err
}

// closeObjects sets additionalProperties to false in every object schema
// under v that lists properties and says nothing of others.
func closeObjects(v any) {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["properties"]; ok {
			if _, set := x["additionalProperties"]; !set {
				x["additionalProperties"] = false
			}
		}
		for _, e := range x {
			closeObjects(e)
		}
	case []any:
		for _, e := range x {
			closeObjects(e)
		}
	}
}
