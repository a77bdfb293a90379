// Package mirror reaches the executor service through a leaf.
package mirror

import "example.com/bad/internal/leaf"

// Get reaches executor.Run.
func Get() { leaf.Leaf() }
