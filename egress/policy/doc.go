// Package policy holds the egress rules that need no I/O: parsing and
// matching allowed_domains entries, canonicalising host names, parsing the
// host:port of a CONNECT request and vetting IP addresses.
//
// Everything here is pure and safe for concurrent use; values are
// immutable once built.
package policy
