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
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/filelock"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/node"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
	"github.com/svc-pf/svc-pf/internal/radius"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/rpz"
	"github.com/svc-pf/svc-pf/internal/session"
)

// EmbeddedNATSConfig is the `nats` section of `svc-pf all`.
type EmbeddedNATSConfig struct {
	// Listen is the embedded server's client address. The default port
	// 4223 leaves 4222 to a system NATS server that may run beside it.
	Listen string `yaml:"listen"`
	// StoreDir holds JetStream's files; default <data_dir>/nats.
	StoreDir string `yaml:"store_dir"`
}

// AllConfig is the configuration of `svc-pf all`: every service in one
// process around an embedded NATS server.
type AllConfig struct {
	// DataDir holds the SQLite database and JetStream's files by default.
	DataDir    string             `yaml:"data_dir"`
	Log        LogConfig          `yaml:"log"`
	NATS       EmbeddedNATSConfig `yaml:"nats"`
	OrgManager OrgManagerConfig   `yaml:"orgmanager"`
	IPMapper   IPMapperConfig     `yaml:"ipmapper"`
	Node       NodeConfig         `yaml:"node"`
	// Simulator takes `svc-pf simulator`'s config; its node keys (feeds,
	// region) stand at the top level instead, shared with the resolver.
	Simulator SimulatorConfig `yaml:"simulator"`
	// Resolver takes `svc-pf resolver`'s config, but its API is served on
	// the node listener (node.http) and its node keys stand at the top
	// level.
	Resolver ResolverConfig `yaml:"resolver"`
	// Feeds are the node's category feeds (docs/feed-client.md).
	Feeds []feeds.FeedConfig `yaml:"feeds"`
	// RPZ are the node's response-policy zone files (step 3 of the
	// decision, docs/policy.md).
	RPZ []rpz.ZoneConfig `yaml:"rpz"`
	// Region is the node's region (the simulator's info payload).
	Region string `yaml:"region"`
	// Activity is the activity section (docs/activity.md): the node's
	// observer and the collector, which stores into <data_dir>/activity
	// unless activity.store.url says otherwise.
	Activity activity.Config `yaml:"activity"`
	// FeedSources are feeds this process rebuilds from their sources on
	// their intervals (docs/feeds.md); a node follows them through feeds:.
	FeedSources []feedbuild.FeedSourceConfig `yaml:"feed_sources"`
	// Radius is RADIUS accounting in (docs/radius.md): with radius.listen
	// set, its sessions go to this process's IP Mapper.
	Radius radius.Config `yaml:"radius"`
}

// DefaultAllConfig is what runs when the file sets nothing.
func DefaultAllConfig() AllConfig {
	return AllConfig{
		DataDir:    defaultDataDir,
		Log:        LogConfig{Level: "info"},
		NATS:       EmbeddedNATSConfig{Listen: "127.0.0.1:4223"},
		OrgManager: DefaultOrgManagerConfig(),
		IPMapper:   DefaultIPMapperConfig(),
		Node:       DefaultNodeConfig(),
		Simulator:  DefaultSimulatorConfig(),
		Resolver:   allResolverConfig(),
		Activity:   activity.DefaultConfig(),
	}
}

// allResolverConfig is `svc-pf resolver`'s defaults without its listener:
// under `svc-pf all` the resolver's API is served on node.http, so a
// resolver.http left in the file would be a setting nobody reads, and
// Validate refuses any.
func allResolverConfig() ResolverConfig {
	c := DefaultResolverConfig()
	c.HTTP = httpapi.Config{}
	// Kept at the defaults, which the file cannot tell from an absent
	// section: Validate refuses any other resolver.activity (the top-level
	// activity: is the one read), an enabled: false included.
	c.Activity = activity.DefaultConfig()
	return c
}

