// Package deploycheck checks the Kubernetes manifests in deploy/kubernetes:
// every kustomization renders, and what it renders validates against the
// Kubernetes API's own schemas (kubeconform, offline), refers only to
// objects it holds, and runs only sandboxapi commands, flags, environment
// variables and config keys that exist.
//
// This file turns the Kubernetes OpenAPI v2 document (api/openapi-spec/
// swagger.json of the k8s.io/kubernetes module, which the Go module proxy
// serves) into JSON schemas laid out for kubeconform's -schema-location,
// so that validation needs no download from anywhere but the module proxy.
package deploycheck

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DefinitionsFile holds every definition; each kind's file refers into it.
const DefinitionsFile = "_definitions.json"

// SchemaTemplate is kubeconform's -schema-location for a folder Convert's
// files were written to (dir is joined in front).
const SchemaTemplate = "{{ .ResourceKind }}{{ .KindSuffix }}.json"

// Special definitions whose OpenAPI type says less than the API accepts.
const (
	intOrString = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
	quantity    = "io.k8s.apimachinery.pkg.api.resource.Quantity"
)

type gvk struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// apiVersion is how a manifest spells g's group and version.
func (g gvk) apiVersion() string {
	if g.Group == "" {
		return g.Version
	}
	return g.Group + "/" + g.Version
}

// fileName is the name kubeconform looks for (its registry's
// ResourceKind and KindSuffix: the kind in lower case, the group's first
// label and the version).
func (g gvk) fileName() string {
	name := strings.ToLower(g.Kind)
	if g.Group != "" {
		name += "-" + strings.ToLower(strings.SplitN(g.Group, ".", 2)[0])
	}
	return name + "-" + strings.ToLower(g.Version) + ".json"
}

// Convert turns an OpenAPI v2 document into kubeconform's schema files:
// DefinitionsFile with every definition, and one file per kind that names
// its definition and pins kind and apiVersion. The schemas are strict:
// an object that lists its properties allows no other (unless the API
// marks it x-kubernetes-preserve-unknown-fields), so an unknown or
// misspelt field fails. Int-or-string fields take both, quantities take
// strings and numbers, and null is accepted wherever a value is (the API
// server reads null as unset). Descriptions are dropped.
func Convert(swagger []byte) (map[string][]byte, error) {
	var doc struct {
		Swagger     string                    `json:"swagger"`
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(swagger, &doc); err != nil {
		return nil, fmt.Errorf("decoding the OpenAPI document: %w", err)
	}
	if !strings.HasPrefix(doc.Swagger, "2.") || len(doc.Definitions) == 0 {
		return nil, errors.New("not an OpenAPI v2 document with definitions")
	}
	defs := make(map[string]any, len(doc.Definitions))
	files := map[string][]byte{}
	owner := map[string]string{} // file name -> definition
	names := make([]string, 0, len(doc.Definitions))
	for name := range doc.Definitions {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		def := doc.Definitions[name]
		var kinds []gvk
		if raw, ok := def["x-kubernetes-group-version-kind"]; ok {
			b, _ := json.Marshal(raw)
			if err := json.Unmarshal(b, &kinds); err != nil {
				return nil, fmt.Errorf("definition %s: reading its group, version and kind: %w", name, err)
			}
		}
		switch name {
		case intOrString:
			defs[name] = map[string]any{"oneOf": []any{typed("string"), typed("integer"), typed("null")}}
		case quantity:
			defs[name] = map[string]any{"oneOf": []any{typed("string"), typed("number"), typed("null")}}
		default:
			defs[name] = convert(def)
		}
		for _, k := range kinds {
			if k.Kind == "" || k.Version == "" {
				continue
			}
			fn := k.fileName()
			if prev, ok := owner[fn]; ok && prev != name {
				return nil, fmt.Errorf("%s: both %s and %s", fn, prev, name)
			}
			owner[fn] = name
			kind := map[string]any{
				"allOf": []any{
					map[string]any{"$ref": DefinitionsFile + "#/definitions/" + name},
					map[string]any{
						"type":     "object",
						"required": []any{"apiVersion", "kind"},
						"properties": map[string]any{
							"apiVersion": map[string]any{"enum": []any{k.apiVersion()}},
							"kind":       map[string]any{"enum": []any{k.Kind}},
						},
					},
				},
			}
			b, err := json.Marshal(kind)
			if err != nil {
				return nil, err
			}
			files[fn] = b
		}
	}
	if len(files) == 0 {
		return nil, errors.New("no definition names a kind (x-kubernetes-group-version-kind)")
	}
	b, err := json.Marshal(map[string]any{"definitions": defs})
	if err != nil {
		return nil, err
	}
	files[DefinitionsFile] = b
	return files, nil
}

func typed(t string) map[string]any { return map[string]any{"type": t} }

// convert rewrites one schema (and everything in it) as described at
// Convert.
func convert(v any) any {
	switch s := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(s))
		for k, val := range s {
			switch {
			case k == "description" || strings.HasPrefix(k, "x-"):
				// dropped: not validation
			case k == "properties":
				// Names, not keywords: a property called "description"
				// or "x-y" stays.
				if m, ok := val.(map[string]any); ok {
					props := make(map[string]any, len(m))
					for p, ps := range m {
						props[p] = convert(ps)
					}
					out[k] = props
				} else {
					out[k] = val
				}
			case k == "items" || k == "additionalProperties" || k == "not" ||
				k == "allOf" || k == "anyOf" || k == "oneOf":
				out[k] = convert(val)
			case k == "$ref":
				out[k] = val // "#/definitions/...": the same file
			default:
				out[k] = val
			}
		}
		if t, ok := out["type"].(string); ok {
			out["type"] = []any{t, "null"}
		}
		if f, _ := out["format"].(string); f == "int-or-string" {
			delete(out, "format")
			out["type"] = []any{"string", "integer", "null"}
		}
		_, listed := out["properties"]
		_, open := out["additionalProperties"]
		preserve, _ := s["x-kubernetes-preserve-unknown-fields"].(bool)
		if listed && !open && !preserve {
			out["additionalProperties"] = false
		}
		return out
	case []any:
		conv := make([]any, len(s))
		for i, e := range s {
			conv[i] = convert(e)
		}
		return conv
	default:
		return v
	}
}

// WriteSchemas converts the OpenAPI v2 document at swaggerPath and writes
// the files into dir (created if missing), returning how many kinds it
// wrote.
func WriteSchemas(swaggerPath, dir string) (int, error) {
	b, err := os.ReadFile(swaggerPath)
	if err != nil {
		return 0, err
	}
	files, err := Convert(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", swaggerPath, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			return 0, err
		}
	}
	return len(files) - 1, nil
}
