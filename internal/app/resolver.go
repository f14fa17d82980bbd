package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/node"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/api"
	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
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

	// DoT and DoH are ip:port addresses served over DNS over TLS and DNS
	// over HTTPS (docs/resolver.md, Encrypted DNS and client ids); empty:
	// off.
	DoT []string `yaml:"dot"`
	DoH []string `yaml:"doh"`
	DoQ []string `yaml:"doq"`
	// DoH3 serves DoH over HTTP/3 (QUIC) on these UDP addresses.
	DoH3 []string     `yaml:"doh3"`
	TLS  DNSTLSConfig `yaml:"tls"`
}

// DNSTLSConfig is the `dns.tls` section: the encrypted listeners'
// certificate, client ids and bounds.
type DNSTLSConfig struct {
	CertFile       string `yaml:"cert_file"`
	KeyFile        string `yaml:"key_file"`
	ClientIDSuffix string `yaml:"client_id_suffix"`
	// Name is the resolver's name in its DDR answer; "": the
	// certificate's first DNS name that is not a wildcard.
	Name string `yaml:"name"`
	// Bounds; 0: resolver.DefaultEncrypted*.
	MaxConnectionsPerClient int           `yaml:"max_connections_per_client"`
	MaxQueriesPerConnection int           `yaml:"max_queries_per_connection"`
	IdleTimeout             time.Duration `yaml:"idle_timeout"`
	HandshakeTimeout        time.Duration `yaml:"handshake_timeout"`
	// ACME obtains the certificate from an ACME CA instead of
	// cert_file/key_file (docs/resolver.md, Certificates from ACME).
	ACME *DNSACMEConfig `yaml:"acme"`
}

// DNSACMEConfig is `dns.tls.acme`: see resolver.ACMEConfig.
type DNSACMEConfig struct {
	Domains   []string `yaml:"domains"`
	Email     string   `yaml:"email"`
	Directory string   `yaml:"directory"`
	// CacheDir: "" is <data_dir>/acme under `svc-pf all`, ./acme (the
	// working directory) under `svc-pf resolver`.
	CacheDir    string        `yaml:"cache_dir"`
	CAFile      string        `yaml:"ca_file"`
	RenewBefore time.Duration `yaml:"renew_before"`
}

// defaultACMECacheDir is cache_dir when the file leaves it empty: under
// dataDir ("": the working directory).
func defaultACMECacheDir(dataDir string) string { return filepath.Join(dataDir, "acme") }

