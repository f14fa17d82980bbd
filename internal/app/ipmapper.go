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
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/session"
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
	// SnapshotInterval: how often the active IP Mapper writes the snapshot
	// of its table nodes start from; 0 or negative writes none (nodes then
	// replay the whole bucket on a cold start).
	SnapshotInterval time.Duration `yaml:"snapshot_interval"`
}

// IPMapperHAConfig is the IP Mapper's `ha` section: the active/passive lock
// that lets several IP Mappers run for one bucket, one of them serving
// (docs/ipmapper.md, "High availability").
type IPMapperHAConfig struct {
	// LockBucket is the KV bucket of the locks (one key per sessions
	// bucket); every IP Mapper of a bucket must name the same one.
	LockBucket string `yaml:"lock_bucket"`
	// LockTTL: a standby takes over about this long after the active one
	// dies. It is the lock bucket's TTL, the same for every IP Mapper using
	// the bucket; one configured otherwise refuses to start.
	LockTTL time.Duration `yaml:"lock_ttl"`
	// Instance names this instance in the lock and the logs; default
	// "<hostname>/<pid>".
	Instance string `yaml:"instance"`
}

// IPMapperConfig is the IP Mapper's whole configuration file.
type IPMapperConfig struct {
	HTTP     httpapi.Config   `yaml:"http"`
	Log      LogConfig        `yaml:"log"`
	NATS     NATSConfig       `yaml:"nats"`
	Sessions SessionsConfig   `yaml:"sessions"`
	HA       IPMapperHAConfig `yaml:"ha"`
	// Auth guards GET /sessions (docs/access.md); under `svc-pf all` the
	// orgmanager's auth section covers it and this one must stay unset.
	Auth IPMapperAuthConfig `yaml:"auth"`
}

