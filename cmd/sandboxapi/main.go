// Command sandboxapi is the self-hosted code-execution API; see README.md.
package main

import (
	"context"
	"os"

	"github.com/sandboxapi/sandboxapi/internal/cli"
)

func main() { os.Exit(cli.Run(context.Background(), os.Args, os.Stdout, os.Stderr)) }
