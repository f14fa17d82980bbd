package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/node"
)

// NodeConfig is the `node` section of `svc-pf all`: the filter node's
// listener. Its status page, /health (ready once every feed has loaded,
// and while none has failed for longer than its stale_after)
// and /metrics (svcpf_feed_*) live there; the resolver's API joins it when
// the resolver is built. The node's read models are configured at the top
// level (`feeds:`), where the simulator and the resolver
// share them.
type NodeConfig struct {
	HTTP httpapi.Config `yaml:"http"`
}

// DefaultNodeConfig is what runs when the file sets nothing: no feeds.
func DefaultNodeConfig() NodeConfig {
	return NodeConfig{HTTP: httpapi.Config{Address: "127.0.0.1:8082"}}
}

// Node is the node (internal/node: read models, the one policy engine,
// staleness, readiness) behind its listener. The listener is wiring and
// stays here: it mounts the node's status page, /health and /metrics, and
// the resolver's PowerDNS-compatible API beside them.
type Node struct {
	// Models is the node itself, which the simulator and the resolver
	// share.
	Models *node.Node
	server *httpapi.Server
	log    *slog.Logger
}

// routes are more routes a node listener serves (the resolver's
// PowerDNS-compatible API).
type routes interface{ Register(r *httpapi.Router) }

// StartNode binds the node's listener; Run follows the node's read models
// and serves.
func StartNode(cfg NodeConfig, n *node.Node, reg *prometheus.Registry, v Version, log *slog.Logger, more ...routes) (*Node, error) {
	if err := cfg.HTTP.Validate(); err != nil {
		return nil, prefixed("node", err)
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "node", Version: string(v), Gatherer: reg, Ready: n.Ready,
		Info: func() any { return n.Status() },
	})
	for _, m := range more {
		m.Register(router)
	}
	ln := &Node{Models: n, log: log}
	if ln.server, err = httpapi.Listen(cfg.HTTP, router, log); err != nil {
		return nil, err
	}
	log.Info("node listening", "address", ln.server.Addr().String(), "feeds", len(n.Feeds().Status()))
	return ln, nil
}

// Addr is the node listener's address: how a program that embeds the node
// learns the port the kernel chose for ":0".
func (n *Node) Addr() net.Addr { return n.server.Addr() }

// Run follows the read models and serves until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- n.Models.Run(ctx) }()
	err := n.server.Serve(ctx)
	if merr := <-done; merr != nil {
		err = errors.Join(err, fmt.Errorf("read models: %w", merr))
	}
	return err
}
