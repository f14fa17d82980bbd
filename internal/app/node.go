package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/node"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
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
	// health adds fields to /health (feed_sources: under `svc-pf all`);
	// nil adds none.
	health func() map[string]any
	// natsWait is the standalone resolver's wait for its NATS server
	// (connectBus); resolver is the resolver the listener serves the API
	// of, whose unready answers /health states. Both nil when absent; set
	// before Run.
	natsWait *natsbus.Await
	resolver *resolver.Resolver
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
		Service: "node", Version: string(v), Gatherer: reg, Ready: ln.Ready,
		Info: func() any { return n.Status() },
		Health: func() map[string]any {
			var body map[string]any
			if ln.health != nil {
				body = ln.health()
			}
			if ln.resolver != nil {
				if body == nil {
					body = map[string]any{}
				}
				forwarderHealth(body, ln.resolver)
			}
			return body
		},
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

// Ready is the node's readiness as its /health and its heartbeat state
// it: nil, or every reason it is not ready, in the order an operator
// should look.
func (ln *Node) Ready() error {
	var parts []string
	if err := ln.natsWait.Err(); err != nil {
		parts = append(parts, err.Error())
	}
	if err := resolverUnready(ln.resolver, ln.Models); err != nil {
		parts = append(parts, err.Error())
	}
	if ln.resolver != nil {
		if err := ln.resolver.TLSCertificateProblem(); err != nil {
			parts = append(parts, err.Error())
		}
	}
	if ln.activity != nil {
		if err := ln.activity(); err != nil {
			parts = append(parts, "activity collector: "+err.Error())
		}
	}
	if err := ln.Models.Ready(); err != nil {
		parts = append(parts, err.Error())
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New(strings.Join(parts, "; "))
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

// resolverUnready is the /health line of a resolver that answers before
// its node's policy data has loaded (resolver.unready): what it answers,
// what it waits for and what to check; nil once it has loaded (and from
// then on), or without a resolver.
func resolverUnready(r *resolver.Resolver, n *node.Node) error {
	if r == nil || r.Waiting() == "" {
		return nil
	}
	answer := "answering unfiltered (resolver.unready: open)"
	if r.UnreadyMode() == resolver.UnreadyClosed {
		answer = "answering SERVFAIL, EDE 14 Not Ready (resolver.unready: closed)"
	}
	missing := n.Missing()
	if len(missing) == 0 { // loaded between the two questions
		return nil
	}
	var check []string
	for _, m := range missing {
		switch {
		case m == "the sessions bucket":
			check = append(check, "that NATS is reachable and the IP Mapper has created the sessions bucket")
		case m == "the settings bucket":
			check = append(check, "that NATS is reachable and the orgmanager has created the settings bucket")
		case strings.HasPrefix(m, "feed "):
			check = append(check, "the feeds' url and their errors below")
		}
	}
	return fmt.Errorf("resolver %s until the policy data has loaded; waiting for %s; check %s",
		answer, strings.Join(missing, ", "), strings.Join(slices.Compact(check), " and "))
}

// forwarderHealth adds the resolver's forwarders to a /health body, and a
// warning when none of them answers. It is a warning, not unreadiness: the
// node still answers from its caches (stale records included) and its
// filtering still holds, and taking every node of a site out of service
// because their shared upstream failed would turn a degraded service into
// none.
func forwarderHealth(body map[string]any, r *resolver.Resolver) {
	body["mode"] = r.Mode().String()
	if r.Mode() == resolver.ModeRecursive {
		return // no forwarders: the recursor's state is in the statistics
	}
	st, strategy := r.Forwarders()
	type fwd struct {
		Address string  `json:"address"`
		Up      bool    `json:"up"`
		SRTTMS  float64 `json:"srtt_ms"`
		// Zone is the forward zone the server answers for; absent for
		// the default forwarders.
		Zone string `json:"zone,omitempty"`
	}
	list := make([]fwd, 0, len(st))
	// add lists servers (of zone, "" for the default forwarders) and
	// says how many answer.
	add := func(servers []upstream.ForwarderStatus, zone string) (up int) {
		for _, f := range servers {
			list = append(list, fwd{Address: f.Addr.String(), Up: f.Up, SRTTMS: float64(f.SRTT.Microseconds()) / 1000, Zone: zone})
			if f.Up {
				up++
			}
		}
		return up
	}
	var warnings []string
	if add(st, "") == 0 && len(st) > 0 {
		warnings = append(warnings, fmt.Sprintf("none of the %d forwarders answers: cache misses are answered from stale records where the record cache has them, else SERVFAIL; check the network path to the forwarders and their own health", len(st)))
	}
	for _, z := range r.ForwardZones() {
		if add(z.Forwarders, z.Zone) == 0 && len(z.Forwarders) > 0 {
			warnings = append(warnings, fmt.Sprintf("none of the %d servers of forward zone %s answers: its names get stale records or SERVFAIL; check those servers", len(z.Forwarders), z.Zone))
		}
	}
	body["forwarders"] = list
	body["forwarder_strategy"] = strategy.String()
	if len(warnings) > 0 {
		body["warning"] = strings.Join(warnings, "; ")
	}
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
func newAnnouncer(cfg AnnounceConfig, service string, services []string, n *node.Node, ready func() error, nc *nats.Conn, v Version,
	log *slog.Logger) (*nodehealth.Announcer, error) {
	if nc == nil {
		return nil, nil
	}
	name := nodeName(cfg, service)
	a, err := nodehealth.NewAnnouncer(nodehealth.AnnouncerConfig{NATS: nc, Name: name, Services: services,
		Version: string(v), Interval: cfg.Heartbeat, Snapshot: nodeSnapshot(n, ready), Logger: log})
	if err != nil {
		return nil, prefixed("node", err)
	}
	log.Info("node announcing itself", "name", name, "bucket", nodehealth.Bucket)
	return a, nil
}

// nodeSnapshot is what the node says at each beat: its readiness (ready;
// nil: the read models'), feeds and counts, the same its /health and
// status page show.
func nodeSnapshot(n *node.Node, ready func() error) func() nodehealth.Snapshot {
	if ready == nil {
		ready = n.Ready
	}
	return func() nodehealth.Snapshot {
		st := n.Status()
		s := nodehealth.Snapshot{Counts: nodehealth.Counts{Sessions: st.Sessions, SettingsDocuments: st.SettingsDocuments}}
		if err := ready(); err != nil {
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
