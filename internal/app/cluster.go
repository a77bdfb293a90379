package app

import (
	"context"

	"github.com/sandboxapi/sandboxapi/cluster"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/lifecycle"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
)

// clusterUnit makes serve a node of a cluster (cluster.node set). The
// node takes sessions in and out of the executor and asks the API's key
// resolution (auth) whose session a call is for. It registers before the
// sessions unit starts the executor and gives its lease up after the
// executor has handed its sessions over; its Handler sits in front of the
// API (http), the HTTP drain marks it draining, and the API lists
// sessions through it (clusterSandboxes).
func (p *parts) clusterUnit() lifecycle.Unit {
	return lifecycle.Unit{
		Name:  "cluster",
		Needs: []string{"store", "executor", "metrics", "auth"},
		Provision: func(context.Context) error {
			node, err := cluster.New(p.env.Config.Cluster, cluster.Deps{Store: p.st, Executor: p.ex.Node(), Log: p.env.Log, Observer: p.m,
				// Another key's session, or a call the API will refuse,
				// is the API's to answer here: nothing moves, no node is
				// named.
				Caller: p.auth.CallerKeyID})
			if err != nil {
				return err
			}
			p.m.RegisterClusterNodes(node.NodesAlive)
			p.node = node
			return nil
		},
		Start: func(ctx context.Context) error { return p.node.Start(ctx) },
		Stop:  func(ctx context.Context) error { return p.node.Stop(ctx) },
	}
}

// The executor's cluster role is what a node takes sessions in and out
// of.
var _ cluster.Executor = (*executor.Node)(nil)

// clusterSandboxes is the executor as the API sees it on a cluster node:
// a key's session list holds its sessions on every node.
type clusterSandboxes struct {
	apiSandboxes
	node *cluster.Node
}

func (c clusterSandboxes) ListSessions(ctx context.Context, owner string) []sandbox.Session {
	return c.node.ListSessions(ctx, owner, c.Executor.ListSessions(ctx, owner))
}
