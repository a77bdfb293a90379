package app

import (
	"context"

	"github.com/sandboxapi/sandboxapi/cluster"
	"github.com/sandboxapi/sandboxapi/executor"
	"github.com/sandboxapi/sandboxapi/internal/metrics"
	"github.com/sandboxapi/sandboxapi/internal/sandbox"
	"github.com/sandboxapi/sandboxapi/store"
)

// wireCluster makes serve a node of a cluster when cluster.node is set,
// and returns nil for a single node. st is the store acting for the node
// (st.ForNode(cluster.node)), as the executor and the API get it. The
// caller adds the node to the lifecycle group before the executor (it
// registers first and gives its lease up last), puts its Handler in front
// of the API, calls Drain when the HTTP drain begins, and lists sessions
// through it (clusterSandboxes).
func wireCluster(env *Env, st *store.Store, ex *executor.Executor, m *metrics.Metrics) (*cluster.Node, error) {
	cfg := env.Config
	if !cfg.Cluster.Enabled() {
		return nil, nil
	}
	node, err := cluster.New(cfg.Cluster, cluster.Deps{Store: st, Executor: ex, Log: env.Log, Observer: m})
	if err != nil {
		return nil, err
	}
	m.RegisterClusterNodes(node.NodesAlive)
	return node, nil
}

// The executor is what a node takes sessions in and out of.
var _ cluster.Executor = (*executor.Executor)(nil)

// clusterSandboxes is the executor as the API sees it on a cluster node:
// a key's session list holds its sessions on every node.
type clusterSandboxes struct {
	*executor.Executor
	node *cluster.Node
}

func (c clusterSandboxes) ListSessions(ctx context.Context, owner string) []sandbox.Session {
	return c.node.ListSessions(ctx, owner, c.Executor.ListSessions(ctx, owner))
}
