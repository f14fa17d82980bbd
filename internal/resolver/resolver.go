// Package resolver is svc-pf's filtering DNS server: it answers every
// subscriber's queries with its own subscriber's verdict, forwarding what
// is allowed to the configured forwarders and caching answers per policy
// class.
//
// Place in the data flow: UDP/TCP sockets → the one entry (serve.go) →
// dnswire (parse) → client address → policy.Engine (subscriber index →
// settings → compiled policy) → cache.Packet keyed by (question, policy
// cache key) → on a miss the pipeline (pipeline.go: the order of a
// query's steps and why) → upstream (forward mode) or recursor (recursive
// mode; mode.go) → cache.Record → the verdict applied
// → the client, and the Observer. It counts into resolver/stats, which
// resolver/api (the PowerDNS-compatible statistics API) and /metrics read. miekg/dns types stay inside
// this package and its subpackages.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
	"github.com/svc-pf/svc-pf/internal/resolver/stats"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// Config configures a Resolver.
type Config struct {
	// Listen are the addresses DNS is served on, UDP and TCP each.
	Listen []netip.AddrPort
	// UDPSockets is how many SO_REUSEPORT UDP sockets each address gets
	// (default DefaultUDPSockets): the kernel spreads clients over them,
	// one reader each, so no socket is a queue every core waits on.
	UDPSockets int
	// UDPBatch is how many datagrams a socket's reader takes with one
	// recvmmsg and answers with one sendmmsg (default 32, at most
	// MaxUDPBatch; 1: a system call per packet). Each slot holds a 4 KiB
	// query buffer and a reply buffer.
	UDPBatch int
	// Mode is how a record-cache miss is answered: ModeForward (the zero
	// value) asks Forwarders, ModeRecursive resolves from the root with
	// the recursor configured by Recursor.
	Mode Mode
	// Recursor configures the recursor in ModeRecursive (its Metrics and
	// Registerer are set from this Config); ignored in ModeForward.
	Recursor recursor.Config
	// Forwarders answer what the policy allows (ModeForward; required
	// there).
	Forwarders []netip.AddrPort
	// ForwarderStrategy is the order they are asked in (forwarder_strategy):
	// upstream.StrategyFastest (the zero value) or StrategyOrdered.
	ForwarderStrategy upstream.Strategy
	// ForwardZones send the names at and under chosen zones to chosen
	// servers instead of Forwarders, in ModeForward (forwardzones.go: the
	// longest zone wins; Recurse: recursive resolvers asked with RD, else
	// the zone's authorities, asked without). In ModeRecursive forward
	// zones are Recursor.ForwardZones, and this must be empty.
	ForwardZones []recursor.ForwardZone
	// AllowFrom are the client networks served; others are refused and
	// counted (unauthorized-udp / unauthorized-tcp). Default: loopback and
	// the private ranges.
	AllowFrom []netip.Prefix
	// Debug answers a CHAOS-class TXT query for a name with the decision's
	// trace for the asking client (dns.debug).
	Debug bool
	// ClientMaxInFlight bounds the queries one client (its source
	// address) has on the slow path at once (default
	// DefaultClientMaxInFlight, at most MaxClientMaxInFlight): a UDP
	// packet-cache miss from the reader to its reply, a TCP query once
	// read. One more is refused and counted (over-capacity-drops): over
	// UDP dropped, over TCP answered SERVFAIL.
	ClientMaxInFlight int
	// TCPMaxConnections bounds open TCP connections (default 1024); one
	// more is closed at once and counted (tcp-client-overflow).
	TCPMaxConnections int
	// TCPMaxQueriesPerConnection bounds the queries of one TCP connection
	// answered at once (default DefaultTCPMaxQueriesPerConnection); at
	// the bound the connection is not read until one is answered.
	TCPMaxQueriesPerConnection int
	// TCPIdleTimeout closes a TCP connection on which nothing is read
	// for this long while none of its queries is being answered, or a
	// reply cannot be written within it (default 10s).
	TCPIdleTimeout time.Duration
	// Encrypted configures DoT and DoH (encrypted.go); off by default.
	Encrypted EncryptedConfig
	// BlockTTL is the TTL of synthesised block answers and their SOA
	// (default 60s).
	BlockTTL time.Duration
	// Cache sizes the packet and record caches.
	Cache cache.Config
	// Upstream tunes the forwarder client; Forwarders and Metrics are set
	// from this Config.
	Upstream upstream.Config
	// Engine decides; required.
	Engine *policy.Engine
	// Generation changes whenever what a cached answer was decided from
	// changes outside the policy's cache key (a new feed version, a new RPZ
	// zone); the packet cache is then emptied. nil: never.
	Generation func() uint64
	Version    string
	Logger     *slog.Logger
	// Observer is told of every answered query (observer.go: when, what
	// it carries, what it must not do); nil: none, at no cost.
	Observer Observer
	// Registerer gets the PowerDNS-named statistics (pdns_recursor_*).
	Registerer prometheus.Registerer
	Clock      func() time.Time

	// Waiting names the first part of the policy data not loaded yet
	// ("" once all has loaded, and from then on: node.Node.Waiting);
	// Unready says what is answered meanwhile (unready.go). nil: ready
	// from the start.
	Waiting func() string
	Unready UnreadyMode
}

