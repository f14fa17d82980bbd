package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// nodeActivity is the node's side of activity (docs/activity.md, On the
// node), assembled: the observer the resolver reports to and the
// publisher's run.
type nodeActivity struct {
	// Observer is for resolver.Config.Observer; nil when activity is off
	// or cannot be published (no NATS).
	Observer resolver.Observer
	// Run publishes until ctx ends; with no observer it only waits for
	// ctx, so that it can run beside the other services.
	Run func(ctx context.Context) error
}

// startNodeActivity builds the node's recorder and publisher from the
// `activity` section: nothing at all when activity.enabled is false, and
// nothing but a warning without NATS, where the events could go nowhere
// (svcpf_resolver_decisions_total still counts every decision).
func startNodeActivity(cfg activity.Config, node string, nc *nats.Conn, reg prometheus.Registerer, log *slog.Logger) (*nodeActivity, error) {
	idle := &nodeActivity{Run: func(ctx context.Context) error { <-ctx.Done(); return nil }}
	if !cfg.Enabled {
		return idle, nil
	}
	if nc == nil {
		log.Warn("activity: no NATS, so no activity is kept (svcpf_resolver_decisions_total still counts the decisions); set nats.url to publish it, or activity.enabled: false")
		return idle, nil
	}
	rec, err := activity.NewRecorder(activity.RecorderConfig{Config: cfg, Node: node, Registerer: reg, Logger: log})
	if err != nil {
		return nil, prefixed("activity", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("activity: %w", err)
	}
	pub, err := activity.NewPublisher(activity.PublisherConfig{Recorder: rec, JetStream: js, Logger: log})
	if err != nil {
		return nil, prefixed("activity", err)
	}
	log.Info("activity: recording", "node", node, "sample_allowed", cfg.SampleAllowed, "client_ip", cfg.ClientIP,
		"count_interval", cfg.CountInterval, "stream", activity.Stream)
	return &nodeActivity{Observer: rec, Run: pub.Run}, nil
}

// observerOf is the resolver's one Observer for obs (nil ones left out).
func observerOf(obs []resolver.Observer) resolver.Observer {
	var all resolver.Observers
	for _, o := range obs {
		if o != nil {
			all = append(all, o)
		}
	}
	switch len(all) {
	case 0:
		return nil
	case 1:
		return all[0]
	}
	return all
}
