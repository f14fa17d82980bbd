package app

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/node"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/rpz"
	"github.com/svc-pf/svc-pf/internal/simulator"
)

// LuaConfig is the simulator's `lua` section (docs/simulator.md).
type LuaConfig struct {
	// Workers is how many Lua states serve calls (lua.workers).
	Workers int `yaml:"workers"`
	// File is the entry file; empty: the embedded default.
	File string `yaml:"file"`
	// CallTimeout bounds one call, so a runaway script cannot hang a worker.
	CallTimeout time.Duration `yaml:"call_timeout"`
}

// RuntimeConfig is the simulator's `runtime` section: the Go runtime's
// GOMAXPROCS, GOGC and GOMEMLIMIT in the config file. The simulator's read
// models are a large, long-lived heap (≈ 400 MB at 1 M sessions), and every
// GC cycle marks all of it while requests keep arriving: on 2 cores a cycle
// takes 0.25–0.7 s and half a core, and the requests due during it make the
// latency tail (the figures: docs/simulator.md, runtime). Fewer cycles mean
// fewer slow requests, at the cost of memory; more Ps than cores keep
// requests moving while the kernel runs another process (a load generator,
// the resolver) on a core that one of the process's threads was using. The
// settings are process-wide: under `svc-pf all` they apply to every service
// of the process.
type RuntimeConfig struct {
	// GOMAXPROCS is how many goroutines run Go code at once (the runtime's
	// default: the cores the process may use). 0 leaves the runtime's (the
	// GOMAXPROCS environment variable, or the cores).
	GOMAXPROCS int `yaml:"gomaxprocs"`
	// GCPercent is GOGC: the heap may grow this many percent over the live
	// heap before the next cycle (the runtime's default is 100). -1 turns
	// the proportional target off, leaving MemoryLimit to pace the GC. 0
	// leaves the runtime's (the GOGC environment variable, or 100).
	GCPercent int `yaml:"gc_percent"`
	// MemoryLimit is GOMEMLIMIT: a soft limit on the process's Go memory,
	// written as GOMEMLIMIT is ("3GiB", "2500MiB", a number of bytes). The
	// GC runs when the heap nears it even if GCPercent would let it grow
	// further. "" leaves the runtime's (GOMEMLIMIT, or none).
	MemoryLimit string `yaml:"memory_limit"`
}

func (c RuntimeConfig) validate() error {
	var errs []error
	if c.GOMAXPROCS < 0 {
		errs = append(errs, fmt.Errorf("runtime.gomaxprocs must not be negative, not %d", c.GOMAXPROCS))
	}
	if c.GCPercent < -1 {
		errs = append(errs, fmt.Errorf("runtime.gc_percent must be -1 (off), 0 (the runtime's) or positive, not %d", c.GCPercent))
	}
	if c.MemoryLimit != "" {
		if _, err := ParseByteSize(c.MemoryLimit); err != nil {
			errs = append(errs, fmt.Errorf("runtime.memory_limit: %w", err))
		}
	}
	if c.GCPercent == -1 && c.MemoryLimit == "" && os.Getenv("GOMEMLIMIT") == "" {
		// Without a limit the heap would grow until the process is killed.
		errs = append(errs, errors.New("runtime.gc_percent -1 (off) needs runtime.memory_limit (or GOMEMLIMIT): nothing else would bound the heap"))
	}
	return errors.Join(errs...)
}

// apply sets what the section sets, logging each with the value it
// replaced.
func (c RuntimeConfig) apply(log *slog.Logger) {
	if c.GOMAXPROCS > 0 {
		log.Info("runtime.gomaxprocs set", "gomaxprocs", c.GOMAXPROCS, "was", runtime.GOMAXPROCS(c.GOMAXPROCS))
	}
	if c.GCPercent != 0 {
		log.Info("runtime.gc_percent set", "gc_percent", c.GCPercent, "was", debug.SetGCPercent(c.GCPercent))
	}
	if c.MemoryLimit != "" {
		n, _ := ParseByteSize(c.MemoryLimit) // validated
		log.Info("runtime.memory_limit set", "bytes", n, "was", debug.SetMemoryLimit(n))
	}
}

// ParseByteSize reads a byte count as GOMEMLIMIT does: a non-negative
// integer with an optional unit, B, KiB, MiB, GiB or TiB (powers of 1024).
func ParseByteSize(s string) (int64, error) {
	num, unit := s, ""
	if i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		num, unit = s[:i], s[i:]
	}
	var shift uint
	switch unit {
	case "", "B":
	case "KiB":
		shift = 10
	case "MiB":
		shift = 20
	case "GiB":
		shift = 30
	case "TiB":
		shift = 40
	default:
		return 0, fmt.Errorf("%q: want a number of bytes with an optional B, KiB, MiB, GiB or TiB", s)
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q: want a number of bytes with an optional B, KiB, MiB, GiB or TiB", s)
	}
	if n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n << shift, nil
}

