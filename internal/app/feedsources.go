package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/httpapi"
)

// FeedUpdateConfig is the configuration of `svc-pf feed update -c FILE`:
// the feeds that rebuild themselves from their sources (docs/feeds.md),
// and the listener of /health and /metrics.
type FeedUpdateConfig struct {
	Log         LogConfig                    `yaml:"log"`
	HTTP        httpapi.Config               `yaml:"http"`
	FeedSources []feedbuild.FeedSourceConfig `yaml:"feed_sources"`
}

// DefaultFeedUpdateAddress is `feed update`'s listener: loopback, the port
// after `feed serve`'s.
const DefaultFeedUpdateAddress = "127.0.0.1:8085"

// DefaultFeedUpdateConfig is what runs when the file sets nothing but its
// feeds.
func DefaultFeedUpdateConfig() FeedUpdateConfig {
	return FeedUpdateConfig{Log: LogConfig{Level: "info"}, HTTP: httpapi.Config{Address: DefaultFeedUpdateAddress}}
}

// Validate checks the configuration before anything starts.
func (c *FeedUpdateConfig) Validate() error {
	errs := []error{c.Log.validate(), c.HTTP.Validate(), feedbuild.ValidateFeedSources(c.FeedSources)}
	if len(c.FeedSources) == 0 {
		errs = append(errs, errors.New("feed_sources: empty: list the feeds to keep up to date (docs/feeds.md)"))
	}
	return errors.Join(errs...)
}

// Check is what `svc-pf feed update` refuses at start.
func (c *FeedUpdateConfig) Check() error { return c.Validate() }

// RunFeedUpdate runs `svc-pf feed update`: with once, one round of every
// feed and an error when a build failed or a source was stale; otherwise
// the update loop and its listener until ctx ends.
func RunFeedUpdate(ctx context.Context, cfg FeedUpdateConfig, v Version, log *slog.Logger, once bool) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	reg := newRegistry()
	u, err := feedbuild.NewUpdater(feedbuild.UpdaterConfig{Feeds: cfg.FeedSources, Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	if once {
		return u.RunOnce(ctx)
	}
	srv, err := StartFeedUpdate(cfg, u, reg, v, log)
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

// FeedUpdate is `svc-pf feed update`, started: the loop and its listener.
type FeedUpdate struct {
	Updater *feedbuild.Updater
	server  *httpapi.Server
}

// StartFeedUpdate binds the listener of u: /health answers 503 naming
// every failing feed and source (a feed built from a last good copy
// included: the lists are not being updated), /metrics the
// svcpf_feed_source_* metrics.
func StartFeedUpdate(cfg FeedUpdateConfig, u *feedbuild.Updater, reg *prometheus.Registry, v Version, log *slog.Logger) (*FeedUpdate, error) {
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "feed update", Version: string(v), Gatherer: reg,
		Ready: func() error {
			if p := u.Problems(); len(p) > 0 {
				return errors.New(strings.Join(p, "; "))
			}
			return nil
		},
		Health: func() map[string]any { return map[string]any{"feeds": u.Status()} },
		Info:   func() any { return u.Status() },
	})
	server, err := httpapi.Listen(cfg.HTTP, router, log)
	if err != nil {
		return nil, err
	}
	log.Info("feed update listening", "address", server.Addr().String(), "feeds", len(cfg.FeedSources))
	return &FeedUpdate{Updater: u, server: server}, nil
}

// Addr is the listener's address.
func (f *FeedUpdate) Addr() net.Addr { return f.server.Addr() }

// Run runs the loop and serves until ctx ends.
func (f *FeedUpdate) Run(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- f.Updater.Run(ctx) }()
	err := f.server.Serve(ctx)
	return errors.Join(err, <-done)
}

// startFeedSources is `feed_sources:` under `svc-pf all`: the loop, its
// metrics on the node listener's registry.
func startFeedSources(list []feedbuild.FeedSourceConfig, reg prometheus.Registerer, log *slog.Logger) (*feedbuild.Updater, error) {
	u, err := feedbuild.NewUpdater(feedbuild.UpdaterConfig{Feeds: list, Registerer: reg, Logger: log})
	if err != nil {
		return nil, err
	}
	if len(list) > 0 {
		log.Info("feed_sources: keeping feeds up to date", "feeds", len(list))
	}
	return u, nil
}

// feedSourcesHealth is the node listener's /health field for
// `feed_sources:` under `svc-pf all`: absent without feeds; with them,
// the problems, each naming the feed or source and what to do. The node
// stays ready (it serves the feeds it holds); the field tells the truth
// about their updates.
func feedSourcesHealth(u *feedbuild.Updater) func() map[string]any {
	return func() map[string]any {
		if u == nil || len(u.Status()) == 0 {
			return nil
		}
		p := u.Problems()
		if len(p) == 0 {
			return map[string]any{"feed_sources": map[string]any{"status": "ok"}}
		}
		return map[string]any{"feed_sources": map[string]any{
			"status":   fmt.Sprintf("failing: %d problem(s); the feeds keep their last good content", len(p)),
			"problems": p,
		}}
	}
}
