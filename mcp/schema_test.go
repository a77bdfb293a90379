package mcp

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPSchemasStateTheRules: the schemas an agent reads say what the
// server enforces: packages a required non-null array, manager and status
// enums, timeout with a minimum and the server's default, and the Java
// class-name rule in execute_code's description.
func TestMCPSchemasStateTheRules(t *testing.T) {
	t.Parallel()
	cs := connectInMemory(t, Options{Handler: &fakeAPI{t: t}, Key: goodKey, DefaultTimeout: 20 * time.Second})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	type prop struct {
		Type     any     `json:"type"`
		Enum     []any   `json:"enum"`
		Minimum  float64 `json:"minimum"`
		Default  any     `json:"default"`
		MinItems int     `json:"minItems"`
		Items    *struct {
			Properties map[string]prop `json:"properties"`
		} `json:"items"`
	}
	type schema struct {
		Required   []string        `json:"required"`
		Properties map[string]prop `json:"properties"`
	}
	decode := func(v any) schema {
		b, _ := json.Marshal(v)
		var s schema
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	tools := map[string]*sdk.Tool{}
	for _, tool := range res.Tools {
		tools[tool.Name] = tool
	}
	in := decode(tools["check_packages"].InputSchema)
	if p := in.Properties["packages"]; p.Type != "array" || p.MinItems != 1 || !slices.Contains(in.Required, "packages") {
		t.Errorf("packages: %+v required %v", p, in.Required)
	}
	if e := in.Properties["manager"].Enum; len(e) != 2 || e[0] != "pip" || e[1] != "npm" {
		t.Errorf("manager enum %v", e)
	}
	out := decode(tools["check_packages"].OutputSchema)
	if e := out.Properties["results"].Items.Properties["status"].Enum; !slices.Contains(e, any("quarantined")) || !slices.Contains(e, any("not_found")) {
		t.Errorf("verdict status enum %v", e)
	}
	if e := decode(tools["execute_code"].OutputSchema).Properties["status"].Enum; len(e) != 6 || !slices.Contains(e, any("compile_error")) {
		t.Errorf("execution status enum %v", e)
	}
	for _, name := range []string{"execute_code", "run_tests"} {
		p := decode(tools[name].InputSchema).Properties["timeout"]
		if p.Minimum != 0.1 || p.Default != float64(20) {
			t.Errorf("%s timeout: minimum %v default %v", name, p.Minimum, p.Default)
		}
	}
	// Every session tool's session_id is one path segment; create_session
	// takes no credentials; write_file's encoding is an enum.
	type strProp struct {
		Pattern    string         `json:"pattern"`
		Enum       []any          `json:"enum"`
		Properties map[string]any `json:"properties"`
	}
	strSchema := func(v any) map[string]strProp {
		b, _ := json.Marshal(v)
		var s struct{ Properties map[string]strProp }
		_ = json.Unmarshal(b, &s)
		return s.Properties
	}
	for _, name := range []string{"execute_in_session", "install_packages", "write_file", "read_file", "list_files", "end_session"} {
		if p := strSchema(tools[name].InputSchema)["session_id"]; p.Pattern != sessionIDPattern {
			t.Errorf("%s session_id pattern %q", name, p.Pattern)
		}
	}
	if n := strSchema(tools["create_session"].InputSchema)["network"]; n.Properties["enabled"] == nil || n.Properties["credentials"] != nil {
		t.Errorf("create_session network properties %v", n.Properties)
	}
	if e := strSchema(tools["write_file"].InputSchema)["encoding"].Enum; !slices.Equal(e, []any{"utf-8", "base64"}) {
		t.Errorf("write_file encoding enum %v", e)
	}
	if d := tools["execute_code"].Description; !strings.Contains(d, "public class Main") {
		t.Errorf("execute_code does not state the Java class-name rule: %s", d)
	}
}

// TestMCPSchemasAreEnforced: calls that break the schema are refused
// before they reach the API.
func TestMCPSchemasAreEnforced(t *testing.T) {
	t.Parallel()
	cs := connectInMemory(t, Options{Handler: &fakeAPI{t: t}, Key: goodKey})
	cases := []struct {
		name string
		tool string
		args map[string]any
	}{
		{"packages null", "check_packages", map[string]any{"manager": "pip", "packages": nil}},
		{"packages missing", "check_packages", map[string]any{"manager": "pip"}},
		{"packages empty", "check_packages", map[string]any{"manager": "pip", "packages": []string{}}},
		{"packages a string", "check_packages", map[string]any{"manager": "pip", "packages": "requests"}},
		{"unknown manager", "check_packages", map[string]any{"manager": "cargo", "packages": []string{"serde"}}},
		{"timeout under the minimum", "execute_code", map[string]any{"language": "bash", "code": "true", "timeout": 0.01}},
		{"negative timeout", "execute_code", map[string]any{"language": "bash", "code": "true", "timeout": -1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: tc.tool, Arguments: tc.args})
			if err == nil && !res.IsError {
				t.Fatalf("accepted: %+v", res)
			}
		})
	}
}

// TestMCPStructuredResultCapped: a program that prints more than the cap
// gets the same cap in its structured result as in its text.
func TestMCPStructuredResultCapped(t *testing.T) {
	t.Parallel()
	cs := connectInMemory(t, Options{Handler: &fakeAPI{t: t}, Key: goodKey})
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "execute_code",
		Arguments: map[string]any{"language": "bash", "code": "head -c 100000 /dev/zero | tr '\\0' a; head -c 40000 /dev/zero | tr '\\0' b >&2"}})
	if err != nil {
		t.Fatal(err)
	}
	out := structured[ExecuteResult](t, res)
	if len(out.Stdout) != textCap || len(out.Stderr) != textCap || !out.Truncated {
		t.Fatalf("structured stdout %d, stderr %d bytes, truncated %v; want %d each, truncated", len(out.Stdout), len(out.Stderr), out.Truncated, textCap)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if !strings.Contains(text, "more bytes cut") || len(text) > 2*textCap+1000 {
		t.Fatalf("text of %d bytes", len(text))
	}
}
