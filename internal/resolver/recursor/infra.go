package recursor

import (
	"math"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// infra is the recursor's memory between queries: zones' nameservers,
// nameservers' addresses, negative answers, and each server's speed and
// health. One mutex guards it all: every operation is a few map lookups,
// far cheaper than the network round trip around it.
type infra struct {
	mu     sync.Mutex
	max    int
	maxTTL time.Duration
	// throttle is the first failure's throttling period (Config.ThrottleBase).
	throttle time.Duration
	deleg    map[string]delegEntry
	addrs    map[string]addrEntry
	neg      map[negKey]negEntry
	servers  map[netip.Addr]*server
	lame     map[lameKey]time.Time
}

type delegEntry struct {
	names  []string
	expire time.Time
}

type addrEntry struct {
	addrs  []netip.Addr
	expire time.Time
}

type negKey struct {
	name  string
	qtype uint16 // 0 for NXDOMAIN: the name has no type at all
}

type negEntry struct {
	soa    *dns.SOA // nil when the server gave none
	part   *part    // with DNSSEC on: the proof, for validating it again
	expire time.Time
}

type lameKey struct {
	zone string
	addr netip.Addr
}

// server is what is known of one authoritative server's speed and health.
type server struct {
	srtt     float64   // smoothed RTT in µs
	updated  time.Time // when srtt was last measured
	fails    int       // failures in a row
	lastFail time.Time // when the last of them happened
	until    time.Time // throttled until
	noEDNS   time.Time // asked without EDNS until
	ednsOK   bool      // has answered a query with EDNS
	measured bool
}

// Speed and throttling parameters. The first RTT of an unknown server is
// taken as small and random so that every server of a zone is tried early
// on (PowerDNS does the same); srtt halves every decayHalfLife unmeasured,
// so a slow server is measured again now and then rather than never.
const (
	decayHalfLife = 60 * time.Second
	throttleMax   = 60 * time.Second
	lameTTL       = 10 * time.Minute
	noEDNSTTL     = 15 * time.Minute
	negTTLCap     = 3 * time.Hour // RFC 2308's suggested cap for negative answers
	// failedTTL is how long a server that failed stays in the failed
	// hosts' count (PowerDNS's failed-host-entries) without failing
	// again: the longest throttling period.
	failedTTL = throttleMax
)

func newInfra(max int, maxTTL, throttle time.Duration) *infra {
	return &infra{
		max:      max,
		maxTTL:   maxTTL,
		throttle: throttle,
		deleg:    map[string]delegEntry{},
		addrs:    map[string]addrEntry{},
		neg:      map[negKey]negEntry{},
		servers:  map[netip.Addr]*server{},
		lame:     map[lameKey]time.Time{},
	}
}

func (in *infra) ttl(now time.Time, ttl uint32) time.Time {
	d := time.Duration(ttl) * time.Second
	return now.Add(min(d, in.maxTTL))
}

// trim makes room in a map before an insertion: past the bound, one in
// eight entries goes (map order is random enough for a cache of hints
// that are all refetchable).
func trim[K comparable, V any](m map[K]V, max int) {
	if len(m) < max {
		return
	}
	n := max/8 + 1
	for k := range m {
		delete(m, k)
		if n--; n == 0 {
			return
		}
	}
}

func (in *infra) putDeleg(now time.Time, d *delegation) {
	in.mu.Lock()
	defer in.mu.Unlock()
	trim(in.deleg, in.max)
	in.deleg[d.zone] = delegEntry{names: slices.Clone(d.names), expire: in.ttl(now, d.ttl)}
	for name, a := range d.glue {
		trim(in.addrs, in.max)
		in.addrs[name] = addrEntry{addrs: slices.Clone(a), expire: in.ttl(now, d.gttl)}
	}
}

// closest returns the closest enclosing zone of name whose nameservers are
// known and unexpired, or "" (then the root hints).
func (in *infra) closest(now time.Time, name string) (string, []string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for off, end := 0, false; !end; off, end = dns.NextLabel(name, off) {
		z := name[off:]
		if e, ok := in.deleg[z]; ok {
			if now.Before(e.expire) {
				return z, e.names
			}
			delete(in.deleg, z)
		}
	}
	return "", nil
}

func (in *infra) getAddrs(now time.Time, name string) ([]netip.Addr, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	e, ok := in.addrs[name]
	if !ok {
		return nil, false
	}
	if !now.Before(e.expire) {
		delete(in.addrs, name)
		return nil, false
	}
	return e.addrs, true
}

// putNeg keeps a negative answer for min(SOA TTL, SOA MINIMUM), as RFC 2308
// says; without an SOA it is not kept.
func (in *infra) putNeg(now time.Time, k negKey, soa *dns.SOA, p *part) {
	if soa == nil {
		return
	}
	ttl := min(soa.Hdr.Ttl, soa.Minttl)
	if ttl == 0 {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	trim(in.neg, in.max)
	exp := now.Add(min(time.Duration(ttl)*time.Second, negTTLCap, in.maxTTL))
	in.neg[k] = negEntry{soa: soa, part: p, expire: exp}
}

// getNeg finds a cached NXDOMAIN for name or NODATA for name/qtype, and
// the remaining TTL.
func (in *infra) getNeg(now time.Time, name string, qtype uint16) (negEntry, bool, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, k := range []negKey{{name, 0}, {name, qtype}} {
		e, ok := in.neg[k]
		if !ok {
			continue
		}
		if !now.Before(e.expire) {
			delete(in.neg, k)
			continue
		}
		return e, k.qtype == 0, true
	}
	return negEntry{}, false, false
}

func (in *infra) server(a netip.Addr) *server {
	s := in.servers[a]
	if s == nil {
		trim(in.servers, in.max)
		s = &server{}
		in.servers[a] = s
	}
	return s
}

// rank orders addrs for asking: usable before throttled or lame ones, then
// by decayed smoothed RTT. random gives an unmeasured server its first
// estimate (0–1 ms) so that new servers get tried.
func (in *infra) rank(now time.Time, zone string, addrs []netip.Addr, random func() float64) []netip.Addr {
	type ranked struct {
		a    netip.Addr
		bad  bool
		srtt float64
	}
	in.mu.Lock()
	rs := make([]ranked, 0, len(addrs))
	for _, a := range addrs {
		s := in.server(a)
		if !s.measured {
			s.srtt, s.updated, s.measured = random()*1000, now, true
		}
		bad := now.Before(s.until)
		if t, ok := in.lame[lameKey{zone, a}]; ok {
			if now.Before(t) {
				bad = true
			} else {
				delete(in.lame, lameKey{zone, a})
			}
		}
		rs = append(rs, ranked{a, bad, s.decayed(now)})
	}
	in.mu.Unlock()
	slices.SortStableFunc(rs, func(x, y ranked) int {
		if x.bad != y.bad {
			if x.bad {
				return 1
			}
			return -1
		}
		switch {
		case x.srtt < y.srtt:
			return -1
		case x.srtt > y.srtt:
			return 1
		}
		return 0
	})
	out := make([]netip.Addr, len(rs))
	for i, r := range rs {
		out[i] = r.a
	}
	return out
}

func (s *server) decayed(now time.Time) float64 {
	age := now.Sub(s.updated)
	if age <= 0 {
		return s.srtt
	}
	return s.srtt * math.Exp2(-float64(age)/float64(decayHalfLife))
}

// answered records a reply's RTT (EWMA, 7/8 old + 1/8 new, as PowerDNS
// keeps nameserver speeds) and clears the server's failures.
func (in *infra) answered(now time.Time, a netip.Addr, rtt time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.server(a)
	us := float64(rtt.Microseconds())
	if !s.measured {
		s.srtt = us
	} else {
		s.srtt = 0.875*s.decayed(now) + 0.125*us
	}
	s.updated, s.measured, s.fails, s.until = now, true, 0, time.Time{}
}

// failed records a timeout or unreachable server: its estimate becomes at
// least timeout, and it is throttled for in.throttle (1 s), doubling with each failure in
// a row, at most a minute.
func (in *infra) failed(now time.Time, a netip.Addr, timeout time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.server(a)
	s.srtt = max(s.decayed(now), float64(timeout.Microseconds()))
	s.updated, s.measured = now, true
	s.fails++
	s.lastFail = now
	s.until = now.Add(min(in.throttle<<min(s.fails-1, 16), throttleMax))
}

// throttled says whether a server is throttled now.
func (in *infra) throttled(now time.Time, a netip.Addr) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.servers[a]
	return s != nil && now.Before(s.until)
}

// dropDeleg forgets zone's nameservers (an NS set none of whose servers
// worked), so that the next resolution asks the parent again; it reports
// whether there was an entry.
func (in *infra) dropDeleg(zone string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.deleg[zone]
	delete(in.deleg, zone)
	return ok
}

func (in *infra) markLame(now time.Time, zone string, a netip.Addr) {
	in.mu.Lock()
	defer in.mu.Unlock()
	trim(in.lame, in.max)
	in.lame[lameKey{zone, a}] = now.Add(lameTTL)
}

func (in *infra) setNoEDNS(now time.Time, a netip.Addr) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.server(a).noEDNS = now.Add(noEDNSTTL)
}

