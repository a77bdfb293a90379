package cli

import (
	"errors"
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
			Usage: "list the nodes with their state, epoch, free capacity and lease (exits 1 on a single node)",
			Flags: stateFlags(),
			Action: func(c *cli.Context) error {
				return withStore(c, func(env *Env, st *store.Store) error {
					nodes, err := st.Nodes(c.Context)
					if err != nil {
						return err
					}
					if len(nodes) == 0 {
						// An empty table would read as a cluster whose
						// nodes are all gone.
						return errNotInCluster
					}
					return cluster.WriteStatus(c.App.Writer, nodes, time.Now())
				})
			},
		}},
	}
}

// errNotInCluster is cluster status's answer on a store no node has
// registered in: a single node.
var errNotInCluster = errors.New("not in a cluster: no node has registered in this store; this is a single node " +
	"(cluster mode: store.url on PostgreSQL and cluster.node on every serve, see docs/operations.md)")