// UDPBatch's default and bound. 32 datagrams cover what a busy socket
// holds between two reads (dnsperf keeps 100 queries in flight per client
// socket; several clients share a socket); a larger batch saves little and
// delays the first reply of a batch behind the others' work.
const (
	DefaultUDPBatch = 32
	MaxUDPBatch     = 1024
)

// ClientMaxInFlight's default and bound. One flooding client then holds
// at most half of the forwarder client's 2048 in-flight queries
// (upstream.DefaultMaxInFlight) and an eighth of the slow path's 8192
// slots, the rest staying free for everyone else; while one busy source
// is not cut: a home router keeps at most 150 queries outstanding
// (dnsmasq's dns-forward-max), and dnsperf from one address with 1 600
// outstanding (bench/resolver.sh's miss phase) kept up to ~430 on the slow
// path on a 2-core machine, where a bound of 256 dropped some. Above the
// slow path's own bound it would mean nothing.
const (
	DefaultClientMaxInFlight = 1024
	MaxClientMaxInFlight     = maxSlowInFlight
)

// DefaultTCPMaxQueriesPerConnection is PowerDNS's
// max-concurrent-requests-per-tcp-connection default.
const DefaultTCPMaxQueriesPerConnection = 10

// DefaultUDPSockets is dns.udp_sockets' default for procs (GOMAXPROCS):
// half of them, at least one. A packet-cache hit costs the reader little
// of its own; most of it is the system calls, and a reader pays for a
// wake-up (the poller, the scheduler, a recvmmsg that finds nothing) per
// batch, not per packet. More readers than the load keeps busy split the
// same packets into smaller batches and more wake-ups: on 2 cores, one
// socket instead of two answered dnsperf's 16 clients at 0.53–0.83× the
// CPU per hit, with misses unchanged (docs/performance.md). The other half of the cores is left to the slow
// path, the kernel's receive work and the garbage collector.
func DefaultUDPSockets(procs int) int { return max(1, procs/2) }

// DefaultAllowFrom is allow_from's default: loopback and private ranges.
func DefaultAllowFrom() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{"127.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "172.16.0.0/12",
		"192.168.0.0/16", "::1/128", "fc00::/7", "fe80::/10"} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// Resolver is the DNS server.
type Resolver struct {
	cfg      Config
	engine   *policy.Engine
	obs      Observer // Config.Observer; nil: none
	stats    *stats.Counters
	up       *upstream.Client   // the forwarder client; nil in ModeRecursive
	router   *forwardRouter     // up and the forward zones' clients; nil in ModeRecursive
	zonesMu  sync.Mutex         // serialises SetUpstream
	rec      *recursor.Recursor // the recursor; nil in ModeForward
	miss     exchanger          // up or rec: what a record-cache miss asks
	packets  *cache.Packet
	records  *cache.Record
	log      *slog.Logger
	now      func() time.Time
	udp      []*udpSocket
	tcp      []*tcpServer
	dot      []*tcpServer // DoT: the TCP adapter under TLS (encrypted.go)
	acme     *acmeStore   // dns.tls.acme (acme.go); nil: certificate files
	doh      []*dohServer
	doq      []*doqServer
	doh3     []*doh3Server // dns.doh3 (doh3.go)
	ddr      []dns.RR      // the SVCB answer for _dns.resolver.arpa (ddr.go); nil: none
	inflight *inFlight     // the slow path's slots, per client and in all
	// refresher runs prefetches and refreshes after stale answers, and
	// counts them (stale.go).
	refresher *refresher
	shardSeq  atomic.Uint32
	// the DoT and DoH handshakes that did not complete (tlshandshake.go)
	dotHandshakes, dohHandshakes handshakeCounts
	// decisions recycles the slow path's *decideScratch (pipeline.go).
	decisions sync.Pool
	// replyBufs recycles the UDP slow path's reply buffers and senders
	// (*replyScratch, udp.go).
	replyBufs sync.Pool
	gen       uint64 // the last Generation seen; the sweeper's
	wg        sync.WaitGroup
	// allowFrom is allow_from in force (reload.go: SetAllowFrom).
	allowFrom atomic.Pointer[[]netip.Prefix]

	// ready is set once Config.Waiting said nothing is missing (unready.go).
	ready   atomic.Bool
	unready unreadyGate
}

