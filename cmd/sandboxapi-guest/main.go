// Command sandboxapi-guest runs inside sandboxes; see package guest.
package main

import (
	"os"

	"github.com/sandboxapi/sandboxapi/executor/guest"
)

func main() { os.Exit(guest.Main(os.Args)) }
