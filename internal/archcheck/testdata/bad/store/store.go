// Package store is shared, and imports a service.
package store

import "example.com/bad/executor"

// Open calls the service.
func Open() { executor.Run() }
