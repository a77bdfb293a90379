// Package archcheck holds no code of its own: its test reads every non-test
// Go file of the module and fails when the tree breaks one of the rules in
// docs/architecture.md that a compiler cannot see.
//
//   - No mutable package-level variable: a package-level var is never
//     assigned, incremented or address-taken inside a function, and none is
//     of a type that exists to be mutated (sync.Mutex, atomic.Int64, ...).
//     Sentinel errors, compiled patterns, embedded files, lookup tables and
//     scratch-buffer pools (sync.Pool) stay allowed.
//   - No service imports another service; a service's subpackages count as
//     the service. Leaf packages under internal/ may be imported by any.
//   - Errors are classified with errors.Is/As only: no comparing or
//     searching the text of x.Error().
package archcheck