// resolverACME is a's resolver form, cache_dir defaulted under dataDir;
// nil: none.
func resolverACME(a *DNSACMEConfig, dataDir string) *resolver.ACMEConfig {
	if a == nil {
		return nil
	}
	r := &resolver.ACMEConfig{Domains: append([]string(nil), a.Domains...), Email: a.Email, Directory: a.Directory,
		CacheDir: a.CacheDir, CAFile: a.CAFile, RenewBefore: a.RenewBefore}
	if r.CacheDir == "" {
		r.CacheDir = defaultACMECacheDir(dataDir)
	}
	return r
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
	// ForwarderStrategy is the order the forwarders are asked in:
	// "fastest" (the default: smallest smoothed RTT first) or "ordered"
	// (as listed, the next only when one fails or times out).
	ForwarderStrategy string `yaml:"forwarder_strategy"`
	// Mode is how a cache miss is answered: "forward" (the default: ask
	// the forwarders) or "recursive" (resolve from the root hints; the
	// forwarders are then not used). A change needs a restart.
	Mode string `yaml:"mode"`
	// RootHintsFile is the root hints in zone-file format (as named.root)
	// for recursive mode; empty: the IANA hints built in.
	RootHintsFile string `yaml:"root_hints_file"`
	// DNSSEC is recursive mode's DNSSEC mode: off, process (the default,
	// as PowerDNS Recursor's) or validate.
	DNSSEC string `yaml:"dnssec"`
	// TrustAnchorsFile holds DS or DNSKEY records in zone-file format that
	// replace the built-in root trust anchors.
	TrustAnchorsFile string `yaml:"trust_anchors_file"`
	// NTA are negative trust anchors: zones at and below which nothing is
	// validated.
	NTA []string `yaml:"nta"`
	// DontQuery lists the networks whose addresses are never asked as
	// authoritative servers in recursive mode (PowerDNS's dont-query);
	// unset: private, shared, link-local, documentation and reserved
	// ranges; [] bars nothing.
	DontQuery *[]string `yaml:"dont_query"`
	// ForwardZones send the names at and below chosen zones to chosen
	// servers: instead of the forwarders in forward mode, instead of
	// resolving them from the root in recursive mode. The longest zone
	// that a name is at or under wins.
	ForwardZones []ForwardZoneConfig `yaml:"forward_zones"`
	// queryLoopback lets the recursor ask nameservers on loopback
	// addresses: set only by tests (the lab of nsd servers on 127.53.N.x),
	// never from YAML, so that production refuses a delegation to itself.
	queryLoopback bool
	// throttleBase, when set, replaces the recursor's first throttling
	// period: the lab tests hold a failed server throttled for longer
	// than a loaded machine takes between two of their questions.
	throttleBase time.Duration
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
	// Unready is what DNS answers until the node's policy data (the
	// sessions and settings buckets, every feed) has loaded once: open
	// (default) answers from what has loaded, unfiltered for whoever's
	// data is missing; closed answers SERVFAIL with EDE 14 "Not Ready"
	// (docs/resolver.md, "Before the policy data has loaded").
	Unready string `yaml:"unready"`
}

