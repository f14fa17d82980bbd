package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/node"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/api"
	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

// DNSConfig is the resolver's `dns` section.
type DNSConfig struct {
	// Listen are ip:port addresses served over UDP and TCP.
	Listen []string `yaml:"listen"`
	// UDPSockets per address (SO_REUSEPORT); default half of GOMAXPROCS,
	// at least 1 (resolver.DefaultUDPSockets).
	UDPSockets int `yaml:"udp_sockets"`
	// UDPBatch is how many datagrams a socket's reader takes with one
	// recvmmsg and answers with one sendmmsg; default 32.
	UDPBatch int `yaml:"udp_batch"`
	// Debug answers CHAOS TXT queries with the decision's trace.
	Debug bool         `yaml:"debug"`
	TCP   DNSTCPConfig `yaml:"tcp"`
	Cache cache.Config `yaml:",inline"`
	Block struct {
		TTL time.Duration `yaml:"ttl"`
	} `yaml:"block"`

	// MaxInFlightPerClient bounds the cache misses one client (source
	// address) has in flight; default resolver.DefaultClientMaxInFlight.
	MaxInFlightPerClient int `yaml:"max_in_flight_per_client"`
}

// DNSTCPConfig bounds TCP clients.
type DNSTCPConfig struct {
	MaxConnections int           `yaml:"max_connections"`
	IdleTimeout    time.Duration `yaml:"idle_timeout"`

	// MaxQueriesPerConnection bounds the queries of one connection
	// answered at once; default resolver.DefaultTCPMaxQueriesPerConnection.
	MaxQueriesPerConnection int `yaml:"max_queries_per_connection"`
}

// ResolverAPIConfig is the `api` section: the statistics API's X-API-Key.
type ResolverAPIConfig struct {
	Key string `yaml:"key"`
}

// ResolverConfig is `svc-pf resolver`'s file (/etc/svc-pf/resolver.yaml)
// and the `resolver` section of `svc-pf all` (docs/resolver.md, Configuration).
type ResolverConfig struct {
	DNS DNSConfig `yaml:"dns"`
	// Forwarders (ip:port) answer what the policy allows; empty: the
	// nameservers of /etc/resolv.conf.
	Forwarders []string `yaml:"forwarders"`
	// HTTP serves the PowerDNS-compatible statistics API and /metrics (under `svc-pf all`: the node
	// listener's address instead).
	HTTP httpapi.Config    `yaml:"http"`
	API  ResolverAPIConfig `yaml:"api"`
	// AllowFrom are the client networks served; default loopback and the
	// private ranges.
	AllowFrom []string   `yaml:"allow_from"`
	Log       LogConfig  `yaml:"log"`
	NATS      NATSConfig `yaml:"nats"`
	// Node keys (docs/feed-client.md, docs/policy.md); at the top level under `svc-pf all`.
	Feeds  []feeds.FeedConfig `yaml:"feeds"`
	RPZ    []rpz.ZoneConfig   `yaml:"rpz"`
	Region string             `yaml:"region"`
	// Node is how the resolver's node announces itself to the orgmanager
	// (node.name, node.heartbeat); under `svc-pf all` set in node: instead.
	Node AnnounceConfig `yaml:"node"`
	// Activity is what the node keeps of the queries it answers
	// (docs/activity.md); at the top level under `svc-pf all`.
	Activity activity.Config `yaml:"activity"`
}

// DefaultResolverConfig is what runs when the file sets nothing.
func DefaultResolverConfig() ResolverConfig {
	c := ResolverConfig{
		DNS:  DNSConfig{Listen: []string{"127.0.0.1:5353"}, Cache: cache.DefaultConfig()},
		HTTP: httpapi.Config{Address: "127.0.0.1:8082"},
		Log:  LogConfig{Level: "info"},

		Activity: activity.DefaultConfig(),
	}
	return c
}

// resolverSettings are a ResolverConfig checked and parsed.
type resolverSettings struct {
	listen, forwarders []netip.AddrPort
	allowFrom          []netip.Prefix
}

// parse checks the section; forwarders default to /etc/resolv.conf's.
func (c *ResolverConfig) parse() (resolverSettings, error) {
	var s resolverSettings
	var errs []error
	addrs := func(key string, in []string) []netip.AddrPort {
		var out []netip.AddrPort
		for i, a := range in {
			ap, err := netip.ParseAddrPort(a)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s[%d] %q: want ip:port", key, i, a))
				continue
			}
			out = append(out, ap)
		}
		return out
	}
	s.listen = addrs("dns.listen", c.DNS.Listen)
	if len(c.DNS.Listen) == 0 {
		errs = append(errs, errors.New("dns.listen: at least one ip:port is required"))
	}
	fw := c.Forwarders
	if len(fw) == 0 {
		fw = resolvConfServers("/etc/resolv.conf")
		if len(fw) == 0 {
			errs = append(errs, errors.New("forwarders: none set and none found in /etc/resolv.conf; set forwarders: [ip:port, …]"))
		}
	}
	s.forwarders = addrs("forwarders", fw)
	for i, p := range c.AllowFrom {
		pfx, err := netip.ParsePrefix(p)
		if err != nil {
			if a, aerr := netip.ParseAddr(p); aerr == nil {
				pfx = netip.PrefixFrom(a, a.BitLen())
			} else {
				errs = append(errs, fmt.Errorf("allow_from[%d] %q: want a CIDR", i, p))
				continue
			}
		}
		s.allowFrom = append(s.allowFrom, pfx.Masked())
	}
	if c.DNS.UDPSockets < 0 || c.DNS.TCP.MaxConnections < 0 || c.DNS.TCP.MaxQueriesPerConnection < 0 {
		errs = append(errs, errors.New("dns.udp_sockets, dns.tcp.max_connections and dns.tcp.max_queries_per_connection must not be negative"))
	}
	if c.DNS.MaxInFlightPerClient < 0 || c.DNS.MaxInFlightPerClient > resolver.MaxClientMaxInFlight {
		errs = append(errs, fmt.Errorf("dns.max_in_flight_per_client: %d is not within 0…%d", c.DNS.MaxInFlightPerClient,
			resolver.MaxClientMaxInFlight))
	}
	if c.DNS.UDPBatch < 0 || c.DNS.UDPBatch > resolver.MaxUDPBatch {
		errs = append(errs, fmt.Errorf("dns.udp_batch: %d is not within 0…%d", c.DNS.UDPBatch, resolver.MaxUDPBatch))
	}
	errs = append(errs, prefixed("dns", c.DNS.Cache.Validate()), c.Log.validate(), c.Node.validate())
	if c.Activity != (activity.Config{}) { // unset under `svc-pf all`, which has its own
		errs = append(errs, prefixed("activity", c.Activity.Validate()))
	}
	return s, errors.Join(errs...)
}

