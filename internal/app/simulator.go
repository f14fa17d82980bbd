package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/rpz"
	"github.com/svc-pf/svc-pf/internal/simulator"
)

// LuaConfig is the simulator's `lua` section (spec 2).
type LuaConfig struct {
	// Workers is how many Lua states serve calls (lua.workers).
	Workers int `yaml:"workers"`
	// File is the entry file; empty: the embedded default.
	File string `yaml:"file"`
	// CallTimeout bounds one call, so a runaway script cannot hang a worker.
	CallTimeout time.Duration `yaml:"call_timeout"`
}

// SimulatorConfig is `svc-pf simulator`'s file (/etc/svc-pf/simulator.yaml)
// and the `simulator` section of `svc-pf all`.
type SimulatorConfig struct {
	HTTP    httpapi.Config `yaml:"http"`
	APIKeys []string       `yaml:"api_keys"`
	Log     LogConfig      `yaml:"log"`
	Lua     LuaConfig      `yaml:"lua"`
	// NATS: the url, or the NATS_URL environment variable; neither means
	// HTTP only, from the feeds and a request's own settings. Under `svc-pf
	// all` an empty url is the embedded server.
	NATS NATSConfig `yaml:"nats"`
	// The node keys (DESIGN.md §6.2). Under `svc-pf all` they stand at the
	// top level, shared with the resolver, and must not be set here.
	Feeds  []feeds.FeedConfig `yaml:"feeds"`
	RPZ    []rpz.ZoneConfig   `yaml:"rpz"`
	Region string             `yaml:"region"`
}

// DefaultSimulatorConfig is what runs when the file sets nothing.
func DefaultSimulatorConfig() SimulatorConfig {
	return SimulatorConfig{
		HTTP: httpapi.Config{Address: "127.0.0.1:8081"},
		Log:  LogConfig{Level: "info"},
		Lua:  LuaConfig{Workers: 2, CallTimeout: 5 * time.Second},
	}
}

// Validate checks the section.
func (c *SimulatorConfig) Validate() error {
	var errs []error
	if c.Lua.Workers < 1 {
		errs = append(errs, fmt.Errorf("lua.workers must be at least 1, not %d", c.Lua.Workers))
	}
	if c.Lua.CallTimeout < 0 {
		errs = append(errs, errors.New("lua.call_timeout must not be negative"))
	}
	for i, k := range c.APIKeys {
		if k == "" {
			errs = append(errs, fmt.Errorf("api_keys[%d] is empty", i))
		}
	}
	errs = append(errs, c.Log.validate(), prefixed("http", c.HTTP.Validate()), rpz.Config{Zones: c.RPZ}.Validate())
	return errors.Join(errs...)
}

// Simulator is a started simulator: its service and listener.
type Simulator struct {
	Service  *simulator.Service
	server   *httpapi.Server
	stopNATS func() error
	log      *slog.Logger
}

// StartSimulator builds the simulator over a node's read models, loads its
// Lua workers, binds its listener and, when nc is not nil, serves its calls
// over NATS.
func StartSimulator(cfg SimulatorConfig, models *readModels, nc *nats.Conn, v Version, log *slog.Logger) (*Simulator, error) {
	log = log.With("service", "simulator")
	reg := newRegistry()
	eng, err := policy.NewEngine(policy.EngineConfig{View: models.View})
	if err != nil {
		return nil, err
	}
	svc, err := simulator.New(simulator.Config{
		Engine: eng, Feeds: models.feeds, Counts: models.Counts,
		Workers: cfg.Lua.Workers, File: cfg.Lua.File, CallTimeout: cfg.Lua.CallTimeout,
		APIKeys: cfg.APIKeys, Region: cfg.Region, Version: string(v),
		Logger: log, Registerer: reg,
	})
	if err != nil {
		log.Error("lua worker creation failed", "file", cfg.Lua.File, "err", err)
		return nil, err
	}
	// The first info payload exists before anyone can ask.
	if err := svc.Maintain(context.Background()); err != nil {
		svc.Close()
		return nil, err
	}
	router, err := httpapi.NewRouter(httpapi.RouterConfig{Logger: log, Registerer: reg})
	if err != nil {
		svc.Close()
		return nil, err
	}
	svc.Mount(router)
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "simulator", Version: string(v), Gatherer: reg, Ready: models.Ready, Info: svc.Info,
		Links: map[string]string{"/api/v1/info": "/api/v1/info", "/api/v1/codemappings": "/api/v1/codemappings",
			"/api/v1/domain?domain=example.com": "/api/v1/domain?domain=example.com", "/debug/pprof/": "/debug/pprof/"},
	})
	s := &Simulator{Service: svc, log: log}
	if nc != nil {
		if s.stopNATS, err = svc.ServeNATS(simulator.NATSConfig{Conn: nc}); err != nil {
			svc.Close()
			return nil, err
		}
	}
	if s.server, err = httpapi.Listen(cfg.HTTP, router, log); err != nil {
		s.close()
		return nil, err
	}
	log.Info("simulator listening", "address", s.server.Addr().String(), "lua_workers", cfg.Lua.Workers,
		"lua_file", cmp.Or(cfg.Lua.File, "(embedded default)"), "api_keys", len(cfg.APIKeys))
	return s, nil
}

