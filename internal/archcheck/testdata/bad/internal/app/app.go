// Package app is the composition root: it may import every service.
package app

import (
	"example.com/bad/executor"
	"example.com/bad/mirror"
)

// Serve wires the services.
func Serve() {
	executor.Run()
	mirror.Get()
}
