package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
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

// Node is the read side of one machine: the node's read models, shared by
// its simulator and resolver, and its listener.
type Node struct {
	Models *readModels
	server *httpapi.Server
	log    *slog.Logger
}

// routes are more routes a node listener serves (the resolver's
// PowerDNS-compatible API).
type routes interface{ Register(r *httpapi.Router) }

// StartNode binds the node's listener over its read models; Run follows
// them and serves.
func StartNode(cfg NodeConfig, models *readModels, reg *prometheus.Registry, v Version, log *slog.Logger, more ...routes) (*Node, error) {
	if err := cfg.HTTP.Validate(); err != nil {
		return nil, prefixed("node", err)
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "node", Version: string(v), Gatherer: reg, Ready: models.Ready,
		Info: func() any { return nodeInfo(models) },
	})
	for _, m := range more {
		m.Register(router)
	}
	n := &Node{Models: models, log: log}
	if n.server, err = httpapi.Listen(cfg.HTTP, router, log); err != nil {
		return nil, err
	}
	log.Info("node listening", "address", n.server.Addr().String(), "feeds", len(models.feeds.Status()))
	return n, nil
}

// nodeInfo is the node's status page payload. What it shares with the
// simulator's info payload (sessions, settings_documents, and each feed's
// name, version, entries, loaded_at) has the simulator's snake_case names,
// so one reader serves both; the feeds carry their poll status besides.
func nodeInfo(models *readModels) map[string]any {
	c := models.Counts()
	return map[string]any{"feeds": models.feeds.Status(), "rpz": models.rpz.Status(),
		"sessions": c.Sessions, "settings_documents": c.SettingsDocuments}
}

// feedProblems says, for /health, which feeds have never loaded and which
// have failed for longer than their stale_after (feeds.FeedStatus.Stale),
// each with its last error; "" when there are none. Every service that
// holds the node's read models (`svc-pf all`'s node, `svc-pf resolver`,
// `svc-pf simulator`) answers its /health from it.
func feedProblems(status []feeds.FeedStatus) string {
	var parts []string
	for _, s := range status {
		var p string
		switch {
		case s.Version == 0:
			p = "feed " + s.Name + " not loaded yet"
		case s.Stale:
			p = fmt.Sprintf("feed %s failing for longer than its stale_after (%d polls in a row), still serving version %d",
				s.Name, s.Failures, s.Version)
			if !s.LastSuccess.IsZero() {
				p += ", last success " + s.LastSuccess.UTC().Format(time.RFC3339)
			}
		default:
			continue
		}
		if s.LastError != "" {
			p += ": " + s.LastError
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, "; ")
}

// Addr is the node listener's address.
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
