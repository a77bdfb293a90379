package host

import "example.com/bad/executor"

// Start reaches up into its service's session layer, which a layer below
// it must not.
func Start() { executor.Run() }