// resolvConfServers reads the nameserver lines of a resolv.conf, as
// ip:53.
func resolvConfServers(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "nameserver" {
			if a, err := netip.ParseAddr(fields[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a, 53).String())
			}
		}
	}
	return out
}

// Resolver is a started resolver.
type Resolver struct {
	DNS *resolver.Resolver
	API *api.API
}

// StartResolver binds the DNS listeners, deciding with the node's engine
// and reporting every answered query to obs (none: no observer), and
// builds the PowerDNS-compatible statistics API, to be mounted on a
// router.
func StartResolver(cfg ResolverConfig, n *node.Node, v Version, reg prometheus.Registerer, log *slog.Logger,
	obs ...resolver.Observer) (*Resolver, error) {
	s, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	log = log.With("service", "resolver")
	r, err := resolver.New(resolver.Config{
		Listen: s.listen, UDPSockets: cfg.DNS.UDPSockets, UDPBatch: cfg.DNS.UDPBatch, Forwarders: s.forwarders, AllowFrom: s.allowFrom,
		Debug: cfg.DNS.Debug, TCPMaxConnections: cfg.DNS.TCP.MaxConnections, TCPIdleTimeout: cfg.DNS.TCP.IdleTimeout,
		BlockTTL: cfg.DNS.Block.TTL, Cache: cfg.DNS.Cache, Engine: n.Engine(), Generation: n.Generation,
		Version: string(v), Logger: log, Registerer: reg,
		ClientMaxInFlight: cfg.DNS.MaxInFlightPerClient, TCPMaxQueriesPerConnection: cfg.DNS.TCP.MaxQueriesPerConnection,
		Observer: observerOf(obs),
	})
	if err != nil {
		return nil, err
	}
	a, err := api.New(api.Config{Stats: r.Stats(), APIKey: cfg.API.Key, Version: string(v), Logger: log})
	if err != nil {
		r.Close()
		return nil, err
	}
	log.Info("resolver listening", "dns", r.UDPAddrs(), "forwarders", s.forwarders, "debug", cfg.DNS.Debug)
	return &Resolver{DNS: r, API: a}, nil
}

// RunResolver runs `svc-pf resolver`: DNS, the PowerDNS-compatible statistics API and /metrics on
// http.address, the read models (sessions and settings over NATS when
// nats.url or NATS_URL is set).
func RunResolver(ctx context.Context, cfg ResolverConfig, v Version, log *slog.Logger) error {
	if _, err := cfg.parse(); err != nil {
		return err
	}
	nc, err := connectNode(cfg.NATS, "svc-pf resolver", log)
	if err != nil {
		return err
	}
	if nc != nil {
		defer nc.Close()
	}
	reg := newRegistry()
	n, err := node.New(node.Config{Feeds: cfg.Feeds, RPZ: cfg.RPZ, NATS: nc, Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	act, err := startNodeActivity(cfg.Activity, nodeName(cfg.Node, "resolver"), v, nc, reg, log.With("service", "resolver"))
	if err != nil {
		return err
	}
	res, err := StartResolver(cfg, n, v, reg, log, act.Observer)
	if err != nil {
		return err
	}
	listener, err := StartNode(NodeConfig{HTTP: cfg.HTTP}, n, reg, v, log.With("service", "resolver"), res.API)
	if err != nil {
		res.DNS.Close()
		return err
	}
	ann, err := newAnnouncer(cfg.Node, "resolver", []string{"resolver"}, n, nc, v, log.With("service", "resolver"))
	if err != nil {
		res.DNS.Close()
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	dnsDone := make(chan error, 1)
	go func() { dnsDone <- res.DNS.Run(ctx) }()
	announced := runAnnouncer(ctx, ann)
	actDone := make(chan error, 1)
	go func() { actDone <- act.Run(ctx) }()
	err = listener.Run(ctx)
	cancel()
	err = errors.Join(err, <-dnsDone)
	announced()
	err = errors.Join(err, <-actDone)
	if err == nil {
		log.Info("svc-pf resolver stopped")
	}
	return err
}
