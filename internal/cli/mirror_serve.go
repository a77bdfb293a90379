package cli

import (
	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/internal/app"
	"github.com/sandboxapi/sandboxapi/store"
)

// mirrorServeCommand runs the mirror as a service of its own: the services
// apart, with `serve` pointed at it by mirror.serve_url. It shares the data
// dir (the store and the blobs) with `serve` and the curation commands.
func mirrorServeCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "serve the mirror alone (pip simple index, npm registry) for a sandboxapi serve whose mirror.serve_url points here",
		Flags: append(stateFlags(), &cli.StringFlag{Name: "listen", Value: "127.0.0.1:8081", Usage: "host:port to serve on"}),
		Action: func(c *cli.Context) error {
			return withStore(c, func(env *Env, st *store.Store) error {
				return app.ServeMirror(c.Context, env, st, c.String("listen"))
			})
		},
	}
}
