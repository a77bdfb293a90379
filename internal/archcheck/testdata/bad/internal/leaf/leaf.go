// Package leaf is a leaf that imports a service.
package leaf

import "example.com/bad/executor"

// Leaf calls the service.
func Leaf() { executor.Run() }
