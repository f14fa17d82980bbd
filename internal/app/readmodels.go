package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/readmodel"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/readmodel/sessions"
	settingsmodel "github.com/svc-pf/svc-pf/internal/readmodel/settings"
	"github.com/svc-pf/svc-pf/internal/rpz"
	"github.com/svc-pf/svc-pf/internal/simulator"
)

// readModels are one node's read models, shared by its simulator and its
// resolver: the feeds (always), and, when the node has NATS, the sessions
// and settings buckets. Without NATS every client gets the global layer of
// no settings: the simulator then answers from the feeds and a request's
// own settings.
type readModels struct {
	feeds    *feeds.Client
	rpz      *rpz.Set             // the node's RPZ zones (docs/policy.md)
	sessions *sessions.Model      // nil without NATS
	settings *settingsmodel.Model // nil without NATS

	genMu    sync.Mutex
	gen      uint64
	lastFeed *feeds.Set
	lastRPZ  *rpz.Snapshot
}

// nodeKeys are the node config keys (feeds, rpz; docs/resolver.md), which
// the simulator and the resolver share under `svc-pf all`.
type nodeKeys struct {
	Feeds []feeds.FeedConfig
	RPZ   []rpz.ZoneConfig
	// SessionsBucket is the sessions bucket to follow; empty: the default
	// (session.Bucket). `svc-pf all` sets it to its IP Mapper's.
	SessionsBucket string
}

// newReadModels builds the read models; nc may be nil (no NATS). The RPZ
// zones are loaded here, before any decision.
func newReadModels(keys nodeKeys, nc *nats.Conn, reg prometheus.Registerer, log *slog.Logger) (*readModels, error) {
	fc, err := feeds.New(feeds.Config{Feeds: keys.Feeds, Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	zones, err := rpz.New(rpz.Config{Zones: keys.RPZ, Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	m := &readModels{feeds: fc, rpz: zones}
	if nc == nil {
		return m, nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	opts := readmodel.Options{JetStream: js, Logger: log, Registerer: reg}
	sessOpts := opts
	sessOpts.Bucket = keys.SessionsBucket
	if m.sessions, err = sessions.New(sessions.Config(sessOpts)); err != nil {
		return nil, err
	}
	if m.settings, err = settingsmodel.New(settingsmodel.Config(opts)); err != nil {
		return nil, err
	}
	return m, nil
}

// View is the policy engine's view: each model's current snapshot.
func (m *readModels) View() policy.View {
	v := policy.View{Categories: m.feeds.Set(), RPZ: m.rpz.RPZ()}
	if m.sessions != nil {
		v.Sessions = m.sessions.Snapshot()
	}
	if m.settings != nil {
		v.Settings = m.settings.Snapshot()
	}
	return v
}

// Generation changes whenever the feeds or the RPZ zones change: what a
// cached DNS answer was decided from beside the policy (the resolver
// empties its packet cache then).
func (m *readModels) Generation() uint64 {
	m.genMu.Lock()
	defer m.genMu.Unlock()
	if f, z := m.feeds.Set(), m.rpz.Snapshot(); f != m.lastFeed || z != m.lastRPZ {
		m.lastFeed, m.lastRPZ = f, z
		m.gen++
	}
	return m.gen
}

// Counts sizes the models for the simulator's info payload.
func (m *readModels) Counts() simulator.Counts {
	var c simulator.Counts
	if m.sessions != nil {
		c.Sessions = m.sessions.Snapshot().Len()
	}
	if m.settings != nil {
		c.SettingsDocuments = m.settings.Snapshot().Len()
	}
	return c
}

// Ready says what is not loaded yet or what feed has failed for longer
// than its stale_after, nil when nothing is amiss: /health tells the truth
// about a node that would answer from half its data or from old data.
func (m *readModels) Ready() error {
	var parts []string
	if p := feedProblems(m.feeds.Status()); p != "" {
		parts = append(parts, p)
	}
	if m.sessions != nil && !m.sessions.Ready() {
		parts = append(parts, "sessions bucket not loaded yet")
	}
	if m.settings != nil && !m.settings.Ready() {
		parts = append(parts, "settings bucket not loaded yet")
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New(strings.Join(parts, "; "))
}

// Run follows every model until ctx ends.
func (m *readModels) Run(ctx context.Context) error {
	runs := map[string]func(context.Context) error{"feeds": m.feeds.Run, "rpz": m.rpz.Run}
	if m.sessions != nil {
		runs["sessions"] = m.sessions.Run
	}
	if m.settings != nil {
		runs["settings"] = m.settings.Run
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