// Addr is the listener's address.
func (s *Simulator) Addr() net.Addr { return s.server.Addr() }

// Run refreshes the info payload every second and serves until ctx ends.
func (s *Simulator) Run(ctx context.Context) error {
	defer s.close()
	done := make(chan error, 1)
	go func() { done <- s.Service.Run(ctx) }()
	err := s.server.Serve(ctx)
	return errors.Join(err, <-done)
}

func (s *Simulator) close() {
	if s.stopNATS != nil {
		_ = s.stopNATS()
	}
	s.Service.Close()
}

// RunSimulator runs `svc-pf simulator`. With testAndExit it sends one
// lookup_domain for a fixed sample domain through a worker and returns
// its error (spec 2's --test-and-exit) instead of serving.
func RunSimulator(ctx context.Context, cfg SimulatorConfig, v Version, log *slog.Logger, testAndExit bool) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	nc, err := connectNode(cfg.NATS, "svc-pf simulator", log)
	if err != nil {
		return err
	}
	if nc != nil {
		defer nc.Close()
	}
	reg := newRegistry()
	models, err := newReadModels(nodeKeys{Feeds: cfg.Feeds, RPZ: cfg.RPZ}, nc, reg, log)
	if err != nil {
		return err
	}
	if testAndExit {
		return testLookup(ctx, cfg, models, v, log)
	}
	sim, err := StartSimulator(cfg, models, nc, v, log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	modelsDone := make(chan error, 1)
	go func() { modelsDone <- models.Run(ctx) }()
	err = sim.Run(ctx)
	cancel()
	err = errors.Join(err, <-modelsDone)
	if err == nil {
		log.Info("svc-pf simulator stopped")
	}
	return err
}

// connectNode connects a standalone node service to NATS when nats.url or
// NATS_URL names a server (nil, nil when neither does), logging the line
// spec 2 names: "NATS enabled".
func connectNode(c NATSConfig, name string, log *slog.Logger) (*nats.Conn, error) {
	url := c.URL
	if url == "" {
		url = os.Getenv("NATS_URL")
	}
	if url == "" {
		return nil, nil
	}
	nc, err := natsbus.Connect(url, name, log, true)
	if err != nil {
		return nil, err
	}
	log.Info("NATS enabled", "url", redactURL(url))
	return nc, nil
}

// testSampleDomain is the fixed domain of --test-and-exit.
const testSampleDomain = "example.com"

func testLookup(ctx context.Context, cfg SimulatorConfig, models *readModels, v Version, log *slog.Logger) error {
	eng, err := policy.NewEngine(policy.EngineConfig{View: models.View})
	if err != nil {
		return err
	}
	svc, err := simulator.New(simulator.Config{Engine: eng, Feeds: models.feeds, Counts: models.Counts,
		Workers: cfg.Lua.Workers, File: cfg.Lua.File, CallTimeout: cfg.Lua.CallTimeout, Version: string(v), Logger: log})
	if err != nil {
		return err
	}
	defer svc.Close()
	out, err := svc.Do(ctx, simulator.CallLookupDomain, &simulator.Request{Domain: testSampleDomain})
	if err != nil {
		return fmt.Errorf("test lookup_domain %s: %w", testSampleDomain, err)
	}
	log.Info("test lookup_domain succeeded", "domain", testSampleDomain, "result", out)
	return nil
}