// Validate checks the configuration before anything starts.
func (c *AllConfig) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data_dir is required"))
	}
	errs = append(errs, c.Log.validate(), prefixed("orgmanager", c.OrgManager.Validate()),
		prefixed("ipmapper", c.IPMapper.Validate(false)), prefixed("node", c.Node.HTTP.Validate()),
		prefixed("simulator", c.Simulator.Validate()))
	if len(c.Simulator.Feeds) > 0 {
		errs = append(errs, errors.New("simulator.feeds: under svc-pf all the feeds are set at the top level (feeds:), shared by the simulator and the resolver"))
	}
	if len(c.Simulator.RPZ) > 0 {
		errs = append(errs, errors.New("simulator.rpz: under svc-pf all the RPZ zones are set at the top level (rpz:), shared by the simulator and the resolver"))
	}
	errs = append(errs, rpz.Config{Zones: c.RPZ}.Validate())
	if len(c.Resolver.Feeds) > 0 || len(c.Resolver.RPZ) > 0 || c.Resolver.Region != "" {
		errs = append(errs, errors.New("resolver.feeds, resolver.rpz, resolver.region: under svc-pf all these node keys are set at the top level, shared by the simulator and the resolver"))
	}
	errs = append(errs, prefixed("activity", c.Activity.Validate()), feedbuild.ValidateFeedSources(c.FeedSources))
	if c.Resolver.Activity != activity.DefaultConfig() {
		errs = append(errs, errors.New("resolver.activity: under svc-pf all activity is set at the top level (activity:)"))
	}
	if c.Resolver.HTTP != (httpapi.Config{}) {
		errs = append(errs, errors.New("resolver.http: under svc-pf all the resolver's API and /metrics are served on the node listener; set node.http instead"))
	}
	if _, err := c.Resolver.parse(); err != nil {
		errs = append(errs, prefixed("resolver", err))
	}
	// The orgmanager deploys to whichever IP Mapper answers on its NATS:
	// on another server than this process's IP Mapper it would deploy to
	// a different IP Mapper (and bucket), or to none, while this one's
	// table never changes. Unset means the embedded server.
	own := "nats://" + c.NATS.Listen
	if om, im := natsURLOr(c.OrgManager.NATS.URL, own), natsURLOr(c.IPMapper.NATS.URL, own); om != im {
		errs = append(errs, fmt.Errorf("orgmanager.nats.url %q points away from this process's IP Mapper (ipmapper.nats.url %q): the orgmanager must reach its own IP Mapper; set both to the same URL, or leave both unset for the embedded server",
			redactURL(om), redactURL(im)))
	}
	// One bucket name for the three: the IP Mapper writes it, the
	// orgmanager deploys to that IP Mapper's subjects, the node follows it.
	// The orgmanager's own key may be left at its default (it then follows
	// ipmapper.sessions.bucket); set to something else it is a mistake.
	if ob, ib := c.OrgManager.Sessions.Bucket, c.IPMapper.Sessions.Bucket; ob != "" && ob != session.Bucket && ob != ib {
		errs = append(errs, fmt.Errorf("orgmanager.sessions.bucket %q differs from ipmapper.sessions.bucket %q: under svc-pf all one bucket serves all three services; set ipmapper.sessions.bucket only", ob, ib))
	}
	if a := c.IPMapper.Auth; a.Mode != AuthTokens || a.DatabaseURL != "" {
		errs = append(errs, errors.New("ipmapper.auth: under svc-pf all the IP Mapper verifies the orgmanager's tokens; set orgmanager.auth instead"))
	}
	if c.Resolver.Node != (AnnounceConfig{}) || c.Simulator.Node != (AnnounceConfig{}) {
		errs = append(errs, errors.New("resolver.node, simulator.node: under svc-pf all the one node announces itself; set node.name and node.heartbeat instead"))
	}
	if c.OrgManager.Activity.Store.URL != "" {
		errs = append(errs, errors.New("orgmanager.activity.store: under svc-pf all the reports read the collector's store (activity.store.url at the top level)"))
	}
	errs = append(errs, c.Node.AnnounceConfig.validate())
	if c.Radius.Enabled() || len(c.Radius.Clients) > 0 {
		errs = append(errs, c.Radius.Validate())
		if !c.Radius.Enabled() {
			errs = append(errs, errors.New("radius.listen: radius.clients are set but no address to serve them on"))
		}
	}
	if c.Simulator.Region != "" {
		errs = append(errs, errors.New("simulator.region: under svc-pf all the region is set at the top level (region:)"))
	}
	return errors.Join(errs...)
}

