package api

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// TestOpenAPIStatesInputCaps checks that api/openapi.json states each cap
// of internal/sandbox/limits.go where a request carries the field, with
// the value the code enforces.
func TestOpenAPIStatesInputCaps(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage
			}
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	type bound struct {
		MaxItems      *int `json:"maxItems"`
		MaxLength     *int `json:"maxLength"`
		MaxProperties *int `json:"maxProperties"`
		Items         *struct {
			MaxLength *int `json:"maxLength"`
		} `json:"items"`
		PropertyNames *struct {
			MaxLength *int `json:"maxLength"`
		} `json:"propertyNames"`
	}
	cases := []struct {
		schema, field, what string
		want                int
		get                 func(b bound) *int
	}{
		{"Network", "allowed_domains", "maxItems", sandbox.MaxAllowedDomains, func(b bound) *int { return b.MaxItems }},
		{"Network", "allowed_domains", "items.maxLength", sandbox.MaxDomainEntryBytes, func(b bound) *int { return itemsMax(b.Items) }},
		{"ExecuteRequest", "language", "maxLength", sandbox.MaxLanguageBytes, func(b bound) *int { return b.MaxLength }},
		{"CreateSessionRequest", "language", "maxLength", sandbox.MaxLanguageBytes, func(b bound) *int { return b.MaxLength }},
		{"ForkRequest", "language", "maxLength", sandbox.MaxLanguageBytes, func(b bound) *int { return b.MaxLength }},
		{"ExecuteRequest", "env", "maxProperties", sandbox.MaxEnvVars, func(b bound) *int { return b.MaxProperties }},
		{"SessionExecuteRequest", "env", "maxProperties", sandbox.MaxEnvVars, func(b bound) *int { return b.MaxProperties }},
		{"ExecuteRequest", "env", "propertyNames.maxLength", sandbox.MaxEnvNameBytes, func(b bound) *int { return itemsMax(b.PropertyNames) }},
		{"SessionExecuteRequest", "env", "propertyNames.maxLength", sandbox.MaxEnvNameBytes, func(b bound) *int { return itemsMax(b.PropertyNames) }},
		{"ExecuteRequest", "files", "maxItems", sandbox.MaxFiles, func(b bound) *int { return b.MaxItems }},
		{"File", "path", "maxLength", sandbox.MaxFilePathBytes, func(b bound) *int { return b.MaxLength }},
		{"InstallRequest", "packages", "maxItems", sandbox.MaxPackages, func(b bound) *int { return b.MaxItems }},
		{"InstallRequest", "packages", "items.maxLength", sandbox.MaxPackageSpecBytes, func(b bound) *int { return itemsMax(b.Items) }},
		{"CheckPackagesRequest", "packages", "maxItems", sandbox.MaxPackages, func(b bound) *int { return b.MaxItems }},
		{"CheckPackagesRequest", "packages", "items.maxLength", sandbox.MaxPackageSpecBytes, func(b bound) *int { return itemsMax(b.Items) }},
	}
	for _, tc := range cases {
		var b bound
		prop, ok := doc.Components.Schemas[tc.schema].Properties[tc.field]
		if !ok {
			t.Errorf("%s.%s: not in the document", tc.schema, tc.field)
			continue
		}
		if err := json.Unmarshal(prop, &b); err != nil {
			t.Fatalf("%s.%s: %v", tc.schema, tc.field, err)
		}
		if got := tc.get(b); got == nil || *got != tc.want {
			t.Errorf("%s.%s %s = %v, want %d", tc.schema, tc.field, tc.what, got, tc.want)
		}
	}
}

func itemsMax(s *struct {
	MaxLength *int `json:"maxLength"`
}) *int {
	if s == nil {
		return nil
	}
	return s.MaxLength
}
