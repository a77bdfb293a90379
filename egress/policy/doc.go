// Package policy holds the egress decision and the rules that need no
// I/O: parsing allowed_domains and denied entries (domain patterns, IP
// addresses, CIDR prefixes), canonicalising host names, parsing the target
// of a CONNECT request and classing IP addresses.
//
// One call decides a connection: Vetter.Decide takes an Args (host,
// address, port, mode and the session's Policy) and returns a Decision
// (verdict, cause, the entry that matched, the address's class), so a new
// input is a new field, not a new signature in every caller.
//
// Everything here is pure and safe for concurrent use; values are
// immutable once built.
package policy