// SimulatorConfig is `svc-pf simulator`'s file (/etc/svc-pf/simulator.yaml)
// and the `simulator` section of `svc-pf all`.
type SimulatorConfig struct {
	HTTP    SimulatorHTTPConfig `yaml:"http"`
	APIKeys []string            `yaml:"api_keys"`
	Log     LogConfig           `yaml:"log"`
	Lua     LuaConfig           `yaml:"lua"`
	Runtime RuntimeConfig       `yaml:"runtime"`
	// NATS: the url, or the NATS_URL environment variable; neither means
	// HTTP only, from the feeds and a request's own settings. Under `svc-pf
	// all` an empty url is the embedded server.
	NATS NATSConfig `yaml:"nats"`
	// The node keys (feeds, rpz, region). Under `svc-pf all` they stand at the
	// top level, shared with the resolver, and must not be set here.
	Feeds  []feeds.FeedConfig `yaml:"feeds"`
	RPZ    []rpz.ZoneConfig   `yaml:"rpz"`
	Region string             `yaml:"region"`
	// Node is how the simulator's node announces itself to the
	// orgmanager (node.name, node.heartbeat); under `svc-pf all` set in
	// node: instead.
	Node AnnounceConfig `yaml:"node"`
}

// SimulatorHTTPConfig is the simulator's `http` section: the listener's,
// and whether it serves Go's profiler.
type SimulatorHTTPConfig struct {
	httpapi.Config `yaml:",inline"`
	// PProf serves /debug/pprof/ on the listener, behind api_keys when
	// they are set; off by default (simulator.Config.PProf says why).
	PProf bool `yaml:"pprof"`
}

