package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/node"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
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
	// Name and Heartbeat: how the node announces itself (node.name,
	// node.heartbeat).
	AnnounceConfig `yaml:",inline"`
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
	// activity is the in-process activity collector's health under `svc-pf
	// all` (set by StartAll before Run serves /health), nil otherwise.
	activity func() error
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
	ln := &Node{Models: n, log: log}
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "node", Version: string(v), Gatherer: reg, Ready: func() error {
			if ln.activity != nil {
				if err := ln.activity(); err != nil {
					return fmt.Errorf("activity collector: %w", err)
				}
			}
			return n.Ready()
		},
		Info: func() any { return n.Status() },
	})
	for _, m := range more {
		m.Register(router)
	}
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

// AnnounceConfig is how a node announces itself to the orgmanager
// (internal/nodehealth): its heartbeat in the NATS KV bucket svcpf_nodes.
// It is the `node` section of `svc-pf resolver` and `svc-pf simulator`,
// and part of the `node` section of `svc-pf all`.
type AnnounceConfig struct {
	// Name is the node's key in the bucket; default <hostname>-<service>
	// (<hostname>-all under `svc-pf all`). Two nodes with one name
	// overwrite each other's heartbeat.
	Name string `yaml:"name"`
	// Heartbeat is how often the node writes it; default 10s.
	Heartbeat time.Duration `yaml:"heartbeat"`
}

func (c AnnounceConfig) validate() error {
	var errs []error
	if c.Name != "" {
		errs = append(errs, prefixed("node.name", nodehealth.ValidateName(c.Name)))
	}
	if c.Heartbeat < 0 || c.Heartbeat > 0 && c.Heartbeat < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("node.heartbeat: %s is not a positive interval of at least 10ms", c.Heartbeat))
	}
	return errors.Join(errs...)
}

// nodeName is the node's name: node.name, else <hostname>-<service>. Its
// heartbeat and its activity go by it.
func nodeName(cfg AnnounceConfig, service string) string {
	if cfg.Name != "" {
		return cfg.Name
	}
	host, _ := os.Hostname()
	return nodehealth.DefaultName(host, service)
}

// newAnnouncer builds the node's announcer under the name cfg gives it or
// <hostname>-<service>; nil without NATS, where nobody would read it.
func newAnnouncer(cfg AnnounceConfig, service string, services []string, n *node.Node, nc *nats.Conn, v Version,
	log *slog.Logger) (*nodehealth.Announcer, error) {
	if nc == nil {
		return nil, nil
	}
	name := nodeName(cfg, service)
	a, err := nodehealth.NewAnnouncer(nodehealth.AnnouncerConfig{NATS: nc, Name: name, Services: services,
		Version: string(v), Interval: cfg.Heartbeat, Snapshot: nodeSnapshot(n), Logger: log})
	if err != nil {
		return nil, prefixed("node", err)
	}
	log.Info("node announcing itself", "name", name, "bucket", nodehealth.Bucket)
	return a, nil
}

// nodeSnapshot is what the node says at each beat: its readiness, feeds
// and counts, the same its /health and status page show.
func nodeSnapshot(n *node.Node) func() nodehealth.Snapshot {
	return func() nodehealth.Snapshot {
		st := n.Status()
		s := nodehealth.Snapshot{Counts: nodehealth.Counts{Sessions: st.Sessions, SettingsDocuments: st.SettingsDocuments}}
		if err := n.Ready(); err != nil {
			s.NotReady = err.Error()
		}
		for _, f := range st.Feeds {
			s.Feeds = append(s.Feeds, nodehealth.Feed{Name: f.Name, Version: f.Version, LoadedAt: f.LoadedAt})
		}
		return s
	}
}

// runAnnouncer runs a (when not nil) until ctx ends; wait returns once it
// has.
func runAnnouncer(ctx context.Context, a *nodehealth.Announcer) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if a != nil {
			_ = a.Run(ctx)
		}
	}()
	return func() { <-done }
}
