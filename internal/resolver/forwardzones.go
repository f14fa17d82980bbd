package resolver

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// Forward zones in forward mode. A record-cache miss whose name is at or
// under a configured zone (the longest one wins) goes to that zone's own
// upstream.Client instead of the default forwarders' one; everything after
// the answer (the record cache keyed by the question, the policy, serve-
// stale, prefetch) is the same as for any answer. Each zone's client is a
// full upstream.Client, so the zone's servers get the same order,
// timeouts, health, probes and TCP retry as the default forwarders.
//
// A zone with Recurse names recursive resolvers, asked with RD as the
// default forwarders are. Without it the servers are taken as the zone's
// authorities: asked without RD, and only an answer with AA is taken (a
// referral to a zone below, which forward mode does not follow, is a
// SERVFAIL rather than an empty answer cached as if the name had no data).

// zoneClient is one forward zone's client. Never modified once in a
// zoneTable, except its client's forwarder set (SetUpstream).
type zoneClient struct {
	zone    string // lower case, FQDN
	recurse bool
	servers []netip.AddrPort
	c       *upstream.Client
}

// zoneTable is the forward zones in force: SetUpstream swaps it whole.
type zoneTable struct {
	byName map[string]*zoneClient
	list   []*zoneClient // in configured order, for Status and metrics
}

// find returns the zone client of the longest zone at or above name, or
// nil. The name is lower-cased into a stack buffer so that a lookup does
// not allocate.
func (t *zoneTable) find(name string) *zoneClient {
	if t == nil || len(t.byName) == 0 {
		return nil
	}
	var buf [256]byte
	lower := buf[:0]
	if len(name) > len(buf) { // escapes (\DDD) make a presentation name longer
		lower = make([]byte, 0, len(name))
	}
	// ASCII only, byte for byte, so that NextLabel's offsets in name hold
	// in lower (zone names are lower-cased the same way: toLower).
	for i := range len(name) {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower = append(lower, c)
	}
	for off, end := 0, false; !end; off, end = dns.NextLabel(name, off) {
		if z, ok := t.byName[string(lower[off:])]; ok {
			return z
		}
	}
	return t.byName["."]
}

// forwardRouter is what a record-cache miss asks in forward mode: the
// forward zones' clients, else the default forwarders.
type forwardRouter struct {
	def   *upstream.Client
	zones atomic.Pointer[zoneTable]
}

// Exchange forwards q to its zone's servers or the default forwarders.
func (fr *forwardRouter) Exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	if len(q.Question) == 1 {
		if z := fr.zones.Load().find(q.Question[0].Name); z != nil {
			return z.c.Exchange(ctx, q)
		}
	}
	return fr.def.Exchange(ctx, q)
}

// checkZones normalises zones (lower case FQDN, port 53 where none) and
// checks them as an upstream.Client would take them; the error names the
// forward_zones key.
func checkZones(zones []recursor.ForwardZone, s upstream.Strategy) ([]recursor.ForwardZone, error) {
	out := make([]recursor.ForwardZone, 0, len(zones))
	seen := map[string]bool{}
	for _, z := range zones {
		// ASCII letters only, byte for byte, as DNS compares names (RFC
		// 4343): strings.ToLower would also fold other letters and
		// replace bytes that are not UTF-8.
		name := toLower(dns.Fqdn(z.Zone))
		if _, ok := dns.IsDomainName(name); !ok || z.Zone == "" {
			return nil, fmt.Errorf("forward_zones: %q is not a domain name", z.Zone)
		}
		if seen[name] {
			return nil, fmt.Errorf("forward_zones: %s listed twice", name)
		}
		seen[name] = true
		servers := make([]netip.AddrPort, len(z.Servers))
		for i, ap := range z.Servers {
			if ap.Port() == 0 {
				ap = netip.AddrPortFrom(ap.Addr(), recursor.DefaultPort)
			}
			servers[i] = ap
		}
		if err := upstream.CheckForwarders(servers, s); err != nil {
			return nil, fmt.Errorf("forward_zones: %s: %w", name, err)
		}
		out = append(out, recursor.ForwardZone{Zone: name, Servers: servers, Recurse: z.Recurse})
	}
	return out, nil
}

// newZoneClient builds zone z's client with the default forwarders'
// settings (timeouts, bounds, statistics).
func (r *Resolver) newZoneClient(z recursor.ForwardZone, s upstream.Strategy) (*zoneClient, error) {
	ucfg := r.cfg.Upstream
	ucfg.Forwarders, ucfg.Strategy = z.Servers, s
	ucfg.Metrics = r.stats.Shard(0)
	ucfg.Authoritative, ucfg.ProbeName = !z.Recurse, z.Zone
	c, err := upstream.New(ucfg)
	if err != nil {
		return nil, fmt.Errorf("forward_zones: %s: %w", z.Zone, err)
	}
	return &zoneClient{zone: z.Zone, recurse: z.Recurse, servers: z.Servers, c: c}, nil
}