// DefaultSimulatorConfig is what runs when the file sets nothing.
func DefaultSimulatorConfig() SimulatorConfig {
	return SimulatorConfig{
		HTTP: SimulatorHTTPConfig{Config: httpapi.Config{Address: "127.0.0.1:8081"}},
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
	errs = append(errs, c.Log.validate(), c.Runtime.validate(), prefixed("http", c.HTTP.Validate()), rpz.Config{Zones: c.RPZ}.Validate(),
		c.Node.validate())
	return errors.Join(errs...)
}

// Simulator is a started simulator: its service and listener.
type Simulator struct {
	Service *simulator.Service
	server  *httpapi.Server
	log     *slog.Logger
	// natsWait is the standalone simulator's wait for its NATS server
	// (connectBus); nil under `svc-pf all` and without NATS. Set before Run.
	natsWait *natsbus.Await

	// natsMu guards stopNATS, set once the NATS API is registered (at
	// start, or by serveNATSLater once the server answers).
	natsMu   sync.Mutex
	stopNATS func() error
	// cancelNATS ends serveNATSLater; natsDone is closed when it has.
	cancelNATS context.CancelFunc
	natsDone   chan struct{}
}

// StartSimulator builds the simulator over a node (its engine, feeds and
// sizes), loads its
// Lua workers, binds its listener and, when nc is not nil, serves its calls
// over NATS. Its metrics go to reg, which its /metrics serves: standalone
// the registry of the read models too (their svcpf_feed_* and
// svcpf_readmodel_* are the simulator's to show), under `svc-pf all` one of
// its own (the node listener shows the shared read models').
func StartSimulator(cfg SimulatorConfig, n *node.Node, reg *prometheus.Registry, nc *nats.Conn, v Version, log *slog.Logger) (*Simulator, error) {
	log = log.With("service", "simulator")
	cfg.Runtime.apply(log)
	svc, err := simulator.New(simulator.Config{
		Engine: n.Engine(), Feeds: n.Feeds(), Sizes: n,
		Workers: cfg.Lua.Workers, File: cfg.Lua.File, CallTimeout: cfg.Lua.CallTimeout,
		APIKeys: cfg.APIKeys, PProf: cfg.HTTP.PProf, Region: cfg.Region, Version: string(v),
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
	links := map[string]string{"/api/v1/info": "/api/v1/info", "/api/v1/codemappings": "/api/v1/codemappings",
		"/api/v1/domain?domain=example.com": "/api/v1/domain?domain=example.com"}
	if cfg.HTTP.PProf {
		links["/debug/pprof/"] = "/debug/pprof/"
	}
	s := &Simulator{Service: svc, log: log}
	httpapi.MountStandard(router, httpapi.StandardConfig{
		Service: "simulator", Version: string(v), Gatherer: reg, Info: svc.Info, Links: links,
		Ready: func() error {
			if err := s.natsWait.Err(); err != nil {
				return err
			}
			return n.Ready()
		},
	})
	switch {
	case nc == nil:
	case natsbus.NotConnected(nc) == nil:
		if s.stopNATS, err = svc.ServeNATS(simulator.NATSConfig{Conn: nc}); err != nil {
			svc.Close()
			return nil, err
		}
	default:
		// NATS does not answer yet: HTTP serves meanwhile, and the NATS
		// API is registered once it does.
		s.serveNATSLater(nc)
	}
	if s.server, err = httpapi.Listen(cfg.HTTP.Config, router, log); err != nil {
		s.close()
		return nil, err
	}
	log.Info("simulator listening", "address", s.server.Addr().String(), "lua_workers", cfg.Lua.Workers,
		"lua_file", cmp.Or(cfg.Lua.File, "(embedded default)"), "api_keys", len(cfg.APIKeys), "pprof", cfg.HTTP.PProf)
	return s, nil
}

// Addr is the listener's address: how a program that embeds the simulator
// learns the port the kernel chose for ":0".
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
	if s.cancelNATS != nil {
		s.cancelNATS()
		<-s.natsDone
	}
	s.natsMu.Lock()
	if s.stopNATS != nil {
		_ = s.stopNATS()
		s.stopNATS = nil
	}
	s.natsMu.Unlock()
	s.Service.Close()
}

// serveNATSLater registers the simulator's NATS API once nc connects,
// retrying every second while the registration fails (the server went
// away again before it was flushed), until close.
func (s *Simulator) serveNATSLater(nc *nats.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancelNATS, s.natsDone = cancel, make(chan struct{})
	go func() {
		defer close(s.natsDone)
		for {
			if natsbus.WaitConnected(ctx, nc) != nil {
				return
			}
			stop, err := s.Service.ServeNATS(simulator.NATSConfig{Conn: nc})
			if err == nil {
				s.natsMu.Lock()
				s.stopNATS = stop
				s.natsMu.Unlock()
				s.log.Info("simulator NATS API registered", "servers", strings.Join(nc.Servers(), ","))
				return
			}
			s.log.Warn("registering the simulator's NATS API failed; retrying", "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
}

// RunSimulator runs `svc-pf simulator`. With testAndExit it sends one
// lookup_domain for a fixed sample domain through a worker and returns
// its error (the simulator's --test-and-exit) instead of serving. A
// reload (reload, SIGHUP) applies log.level (the caller's step), rpz and
// feeds.
func RunSimulator(ctx context.Context, cfg SimulatorConfig, v Version, log *slog.Logger, testAndExit bool, reload ...*Reloader[SimulatorConfig]) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nc, aw, err := connectNode(ctx, cfg.NATS, "svc-pf simulator", log)
	if err != nil {
		return err
	}
	if nc != nil {
		defer nc.Close()
	}
	if testAndExit {
		n, err := node.New(node.Config{Feeds: cfg.Feeds, RPZ: cfg.RPZ, NATS: nc, Logger: log})
		if err != nil {
			return err
		}
		return testLookup(ctx, cfg, n, v, log)
	}
	sn, err := startSimulatorNode(cfg, nc, v, log)
	if err != nil {
		return err
	}
	sn.natsWait = aw
	for _, rl := range reload {
		registerSimulatorReload(rl, sn.node)
	}
	err = sn.Run(ctx)
	if err == nil {
		log.Info("svc-pf simulator stopped")
	}
	return err
}

// simulatorNode is a started `svc-pf simulator`: the simulator over a
// node of its own, their metrics on one registry.
type simulatorNode struct {
	*Simulator
	node      *node.Node
	announcer *nodehealth.Announcer // nil without NATS
}

func startSimulatorNode(cfg SimulatorConfig, nc *nats.Conn, v Version, log *slog.Logger) (*simulatorNode, error) {
	reg := newRegistry()
	n, err := node.New(node.Config{Feeds: cfg.Feeds, RPZ: cfg.RPZ, NATS: nc, Registerer: reg, Logger: log})
	if err != nil {
		return nil, err
	}
	sim, err := StartSimulator(cfg, n, reg, nc, v, log)
	if err != nil {
		return nil, err
	}
	ann, err := newAnnouncer(cfg.Node, "simulator", []string{"simulator"}, n, nil, nc, v, log.With("service", "simulator"))
	if err != nil {
		sim.close()
		return nil, err
	}
	return &simulatorNode{Simulator: sim, node: n, announcer: ann}, nil
}

// Run follows the read models and serves until ctx ends.
func (n *simulatorNode) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	modelsDone := make(chan error, 1)
	go func() { modelsDone <- n.node.Run(ctx) }()
	announced := runAnnouncer(ctx, n.announcer)
	err := n.Simulator.Run(ctx)
	cancel()
	announced()
	return errors.Join(err, <-modelsDone)
}

// connectNode connects a standalone node service to NATS when nats.url or
// NATS_URL names a server (nil, nil, nil when neither does), logging the
// line the simulator API names: "NATS enabled". A server that does not
// answer yet is waited for as every service waits (connectBus).
func connectNode(ctx context.Context, c NATSConfig, name string, log *slog.Logger) (*nats.Conn, *natsbus.Await, error) {
	url := c.URL
	if url == "" {
		url = os.Getenv("NATS_URL")
	}
	if url == "" {
		return nil, nil, nil
	}
	nc, aw, err := connectBus(ctx, url, name, log)
	if err != nil {
		return nil, nil, err
	}
	log.Info("NATS enabled", "url", redactURLs(url))
	return nc, aw, nil
}

// testSampleDomain is the fixed domain of --test-and-exit.
const testSampleDomain = "example.com"

func testLookup(ctx context.Context, cfg SimulatorConfig, n *node.Node, v Version, log *slog.Logger) error {
	svc, err := simulator.New(simulator.Config{Engine: n.Engine(), Feeds: n.Feeds(), Sizes: n,
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