// ForwardZoneConfig is one entry of forward_zones.
type ForwardZoneConfig struct {
	// Zone is the zone's name; names at and below it are forwarded.
	Zone string `yaml:"zone"`
	// Forwarders are the servers asked, ip or ip:port (port 53).
	Forwarders []string `yaml:"forwarders"`
	// Recurse: the forwarders are recursive resolvers (asked with RD);
	// otherwise they are the zone's authoritative servers (asked without
	// RD; in forward mode only an answer with AA is taken).
	Recurse bool `yaml:"recurse"`
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
	dot, doh, doq      []netip.AddrPort
	doh3               []netip.AddrPort
	allowFrom          []netip.Prefix
	strategy           upstream.Strategy
	mode               resolver.Mode
	recursor           recursor.Config
	// forwardZones are forward_zones in forward mode (in recursive mode
	// they are recursor.ForwardZones).
	forwardZones []recursor.ForwardZone
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
	s.dot = addrs("dns.dot", c.DNS.DoT)
	s.doh = addrs("dns.doh", c.DNS.DoH)
	s.doq = addrs("dns.doq", c.DNS.DoQ)
	s.doh3 = addrs("dns.doh3", c.DNS.DoH3)
	if a := c.DNS.TLS.ACME; a != nil {
		if c.DNS.TLS.CertFile != "" || c.DNS.TLS.KeyFile != "" {
			errs = append(errs, errors.New("dns.tls.acme and dns.tls.cert_file / key_file exclude each other: keep one way of getting the certificate"))
		}
		errs = append(errs, resolverACME(a, "").Validate())
	} else if len(c.DNS.DoT)+len(c.DNS.DoH)+len(c.DNS.DoQ)+len(c.DNS.DoH3) > 0 && (c.DNS.TLS.CertFile == "" || c.DNS.TLS.KeyFile == "") {
		errs = append(errs, errors.New("dns.tls.cert_file and dns.tls.key_file (or dns.tls.acme): required when dns.dot, dns.doh, dns.doq or dns.doh3 lists an address"))
	}
	if t := c.DNS.TLS; t.MaxConnectionsPerClient < 0 || t.MaxQueriesPerConnection < 0 || t.IdleTimeout < 0 || t.HandshakeTimeout < 0 {
		errs = append(errs, errors.New("dns.tls.max_connections_per_client, max_queries_per_connection, idle_timeout and handshake_timeout must not be negative"))
	}
	var err error
	if s.mode, err = resolver.ParseMode(c.Mode); err != nil {
		errs = append(errs, fmt.Errorf("mode: %w", err))
	}
	if s.mode == resolver.ModeRecursive {
		errs = append(errs, c.parseRecursor(&s))
	} else {
		if c.RootHintsFile != "" || c.DNSSEC != "" || c.TrustAnchorsFile != "" || len(c.NTA) > 0 {
			errs = append(errs, errors.New("root_hints_file, dnssec, trust_anchors_file and nta: only with mode: recursive (a forwarder's answers are not validated)"))
		}
		if c.DontQuery != nil {
			errs = append(errs, errors.New("dont_query: only with mode: recursive (in forward mode only the forwarders are asked)"))
		}
		fz, err := parseForwardZones(c.ForwardZones)
		errs = append(errs, err)
		s.forwardZones = fz
	}
	fw := c.Forwarders
	if len(fw) == 0 && s.mode == resolver.ModeRecursive {
		// not used in recursive mode
	} else if len(fw) == 0 {
		fw = resolvConfServers("/etc/resolv.conf")
		if len(fw) == 0 {
			errs = append(errs, errors.New("forwarders: none set and none found in /etc/resolv.conf; set forwarders: [ip:port, …]"))
		}
	}
	s.forwarders = addrs("forwarders", fw)
	if s.strategy, err = upstream.ParseStrategy(c.ForwarderStrategy); err != nil {
		errs = append(errs, fmt.Errorf("forwarder_strategy: %w", err))
	}
	for i, p := range c.AllowFrom {
		pfx, ok := parsePrefix(p)
		if !ok {
			errs = append(errs, fmt.Errorf("allow_from[%d] %q: want a CIDR", i, p))
			continue
		}
		s.allowFrom = append(s.allowFrom, pfx)
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
	if _, err := resolver.ParseUnreadyMode(c.Unready); err != nil {
		errs = append(errs, err)
	}
	if c.Activity != (activity.Config{}) { // unset under `svc-pf all`, which has its own
		errs = append(errs, prefixed("activity", c.Activity.Validate()))
	}
	return s, errors.Join(errs...)
}

// parseRecursor reads recursive mode's keys into s.recursor.
func (c *ResolverConfig) parseRecursor(s *resolverSettings) error {
	var errs []error
	rc := recursor.Config{NTA: c.NTA, QueryLoopback: c.queryLoopback, ThrottleBase: c.throttleBase}
	dnssecMode := c.DNSSEC
	if dnssecMode == "" {
		dnssecMode = "process"
	}
	m, err := recursor.ParseMode(dnssecMode)
	if err != nil {
		errs = append(errs, fmt.Errorf("dnssec: %q is not off, process or validate", c.DNSSEC))
	}
	rc.DNSSEC = m
	if c.RootHintsFile != "" {
		b, err := os.ReadFile(c.RootHintsFile)
		if err == nil {
			_, err = recursor.ParseHints(string(b))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("root_hints_file: %w", err))
		}
		rc.Hints = string(b)
	}
	if c.TrustAnchorsFile != "" {
		b, err := os.ReadFile(c.TrustAnchorsFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("trust_anchors_file: %w", err))
		}
		rc.TrustAnchors = string(b)
	}
	fz, err := parseForwardZones(c.ForwardZones)
	if err != nil {
		errs = append(errs, err)
	}
	rc.ForwardZones = fz
	if c.DontQuery != nil {
		rc.DontQuery = []netip.Prefix{}
		for i, v := range *c.DontQuery {
			p, ok := parsePrefix(v)
			if !ok {
				errs = append(errs, fmt.Errorf("dont_query[%d] %q: want a network (10.0.0.0/8) or an address", i, v))
				continue
			}
			rc.DontQuery = append(rc.DontQuery, p)
		}
	}
	if len(errs) == 0 {
		// The anchors' and hints' own checks (New opens no socket).
		if r, err := recursor.New(rc); err != nil {
			errs = append(errs, fmt.Errorf("trust_anchors_file or nta: %w", err))
		} else {
			_ = r.Close()
		}
	}
	s.recursor = rc
	return errors.Join(errs...)
}

