package cli

import (
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sandboxapi/sandboxapi/cluster"
	"github.com/sandboxapi/sandboxapi/store"
)

func clusterCommand() *cli.Command {
	return &cli.Command{
		Name:  "cluster",
		Usage: "the nodes that share this store",
		Subcommands: []*cli.Command{{
			Name:  "status",
			Usage: "list the nodes with their state, epoch, free capacity and lease",
			Flags: stateFlags(),
			Action: func(c *cli.Context) error {
				return withStore(c, func(env *Env, st *store.Store) error {
					nodes, err := st.Nodes(c.Context)
					if err != nil {
						return err
					}
					return cluster.WriteStatus(c.App.Writer, nodes, time.Now())
				})
			},
		}},
	}
}
