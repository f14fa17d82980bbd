// Package node is one filter node's read side, shared by its simulator and
// its resolver: the read models, the policy View over them, the one
// policy.Engine both ask, when a cached answer goes stale, and readiness.
//
// Its place in the data flow: the IP Mapper's sessions bucket and the
// orgmanager's settings bucket (NATS KV), the feed directories and the RPZ
// zone files → the read models (internal/readmodel/*, internal/rpz) → one
// policy.View per decision → one policy.Engine → the resolver (PolicyFor,
// DecideInto per DNS query) and the simulator (Evaluate per API call). One
// engine means one cache of compiled policies: a policy the simulator
// compiled is the one DNS answers from. Generation tells the resolver when
// its packet cache must go; Ready tells /health whether the node would
// answer from half its data or from old data. The listener that shows all
// this (status page, /health, /metrics) is the caller's to wire
// (internal/app).
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/readmodel"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/readmodel/sessions"
	settingsmodel "github.com/svc-pf/svc-pf/internal/readmodel/settings"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

// Config configures a Node: the node keys (feeds, rpz) and what it runs on.
type Config struct {
	// Feeds are the category feeds (docs/feed-client.md).
	Feeds []feeds.FeedConfig
	// RPZ are the response-policy zone files (docs/policy.md).
	RPZ []rpz.ZoneConfig
	// NATS carries the sessions and settings buckets; nil: no NATS, and
	// every client gets the global layer of no settings (the simulator
	// then answers from the feeds and a request's own settings).
	NATS *nats.Conn
	// SessionsBucket is the sessions bucket to follow; empty: the default
	// (session.Bucket). `svc-pf all` sets it to its IP Mapper's.
	SessionsBucket string
	// Registerer takes the read models' and the engine's metrics; nil
	// registers nowhere.
	Registerer prometheus.Registerer
	// Logger; nil logs nothing.
	Logger *slog.Logger
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.SessionsBucket != "" && c.NATS == nil {
		errs = append(errs, errors.New("node: a sessions bucket without NATS: nothing would follow it"))
	}
	errs = append(errs, rpz.Config{Zones: c.RPZ}.Validate())
	return errors.Join(errs...)
}

// Node is one node's read side, built by New and followed by Run.
type Node struct {
	feeds    *feeds.Client
	rpz      atomic.Pointer[rpz.Set] // swapped by SetRPZ (reload.go)
	rpzRun   rpzRun
	sessions *sessions.Model      // nil without NATS
	settings *settingsmodel.Model // nil without NATS
	engine   *policy.Engine

	genMu    sync.Mutex
	gen      uint64
	lastFeed *feeds.Set
	lastRPZ  *rpz.Snapshot
}

// New builds the read models and the engine over them. The RPZ zones are
// loaded here, before any decision; the rest loads once Run follows them.
func New(cfg Config) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	fc, err := feeds.New(feeds.Config{Feeds: cfg.Feeds, Logger: cfg.Logger, Registerer: cfg.Registerer})
	if err != nil {
		return nil, err
	}
	zones, err := rpz.New(rpz.Config{Zones: cfg.RPZ, Logger: cfg.Logger, Registerer: cfg.Registerer})
	if err != nil {
		return nil, err
	}
	n := &Node{feeds: fc}
	n.rpz.Store(zones)
	if cfg.NATS != nil {
		js, err := jetstream.New(cfg.NATS)
		if err != nil {
			return nil, err
		}
		opts := readmodel.Options{JetStream: js, Logger: cfg.Logger, Registerer: cfg.Registerer}
		sessOpts := opts
		sessOpts.Bucket = cfg.SessionsBucket
		if n.sessions, err = sessions.New(sessions.Config(sessOpts)); err != nil {
			return nil, err
		}
		if n.settings, err = settingsmodel.New(settingsmodel.Config(opts)); err != nil {
			return nil, err
		}
	}
	m, err := newPolicyMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	if n.engine, err = policy.NewEngine(policy.EngineConfig{View: n.View, Metrics: m}); err != nil {
		return nil, err
	}
	return n, nil
}

// Engine is the node's one policy engine: the resolver and the simulator
// both decide with it, so they share its cache of compiled policies, whose
// lookups svcpf_policy_cache_lookups_total{result="hit"|"miss"} counts.
func (n *Node) Engine() *policy.Engine { return n.engine }

// Feeds is the feeds read model (the simulator's codemappings and info).
func (n *Node) Feeds() *feeds.Client { return n.feeds }

// View is the policy engine's view: each model's current snapshot.
func (n *Node) View() policy.View {
	v := policy.View{Categories: n.feeds.Set(), RPZ: n.rpz.Load().RPZ()}
	if n.sessions != nil {
		v.Sessions = n.sessions.Snapshot()
	}
	if n.settings != nil {
		v.Settings = n.settings.Snapshot()
	}
	return v
}