// New validates cfg, builds the caches, statistics and the forwarder
// client, and binds every listener, so that a busy port fails here.
func New(cfg Config) (*Resolver, error) {
	if cfg.Engine == nil {
		return nil, errors.New("resolver: Engine is required")
	}
	if len(cfg.Listen) == 0 {
		return nil, errors.New("dns.listen: at least one address is required")
	}
	switch cfg.Mode {
	case ModeForward:
		if len(cfg.Forwarders) == 0 {
			return nil, errors.New("forwarders: at least one forwarder (ip:port) is required")
		}
	case ModeRecursive:
		if len(cfg.ForwardZones) > 0 {
			return nil, errors.New("resolver: in recursive mode forward zones are Recursor.ForwardZones")
		}
	default:
		return nil, fmt.Errorf("resolver: mode %d is not forward or recursive", cfg.Mode)
	}
	if cfg.UDPSockets <= 0 {
		cfg.UDPSockets = DefaultUDPSockets(runtime.GOMAXPROCS(0))
	}
	if cfg.UDPBatch <= 0 {
		cfg.UDPBatch = DefaultUDPBatch
	}
	if cfg.UDPBatch > MaxUDPBatch {
		return nil, fmt.Errorf("dns.udp_batch: %d is more than %d", cfg.UDPBatch, MaxUDPBatch)
	}
	if cfg.AllowFrom == nil {
		cfg.AllowFrom = DefaultAllowFrom()
	}
	if cfg.ClientMaxInFlight <= 0 {
		cfg.ClientMaxInFlight = DefaultClientMaxInFlight
	}
	if cfg.ClientMaxInFlight > MaxClientMaxInFlight {
		return nil, fmt.Errorf("dns.max_in_flight_per_client: %d is more than %d", cfg.ClientMaxInFlight, MaxClientMaxInFlight)
	}
	if cfg.TCPMaxConnections <= 0 {
		cfg.TCPMaxConnections = 1024
	}
	if cfg.TCPMaxQueriesPerConnection <= 0 {
		cfg.TCPMaxQueriesPerConnection = DefaultTCPMaxQueriesPerConnection
	}
	if cfg.TCPIdleTimeout <= 0 {
		cfg.TCPIdleTimeout = 10 * time.Second
	}
	if err := cfg.Encrypted.validate(); err != nil {
		return nil, err
	}
	if cfg.BlockTTL <= 0 {
		cfg.BlockTTL = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Cache == (cache.Config{}) {
		cfg.Cache = cache.DefaultConfig()
	}
	if err := cfg.Cache.Validate(); err != nil {
		return nil, err
	}
	r := &Resolver{cfg: cfg, engine: cfg.Engine, obs: cfg.Observer, log: cfg.Logger, now: cfg.Clock,
		inflight: newInFlight(maxSlowInFlight, cfg.ClientMaxInFlight), refresher: newRefresher()}
	r.allowFrom.Store(&cfg.AllowFrom)
	r.decisions.New = newDecideScratch
	if err := r.initUnready(cfg); err != nil {
		return nil, err
	}
	r.replyBufs.New = newReplyScratch
	var err error
	pcfg := cfg.Cache.Packet
	pcfg.Prefetch = cfg.Cache.Record.Prefetch // a packet-cache hit counts towards its record's prefetch
	if r.packets, err = cache.NewPacket(pcfg); err != nil {
		return nil, err
	}
	if r.records, err = cache.NewRecord(cfg.Cache.Record); err != nil {
		return nil, err
	}
	r.stats, err = stats.New(stats.Config{
		Registerer: cfg.Registerer, Version: cfg.Version,
		CacheEntries:       func() uint64 { s := r.records.Stats(); return uint64(max(s.Entries, 0)) },
		NegCacheEntries:    func() uint64 { s := r.records.Stats(); return uint64(max(s.NegEntries, 0)) },
		PacketCacheEntries: func() uint64 { s := r.packets.Stats(); return uint64(max(s.Entries, 0)) },
		Recursive:          r.recursiveStat,
	})
	if err != nil {
		return nil, err
	}
	if cfg.Mode == ModeRecursive {
		rcfg := cfg.Recursor
		rcfg.Metrics = r.stats.Shard(0)
		rcfg.Registerer = cfg.Registerer
		if r.rec, err = recursor.New(rcfg); err != nil {
			return nil, err
		}
		r.miss = r.rec
	} else {
		ucfg := cfg.Upstream
		ucfg.Forwarders = cfg.Forwarders
		ucfg.Strategy = cfg.ForwarderStrategy
		ucfg.Metrics = r.stats.Shard(0)
		if r.up, err = upstream.New(ucfg); err != nil {
			return nil, fmt.Errorf("forwarders: %w", err)
		}
		if err := r.initZones(cfg.ForwardZones); err != nil {
			r.Close()
			return nil, err
		}
		r.miss = r.router
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newResilienceCollector(r)); err != nil {
			r.Close()
			return nil, fmt.Errorf("resolver: registering the upstream metrics: %w", err)
		}
	}
	if err := r.listen(); err != nil {
		r.Close()
		return nil, err
	}
	if err := r.listenEncrypted(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Stats are the resolver's statistics (PowerDNS Recursor's names).
func (r *Resolver) Stats() *stats.Counters { return r.stats }

// UDPAddrs and TCPAddrs are the bound addresses, in dns.listen order (a
// port 0 in the config is the kernel's choice).
func (r *Resolver) UDPAddrs() []netip.AddrPort {
	var out []netip.AddrPort
	for i := 0; i < len(r.udp); i += r.cfg.UDPSockets {
		out = append(out, r.udp[i].addr)
	}
	return out
}

// TCPAddrs is UDPAddrs' TCP twin.
func (r *Resolver) TCPAddrs() []netip.AddrPort { return addrsOf(r.tcp) }

// DoTAddrs, DoHAddrs and DoQAddrs are the bound encrypted addresses, in
// dns.dot, dns.doh and dns.doq order (DoQ's are UDP addresses).
func (r *Resolver) DoTAddrs() []netip.AddrPort { return addrsOf(r.dot) }

// DoHAddrs: see DoTAddrs.
func (r *Resolver) DoHAddrs() []netip.AddrPort { return addrsOf(r.doh) }

// DoQAddrs: see DoTAddrs.
func (r *Resolver) DoQAddrs() []netip.AddrPort { return addrsOf(r.doq) }

// bound is a listener that knows its address.
type bound interface{ boundAddr() netip.AddrPort }

func (t *tcpServer) boundAddr() netip.AddrPort { return t.addr }
func (d *dohServer) boundAddr() netip.AddrPort { return d.addr }
func (d *doqServer) boundAddr() netip.AddrPort { return d.addr }

// addrsOf are the addresses of listeners, in their order.
func addrsOf[L bound](ls []L) []netip.AddrPort {
	var out []netip.AddrPort
	for _, l := range ls {
		out = append(out, l.boundAddr())
	}
	return out
}

// Run serves until ctx ends, then closes the listeners and waits for the
// queries in flight.
func (r *Resolver) Run(ctx context.Context) error {
	for _, s := range r.udp {
		r.wg.Go(func() { s.serve(r) })
	}
	for _, t := range r.tcp {
		r.wg.Go(t.serve)
	}
	for _, t := range r.dot {
		r.wg.Go(t.serve)
	}
	for _, d := range r.doh {
		r.wg.Go(d.serve)
	}
	for _, d := range r.doq {
		r.wg.Go(d.serve)
	}
	for _, d := range r.doh3 {
		r.wg.Go(d.serve)
	}
	r.wg.Go(func() { r.housekeeping(ctx) })
	<-ctx.Done()
	r.Close()
	r.wg.Wait()
	return nil
}

// Close closes the listeners and the forwarder client, within about
// tcpShutdownGrace: TCP queries already read get that long to be
// answered, then their connections are closed, whether or not their
// clients read.
func (r *Resolver) Close() {
	for _, s := range r.udp {
		s.close()
	}
	streams := append(append([]*tcpServer(nil), r.tcp...), r.dot...)
	for _, t := range streams {
		t.stop()
	}
	deadline := time.Now().Add(tcpShutdownGrace)
	var wg sync.WaitGroup
	for _, d := range r.doh {
		wg.Go(func() { d.stop(deadline) })
	}
	for _, d := range r.doq {
		wg.Go(func() { d.stop(deadline) })
	}
	for _, d := range r.doh3 {
		wg.Go(func() { d.stop(deadline) })
	}
	for _, t := range streams {
		t.drain(deadline)
	}
	wg.Wait()
	if r.acme != nil {
		r.acme.close()
	}
	if r.up != nil {
		_ = r.up.Close()
	}
	r.closeZones()
	if r.rec != nil {
		_ = r.rec.Close()
	}
}

// housekeeping sweeps expired cache entries and empties the packet cache
// when the feeds or RPZ zones change.
func (r *Resolver) housekeeping(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	sweep := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if r.cfg.Generation != nil {
			if g := r.cfg.Generation(); g != r.gen {
				r.gen = g
				n := r.packets.Flush([]byte{0}, true)
				r.log.Debug("packet cache emptied: feeds or RPZ changed", "entries", n)
			}
		}
		if sweep++; sweep%60 == 0 {
			now := r.now()
			r.packets.Sweep(now)
			r.records.Sweep(now)
		}
	}
}
