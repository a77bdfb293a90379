// Package egress imports a test-only package outside tests.
package egress

import "example.com/bad/internal/testenv"

// Proxy uses test support.
func Proxy() { testenv.Env() }
