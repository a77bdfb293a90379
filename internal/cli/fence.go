package cli

import (
	"os"
	"os/signal"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/executor/fence"
)

// fenceCommand is a cluster node's dead man's switch, started by the
// executor itself (package executor/fence); hidden from help.
func fenceCommand() *cli.Command {
	return &cli.Command{
		Name:   "fence",
		Usage:  "kill a dead node's sandboxes and unmount its homes (started by serve)",
		Hidden: true,
		Flags:  []cli.Flag{&cli.StringFlag{Name: "root"}, &cli.StringFlag{Name: "homes"}, &cli.StringFlag{Name: "lock"}},
		Action: func(c *cli.Context) error {
			signal.Ignore(fence.Signals...)
			cfg := fence.Config{Root: c.String("root"), Homes: c.String("homes"), Lock: c.String("lock")}
			return fence.Run(c.Context, cfg, os.Stdin, os.Stdout, newLogger(c.App.ErrWriter, "info"))
		},
	}
}
