package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/docs"
	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/store"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/orgmanager"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/session"
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
	// MaxDirtyAge: /health is 503 while a change has waited longer than
	// this for its deploy; 0 disables the check.
	MaxDirtyAge time.Duration `yaml:"max_dirty_age"`
}

// OrgSessionsConfig is the orgmanager's `sessions` section.
type OrgSessionsConfig struct {
	// Bucket is the sessions bucket the filter nodes follow; the orgmanager
	// deploys to the IP Mapper of this bucket (subjects
	// ipmapper.<bucket>.*) and to no other on the same NATS.
	Bucket string `yaml:"bucket"`
}

// OrgSettingsConfig is the orgmanager's `settings` section.
type OrgSettingsConfig struct {
	// Replicas of the settings bucket when the orgmanager creates it (3 on
	// a NATS cluster); an existing bucket keeps its own.
	Replicas int `yaml:"replicas"`
}

// OrgAuditConfig is the orgmanager's `audit` section.
type OrgAuditConfig struct {
	// Retention is how long audit records are kept: older ones are
	// deleted hourly. 0 keeps them for good.
	Retention time.Duration `yaml:"retention"`
}

// OrgManagerConfig is the orgmanager's whole configuration file.
type OrgManagerConfig struct {
	HTTP     httpapi.Config    `yaml:"http"`
	Log      LogConfig         `yaml:"log"`
	Database DatabaseConfig    `yaml:"database"`
	NATS     NATSConfig        `yaml:"nats"`
	Sessions OrgSessionsConfig `yaml:"sessions"`
	Settings OrgSettingsConfig `yaml:"settings"`
	Deploy   DeployConfig      `yaml:"deploy"`
	Audit    OrgAuditConfig    `yaml:"audit"`
	Auth     AuthConfig        `yaml:"auth"`

	// AwaitIPMapper bounds how long Run holds the first deploy until the
	// IP Mapper answers (not a file key). `svc-pf all` sets it: its IP
	// Mapper starts beside the orgmanager, and a deploy sent before it
	// serves would fail and log a warning on every start. Past the bound
	// the deploys start anyway, and their failures are logged as usual.
	AwaitIPMapper time.Duration `yaml:"-"`

	// Console wires the web console under /ui/ (not file keys); it is
	// mounted when Console.Auth is set.
	Console ConsoleDeps `yaml:"-"`

	// Activity names the store the reports and the console's Activity
	// page read, standalone (under `svc-pf all` the top-level activity
	// section's store is read, and this one must stay unset).
	Activity OrgActivityConfig `yaml:"activity"`

	// ActivityReader is the activity store, opened by the caller (not a
	// file key): `svc-pf all` hands its collector's store; the standalone
	// orgmanager opens activity.store.url read-only. Nil answers the
	// reports 503, saying how to configure one.
	ActivityReader activity.Reader `yaml:"-"`
}

// OrgActivityConfig is the standalone orgmanager's `activity` section.
type OrgActivityConfig struct {
	// Store is the collector's store: dir:/path (the day files, read
	// only; on the collector's machine) or postgres://…. Empty: no
	// reports (they answer 503).
	Store activity.StoreConfig `yaml:"store"`
	// Retention is the collector's activity.retention (default 720h): the
	// reports read nothing older, even before the collector's next drop.
	Retention time.Duration `yaml:"retention"`
}

// DefaultOrgManagerConfig is what runs when the file sets nothing.
func DefaultOrgManagerConfig() OrgManagerConfig {
	return OrgManagerConfig{
		HTTP:     httpapi.Config{Address: "127.0.0.1:8080"},
		Log:      LogConfig{Level: "info"},
		Database: DatabaseConfig{URL: "sqlite:" + defaultDataDir + "/orgmanager.db"},
		Sessions: OrgSessionsConfig{Bucket: session.Bucket},
		Settings: OrgSettingsConfig{Replicas: 1},
		Deploy: DeployConfig{
			Workers:              4,
			VersionCheckInterval: 30 * time.Second,
			FullRedeployInterval: 6 * time.Hour,
			RetryMin:             100 * time.Millisecond,
			RetryMax:             30 * time.Second,
			PublishTimeout:       30 * time.Second,
			MaxDirtyAge:          5 * time.Minute,
		},
		Auth:     AuthConfig{Mode: AuthTokens, BootstrapTokenFile: defaultDataDir + "/admin.token"},
		Activity: OrgActivityConfig{Retention: activity.DefaultConfig().Retention},
	}
}

