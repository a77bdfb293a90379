package mcp

import (
	"fmt"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandboxapi/sandboxapi/api/wire"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// Closed value sets the tools' schemas state as enums.
var (
	managers        = []any{"pip", "npm"}
	executionStatus = []any{sandbox.StatusOK, sandbox.StatusError, sandbox.StatusTimeout, sandbox.StatusOOM, sandbox.StatusOutputLimit, sandbox.StatusCompileError}
	packageStatus   = []any{"admitted", "refused", "quarantined", "removed", "not_found", "invalid"}
	osvVerdicts     = []any{"clean", "accepted", "vulnerable", "unknown"}
)

// minTimeoutSecond is the smallest timeout a tool accepts.
const minTimeoutSecond = 0.1

// defaultTimeoutSeconds is the timeout a call without one gets when
// Options.DefaultTimeout is zero (the server's limits.default_timeout
// default); the server also caps it at the plan's max_timeout.
const defaultTimeoutSeconds = 30

// schemaFor infers T's schema (as the SDK would) and lets edit refine it:
// enums, bounds and defaults the Go types cannot say.
func schemaFor[T any](edit func(props map[string]*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: schema of %T: %v", *new(T), err))
	}
	if edit != nil {
		edit(s.Properties)
	}
	return s
}

// requiredArray makes p a required, non-null array with at least one item
// (the inferred schema of a Go slice also allows null).
func requiredArray(s *jsonschema.Schema, name string, maxItems int) {
	p := s.Properties[name]
	p.Type, p.Types = "array", nil
	p.MinItems = ptr(1)
	if maxItems > 0 {
		p.MaxItems = ptr(maxItems)
	}
	for _, r := range s.Required {
		if r == name {
			return
		}
	}
	s.Required = append(s.Required, name)
}

// timeoutSchema bounds a timeout property and states its default.
func timeoutSchema(p *jsonschema.Schema, def float64) {
	lowest := minTimeoutSecond
	p.Minimum = &lowest
	p.Default = []byte(fmt.Sprintf("%g", def))
}

func ptr[T any](v T) *T { return &v }

// executeInputSchema is execute_code's input schema.
// With the server's runtimes, language is an enum of their names and
// aliases, and version's description lists each language's versions.
func executeInputSchema(defTimeout float64, runtimes []wire.Runtime) *jsonschema.Schema {
	return schemaFor[ExecuteInput](func(p map[string]*jsonschema.Schema) {
		timeoutSchema(p["timeout"], defTimeout)
		languageSchema(p, runtimes)
	})
}

// languageSchema makes p's language an enum of the runtimes' names and
// aliases and lists each one's versions in version's description (both
// stay free text without runtimes).
func languageSchema(p map[string]*jsonschema.Schema, runtimes []wire.Runtime) {
	if len(runtimes) == 0 {
		return
	}
	var names []any
	var per []string
	var versions []any
	for _, rt := range runtimes {
		names = append(names, rt.Language)
		for _, a := range rt.Aliases {
			names = append(names, a)
		}
		var vs []string
		for _, v := range rt.Versions {
			d := v.Version
			if v.Series != v.Version {
				d = v.Series + " (" + v.Version + ")"
			}
			if v.Default {
				d += " default"
			}
			vs = append(vs, d)
			versions = append(versions, v.Series)
		}
		per = append(per, rt.Language+": "+strings.Join(vs, ", "))
	}
	p["language"].Enum = names
	p["language"].Description = "language name or alias: " + strings.Join(runtimeNames(runtimes), ", ")
	p["version"].Description += ". Versions: " + strings.Join(per, "; ")
	p["version"].Examples = versions
	p["version"].MaxLength = ptr(sandbox.MaxVersionBytes)
}

// runtimeNames are the runtimes' names, each with its aliases.
func runtimeNames(runtimes []wire.Runtime) []string {
	out := make([]string, len(runtimes))
	for i, rt := range runtimes {
		out[i] = rt.Language
		if len(rt.Aliases) > 0 {
			out[i] += " (" + strings.Join(rt.Aliases, ", ") + ")"
		}
	}
	return out
}

func testsInputSchema(defTimeout float64) *jsonschema.Schema {
	return schemaFor[TestsInput](func(p map[string]*jsonschema.Schema) {
		timeoutSchema(p["timeout"], defTimeout)
	})
}

func executeOutputSchema() *jsonschema.Schema {
	return schemaFor[ExecuteResult](func(p map[string]*jsonschema.Schema) {
		p["status"].Enum = executionStatus
		// The REST reply's ids stay out of the tool's result (capResult).
		delete(p, "execution_id")
		delete(p, "resumed_ms")
	})
}

func packagesInputSchema() *jsonschema.Schema {
	s := schemaFor[PackagesInput](func(p map[string]*jsonschema.Schema) { p["manager"].Enum = managers })
	requiredArray(s, "packages", maxPackages)
	s.Properties["packages"].Items.MinLength = ptr(1)
	return s
}

func packagesOutputSchema() *jsonschema.Schema {
	return schemaFor[PackagesResult](func(p map[string]*jsonschema.Schema) {
		p["manager"].Enum = managers
		v := p["results"].Items
		v.Properties["status"].Enum = packageStatus
		v.Properties["osv"].Enum = osvVerdicts
	})
}

// maxPackages bounds one check_packages call (the API's own bound).
const maxPackages = 100

// The session tools' schemas. Every one names its session with a
// session_id that is one path segment (sessionPattern).

func sessionIDSchema(p map[string]*jsonschema.Schema) {
	p["session_id"].Pattern = sessionIDPattern
}

// sessionPathSchema is the input schema of a tool that takes a session id
// and, if T has one, a path.
func sessionPathSchema[T any]() *jsonschema.Schema {
	return schemaFor[T](func(p map[string]*jsonschema.Schema) {
		sessionIDSchema(p)
		if path := p["path"]; path != nil {
			path.MinLength = ptr(1)
		}
	})
}

// createSessionInputSchema is POST /v1/sessions' body as create_session
// takes it: language and version as execute_code states them, and the
// network block without credentials (createSession refuses them).
func createSessionInputSchema(runtimes []wire.Runtime) *jsonschema.Schema {
	return schemaFor[CreateSessionInput](func(p map[string]*jsonschema.Schema) {
		p["language"].Description = "language name or alias (see list_runtimes)"
		p["version"].Description = "version of the language: 22 picks the newest 22.x present; absent: the default (see list_runtimes)"
		languageSchema(p, runtimes)
		p["idle_ttl"].Description = "seconds without a call after which the session ends (absent: the server's default)"
		p["idle_ttl"].ExclusiveMinimum = ptr(0.0)
		p["kernel"].Description = "true: executes run as cells of one long-lived interpreter (python3), so variables stay and rich results (plots) come back"
		n := p["network"]
		n.Description = "network access through the egress proxy, if your plan allows it: enabled, and allowed_domains (exact hosts or *.example.com) and denied"
		delete(n.Properties, "credentials")
	})
}

func sessionOutputSchema() *jsonschema.Schema { return schemaFor[SessionResult](nil) }

func sessionExecuteInputSchema(defTimeout float64) *jsonschema.Schema {
	return schemaFor[SessionExecuteInput](func(p map[string]*jsonschema.Schema) {
		sessionIDSchema(p)
		timeoutSchema(p["timeout"], defTimeout)
	})
}

func installInputSchema() *jsonschema.Schema {
	return schemaFor[InstallInput](func(p map[string]*jsonschema.Schema) {
		sessionIDSchema(p)
		p["manager"].Enum = managers
		p["packages"].MaxItems = ptr(maxPackages)
		// A package-lock.json object; its Go type (raw JSON) says nothing.
		p["lockfile"] = &jsonschema.Schema{Type: "object", Description: p["lockfile"].Description}
	})
}

func writeFileInputSchema() *jsonschema.Schema {
	return schemaFor[WriteFileInput](func(p map[string]*jsonschema.Schema) {
		sessionIDSchema(p)
		p["path"].MinLength = ptr(1)
		p["encoding"].Enum = []any{"utf-8", "base64"}
		p["encoding"].Default = []byte(`"utf-8"`)
	})
}

func listFilesInputSchema() *jsonschema.Schema {
	return schemaFor[ListFilesInput](func(p map[string]*jsonschema.Schema) {
		sessionIDSchema(p)
		p["dir"].Default = []byte(`"` + defaultDir + `"`)
	})
}