// parsePrefix reads a network (CIDR) or a single address, which stands
// for itself alone (/32, /128), as a masked prefix.
func parsePrefix(v string) (netip.Prefix, bool) {
	p, err := netip.ParsePrefix(v)
	if err != nil {
		a, aerr := netip.ParseAddr(v)
		if aerr != nil {
			return netip.Prefix{}, false
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	return p.Masked(), true
}

// parseForwardZones checks forward_zones, in either mode: a domain name per
// zone, listed once; at least one forwarder each and at most
// upstream.MaxForwarders, ip or ip:port, each listed once.
func parseForwardZones(in []ForwardZoneConfig) ([]recursor.ForwardZone, error) {
	var errs []error
	var out []recursor.ForwardZone
	seen := map[string]int{}
	for i, f := range in {
		key := fmt.Sprintf("forward_zones[%d]", i)
		zone := strings.ToLower(dns.Fqdn(f.Zone))
		if _, ok := dns.IsDomainName(zone); !ok || f.Zone == "" {
			errs = append(errs, fmt.Errorf("%s.zone: %q is not a domain name", key, f.Zone))
			continue
		}
		if j, dup := seen[zone]; dup {
			errs = append(errs, fmt.Errorf("%s.zone: %s is also forward_zones[%d]'s", key, zone, j))
			continue
		}
		seen[zone] = i
		if len(f.Forwarders) == 0 {
			errs = append(errs, fmt.Errorf("%s.forwarders: at least one ip or ip:port is required for %s", key, zone))
			continue
		}
		if len(f.Forwarders) > upstream.MaxForwarders {
			errs = append(errs, fmt.Errorf("%s.forwarders: %d for %s, at most %d", key, len(f.Forwarders), zone, upstream.MaxForwarders))
			continue
		}
		z := recursor.ForwardZone{Zone: zone, Recurse: f.Recurse}
		for j, a := range f.Forwarders {
			ap, err := netip.ParseAddrPort(a)
			if err != nil {
				ip, ierr := netip.ParseAddr(a)
				if ierr != nil {
					errs = append(errs, fmt.Errorf("%s.forwarders[%d] %q: want ip or ip:port", key, j, a))
					continue
				}
				ap = netip.AddrPortFrom(ip, 53)
			}
			if ap.Addr().IsUnspecified() || ap.Addr().IsMulticast() || ap.Port() == 0 {
				errs = append(errs, fmt.Errorf("%s.forwarders[%d] %q: want a unicast address and a port other than 0", key, j, a))
				continue
			}
			ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
			if ap.Addr().Zone() != "" {
				errs = append(errs, fmt.Errorf("%s.forwarders[%d] %q: want an address without a zone", key, j, a))
				continue
			}
			if slices.Contains(z.Servers, ap) {
				errs = append(errs, fmt.Errorf("%s.forwarders[%d] %q: %s is listed twice for %s", key, j, a, ap, zone))
				continue
			}
			z.Servers = append(z.Servers, ap)
		}
		out = append(out, z)
	}
	return out, errors.Join(errs...)
}

// zoneList names forward zones and their servers, for logs: zone=ip:port,….
func zoneList(zs []recursor.ForwardZone) []string {
	out := make([]string, len(zs))
	for i, z := range zs {
		out[i] = z.Zone + "=" + fmt.Sprint(z.Servers)
		if !z.Recurse {
			out[i] += " (authoritative)"
		}
	}
	return out
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
	return startResolver(cfg, "", n, v, reg, log, obs...)
}

// startResolver is StartResolver with the data directory dns.tls.acme's
// cache defaults under ("": the working directory).
func startResolver(cfg ResolverConfig, dataDir string, n *node.Node, v Version, reg prometheus.Registerer, log *slog.Logger,
	obs ...resolver.Observer) (*Resolver, error) {
	s, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	log = log.With("service", "resolver")
	r, err := resolver.New(resolver.Config{
		Listen: s.listen, UDPSockets: cfg.DNS.UDPSockets, UDPBatch: cfg.DNS.UDPBatch, Forwarders: s.forwarders, AllowFrom: s.allowFrom,
		ForwarderStrategy: s.strategy, ForwardZones: s.forwardZones, Mode: s.mode, Recursor: s.recursor,
		Debug: cfg.DNS.Debug, TCPMaxConnections: cfg.DNS.TCP.MaxConnections, TCPIdleTimeout: cfg.DNS.TCP.IdleTimeout,
		BlockTTL: cfg.DNS.Block.TTL, Cache: cfg.DNS.Cache, Engine: n.Engine(), Generation: n.Generation,
		Version: string(v), Logger: log, Registerer: reg,
		ClientMaxInFlight: cfg.DNS.MaxInFlightPerClient, TCPMaxQueriesPerConnection: cfg.DNS.TCP.MaxQueriesPerConnection,
		Observer: observerOf(obs),
		Encrypted: resolver.EncryptedConfig{DoT: s.dot, DoH: s.doh, DoQ: s.doq, DoH3: s.doh3, CertFile: cfg.DNS.TLS.CertFile, KeyFile: cfg.DNS.TLS.KeyFile,
			ClientIDSuffix: cfg.DNS.TLS.ClientIDSuffix, Name: cfg.DNS.TLS.Name, MaxConnectionsPerClient: cfg.DNS.TLS.MaxConnectionsPerClient,
			MaxQueriesPerConnection: cfg.DNS.TLS.MaxQueriesPerConnection, IdleTimeout: cfg.DNS.TLS.IdleTimeout,
			HandshakeTimeout: cfg.DNS.TLS.HandshakeTimeout,
			ACME:             resolverACME(cfg.DNS.TLS.ACME, dataDir)},
		Waiting: n.Waiting, Unready: resolver.UnreadyMode(cfg.Unready),
	})
	if err != nil {
		return nil, err
	}
	a, err := api.New(api.Config{Stats: r.Stats(), APIKey: cfg.API.Key, Version: string(v), Logger: log})
	if err != nil {
		r.Close()
		return nil, err
	}
	log.Info("resolver listening", "dns", r.UDPAddrs(), "dot", r.DoTAddrs(), "doh", r.DoHAddrs(), "doq", r.DoQAddrs(), "doh3", r.DoH3Addrs(), "mode", s.mode.String(), "forwarders", s.forwarders, "forwarder_strategy", s.strategy.String(),
		"forward_zones", zoneList(s.forwardZones),
		"debug", cfg.DNS.Debug)
	return &Resolver{DNS: r, API: a}, nil
}

// RunResolver runs `svc-pf resolver`: DNS, the PowerDNS-compatible statistics API and /metrics on
// http.address, the read models (sessions and settings over NATS when
// nats.url or NATS_URL is set). A reload (reload, SIGHUP) applies
// log.level (the caller's step), forwarders (with forwarder_strategy and, in forward
// mode, forward_zones), allow_from, rpz and feeds.
func RunResolver(ctx context.Context, cfg ResolverConfig, v Version, log *slog.Logger, reload ...*Reloader[ResolverConfig]) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nc, aw, err := connectNode(ctx, cfg.NATS, "svc-pf resolver", log)
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
	for _, rl := range reload {
		registerResolverReload(rl, res, n)
	}
	listener, err := StartNode(NodeConfig{HTTP: cfg.HTTP}, n, reg, v, log.With("service", "resolver"), res.API)
	if err != nil {
		res.DNS.Close()
		return err
	}
	listener.natsWait, listener.resolver = aw, res.DNS
	ann, err := newAnnouncer(cfg.Node, "resolver", []string{"resolver"}, n, listener.Ready, nc, v, log.With("service", "resolver"))
	if err != nil {
		res.DNS.Close()
		return err
	}
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
