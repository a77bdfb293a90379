// Package archcheck holds no code of its own: its test reads every non-test
// Go file of the module and fails when the tree breaks one of the rules in
// docs/architecture.md that a compiler cannot see.
//
//   - No mutable package-level variable: a package-level var is never
//     assigned, incremented, changed in place (delete, clear, copy, sorts)
//     or address-taken inside a function, by the package's code or its
//     tests (a test hook is a field of a struct the test builds), and none
//     is of a type that exists to be mutated (sync.Mutex, atomic.Int64, ...).
//     Sentinel errors, compiled patterns, embedded files, lookup tables and
//     scratch-buffer pools (sync.Pool) stay allowed. Non-test code calls
//     none of the setters of process-wide defaults (slog.SetDefault,
//     http.HandleFunc, os.Setenv, ...). Test-only support
//     packages are listed, with the reason, and checked to stay test-only.
//   - No service imports another service; a service's subpackages count as
//     the service. Leaf packages under internal/ may be imported by any, and
//     so may the few shared packages listed with their reasons (store,
//     egress/policy, api/wire), which import no service themselves.
//   - The same rules hold for every dependency, not only direct imports,
//     and for test builds too (deps_test.go, from go list -test: every
//     package's and test build's Deps, the transitive imports):
//     a service reaches no other service through any chain of imports, a
//     shared package reaches no service, any other package but the
//     composition root (cmd/sandboxapi, internal/app, internal/cli) reaches
//     no service, nothing but the root imports the root, and only tests
//     reach the test-only packages. What breaks a rule today is listed in
//     allowedDeps with its reason; the list fails when an entry goes stale.
//   - docs/architecture.md's package map has a row for every package of
//     the module (and for bench/egress, a module of its own), and each
//     row's imports are the package's non-test imports of ours as go list
//     gives them (docmap_test.go).
//   - The shared leaves (egress/policy, api/wire) do no I/O: neither they
//     nor any package of the module they import, followed through, imports
//     os, io, net, net/http, log, database/sql or the like, so that mcp
//     may take the API's shapes from api/wire without taking on api.
//   - Errors are classified with errors.Is/As only: no comparing, switching
//     on or searching (strings.Contains, HasPrefix, ...) the text of
//     x.Error().
//
// testdata/bad is a module that breaks each rule (the dependency rules
// directly, through a leaf and from a test file), so that a check that
// stops seeing a violation fails its own test.
package archcheck
