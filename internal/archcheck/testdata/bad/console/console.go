// Package console imports the composition root.
package console

import "example.com/bad/internal/app"

// Page calls the root.
func Page() { app.Serve() }
