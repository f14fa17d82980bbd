package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/natsbus"
)

// SessionsConfig is the IP Mapper's `sessions` section.
type SessionsConfig struct {
	// Bucket is the JetStream key-value bucket; keep the default unless every
	// node is configured alike.
	Bucket        string        `yaml:"bucket"`
	Replicas      int           `yaml:"replicas"`
	SweepInterval time.Duration `yaml:"sweep_interval"`
	// PurgeDeletesAfter: how old a KV delete marker must be before the IP
	// Mapper purges it; keep it well above any node's watch lag. Negative
	// disables the purge.
	PurgeDeletesAfter time.Duration `yaml:"purge_deletes_after"`
}

// IPMapperConfig is the IP Mapper's whole configuration file.
type IPMapperConfig struct {
	HTTP     httpapi.Config `yaml:"http"`
	Log      LogConfig      `yaml:"log"`
	NATS     NATSConfig     `yaml:"nats"`
	Sessions SessionsConfig `yaml:"sessions"`
}

// DefaultIPMapperConfig is what runs when the file sets nothing.
func DefaultIPMapperConfig() IPMapperConfig {
	return IPMapperConfig{
		HTTP:     httpapi.Config{Address: "127.0.0.1:8083"},
		Log:      LogConfig{Level: "info"},
		Sessions: SessionsConfig{Bucket: "sessions", Replicas: 1, SweepInterval: time.Second, PurgeDeletesAfter: 24 * time.Hour},
	}
}

// Validate checks the configuration before anything starts. standalone
// requires nats.url: the IP Mapper cannot work without NATS.
func (c *IPMapperConfig) Validate(standalone bool) error {
	var errs []error
	errs = append(errs, prefixed("ipmapper", c.HTTP.Validate()), c.Log.validate())
	if standalone && c.NATS.URL == "" {
		errs = append(errs, errors.New("nats.url is required: the IP Mapper keeps its sessions in NATS JetStream"))
	}
	if c.Sessions.Bucket == "" {
		errs = append(errs, errors.New("sessions.bucket is required"))
	}
	if c.Sessions.Replicas < 1 || c.Sessions.Replicas > 5 {
		errs = append(errs, errors.New("sessions.replicas must be 1..5"))
	}
	if c.Sessions.SweepInterval <= 0 {
		errs = append(errs, errors.New("sessions.sweep_interval must be positive"))
	}
	return errors.Join(errs...)
}

// RunIPMapper runs the standalone IP Mapper until ctx ends.
func RunIPMapper(ctx context.Context, cfg IPMapperConfig, v Version, log *slog.Logger) error {
	if err := cfg.Validate(true); err != nil {
		return err
	}
	nc, err := natsbus.Connect(cfg.NATS.URL, "svc-pf ipmapper", log, true)
	if err != nil {
		return err
	}
	defer nc.Close()
	m, err := StartIPMapper(cfg, nc, v, log)
	if err != nil {
		return err
	}
	if err := m.Run(ctx); err != nil {
		return err
	}
	log.Info("svc-pf ipmapper stopped")
	return nil
}

// IPMapper is a built IP Mapper with its health/metrics listener bound.
type IPMapper struct {
	svc     *ipmapper.Service
	server  *httpapi.Server
	log     *slog.Logger
	loadErr atomic.Pointer[error]
}

// StartIPMapper builds the IP Mapper and binds its HTTP listener; Run loads
// the session table and serves.
func StartIPMapper(cfg IPMapperConfig, nc *nats.Conn, v Version, log *slog.Logger) (*IPMapper, error) {
	if err := cfg.Validate(false); err != nil {
		return nil, err
	}
	log = log.With("service", "ipmapper")
	reg := newRegistry()
	svc, err := ipmapper.New(ipmapper.Config{Conn: nc, Bucket: cfg.Sessions.Bucket, Replicas: cfg.Sessions.Replicas,
		SweepInterval: cfg.Sessions.SweepInterval, PurgeDeletesAfter: cfg.Sessions.PurgeDeletesAfter, Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	m := &IPMapper{svc: svc, log: log}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: reg})
	if err != nil {
		return nil, err
	}
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "ipmapper", Version: string(v), Gatherer: reg,
		Ready: func() error {
			if !svc.Ready() {
				if err := m.loadErr.Load(); err != nil {
					return fmt.Errorf("loading sessions: %w", *err)
				}
				return errors.New("loading sessions")
			}
			// Answering but unable to store (a full disk, JetStream down):
			// every deploy fails, which an operator must see here rather
			// than in the orgmanager's backlog minutes later.
			return svc.WriteError()
		},
		Info: func() any { return map[string]any{"nats": nc.ConnectedUrlRedacted(), "bucket": cfg.Sessions.Bucket} },
	})
	router.Handle(http.MethodGet, "/sessions", svc.HandleSessions)
	if m.server, err = httpapi.Listen(cfg.HTTP, router, log); err != nil {
		return nil, err
	}
	log.Info("ipmapper listening", "address", m.server.Addr().String(), "bucket", cfg.Sessions.Bucket)
	return m, nil
}

// Addr is the health/metrics listener's address.
func (m *IPMapper) Addr() net.Addr { return m.server.Addr() }

// Run loads the session table (retrying while NATS or JetStream is not
// reachable; /health says why meanwhile), serves the micro service and the
// HTTP listener until ctx ends.
func (m *IPMapper) Run(ctx context.Context) error {
	served := make(chan error, 1)
	go func() { served <- m.server.Serve(ctx) }()
	delay := 250 * time.Millisecond
	for {
		err := m.svc.Start(ctx)
		if err == nil {
			m.log.Info("ipmapper ready")
			break
		}
		m.loadErr.Store(&err)
		m.log.Warn("ipmapper start failed; retrying", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return <-served
		case <-time.After(delay):
		}
		delay = min(2*delay, 10*time.Second)
	}
	err := <-served
	return errors.Join(err, m.svc.Stop())
}
