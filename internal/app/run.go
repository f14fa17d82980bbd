package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/ipmapper"
	"github.com/svc-pf/svc-pf/internal/natsbus"
)

// RunOrgManager runs the standalone orgmanager until ctx ends.
func RunOrgManager(ctx context.Context, cfg OrgManagerConfig, v Version, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	var nc *nats.Conn
	if cfg.NATS.URL != "" {
		var err error
		// Writes must succeed while NATS is away, so the first connection
		// may fail too: deploys retry until it is up.
		if nc, err = natsbus.Connect(cfg.NATS.URL, "svc-pf orgmanager", log, true); err != nil {
			return err
		}
		defer nc.Close()
	}
	om, err := StartOrgManager(ctx, cfg, nc, v, log)
	if err != nil {
		return err
	}
	return om.Run(ctx)
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
	return m.Run(ctx)
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
			if svc.Ready() {
				return nil
			}
			if err := m.loadErr.Load(); err != nil {
				return fmt.Errorf("loading sessions: %w", *err)
			}
			return errors.New("loading sessions")
		},
		Info: func() any { return map[string]any{"nats": nc.ConnectedUrlRedacted(), "bucket": cfg.Sessions.Bucket} },
	})
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

// RunAll runs every service in one process around an embedded NATS server
// whose JetStream files live under the data directory.
func RunAll(ctx context.Context, cfg AllConfig, v Version, log *slog.Logger) error {
	all, err := StartAll(ctx, cfg, v, log)
	if err != nil {
		return err
	}
	return all.Run(ctx)
}

// All is `svc-pf all`, started.
type All struct {
	NATS       *natsbus.Embedded
	OrgManager *OrgManager
	IPMapper   *IPMapper
	conns      []*nats.Conn
}

// StartAll starts the embedded NATS server and builds both services.
func StartAll(ctx context.Context, cfg AllConfig, v Version, log *slog.Logger) (*All, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return nil, err
	}
	storeDir := cfg.NATS.StoreDir
	if storeDir == "" {
		storeDir = filepath.Join(cfg.DataDir, "nats")
	}
	if cfg.OrgManager.Database.URL == DefaultOrgManagerConfig().Database.URL {
		// Not set by the operator: the database lives in the data directory too.
		cfg.OrgManager.Database.URL = "sqlite:" + filepath.Join(cfg.DataDir, "orgmanager.db")
	}
	host, portStr, err := net.SplitHostPort(cfg.NATS.Listen)
	if err != nil {
		return nil, fmt.Errorf("nats.listen %q: %w", cfg.NATS.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("nats.listen %q: bad port", cfg.NATS.Listen)
	}
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{Host: host, Port: port, StoreDir: storeDir, Logger: log})
	if err != nil {
		return nil, err
	}
	a := &All{NATS: srv}
	fail := func(err error) (*All, error) {
		a.close()
		return nil, err
	}
	connect := func(url, name string) (*nats.Conn, error) {
		if url == "" {
			url = srv.ClientURL()
		}
		nc, err := natsbus.Connect(url, name, log, true)
		if err == nil {
			a.conns = append(a.conns, nc)
		}
		return nc, err
	}
	log.Info("embedded NATS server started", "url", srv.ClientURL(), "store_dir", storeDir)

	ncMapper, err := connect(cfg.IPMapper.NATS.URL, "svc-pf ipmapper")
	if err != nil {
		return fail(err)
	}
	if a.IPMapper, err = StartIPMapper(cfg.IPMapper, ncMapper, v, log); err != nil {
		return fail(err)
	}
	ncOrg, err := connect(cfg.OrgManager.NATS.URL, "svc-pf orgmanager")
	if err != nil {
		return fail(err)
	}
	if a.OrgManager, err = StartOrgManager(ctx, cfg.OrgManager, ncOrg, v, log); err != nil {
		return fail(err)
	}
	return a, nil
}

// Run runs every service until ctx ends, then stops NATS last.
func (a *All) Run(ctx context.Context) error {
	defer a.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- a.IPMapper.Run(ctx) }()
	go func() { errc <- a.OrgManager.Run(ctx) }()
	// One service failing stops the others: half a platform is worse than
	// a restart.
	err := <-errc
	cancel()
	return errors.Join(err, <-errc)
}

func (a *All) close() {
	for _, nc := range a.conns {
		nc.Close()
	}
	if a.NATS != nil {
		a.NATS.Shutdown()
	}
}