// SetUpstream replaces the default forwarders, the strategy and the
// forward zones of a running resolver in forward mode (a configuration
// reload): everything is checked first, so that on an error nothing
// changes and the error names the key. A zone kept with the same recurse
// keeps its client, so its servers that stay keep their health, counters
// and idle sockets; a removed zone's client is closed (queries already
// asking it finish). The caches are emptied at and under every zone added,
// removed or changed: names there are now answered by other servers.
func (r *Resolver) SetUpstream(fw []netip.AddrPort, strategy upstream.Strategy, zones []recursor.ForwardZone) error {
	if r.up == nil {
		return errors.New("forwarders, forward_zones: the resolver runs in recursive mode (a mode change needs a restart)")
	}
	r.zonesMu.Lock()
	defer r.zonesMu.Unlock()
	if err := upstream.CheckForwarders(fw, strategy); err != nil {
		return fmt.Errorf("forwarders: %w; the previous forwarders stay in use", err)
	}
	zones, err := checkZones(zones, strategy)
	if err != nil {
		return fmt.Errorf("%w; the previous forward zones stay in use", err)
	}
	old := r.router.zones.Load()
	next := &zoneTable{byName: map[string]*zoneClient{}}
	var built []*zoneClient
	for _, z := range zones {
		zc := old.byName[z.Zone]
		if zc == nil || zc.recurse != z.Recurse {
			if zc, err = r.newZoneClient(z, strategy); err != nil {
				for _, b := range built {
					_ = b.c.Close()
				}
				return err
			}
			built = append(built, zc)
		} else {
			zc = &zoneClient{zone: zc.zone, recurse: zc.recurse, servers: z.Servers, c: zc.c}
		}
		next.byName[z.Zone], next.list = zc, append(next.list, zc)
	}
	// Checked above: from here on nothing fails but on a closed resolver.
	if err := r.up.SetForwarders(fw, strategy); err != nil {
		for _, b := range built {
			_ = b.c.Close()
		}
		return fmt.Errorf("forwarders: %w; the previous forwarders stay in use", err)
	}
	for _, zc := range next.list {
		if !slices.Contains(built, zc) {
			_ = zc.c.SetForwarders(zc.servers, strategy)
		}
	}
	r.router.zones.Store(next)
	var changed []string
	for _, zc := range old.list {
		n := next.byName[zc.zone]
		if n == nil || n.c != zc.c {
			_ = zc.c.Close()
		}
		if n == nil || n.c != zc.c || !slices.Equal(n.servers, zc.servers) {
			changed = append(changed, zc.zone)
		}
	}
	for _, zc := range built {
		if old.byName[zc.zone] == nil {
			changed = append(changed, zc.zone)
		}
	}
	flushed := 0
	for _, z := range changed {
		flushed += r.flushZone(z)
	}
	r.log.Info("forwarders set", "forwarders", fw, "strategy", strategy.String(), "forward_zones", zoneNames(next.list),
		"zones_changed", changed, "cache_entries_flushed", flushed)
	return nil
}

// flushZone empties both caches at and under zone and returns how many
// entries went.
func (r *Resolver) flushZone(zone string) int {
	wire := make([]byte, 256)
	off, err := dns.PackDomainName(zone, wire, 0, nil, false)
	if err != nil {
		return 0
	}
	return r.packets.Flush(wire[:off], true) + r.records.Flush(zone, true)
}

func zoneNames(zs []*zoneClient) []string {
	out := make([]string, len(zs))
	for i, z := range zs {
		out[i] = z.zone
	}
	return out
}

// ZoneForwarders is one forward zone's servers' health and counts.
type ZoneForwarders struct {
	Zone       string
	Recurse    bool
	Forwarders []upstream.ForwarderStatus
}

// ForwardZones reports the forward zones' servers (forward mode), in the
// configured order: what the node's /health shows beside Forwarders.
func (r *Resolver) ForwardZones() []ZoneForwarders {
	if r.router == nil {
		return nil
	}
	t := r.router.zones.Load()
	out := make([]ZoneForwarders, 0, len(t.list))
	for _, z := range t.list {
		st, _ := z.c.Status()
		out = append(out, ZoneForwarders{Zone: z.zone, Recurse: z.recurse, Forwarders: st})
	}
	return out
}

// closeZones closes the forward zones' clients (Close).
func (r *Resolver) closeZones() {
	if r.router == nil {
		return
	}
	for _, z := range r.router.zones.Load().list {
		_ = z.c.Close()
	}
}

// initZones builds the forward zones' clients of New.
func (r *Resolver) initZones(zones []recursor.ForwardZone) error {
	r.router = &forwardRouter{def: r.up}
	t := &zoneTable{byName: map[string]*zoneClient{}}
	defer r.router.zones.Store(t) // what was built, for Close on an error
	zones, err := checkZones(zones, r.cfg.ForwarderStrategy)
	if err != nil {
		return err
	}
	for _, z := range zones {
		zc, err := r.newZoneClient(z, r.cfg.ForwarderStrategy)
		if err != nil {
			return err
		}
		t.byName[z.Zone], t.list = zc, append(t.list, zc)
	}
	return nil
}