// natsURLOr is url with its scheme, or def when unset.
func natsURLOr(url, def string) string {
	switch {
	case url == "":
		return def
	case !strings.Contains(url, "://"):
		return "nats://" + url
	}
	return url
}

// RunAll runs every service in one process around an embedded NATS server
// whose JetStream files live under the data directory. A reload (reload,
// SIGHUP) applies log.level (the caller's step), resolver.forwarders (with
// forwarder_strategy and, in forward mode, forward_zones),
// resolver.allow_from, rpz and feeds.
func RunAll(ctx context.Context, cfg AllConfig, v Version, log *slog.Logger, reload ...*Reloader[AllConfig]) error {
	cfg.OrgManager.Auth.AdminToken = os.Getenv(AdminTokenEnv)
	all, err := StartAll(ctx, cfg, v, log)
	if err != nil {
		return err
	}
	for _, rl := range reload {
		registerAllReload(rl, all)
	}
	if err := all.Run(ctx); err != nil {
		return err
	}
	log.Info("svc-pf all stopped")
	return nil
}

// All is `svc-pf all`, started.
type All struct {
	NATS       *natsbus.Embedded
	OrgManager *OrgManager
	IPMapper   *IPMapper
	Node       *Node
	Simulator  *Simulator
	Resolver   *Resolver
	// Activity is the collector, storing the node's activity.
	Activity *Activity
	// announcer writes the node's heartbeat (svcpf_nodes).
	announcer *nodehealth.Announcer
	conns     []*nats.Conn
	lock      *filelock.Lock // the data directory's

	// activity is the node's side of activity.
	activity *nodeActivity
	// feedSources rebuilds the feeds of feed_sources:.
	feedSources *feedbuild.Updater
	// Radius is the RADIUS accounting server, nil without radius.listen.
	Radius *Radius
}

