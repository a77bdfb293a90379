package deploycheck

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A small OpenAPI v2 document in the shape of Kubernetes' own.
const miniSwagger = `{
  "swagger": "2.0",
  "definitions": {
    "io.k8s.api.apps.v1.Thing": {
      "description": "dropped",
      "type": "object",
      "required": ["spec"],
      "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "spec": {"$ref": "#/definitions/io.k8s.api.apps.v1.ThingSpec"}
      },
      "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "Thing", "version": "v1"}]
    },
    "io.k8s.api.apps.v1.ThingSpec": {
      "type": "object",
      "properties": {
        "port": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
        "memory": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.api.resource.Quantity"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "raw": {"type": "object", "properties": {"a": {"type": "string"}}, "x-kubernetes-preserve-unknown-fields": true},
        "type": {"type": "string", "description": "a property named like a keyword"}
      }
    },
    "io.k8s.api.core.v1.Pod": {
      "type": "object",
      "x-kubernetes-group-version-kind": [{"group": "", "kind": "Pod", "version": "v1"}]
    },
    "io.k8s.api.networking.v1.NetworkPolicy": {
      "type": "object",
      "x-kubernetes-group-version-kind": [{"group": "networking.k8s.io", "kind": "NetworkPolicy", "version": "v1"}]
    },
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"}
  }
}`

// TestConvert checks the conversion on a document small enough to read:
// kubeconform's file names, strict objects, the special types, and the
// kind files' pins.
func TestConvert(t *testing.T) {
	files, err := Convert([]byte(miniSwagger))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	for _, want := range []string{DefinitionsFile, "thing-apps-v1.json", "pod-v1.json", "networkpolicy-networking-v1.json"} {
		if files[want] == nil {
			t.Errorf("no %s among %v", want, names)
		}
	}
	if len(files) != 4 {
		t.Errorf("want 4 files, got %v", names)
	}
	var defs struct {
		Definitions map[string]map[string]any `json:"definitions"`
	}
	if err := json.Unmarshal(files[DefinitionsFile], &defs); err != nil {
		t.Fatal(err)
	}
	thing := defs.Definitions["io.k8s.api.apps.v1.Thing"]
	spec := defs.Definitions["io.k8s.api.apps.v1.ThingSpec"]
	props := spec["properties"].(map[string]any)
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"descriptions dropped", thing["description"], nil},
		{"extensions dropped", thing["x-kubernetes-group-version-kind"], nil},
		{"listed properties only", thing["additionalProperties"], false},
		{"nested objects strict too", spec["additionalProperties"], false},
		{"maps stay maps", props["labels"].(map[string]any)["additionalProperties"], map[string]any{"type": []any{"string", "null"}}},
		{"preserve-unknown-fields stays open", props["raw"].(map[string]any)["additionalProperties"], nil},
		{"null accepted", props["type"].(map[string]any)["type"], []any{"string", "null"}},
		{"a property named description or type is kept", props["type"] != nil, true},
		{"refs stay in the file", thing["properties"].(map[string]any)["spec"], map[string]any{"$ref": "#/definitions/io.k8s.api.apps.v1.ThingSpec"}},
		{"int-or-string takes both", defs.Definitions[intOrString]["oneOf"], []any{map[string]any{"type": "string"}, map[string]any{"type": "integer"}, map[string]any{"type": "null"}}},
		{"quantity takes numbers", defs.Definitions[quantity]["oneOf"], []any{map[string]any{"type": "string"}, map[string]any{"type": "number"}, map[string]any{"type": "null"}}},
		{"required kept", thing["required"], []any{"spec"}},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s: got %#v, want %#v", tt.name, tt.got, tt.want)
		}
	}
	var kind map[string]any
	if err := json.Unmarshal(files["networkpolicy-networking-v1.json"], &kind); err != nil {
		t.Fatal(err)
	}
	allOf := kind["allOf"].([]any)
	if ref := allOf[0].(map[string]any)["$ref"]; ref != DefinitionsFile+"#/definitions/io.k8s.api.networking.v1.NetworkPolicy" {
		t.Errorf("kind file refers to %v", ref)
	}
	pins := allOf[1].(map[string]any)["properties"].(map[string]any)
	if got := pins["apiVersion"].(map[string]any)["enum"]; !reflect.DeepEqual(got, []any{"networking.k8s.io/v1"}) {
		t.Errorf("apiVersion pinned to %v", got)
	}
	if got := pins["kind"].(map[string]any)["enum"]; !reflect.DeepEqual(got, []any{"NetworkPolicy"}) {
		t.Errorf("kind pinned to %v", got)
	}
}

// TestConvertRefusesOtherDocuments: not OpenAPI v2, or no kinds.
func TestConvertRefusesOtherDocuments(t *testing.T) {
	for _, doc := range []string{
		`{"openapi": "3.0.0", "components": {}}`,
		`{"swagger": "2.0", "definitions": {"a.B": {"type": "object"}}}`,
		`not json`,
	} {
		if _, err := Convert([]byte(doc)); err == nil {
			t.Errorf("Convert(%s) succeeded", doc)
		}
	}
}

// FuzzConvert: any document is converted or refused, never a panic, and
// what is converted is JSON.
func FuzzConvert(f *testing.F) {
	f.Add([]byte(miniSwagger))
	f.Add([]byte(`{"swagger":"2.0","definitions":{"a":{"properties":[],"allOf":{},"x-kubernetes-group-version-kind":[{"kind":"A","version":"v1"}]}}}`))
	f.Add([]byte(`{"swagger":"2.0","definitions":{"a":{"type":"object","x-kubernetes-group-version-kind":{"kind":1}}}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		files, err := Convert(doc)
		if err != nil {
			return
		}
		for name, b := range files {
			if !json.Valid(b) {
				t.Fatalf("%s is not JSON", name)
			}
		}
	})
}
