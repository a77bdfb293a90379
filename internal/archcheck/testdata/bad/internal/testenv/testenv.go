// Package testenv is test support.
package testenv

// Env does nothing.
func Env() {}
