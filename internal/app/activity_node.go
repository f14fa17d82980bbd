package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/dnstap"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// nodeActivity is the node's side of activity (docs/activity.md, On the
// node, and dnstap), assembled: the observer the resolver reports to and
// the goroutines that ship what it saw.
type nodeActivity struct {
	// Observer is for resolver.Config.Observer: the recorder, the dnstap
	// writer, both or nil.
	Observer resolver.Observer
	// Run publishes and writes dnstap until ctx ends; with neither it
	// only waits for ctx, so that it can run beside the other services.
	Run func(ctx context.Context) error
}

// startNodeActivity builds the node's recorder and publisher from the
// `activity` section — nothing when activity.enabled is false, and
// nothing but a warning without NATS, where the events could go nowhere
// (svcpf_resolver_decisions_total still counts every decision) — and,
// when activity.dnstap.socket is set, the dnstap writer, which needs
// neither.
func startNodeActivity(cfg activity.Config, node string, v Version, nc *nats.Conn, reg prometheus.Registerer, log *slog.Logger) (*nodeActivity, error) {
	var (
		obs  []resolver.Observer
		runs []func(context.Context) error
	)
	switch {
	case !cfg.Enabled:
	case nc == nil:
		log.Warn("activity: no NATS, so no activity is kept (svcpf_resolver_decisions_total still counts the decisions); set nats.url to publish it, or activity.enabled: false")
	default:
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
		obs, runs = append(obs, rec), append(runs, pub.Run)
	}
	if sock := cfg.DNSTap.Socket; sock != "" {
		tap, err := dnstap.New(dnstap.Config{Socket: sock, Identity: node, Version: string(v), Registerer: reg,
			Logger: log.With("component", "dnstap")})
		if err != nil {
			return nil, fmt.Errorf("activity.dnstap: %w", err)
		}
		log.Info("activity: writing dnstap", "socket", sock)
		obs, runs = append(obs, tap), append(runs, tap.Run)
	}
	return &nodeActivity{Observer: observerOf(obs), Run: func(ctx context.Context) error {
		errc := make(chan error, len(runs))
		for _, run := range runs {
			go func() { errc <- run(ctx) }()
		}
		<-ctx.Done()
		var errs []error
		for range runs {
			errs = append(errs, <-errc)
		}
		return errors.Join(errs...)
	}}, nil
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
