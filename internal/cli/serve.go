package cli

import (
	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/internal/app"
)

func serveCommand() *cli.Command {
	flags := append(stateFlags(), listenFlag())
	return &cli.Command{
		Name:  "serve",
		Usage: "run the API, executor and the other services in one process",
		Flags: flags,
		Action: func(c *cli.Context) error {
			env, err := loadEnv(c)
			if err != nil {
				return err
			}
			return app.Serve(c.Context, env)
		},
	}
}