func (in *infra) wantsNoEDNS(now time.Time, a netip.Addr) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.servers[a]
	return s != nil && now.Before(s.noEDNS)
}

// Stats are the sizes PowerDNS reports for its recursor's state.
type Stats struct {
	NSSpeeds   int // nsspeeds-entries: servers with a measured speed
	Throttled  int // throttle-entries: servers throttled now
	Failed     int // failed-host-entries: servers that failed in the last minute and have not answered since
	Lame       int // lame marks (zone, server) in force
	Delegation int // zones whose nameservers are known
	Addresses  int // nameserver names whose addresses are known
	Negative   int // negative answers cached
}

// Stats returns the sizes of the recursor's caches.
func (r *Recursor) Stats() Stats {
	in := r.infra
	now := time.Now()
	in.mu.Lock()
	defer in.mu.Unlock()
	st := Stats{NSSpeeds: len(in.servers), Lame: len(in.lame), Delegation: len(in.deleg), Addresses: len(in.addrs), Negative: len(in.neg)}
	for _, s := range in.servers {
		if now.Before(s.until) {
			st.Throttled++
		}
		if s.fails > 0 && now.Sub(s.lastFail) < failedTTL {
			st.Failed++
		}
	}
	return st
}

// addMore adds addresses to a name's known ones (A and AAAA come from two
// queries), keeping the earlier expiry when it is sooner.
func (in *infra) addMore(now time.Time, name string, a []netip.Addr, ttl uint32) {
	in.mu.Lock()
	defer in.mu.Unlock()
	exp := in.ttl(now, ttl)
	e, ok := in.addrs[name]
	if !ok || !now.Before(e.expire) {
		trim(in.addrs, in.max)
		in.addrs[name] = addrEntry{addrs: slices.Clone(a), expire: exp}
		return
	}
	merged := slices.Clone(e.addrs)
	for _, x := range a {
		if !slices.Contains(merged, x) {
			merged = append(merged, x)
		}
	}
	in.addrs[name] = addrEntry{addrs: merged, expire: minTime(exp, e.expire)}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (in *infra) sawEDNS(a netip.Addr) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.server(a).ednsOK = true
}

// firstEDNSTimeout says whether a server that just timed out on a query
// with EDNS never answered one and had not failed before: then it may be
// one that drops EDNS queries.
func (in *infra) firstEDNSTimeout(a netip.Addr) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.server(a)
	return !s.ednsOK && s.fails == 0
}