// Validate checks the configuration before anything starts.
func (c *OrgManagerConfig) Validate() error {
	var errs []error
	errs = append(errs, prefixed("orgmanager", c.HTTP.Validate()), c.Log.validate())
	if c.Database.URL == "" {
		errs = append(errs, errors.New("database.url is required"))
	}
	if err := wire.ValidBucket(c.Sessions.Bucket); err != nil {
		errs = append(errs, fmt.Errorf("sessions.bucket: %w", err))
	}
	if r := c.Settings.Replicas; r < 1 || r > 5 {
		errs = append(errs, fmt.Errorf("settings.replicas must be 1..5 (JetStream's range), not %d", r))
	}
	d := c.Deploy
	if d.Workers < 1 || d.Workers > 1024 {
		errs = append(errs, fmt.Errorf("deploy.workers must be 1..1024, not %d", d.Workers))
	}
	for name, v := range map[string]time.Duration{"version_check_interval": d.VersionCheckInterval,
		"full_redeploy_interval": d.FullRedeployInterval, "max_dirty_age": d.MaxDirtyAge} {
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
	if u := c.Activity.Store.URL; u != "" {
		if _, err := store.ParseURL(u, ""); err != nil {
			errs = append(errs, fmt.Errorf("activity.store.url: %w", err))
		}
	}
	if c.Activity.Retention < 0 {
		errs = append(errs, errors.New("activity.retention must not be negative"))
	}
	if c.Audit.Retention < 0 {
		errs = append(errs, errors.New("audit.retention must not be negative (0 keeps the audit for good)"))
	}
	errs = append(errs, validMode(c.Auth.Mode))
	return errors.Join(errs...)
}

// OrgManager is a started orgmanager: listener bound, store open.
type OrgManager struct {
	store    *orgstore.Store
	tokens   *access.Tokens
	deployer *deploy.Deployer
	auditor  *access.Auditor
	server   *httpapi.Server
	log      *slog.Logger
	// ping asks the IP Mapper whether it answers (nil without one);
	// awaitMapper is OrgManagerConfig.AwaitIPMapper.
	ping        func(context.Context) error
	awaitMapper time.Duration
	// writeProbeInterval: how often Run probes the database with a write
	// when no write told whether it takes them (writeProbeEvery; tests
	// shorten it before Run).
	writeProbeInterval time.Duration
	// natsWait is the standalone orgmanager's wait for its NATS server
	// (connectBus), nil under `svc-pf all` and without NATS: set before
	// Run.
	natsWait *natsbus.Await
}

// writeProbeEvery is how stale "the store is writable" may get in /health
// while nobody writes, and how soon a repaired database turns it green.
const writeProbeEvery = 10 * time.Second

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
	// Exclusive: a second orgmanager on the same SQLite file is refused
	// (issue 11); PostgreSQL takes any number.
	store, err := orgstore.Open(ctx, orgstore.Config{URL: cfg.Database.URL, Exclusive: true})
	if err != nil {
		return nil, err
	}
	var publisher deploy.Publisher = deploy.Discard{}
	var settingsKV deploy.SettingsKV
	var (
		ping   func(context.Context) error
		mapper *mapperclient.Client
	)
	if nc != nil {
		client, err := mapperclient.NewClient(mapperclient.ClientConfig{Conn: nc, Bucket: cfg.Sessions.Bucket, Timeout: cfg.Deploy.PublishTimeout})
		if err != nil {
			store.Close()
			return nil, err
		}
		// Each says "IP Mapper unreachable: …" or "NATS unreachable: …",
		// naming the NATS servers, when nothing can answer.
		publisher = mapperclient.Publisher{Client: client}
		mapper = client
		ping = client.Ping
		if settingsKV, err = natsbus.NewKV(nc, jetstream.KeyValueConfig{Bucket: settings.Bucket, History: 1, Replicas: cfg.Settings.Replicas}); err != nil {
			store.Close()
			return nil, err
		}
	}
	deployer, err := deploy.New(deploy.Config{
		Store: store, Publisher: publisher, Workers: cfg.Deploy.Workers,
		VersionCheckInterval: cfg.Deploy.VersionCheckInterval, FullRedeployInterval: cfg.Deploy.FullRedeployInterval,
		RetryMin: cfg.Deploy.RetryMin, RetryMax: cfg.Deploy.RetryMax, PublishTimeout: cfg.Deploy.PublishTimeout,
		MaxDirtyAge: cfg.Deploy.MaxDirtyAge, Ping: ping,
		Settings: settingsKV, Logger: log, Registerer: reg,
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	// Every write through the listener is audited. The console records
	// its own writes (it knows what a form did), so its paths are left out.
	auditor, err := access.NewAuditor(access.AuditorConfig{
		Store: store, Retention: cfg.Audit.Retention, RequestID: httpapi.RequestID,
		Skip:   func(r *http.Request) bool { return r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/") },
		Logger: log, Registerer: reg,
	})
	if err != nil {
		store.Close()
		return nil, err
	}
	tokens, guard, err := orgManagerAuth(ctx, cfg.Auth, store, auditor, log)
	if err != nil {
		store.Close()
		return nil, err
	}
	var nodes orgmanager.NodeLister
	if nc != nil {
		js, err := jetstream.New(nc)
		if err != nil {
			store.Close()
			return nil, err
		}
		nodes = kvNodes{js: js}
	}
	api, err := orgmanager.New(orgmanager.Config{Store: store, Deployer: deployer, Tokens: tokens, Nodes: nodes, Activity: cfg.ActivityReader, Logger: log})
	if err != nil {
		store.Close()
		return nil, err
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: reg, Guard: guard.Check, Wrap: auditor.Handler})
	if err != nil {
		store.Close()
		return nil, err
	}
	api.Register(router)
	// The console signs in with the same tokens; under auth.mode none
	// there is nothing to sign in with, and it stays off.
	if cfg.Auth.Mode != AuthNone {
		cfg.Console.withDefaults(tokens, auditor, store, guard)
	}
	if cfg.Console.Auth != nil {
		cons, err := newConsole(cfg, api, store, nc, mapper, nodes, log)
		if err != nil {
			store.Close()
			return nil, err
		}
		cons.Register(router)
	}
	docs.Register(router, "orgmanager")
	om := new(OrgManager) // filled below; /health reads it once served
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "orgmanager", Version: string(version), Gatherer: reg,
		Ready: func() error {
			if err := om.natsWait.Err(); err != nil {
				return err
			}
			return orgManagerReady(store, deployer)
		},
		Info: func() any {
			return map[string]any{"database": store.Dialect(), "ip_mapper": nc != nil, "sessions_bucket": cfg.Sessions.Bucket}
		},
		Links: map[string]string{"API (OpenAPI 3)": "/openapi.yaml", "API reference": "https://github.com/svc-pf/svc-pf/blob/main/docs/orgmanager.md"},
	})
	server, err := httpapi.Listen(cfg.HTTP, router, log)
	if err != nil {
		store.Close()
		return nil, err
	}
	log.Info("orgmanager listening", "address", server.Addr().String(), "database", redactURL(cfg.Database.URL),
		"ip_mapper", nc != nil, "sessions_bucket", cfg.Sessions.Bucket)
	*om = OrgManager{store: store, tokens: tokens, deployer: deployer, auditor: auditor, server: server, log: log, writeProbeInterval: writeProbeEvery,
		ping: ping, awaitMapper: cfg.AwaitIPMapper}
	return om, nil
}