// Generation changes whenever the feeds or the RPZ zones change: what a
// cached DNS answer was decided from beside the policy (the resolver
// empties its packet cache then).
func (n *Node) Generation() uint64 {
	n.genMu.Lock()
	defer n.genMu.Unlock()
	if f, z := n.feeds.Set(), n.rpz.Load().Snapshot(); f != n.lastFeed || z != n.lastRPZ {
		n.lastFeed, n.lastRPZ = f, z
		n.gen++
	}
	return n.gen
}

// Counts are the sizes of the node's read models, with the names the
// simulator's info payload gives them.
type Counts struct {
	Sessions          int `json:"sessions"`
	SettingsDocuments int `json:"settings_documents"`
}

// Counts sizes the read models.
func (n *Node) Counts() Counts {
	return Counts{Sessions: n.SessionCount(), SettingsDocuments: n.SettingsDocumentCount()}
}

// SessionCount is how many sessions the node holds; 0 without NATS.
func (n *Node) SessionCount() int {
	if n.sessions == nil {
		return 0
	}
	return n.sessions.Snapshot().Len()
}

// SettingsDocumentCount is how many settings documents the node holds; 0
// without NATS.
func (n *Node) SettingsDocumentCount() int {
	if n.settings == nil {
		return 0
	}
	return n.settings.Snapshot().Len()
}

// Status is the node's status page payload. What it shares with the
// simulator's info payload (sessions, settings_documents, and each feed's
// name, version, entries, loaded_at) has the simulator's snake_case
// names, so one reader serves both; the feeds carry their poll status
// besides.
type Status struct {
	Feeds []feeds.FeedStatus `json:"feeds"`
	RPZ   []rpz.Status       `json:"rpz"`
	Counts
}

// Status is the status page's payload now.
func (n *Node) Status() Status {
	return Status{Feeds: n.feeds.Status(), RPZ: n.rpz.Load().Status(), Counts: n.Counts()}
}

// Ready says what is not loaded yet or what feed has failed for longer
// than its stale_after, nil when nothing is amiss: /health tells the truth
// about a node that would answer from half its data or from old data.
func (n *Node) Ready() error {
	var parts []string
	if p := feedProblems(n.feeds.Status()); p != "" {
		parts = append(parts, p)
	}
	if n.sessions != nil && !n.sessions.Ready() {
		parts = append(parts, "sessions bucket not loaded yet")
	}
	if n.settings != nil && !n.settings.Ready() {
		parts = append(parts, "settings bucket not loaded yet")
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New(strings.Join(parts, "; "))
}

// The parts of the policy data Waiting and Missing name: the labels of
// the resolver's svcpf_resolver_unfiltered_total and the words of its
// /health line.
const (
	PartSessions = "sessions"
	PartSettings = "settings"
	PartFeeds    = "feeds"
)

// Waiting is the first part of the policy data that has not loaded yet,
// in the order sessions, settings, feeds (PartSessions, …); "" once every
// part has loaded. A part counts as loaded from its first complete load
// on, whatever happens later: the read models keep their last data when
// NATS goes away or a feed fails, so Waiting never turns non-empty again
// (Ready, not Waiting, says a feed has gone stale). It allocates nothing:
// the resolver asks it for each query it answers before that.
func (n *Node) Waiting() string {
	switch {
	case n.sessions != nil && !n.sessions.Ready():
		return PartSessions
	case n.settings != nil && !n.settings.Ready():
		return PartSettings
	case !n.feeds.Ready():
		return PartFeeds
	}
	return ""
}

// Missing lists, for /health, each part of the policy data Waiting would
// name (the buckets by name, each feed that has never loaded by name);
// nil once everything has loaded.
func (n *Node) Missing() []string {
	var out []string
	if n.sessions != nil && !n.sessions.Ready() {
		out = append(out, "the sessions bucket")
	}
	if n.settings != nil && !n.settings.Ready() {
		out = append(out, "the settings bucket")
	}
	for _, s := range n.feeds.Status() {
		if s.Version == 0 {
			out = append(out, "feed "+s.Name)
		}
	}
	return out
}

// feedProblems says which feeds have never loaded and which have failed
// for longer than their stale_after (feeds.FeedStatus.Stale), each with
// its last error; "" when there are none.
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

// Run follows every read model until ctx ends.
func (n *Node) Run(ctx context.Context) error {
	runs := map[string]func(context.Context) error{"feeds": n.feeds.Run, "rpz": n.runRPZ}
	if n.sessions != nil {
		runs["sessions"] = n.sessions.Run
	}
	if n.settings != nil {
		runs["settings"] = n.settings.Run
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for name, run := range runs {
		wg.Go(func() {
			if err := run(ctx); err != nil && ctx.Err() == nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