// StartAll starts the embedded NATS server and builds both services.
func StartAll(ctx context.Context, cfg AllConfig, v Version, log *slog.Logger) (*All, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	// Held for the life of the process (released by close): two `svc-pf
	// all` on one data directory would share the SQLite file and the
	// JetStream store and each believe its own state; the second must not
	// start. The embedded server locks its store directory too, which
	// also covers a nats.store_dir outside the data directory.
	lock, err := filelock.Dir(cfg.DataDir, "data directory")
	if err != nil {
		return nil, err
	}
	storeDir := cfg.NATS.StoreDir
	if storeDir == "" {
		storeDir = filepath.Join(cfg.DataDir, "nats")
	}
	// The orgmanager and the node follow the IP Mapper's bucket (Validate
	// refused a different one).
	cfg.OrgManager.Sessions.Bucket = cfg.IPMapper.Sessions.Bucket
	// The IP Mapper beside it serves once it holds its lock, which a
	// process killed without releasing it keeps for up to lock_ttl.
	cfg.OrgManager.AwaitIPMapper = cfg.IPMapper.HA.LockTTL + 30*time.Second
	if cfg.OrgManager.Database.URL == DefaultOrgManagerConfig().Database.URL {
		// Not set by the operator: the database lives in the data directory too.
		cfg.OrgManager.Database.URL = "sqlite:" + filepath.Join(cfg.DataDir, "orgmanager.db")
	}
	if cfg.OrgManager.Auth.BootstrapTokenFile == DefaultOrgManagerConfig().Auth.BootstrapTokenFile {
		// Likewise the first admin token.
		cfg.OrgManager.Auth.BootstrapTokenFile = filepath.Join(cfg.DataDir, "admin.token")
	}
	host, portStr, err := net.SplitHostPort(cfg.NATS.Listen)
	if err != nil {
		_ = lock.Unlock()
		return nil, fmt.Errorf("nats.listen %q: %w", cfg.NATS.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		_ = lock.Unlock()
		return nil, fmt.Errorf("nats.listen %q: bad port", cfg.NATS.Listen)
	}
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{Host: host, Port: port, StoreDir: storeDir, Logger: log})
	if err != nil {
		_ = lock.Unlock()
		return nil, err
	}
	a := &All{NATS: srv, lock: lock}
	fail := func(err error) (*All, error) {
		a.close()
		return nil, err
	}
	// connectAway is connect for the sections that may name a NATS server
	// of their own (ipmapper, orgmanager, simulator): one that does not
	// answer at start is waited for as the standalone services wait for
	// theirs (connectBus), its URL in the log and on the section's
	// /health, rather than a listener saying ok while it cannot reach
	// its server. The embedded server answers at once: nil Await.
	connectAway := func(url, name string) (nc *nats.Conn, aw *natsbus.Await, err error) {
		if url == "" {
			nc, err = natsbus.Connect(srv.ClientURL(), name, log, true)
		} else {
			nc, aw, err = connectBus(ctx, url, name, log.With("service", strings.TrimPrefix(name, "svc-pf ")))
		}
		if err == nil {
			a.conns = append(a.conns, nc)
		}
		return nc, aw, err
	}
	connect := func(url, name string) (*nats.Conn, error) {
		nc, _, err := connectAway(url, name)
		return nc, err
	}
	log.Info("embedded NATS server started", "url", srv.ClientURL(), "store_dir", storeDir)

	ncMapper, awMapper, err := connectAway(cfg.IPMapper.NATS.URL, "svc-pf ipmapper")
	if err != nil {
		return fail(err)
	}
	ncOrg, awOrg, err := connectAway(cfg.OrgManager.NATS.URL, "svc-pf orgmanager")
	if err != nil {
		return fail(err)
	}
	// The collector first: the orgmanager's reports and console read its
	// store.
	ncActivity, err := connect("", "svc-pf activity")
	if err != nil {
		return fail(err)
	}
	// The node listener serves the collector's metrics beside the node's.
	reg := newRegistry()
	if a.Activity, err = StartActivity(ctx, ActivityConfig{DataDir: cfg.DataDir, Activity: cfg.Activity, Registry: reg}, ncActivity, v, log); err != nil {
		return fail(err)
	}
	cfg.OrgManager.ActivityReader = a.Activity.Store
	// The console's "why" and feeds pages ask this process's simulator.
	cfg.OrgManager.Console.Simulator = inProcessSimulator{all: a}
	// The orgmanager first: the IP Mapper verifies its tokens. Neither
	// serves before Run, and the orgmanager's deploys wait for the IP
	// Mapper (AwaitIPMapper).
	if a.OrgManager, err = StartOrgManager(ctx, cfg.OrgManager, ncOrg, v, log); err != nil {
		return fail(err)
	}
	a.OrgManager.natsWait = awOrg
	if cfg.OrgManager.Auth.Mode != AuthNone {
		log.Info("console listening", "url", consoleURL(cfg.OrgManager.HTTP, a.OrgManager.Addr()),
			"admin_token_file", filepath.Join(cfg.DataDir, "admin.token"))
	}
	// One mode and one verifier for both listeners.
	cfg.IPMapper.Auth = IPMapperAuthConfig{Mode: cfg.OrgManager.Auth.Mode, Verifier: a.OrgManager.Tokens()}
	if a.IPMapper, err = StartIPMapper(cfg.IPMapper, ncMapper, v, log); err != nil {
		return fail(err)
	}
	a.IPMapper.natsWait = awMapper
	// The IP Mapper's writes are the ones a store that refuses them stops
	// (nats-server then only lets them time out): its /health says why.
	a.IPMapper.natsStore = srv.StoreError
	ncNode, err := connect("", "svc-pf node")
	if err != nil {
		return fail(err)
	}
	nodeLog := log.With("service", "node")
	// One node, so one policy engine, for the resolver and the simulator:
	// a policy compiled for one is cached for the other.
	n, err := node.New(node.Config{Feeds: cfg.Feeds, RPZ: cfg.RPZ, NATS: ncNode, SessionsBucket: cfg.IPMapper.Sessions.Bucket,
		Registerer: reg, Logger: nodeLog})
	if err != nil {
		return fail(err)
	}
	if a.activity, err = startNodeActivity(cfg.Activity, nodeName(cfg.Node.AnnounceConfig, "all"), v, ncNode, reg, nodeLog); err != nil {
		return fail(err)
	}
	if a.Resolver, err = startResolver(cfg.Resolver, cfg.DataDir, n, v, reg, log, a.activity.Observer); err != nil {
		return fail(err)
	}
	// The resolver's PowerDNS-compatible API is served on the node listener.
	if a.Node, err = StartNode(cfg.Node, n, reg, v, nodeLog, a.Resolver.API); err != nil {
		return fail(err)
	}
	ncSim, awSim, err := connectAway(cfg.Simulator.NATS.URL, "svc-pf simulator")
	if err != nil {
		return fail(err)
	}
	simCfg := cfg.Simulator
	simCfg.Region = cfg.Region
	if a.Simulator, err = StartSimulator(simCfg, n, newRegistry(), ncSim, v, log); err != nil {
		return fail(err)
	}
	a.Simulator.natsWait = awSim
	simURL := ncSim.ConnectedUrlRedacted()
	if simURL == "" { // not connected yet: the URL it waits for
		simURL = redactURLs(cfg.Simulator.NATS.URL)
	}
	log.Info("simulator NATS enabled", "url", redactURL(simURL))
	// The node listener's /health says when the collector cannot store.
	a.Node.activity = a.Activity.Collector.Health
	if a.feedSources, err = startFeedSources(cfg.FeedSources, reg, log); err != nil {
		return fail(err)
	}
	if cfg.Radius.Enabled() {
		ncRadius, err := connect("", "svc-pf radius")
		if err != nil {
			return fail(err)
		}
		// Its metrics on the node listener, its state in the node's /health.
		if a.Radius, err = StartRadius(RadiusConfig{Sessions: RadiusSessionsConfig{Bucket: cfg.IPMapper.Sessions.Bucket}, Radius: cfg.Radius},
			ncRadius, reg, v, log); err != nil {
			return fail(err)
		}
	}
	fsHealth := feedSourcesHealth(a.feedSources)
	a.Node.health = func() map[string]any {
		h := fsHealth()
		if rh := radiusHealth(a.Radius); rh != nil {
			if h == nil {
				h = map[string]any{}
			}
			for k, v := range rh {
				h[k] = v
			}
		}
		return h
	}
	// …and when the resolver answers before the policy data has loaded.
	a.Node.resolver = a.Resolver.DNS
	if a.announcer, err = newAnnouncer(cfg.Node.AnnounceConfig, "all", []string{"resolver", "simulator"}, n, a.Node.Ready, ncNode, v, nodeLog); err != nil {
		return fail(err)
	}
	return a, nil
}

