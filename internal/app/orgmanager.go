package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/docs"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/orgmanager"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// DatabaseConfig is the orgmanager's `database` section.
type DatabaseConfig struct {
	// URL is sqlite:PATH or postgres://…
	URL string `yaml:"url"`
}

// DeployConfig is the orgmanager's `deploy` section.
type DeployConfig struct {
	Workers              int           `yaml:"workers"`
	VersionCheckInterval time.Duration `yaml:"version_check_interval"`
	FullRedeployInterval time.Duration `yaml:"full_redeploy_interval"`
	RetryMin             time.Duration `yaml:"retry_min"`
	RetryMax             time.Duration `yaml:"retry_max"`
	PublishTimeout       time.Duration `yaml:"publish_timeout"`
}

// OrgManagerConfig is the orgmanager's whole configuration file.
type OrgManagerConfig struct {
	HTTP     httpapi.Config `yaml:"http"`
	Log      LogConfig      `yaml:"log"`
	Database DatabaseConfig `yaml:"database"`
	NATS     NATSConfig     `yaml:"nats"`
	Deploy   DeployConfig   `yaml:"deploy"`
}

// DefaultOrgManagerConfig is what runs when the file sets nothing.
func DefaultOrgManagerConfig() OrgManagerConfig {
	return OrgManagerConfig{
		HTTP:     httpapi.Config{Address: "127.0.0.1:8080"},
		Log:      LogConfig{Level: "info"},
		Database: DatabaseConfig{URL: "sqlite:" + defaultDataDir + "/orgmanager.db"},
		Deploy: DeployConfig{
			Workers:              4,
			VersionCheckInterval: 30 * time.Second,
			FullRedeployInterval: 6 * time.Hour,
			RetryMin:             100 * time.Millisecond,
			RetryMax:             30 * time.Second,
			PublishTimeout:       30 * time.Second,
		},
	}
}

// Validate checks the configuration before anything starts.
func (c *OrgManagerConfig) Validate() error {
	var errs []error
	errs = append(errs, prefixed("orgmanager", c.HTTP.Validate()), c.Log.validate())
	if c.Database.URL == "" {
		errs = append(errs, errors.New("database.url is required"))
	}
	d := c.Deploy
	if d.Workers < 1 || d.Workers > 1024 {
		errs = append(errs, fmt.Errorf("deploy.workers must be 1..1024, not %d", d.Workers))
	}
	for name, v := range map[string]time.Duration{"version_check_interval": d.VersionCheckInterval,
		"full_redeploy_interval": d.FullRedeployInterval} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("deploy.%s must not be negative (0 disables it)", name))
		}
	}
	for name, v := range map[string]time.Duration{"retry_min": d.RetryMin, "retry_max": d.RetryMax, "publish_timeout": d.PublishTimeout} {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("deploy.%s must be positive", name))
		}
	}
	if d.RetryMax < d.RetryMin {
		errs = append(errs, errors.New("deploy.retry_max must not be below deploy.retry_min"))
	}
	return errors.Join(errs...)
}

// OrgManager is a started orgmanager: listener bound, store open.
type OrgManager struct {
	store    *orgstore.Store
	deployer *deploy.Deployer
	server   *httpapi.Server
	log      *slog.Logger
}

// StartOrgManager opens the store, builds the deploy pipeline (publishing
// sessions to the IP Mapper and settings to their bucket over nc when it is
// not nil) and binds the HTTP listener.
func StartOrgManager(ctx context.Context, cfg OrgManagerConfig, nc *nats.Conn, version Version, log *slog.Logger) (*OrgManager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log = log.With("service", "orgmanager")
	reg := newRegistry()

	if cfg.Database.URL == DefaultOrgManagerConfig().Database.URL {
		// The default database lives in ./data, made on first start; a
		// database.url the operator wrote must name an existing directory.
		if err := os.MkdirAll(defaultDataDir, 0o750); err != nil {
			return nil, err
		}
	}
	store, err := orgstore.Open(ctx, orgstore.Config{URL: cfg.Database.URL})
	if err != nil {
		return nil, err
	}
	var publisher deploy.Publisher = deploy.Discard{}
	var settingsKV deploy.SettingsKV
	if nc != nil {
		client, err := mapperclient.NewClient(mapperclient.ClientConfig{Conn: nc, Timeout: cfg.Deploy.PublishTimeout})
		if err != nil {
			store.Close()
			return nil, err
		}
		publisher = mapperclient.Publisher{Client: client}
		if settingsKV, err = natsbus.NewKV(nc, jetstream.KeyValueConfig{Bucket: settings.Bucket, History: 1}); err != nil {
			store.Close()
			return nil, err
		}
	}
	deployer, err := deploy.New(deploy.Config{
		Store: store, Publisher: publisher, Workers: cfg.Deploy.Workers,
		VersionCheckInterval: cfg.Deploy.VersionCheckInterval, FullRedeployInterval: cfg.Deploy.FullRedeployInterval,
		RetryMin: cfg.Deploy.RetryMin, RetryMax: cfg.Deploy.RetryMax, PublishTimeout: cfg.Deploy.PublishTimeout,
		Settings: settingsKV, Logger: log, Registerer: reg,
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	api, err := orgmanager.New(orgmanager.Config{Store: store, Deployer: deployer, Logger: log})
	if err != nil {
		store.Close()
		return nil, err
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: reg})
	if err != nil {
		store.Close()
		return nil, err
	}
	api.Register(router)
	docs.Register(router, "orgmanager")
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "orgmanager", Version: string(version), Gatherer: reg,
		Ready: func() error {
			pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			return store.Ping(pctx)
		},
		Info: func() any {
			return map[string]any{"database": store.Dialect(), "ip_mapper": nc != nil}
		},
		Links: map[string]string{"API (OpenAPI 3)": "/openapi.yaml", "API reference": "https://github.com/svc-pf/svc-pf/blob/main/docs/orgmanager.md"},
	})
	server, err := httpapi.Listen(cfg.HTTP, router, log)
	if err != nil {
		store.Close()
		return nil, err
	}
	log.Info("orgmanager listening", "address", server.Addr().String(), "database", redactURL(cfg.Database.URL),
		"ip_mapper", nc != nil)
	return &OrgManager{store: store, deployer: deployer, server: server, log: log}, nil
}

// Addr is the HTTP listener's address.
func (o *OrgManager) Addr() net.Addr { return o.server.Addr() }

// Run serves until ctx ends, then stops the deploy workers and closes the
// store.
func (o *OrgManager) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deployed := make(chan struct{})
	go func() {
		defer close(deployed)
		o.deployer.Run(ctx)
	}()
	err := o.server.Serve(ctx)
	cancel()
	<-deployed
	return errors.Join(err, o.store.Close())
}

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
	if err := om.Run(ctx); err != nil {
		return err
	}
	log.Info("svc-pf orgmanager stopped")
	return nil
}