// DefaultIPMapperConfig is what runs when the file sets nothing.
func DefaultIPMapperConfig() IPMapperConfig {
	return IPMapperConfig{
		HTTP:     httpapi.Config{Address: "127.0.0.1:8083"},
		Log:      LogConfig{Level: "info"},
		Sessions: SessionsConfig{Bucket: session.Bucket, Replicas: 1, SweepInterval: time.Second, PurgeDeletesAfter: 24 * time.Hour, SnapshotInterval: 10 * time.Minute},
		HA:       IPMapperHAConfig{LockBucket: ipmapper.DefaultLockBucket, LockTTL: 3 * time.Second},
		Auth:     IPMapperAuthConfig{Mode: AuthTokens},
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
	if err := wire.ValidBucket(c.Sessions.Bucket); err != nil {
		errs = append(errs, fmt.Errorf("sessions.bucket: %w", err))
	}
	if err := wire.ValidBucket(c.HA.LockBucket); err != nil {
		errs = append(errs, fmt.Errorf("ha.lock_bucket: %w", err))
	} else if c.HA.LockBucket == c.Sessions.Bucket {
		errs = append(errs, fmt.Errorf("ha.lock_bucket %q is the sessions bucket: the locks need a bucket of their own", c.HA.LockBucket))
	}
	if c.HA.LockTTL < 300*time.Millisecond || c.HA.LockTTL > time.Minute {
		errs = append(errs, fmt.Errorf("ha.lock_ttl %s: must be 300ms..1m", c.HA.LockTTL))
	}
	if c.Sessions.Replicas < 1 || c.Sessions.Replicas > 5 {
		errs = append(errs, errors.New("sessions.replicas must be 1..5"))
	}
	if c.Sessions.SweepInterval <= 0 {
		errs = append(errs, errors.New("sessions.sweep_interval must be positive"))
	}
	errs = append(errs, validMode(c.Auth.Mode))
	return errors.Join(errs...)
}

// snapshotInterval maps sessions.snapshot_interval to
// ipmapper.Config.SnapshotInterval, whose 0 means its default: in the file,
// 0 (like a negative value) turns the snapshot off.
func snapshotInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// RunIPMapper runs the standalone IP Mapper until ctx ends.
func RunIPMapper(ctx context.Context, cfg IPMapperConfig, v Version, log *slog.Logger) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nc, aw, err := connectBus(ctx, cfg.NATS.URL, "svc-pf ipmapper", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	m, err := StartIPMapper(cfg, nc, v, log)
	if err != nil {
		return err
	}
	m.natsWait = aw
	if err := m.Run(ctx); err != nil {
		return err
	}
	log.Info("svc-pf ipmapper stopped")
	return nil
}

// IPMapper is a built IP Mapper with its health/metrics listener bound.
type IPMapper struct {
	svc *ipmapper.Service
	// closeAuth closes the token database the IP Mapper opened itself.
	closeAuth func()
	server    *httpapi.Server
	log       *slog.Logger
	loadErr   atomic.Pointer[error]
	// natsStore is the embedded NATS server's store error under svc-pf
	// all (natsbus.Embedded.StoreError), nil with an external server: set
	// by StartAll before Run serves /health.
	natsStore func() error
	// natsWait is the standalone IP Mapper's wait for its NATS server
	// (connectBus), nil under `svc-pf all`: set before Run.
	natsWait *natsbus.Await
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
		SweepInterval: cfg.Sessions.SweepInterval, PurgeDeletesAfter: cfg.Sessions.PurgeDeletesAfter,
		SnapshotInterval: snapshotInterval(cfg.Sessions.SnapshotInterval), Logger: log, Registerer: reg,
		LockBucket: cfg.HA.LockBucket, LockTTL: cfg.HA.LockTTL, Instance: cfg.HA.Instance})
	if err != nil {
		return nil, err
	}
	guard, closeAuth, err := ipMapperAuth(context.Background(), cfg.Auth, log)
	if err != nil {
		return nil, err
	}
	m := &IPMapper{svc: svc, log: log, closeAuth: closeAuth}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: reg, Guard: guard})
	if err != nil {
		closeAuth()
		return nil, err
	}
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "ipmapper", Version: string(v), Gatherer: reg,
		Ready: func() error {
			if err := m.natsWait.Err(); err != nil {
				return err
			}
			// First: the cause a write timeout below would not say.
			if m.natsStore != nil {
				if err := m.natsStore(); err != nil {
					return fmt.Errorf("NATS store failing writes (disk full?): %w", err)
				}
			}
			ha := svc.HA()
			switch ha.Role {
			case ipmapper.RoleActive:
				// Answering but unable to store (a full disk, JetStream
				// down): every deploy fails, which an operator must see
				// here rather than in the orgmanager's backlog minutes later.
				// Storing but not answering every request (its self-probe
				// went unanswered): deploys wait for their timeout.
				if err := svc.WriteError(); err != nil {
					return err
				}
				return svc.ServeError()
			case ipmapper.RoleStandby:
				// Healthy but not serving: it can take over, which is its
				// whole job. Only a standby that cannot reach the lock (so
				// could not take over) is unhealthy. The role is in the body.
				if err := svc.LockError(); err != nil {
					return fmt.Errorf("standby and cannot reach the lock bucket %s: %w", cfg.HA.LockBucket, err)
				}
				return nil
			}
			if ha.LoadError != "" {
				return errors.New("loading sessions: " + ha.LoadError)
			}
			if err := m.loadErr.Load(); err != nil {
				return fmt.Errorf("loading sessions: %w", *err)
			}
			return errors.New("loading sessions")
		},
		Health: func() map[string]any {
			ha := svc.HA()
			body := map[string]any{"role": ha.Role, "instance": ha.Instance, "bucket": cfg.Sessions.Bucket}
			if ha.Holder != "" {
				body["holder"] = ha.Holder
			}
			return body
		},
		Info: func() any {
			return map[string]any{"nats": nc.ConnectedUrlRedacted(), "bucket": cfg.Sessions.Bucket, "ha": svc.HA()}
		},
	})
	router.Handle(http.MethodGet, "/sessions", svc.HandleSessions)
	if m.server, err = httpapi.Listen(cfg.HTTP, router, log); err != nil {
		closeAuth()
		return nil, err
	}
	log.Info("ipmapper listening", "address", m.server.Addr().String(), "bucket", cfg.Sessions.Bucket,
		"lock_bucket", cfg.HA.LockBucket, "lock_ttl", cfg.HA.LockTTL)
	return m, nil
}

// Addr is the health/metrics listener's address: how a program that
// embeds the IP Mapper learns the port the kernel chose for ":0".
func (m *IPMapper) Addr() net.Addr { return m.server.Addr() }

// Run starts the IP Mapper (retrying while NATS or JetStream is not
// reachable; /health says why meanwhile) — active, or on standby until it
// takes its bucket's lock — and serves the HTTP listener until ctx ends.
// A conflict (ipmapper.ErrConflict: another IP Mapper serves the bucket
// without sharing the lock, or the lock bucket's TTL differs) stops it.
func (m *IPMapper) Run(ctx context.Context) error {
	defer m.closeAuth()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- m.server.Serve(ctx) }()
	// Until NATS first answers, its Await says so (log, /health): a
	// start attempt per delay would only repeat it.
	if !awaitDone(ctx, m.natsWait) {
		return <-served
	}
	delay := 250 * time.Millisecond
	for {
		err := m.svc.Start(ctx)
		if err == nil {
			if role := m.svc.Role(); role == ipmapper.RoleActive {
				m.log.Info("ipmapper ready", "role", role)
			} else {
				m.log.Info("ipmapper started on standby", "role", role)
			}
			break
		}
		if errors.Is(err, ipmapper.ErrConflict) {
			m.log.Error("ipmapper refuses to start", "err", err)
			cancel()
			return errors.Join(err, <-served)
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