// Run runs every service until ctx ends, then stops NATS last.
func (a *All) Run(ctx context.Context) error {
	defer a.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	services := []func(context.Context) error{a.IPMapper.Run, a.OrgManager.Run, a.Node.Run, a.Simulator.Run, a.Resolver.DNS.Run,
		a.announcer.Run, a.Activity.Run, a.activity.Run, a.feedSources.Run}
	if a.Radius != nil {
		services = append(services, a.Radius.Run)
	}
	errc := make(chan error, len(services))
	for _, run := range services {
		go func() { errc <- run(ctx) }()
	}
	// One service failing stops the others: half a platform is worse than
	// a restart.
	errs := []error{<-errc}
	cancel()
	for range services[1:] {
		errs = append(errs, <-errc)
	}
	return errors.Join(errs...)
}

func (a *All) close() {
	if a.Radius != nil {
		a.Radius.Server.Close()
	}
	if a.Resolver != nil {
		a.Resolver.DNS.Close()
	}
	if a.Activity != nil && a.Activity.Store != nil {
		// Closing twice (Run closed it) is harmless.
		_ = a.Activity.Store.Close()
	}
	for _, nc := range a.conns {
		nc.Close()
	}
	if a.NATS != nil {
		a.NATS.Shutdown()
	}
	// Last: the directory is free only once nothing writes it.
	_ = a.lock.Unlock()
}