// Addr is the HTTP listener's address: how a program that embeds the
// orgmanager learns the port the kernel chose for ":0".
func (o *OrgManager) Addr() net.Addr { return o.server.Addr() }

// Tokens verifies the orgmanager's tokens; `svc-pf all` gives it to the IP
// Mapper.
func (o *OrgManager) Tokens() *access.Tokens { return o.tokens }

// Run serves until ctx ends, then stops the deploy workers and closes the
// store.
func (o *OrgManager) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deployed, probed, pruned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pruned)
		o.auditor.Run(ctx) // the audit's retention
	}()
	go func() {
		defer close(deployed)
		// Writes are served meanwhile: they wait in the deploy queue.
		// Until NATS first answers, its Await says so (log, /health);
		// a deploy attempt per retry would only repeat it.
		if !awaitDone(ctx, o.natsWait) {
			return
		}
		o.awaitIPMapper(ctx)
		o.deployer.Run(ctx)
	}()
	go func() {
		defer close(probed)
		o.probeWrites(ctx)
	}()
	err := o.server.Serve(ctx)
	cancel()
	<-deployed
	<-probed
	<-pruned
	return errors.Join(err, o.store.Close())
}

// awaitIPMapper returns once the IP Mapper answers a ping, or after
// awaitMapper, saying so, or when ctx ends.
func (o *OrgManager) awaitIPMapper(ctx context.Context) {
	if o.ping == nil || o.awaitMapper <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, o.awaitMapper)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if err := o.ping(ctx); err == nil || !errors.Is(err, deploy.ErrUnreachable) {
			return // it answered, if only to refuse
		}
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.Canceled) {
				o.log.Info("the IP Mapper did not answer in time; deploying anyway", "waited", o.awaitMapper)
			}
			return
		case <-t.C:
		}
	}
}

