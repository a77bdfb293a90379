// Package configs embeds the example and default configuration files so the
// binary runs with no files beside it.
package configs

import _ "embed"

// Server is the default server configuration (sandboxapi.yaml).
//
//go:embed sandboxapi.yaml
var Server []byte

// Runtimes is the default language table (runtimes.yaml).
//
//go:embed runtimes.yaml
var Runtimes []byte

// Plans is the default plan table (plans.yaml).
//
//go:embed plans.yaml
var Plans []byte
