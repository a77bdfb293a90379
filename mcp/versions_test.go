package mcp

import (
	"slices"
	"strings"
	"testing"

	"github.com/sandboxapi/sandboxapi/api/wire"
)

// execute_code's schema names the server's languages (with aliases) and
// each one's versions; without them both stay free text.
func TestExecuteSchemaListsVersions(t *testing.T) {
	rts := []wire.Runtime{
		{Language: "javascript", Aliases: []string{"node"}, Versions: []wire.RuntimeVersion{{Version: "26.12.1", Series: "26", Default: true}, {Version: "22.23.5", Series: "22"}}},
		{Language: "bash", Versions: []wire.RuntimeVersion{{Version: "5.2.37", Series: "5.2", Default: true}}},
	}
	s := executeInputSchema(30, rts)
	lang, ver := s.Properties["language"], s.Properties["version"]
	if !slices.Equal(lang.Enum, []any{"javascript", "node", "bash"}) {
		t.Errorf("language enum %v", lang.Enum)
	}
	for _, want := range []string{"javascript: 26 (26.12.1) default, 22 (22.23.5)", "bash: 5.2 (5.2.37) default"} {
		if !strings.Contains(ver.Description, want) {
			t.Errorf("version description %q lacks %q", ver.Description, want)
		}
	}
	if slices.Contains(s.Required, "version") {
		t.Error("version is required")
	}
	// create_session states the same languages and versions.
	cs := createSessionInputSchema(rts)
	if !slices.Equal(cs.Properties["language"].Enum, lang.Enum) || cs.Properties["version"].Description != ver.Description {
		t.Errorf("create_session language %v, version %q", cs.Properties["language"].Enum, cs.Properties["version"].Description)
	}
	free := executeInputSchema(30, nil)
	if free.Properties["language"].Enum != nil || free.Properties["version"] == nil {
		t.Errorf("without runtimes: %+v", free.Properties)
	}
}