// RunOrgManager runs the standalone orgmanager until ctx ends.
func RunOrgManager(ctx context.Context, cfg OrgManagerConfig, v Version, log *slog.Logger) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	cfg.Auth.AdminToken = os.Getenv(AdminTokenEnv)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		nc *nats.Conn
		aw *natsbus.Await
	)
	if cfg.NATS.URL != "" {
		var err error
		// Writes must succeed while NATS is away, so the first connection
		// may fail too: deploys wait in their queue until it is up.
		if nc, aw, err = connectBus(ctx, cfg.NATS.URL, "svc-pf orgmanager", log); err != nil {
			return err
		}
		defer nc.Close()
	}
	if cfg.ActivityReader == nil {
		st, err := openActivityReader(ctx, cfg.Activity)
		if err != nil {
			return err
		}
		if st != nil {
			defer st.Close()
			cfg.ActivityReader = st
		}
	}
	om, err := StartOrgManager(ctx, cfg, nc, v, log)
	if err != nil {
		return err
	}
	om.natsWait = aw
	if err := om.Run(ctx); err != nil {
		return err
	}
	log.Info("svc-pf orgmanager stopped")
	return nil
}

// openActivityReader opens the store the standalone orgmanager's reports
// read, read only: the collector writes it (and drops its old days); nil
// when activity.store.url is unset.
func openActivityReader(ctx context.Context, c OrgActivityConfig) (*store.Store, error) {
	if c.Store.URL == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := store.Open(ctx, store.Config{URL: c.Store.URL, Retention: c.Retention, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("activity.store.url: %w", err)
	}
	return st, nil
}

// orgManagerReady is the orgmanager's /health: 503 with the first reason
// that holds, in the order an operator should look — the database does not
// answer, the database does not take writes (the last write or probe
// failed), the IP Mapper does not answer, changes wait for their deploy
// longer than deploy.max_dirty_age (see deploy.Deployer.Ready).
func orgManagerReady(store *orgstore.Store, deployer *deploy.Deployer) error {
	pctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := store.Ping(pctx); err != nil {
		return fmt.Errorf("database unreachable: %w", err)
	}
	if _, err := store.WriteStatus(); err != nil {
		return fmt.Errorf("database not writable (the last write failed): %w", err)
	}
	return deployer.Ready()
}

// probeWrites keeps "the database takes writes" current for /health: when
// no write said so within the interval, or the last one failed, a write
// probe (rolled back) asks. A repaired database thus turns /health green
// without waiting for a client's write, and a broken one red without one.
func (o *OrgManager) probeWrites(ctx context.Context) {
	t := time.NewTicker(o.writeProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		at, err := o.store.WriteStatus()
		if err == nil && time.Since(at) < o.writeProbeInterval {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, o.writeProbeInterval)
		perr := o.store.ProbeWrite(pctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case perr != nil && err == nil:
			o.log.Error("database does not take writes", "err", perr)
		case perr == nil && err != nil:
			o.log.Info("database takes writes again")
		}
	}
}
