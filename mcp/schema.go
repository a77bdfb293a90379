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
	})
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
