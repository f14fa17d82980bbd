package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/radius"
	"github.com/svc-pf/svc-pf/internal/session"
)

// RadiusSessionsConfig names the IP Mapper the RADIUS server writes to.
type RadiusSessionsConfig struct {
	// Bucket is the sessions bucket whose IP Mapper stores the sessions:
	// the one the nodes follow; default "sessions".
	Bucket string `yaml:"bucket"`
}

// RadiusConfig is `svc-pf radius`'s configuration file: RADIUS accounting
// in, IP Mapper sessions out (docs/radius.md).
type RadiusConfig struct {
	HTTP     httpapi.Config       `yaml:"http"`
	Log      LogConfig            `yaml:"log"`
	NATS     NATSConfig           `yaml:"nats"`
	Sessions RadiusSessionsConfig `yaml:"sessions"`
	Radius   radius.Config        `yaml:"radius"`
}

// DefaultRadiusConfig is what runs when the file sets nothing (but
// radius.clients, which has no default).
func DefaultRadiusConfig() RadiusConfig {
	return RadiusConfig{
		HTTP:     httpapi.Config{Address: "127.0.0.1:8086"},
		Log:      LogConfig{Level: "info"},
		Sessions: RadiusSessionsConfig{Bucket: session.Bucket},
		Radius:   radius.Config{Listen: []string{"127.0.0.1:1813"}},
	}
}

// Validate checks the configuration before anything starts.
func (c *RadiusConfig) Validate() error {
	errs := []error{prefixed("radius", c.HTTP.Validate()), c.Log.validate(), c.Radius.Validate()}
	if c.NATS.URL == "" {
		errs = append(errs, errors.New("nats.url is required: the sessions go to the IP Mapper over NATS"))
	}
	if err := wire.ValidBucket(c.Sessions.Bucket); err != nil {
		errs = append(errs, fmt.Errorf("sessions.bucket: %w", err))
	}
	if len(c.Radius.Listen) == 0 {
		errs = append(errs, errors.New("radius.listen: at least one address is needed"))
	}
	return errors.Join(errs...)
}

// Check is what `svc-pf radius` refuses at start.
func (c *RadiusConfig) Check() error { return c.Validate() }

// RunRadius runs the standalone RADIUS accounting server until ctx ends.
func RunRadius(ctx context.Context, cfg RadiusConfig, v Version, log *slog.Logger) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nc, aw, err := connectBus(ctx, cfg.NATS.URL, "svc-pf radius", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	r, err := StartRadius(cfg, nc, nil, v, log)
	if err != nil {
		return err
	}
	r.natsWait = aw
	if err := r.Run(ctx); err != nil {
		return err
	}
	log.Info("svc-pf radius stopped")
	return nil
}

// Radius is the RADIUS accounting server with, standalone, its
// health/metrics listener.
type Radius struct {
	Server   *radius.Server
	server   *httpapi.Server
	natsWait *natsbus.Await
}

// StartRadius builds the server and binds its sockets, and its listener
// when cfg.HTTP.Address is set (standalone; under `svc-pf all` reg is the
// node listener's registry and the node's /health reports it).
func StartRadius(cfg RadiusConfig, nc *nats.Conn, reg *prometheus.Registry, v Version, log *slog.Logger) (*Radius, error) {
	log = log.With("service", "radius")
	client, err := mapperclient.NewClient(mapperclient.ClientConfig{Conn: nc, Bucket: cfg.Sessions.Bucket})
	if err != nil {
		return nil, err
	}
	if reg == nil {
		reg = newRegistry()
	}
	srv, err := radius.New(radius.ServerConfig{Config: cfg.Radius, Mapper: client, Registerer: reg, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := srv.Listen(); err != nil {
		return nil, err
	}
	r := &Radius{Server: srv}
	if cfg.HTTP.Address == "" {
		return r, nil
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: reg})
	if err != nil {
		srv.Close()
		return nil, err
	}
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "radius", Version: string(v), Gatherer: reg,
		Ready: func() error {
			if err := r.natsWait.Err(); err != nil {
				return err
			}
			// Not storing: every request goes unanswered, so a NAS
			// should fail over to another accounting server.
			return srv.Health()
		},
		Info: func() any {
			return map[string]any{"nats": nc.ConnectedUrlRedacted(), "bucket": cfg.Sessions.Bucket, "listen": addrStrings(srv.Addrs())}
		},
	})
	if r.server, err = httpapi.Listen(cfg.HTTP, router, log); err != nil {
		srv.Close()
		return nil, err
	}
	log.Info("radius listening", "address", r.server.Addr().String())
	return r, nil
}

func addrStrings(as []netip.AddrPort) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
}

// Addr is the health/metrics listener's address (nil without one).
func (r *Radius) Addr() net.Addr {
	if r.server == nil {
		return nil
	}
	return r.server.Addr()
}

// Run serves until ctx ends.
func (r *Radius) Run(ctx context.Context) error {
	if r.server == nil {
		return r.Server.Run(ctx)
	}
	done := make(chan error, 1)
	go func() {
		if !awaitDone(ctx, r.natsWait) {
			r.Server.Close()
			done <- nil
			return
		}
		done <- r.Server.Run(ctx)
	}()
	err := r.server.Serve(ctx)
	return errors.Join(err, <-done)
}

// radiusHealth is the `radius` field of the node's /health under `svc-pf
// all`: informational, since the node answers DNS whatever RADIUS does.
func radiusHealth(r *Radius) map[string]any {
	if r == nil {
		return nil
	}
	status := "ok"
	if err := r.Server.Health(); err != nil {
		status = "failing: " + err.Error()
	}
	return map[string]any{"radius": map[string]any{"status": status, "listen": addrStrings(r.Server.Addrs())}}
}
