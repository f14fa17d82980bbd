package recursor

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/resolver/dnssec"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// The errors are also upstream's (errors.Is matches both), so that the
// resolver treats both sources alike: ErrAllFailed means SERVFAIL,
// ErrBadQuery FORMERR/NOTIMP.
var (
	ErrAllFailed error = &alias{"recursor: resolution failed", upstream.ErrAllFailed}
	ErrBadQuery  error = &alias{"recursor: bad query", upstream.ErrBadQuery}
	ErrClosed    error = &alias{"recursor: closed", upstream.ErrClosed}
)

// alias is an error of its own that also Is another.
type alias struct {
	msg string
	of  error
}

func (a *alias) Error() string        { return a.msg }
func (a *alias) Is(target error) bool { return target == a.of }

// Defaults of Config's zero fields.
const (
	DefaultPort         = 53
	DefaultTimeout      = 1500 * time.Millisecond
	DefaultMaxTime      = 8 * time.Second
	DefaultMaxQueries   = 60 // PowerDNS's max-qperq is 60
	DefaultMaxDepth     = 6
	DefaultMaxCNAME     = 12
	DefaultUDPSize      = 1232
	DefaultCacheSize    = 100_000
	DefaultMaxTTL       = 24 * time.Hour
	DefaultThrottleBase = time.Second
)

// DefaultDontQuery is PowerDNS Recursor's default dont-query: private,
// shared, link-local, documentation and reserved ranges, which no public
// zone's nameserver is on.
func DefaultDontQuery() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []string{
		"127.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "169.254.0.0/16", "192.168.0.0/16", "172.16.0.0/12",
		"0.0.0.0/8", "192.0.0.0/24", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4",
		"::1/128", "fc00::/7", "fe80::/10", "::/96", "::ffff:0:0/96", "100::/64", "2001:db8::/32",
	} {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}

// Config configures a Recursor.
type Config struct {
	// Hints is the root hints in zone-file format (as named.root); empty
	// means the built-in IANA hints.
	Hints string
	// Port is the authoritative servers' port, 53 unless a test says.
	Port uint16
	// Timeout bounds one query to one server (UDP, or TCP after a
	// truncated reply).
	Timeout time.Duration
	// MaxTime bounds a whole Exchange; a sooner context deadline wins.
	MaxTime time.Duration
	// MaxQueries bounds the queries one Exchange sends.
	MaxQueries int
	// MaxDepth bounds nested resolutions of nameserver names without glue
	// (a server whose name needs a server whose name needs…).
	MaxDepth int
	// MaxCNAME bounds the CNAME links followed for one Exchange.
	MaxCNAME int
	// UDPSize is the EDNS payload size advertised.
	UDPSize uint16
	// CacheSize bounds each infrastructure map (zones, addresses,
	// negative answers, servers).
	CacheSize int
	// MaxTTL caps how long anything is kept.
	MaxTTL time.Duration
	// QueryLoopback allows asking servers on loopback addresses (the test
	// lab). Off, they are never asked: a delegation to 127.0.0.1 would
	// otherwise make the resolver query itself.
	QueryLoopback bool
	// NoIPv6 never asks servers on IPv6 addresses nor looks up their
	// AAAA records (a host without IPv6 connectivity).
	NoIPv6 bool
	// NoQNAMEMinimisation sends the full name to every server instead of
	// only one label more than the zone asked (RFC 9156).
	NoQNAMEMinimisation bool
	// Registerer, when set, gets the recursor's Prometheus collector
	// (svcpf_recursor_*).
	Registerer prometheus.Registerer
	// Metrics counts outgoing queries as upstream's client does; nil
	// counts nothing.
	Metrics upstream.Metrics
	// DNSSEC is the DNSSEC mode: ModeOff (the zero value), ModeProcess,
	// ModeValidate.
	DNSSEC Mode
	// TrustAnchors is DS or DNSKEY records in zone-file format; empty
	// means the built-in root anchors (dnssec.RootAnchors). When set it
	// replaces them.
	TrustAnchors string
	// NTA lists negative trust anchors: zones at and below which nothing
	// is validated (answers are insecure, never bogus).
	NTA []string
	// Now is the validator's clock (signature validity); nil is time.Now.
	Now func() time.Time
	// SigSkew widens every signature's validity period by this much on
	// both sides, for clocks that are off.
	SigSkew time.Duration
	// ForwardZones send the names at and below chosen zones to chosen
	// servers instead of iterating from the root (see ForwardZone).
	ForwardZones []ForwardZone
	// DontQuery lists the addresses never asked as authoritative servers
	// (PowerDNS's dont-query): a delegation to one of them fails instead
	// of sending the resolver's queries into the operator's own networks.
	// nil means DefaultDontQuery; an empty list bars nothing. Loopback
	// addresses are governed by QueryLoopback alone, and forward zones'
	// servers, which the operator chose, are never barred.
	DontQuery []netip.Prefix
	// ThrottleBase is how long a server that failed once is not asked
	// while its zone has another; it doubles with each failure in a row,
	// up to a minute. Zero means DefaultThrottleBase.
	ThrottleBase time.Duration
}

// Recursor resolves iteratively; it is safe for concurrent use.
type Recursor struct {
	cfg     Config
	fwd     forwardZones
	sec     *sec
	hints   Hints
	infra   *infra
	metrics upstream.Metrics
	counts  counts
	closed  atomic.Bool
	bufs    sync.Pool // *[]byte of udpBufSize: UDP read buffers
}

// setDefault sets *v to d when it is the zero value (the field left
// unset).
func setDefault[T comparable](v *T, d T) {
	var zero T
	if *v == zero {
		*v = d
	}
}

// New validates cfg and returns a Recursor; it opens no socket.
func New(cfg Config) (*Recursor, error) {
	text := cfg.Hints
	if text == "" {
		text = builtinHints
	}
	h, err := ParseHints(text)
	if err != nil {
		return nil, err
	}
	setDefault(&cfg.Port, DefaultPort)
	setDefault(&cfg.Timeout, DefaultTimeout)
	setDefault(&cfg.MaxTime, DefaultMaxTime)
	setDefault(&cfg.UDPSize, DefaultUDPSize)
	setDefault(&cfg.MaxTTL, DefaultMaxTTL)
	setDefault(&cfg.ThrottleBase, DefaultThrottleBase)
	setDefault(&cfg.MaxQueries, DefaultMaxQueries)
	setDefault(&cfg.MaxDepth, DefaultMaxDepth)
	setDefault(&cfg.MaxCNAME, DefaultMaxCNAME)
	setDefault(&cfg.CacheSize, DefaultCacheSize)
	if cfg.DontQuery == nil {
		cfg.DontQuery = DefaultDontQuery()
	}
	switch {
	case cfg.Timeout < 0 || cfg.MaxTime < cfg.Timeout:
		return nil, fmt.Errorf("recursor: Timeout %v must be positive and at most MaxTime %v", cfg.Timeout, cfg.MaxTime)
	case cfg.MaxQueries < 1 || cfg.MaxDepth < 1 || cfg.MaxCNAME < 0 || cfg.CacheSize < 1 || cfg.MaxTTL < 0 || cfg.ThrottleBase < 0:
		return nil, errors.New("recursor: MaxQueries, MaxDepth, CacheSize must be positive, MaxCNAME, MaxTTL and ThrottleBase not negative")
	case cfg.UDPSize < 512:
		return nil, fmt.Errorf("recursor: UDPSize %d below 512", cfg.UDPSize)
	}
	m := cfg.Metrics
	if m == nil {
		m = upstream.NopMetrics{}
	}
	sc, err := newSec(cfg)
	if err != nil {
		return nil, err
	}
	fz, err := newForwardZones(cfg.ForwardZones)
	if err != nil {
		return nil, err
	}
	r := &Recursor{cfg: cfg, fwd: fz, sec: sc, hints: h, infra: newInfra(cfg.CacheSize, cfg.MaxTTL, cfg.ThrottleBase), metrics: m}
	size := max(int(cfg.UDPSize), 4096)
	r.bufs.New = func() any { b := make([]byte, size); return &b }
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newCollector(r)); err != nil {
			return nil, fmt.Errorf("recursor: metrics: %w", err)
		}
	}
	return r, nil
}

// Close makes later Exchange calls return ErrClosed. There is nothing to
// release: sockets live for one query.
func (r *Recursor) Close() error {
	r.closed.Store(true)
	return nil
}

// query is one Exchange's state: its bounds and what it has spent.
type query struct {
	r *Recursor
	// ctx is the caller's; deadline is the earlier of its deadline and
	// Config.MaxTime from the start: q.err says when either is over.
	ctx      context.Context
	deadline time.Time
	sent     int
	// primed: this Exchange tried priming already.
	primed bool
	// busy holds the nameserver names being resolved up the stack, so
	// that a name needing itself is noticed at once.
	busy map[string]bool
	// keyBusy holds the zones whose keys are being fetched up the stack.
	keyBusy map[string]bool
}

// err is what the query's context's Err would be with the query's
// deadline set on it: the caller's cancellation, or
// context.DeadlineExceeded once the deadline is reached.
func (q *query) err() error {
	if err := q.ctx.Err(); err != nil {
		return err
	}
	if !time.Now().Before(q.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}

// result is the outcome of resolving one name and type.
type result struct {
	rcode  int
	answer []dns.RR
	soa    *dns.SOA
	// parts: with DNSSEC on, what each zone on the way said, with its
	// signatures and proofs, for the validator.
	parts []*part
}

// Exchange resolves q's question and returns the answer: rcode NOERROR,
// NXDOMAIN or YXDOMAIN, the CNAME chain and the records, the zone's SOA in
// the authority section of a negative answer. Otherwise it returns an error
// that Is ErrAllFailed, within Config.MaxTime (or the context's deadline),
// saying why. q is not modified; the answer has q's id and question.
//
// With DNSSEC on, an answer that validates has the AD bit when q has DO or
// AD; a bogus one is a *ValidationError (which Is ErrAllFailed) carrying
// the extended error code, unless q has CD: then the bogus data is the
// answer, without AD; a client asking with DO gets the answer's RRSIGs and
// the negative answer's proofs too. Resolve also returns the validation
// result.
func (r *Recursor) Exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	m, _, err := r.Resolve(ctx, q)
	return m, err
}

// Resolve is Exchange that also returns the answer's DNSSEC validation
// result (Indeterminate when nothing was validated: DNSSEC off, or
// process mode for a client without DO and AD).
func (r *Recursor) Resolve(ctx context.Context, q *dns.Msg) (*dns.Msg, dnssec.Result, error) {
	var vr dnssec.Result
	if r.closed.Load() {
		return nil, vr, ErrClosed
	}
	if q == nil || len(q.Question) != 1 || q.Response || q.Opcode != dns.OpcodeQuery {
		return nil, vr, ErrBadQuery
	}
	qq := q.Question[0]
	if qq.Qclass != dns.ClassINET {
		return nil, vr, fmt.Errorf("%w: class %d", ErrBadQuery, qq.Qclass)
	}
	switch qq.Qtype {
	case dns.TypeAXFR, dns.TypeIXFR, dns.TypeOPT, dns.TypeMAILA, dns.TypeMAILB:
		return nil, vr, fmt.Errorf("%w: type %s", ErrBadQuery, dns.TypeToString[qq.Qtype])
	}
	name := strings.ToLower(dns.Fqdn(qq.Name))
	if _, ok := dns.IsDomainName(name); !ok {
		return nil, vr, fmt.Errorf("%w: name %q", ErrBadQuery, qq.Name)
	}
	start := time.Now()
	deadline := start.Add(r.cfg.MaxTime)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	// The deadline is the query's own (q.err), not a context's: a
	// context with a deadline costs a timer and four allocations per
	// miss, and nothing waits on its Done: each network wait has the
	// deadline set on its socket.
	st := &query{r: r, ctx: ctx, deadline: deadline}
	res, err := st.resolve(name, qq.Qtype, 0)
	do := false
	if o := q.IsEdns0(); o != nil {
		do = o.Do()
	}
	validate := r.sec.mode == ModeValidate || r.sec.mode == ModeProcess && (do || q.AuthenticatedData)
	if err == nil && validate {
		vr = st.validate(res)
		r.counts.validated(vr)
		if vr.State == dnssec.Bogus && !q.CheckingDisabled {
			// With CD the client validates for itself (RFC 4035
			// section 3.2.2): it gets the data, without AD, as
			// unbound answers it.
			err = &ValidationError{Name: qq.Name, Qtype: qq.Qtype, Result: vr}
		}
	}
	r.counts.queries.Add(uint64(st.sent))
	switch {
	case err != nil:
		r.counts.failed.Add(1)
	case res.rcode == dns.RcodeNameError:
		r.counts.nxdomain.Add(1)
	default:
		r.counts.answered.Add(1)
	}
	if ve, ok := err.(*ValidationError); ok {
		return nil, vr, ve
	}
	if err != nil {
		return nil, vr, fmt.Errorf("%w (%s %s, %d queries in %v): %w", ErrAllFailed, qq.Name, dns.TypeToString[qq.Qtype],
			st.sent, time.Since(start).Round(time.Millisecond), err)
	}
	m := new(dns.Msg)
	m.Id = q.Id
	m.Response = true
	m.Opcode = dns.OpcodeQuery
	m.RecursionDesired = q.RecursionDesired
	m.CheckingDisabled = q.CheckingDisabled
	m.RecursionAvailable = true
	m.Rcode = res.rcode
	m.Question = []dns.Question{qq}
	m.Answer = res.answer
	if res.soa != nil {
		m.Ns = []dns.RR{res.soa}
	}
	m.AuthenticatedData = vr.State == dnssec.Secure && (do || q.AuthenticatedData)
	if do && r.sec.mode != ModeOff {
		for _, p := range res.parts {
			for _, s := range p.sigs {
				m.Answer = append(m.Answer, s)
			}
			// The denial proofs: of an NXDOMAIN or NODATA, and of a
			// wildcard expansion (that the name asked does not exist),
			// without which a validating client would find the
			// expanded answer bogus. A plain answer has none.
			m.Ns = append(m.Ns, p.proof...)
		}
	}
	return m, vr, nil
}

var (
	errTooManyQueries = errors.New("too many queries for one resolution")
	errTooDeep        = errors.New("nameserver resolution nested too deep")
	errCycle          = errors.New("nameserver names depend on each other")
	errLongChain      = errors.New("CNAME chain too long")
	errCNAMELoop      = errors.New("CNAME loop")
	errNoServer       = errors.New("no server of the zone answered")
	errThrottled      = errors.New("throttled after failing")
	errDontQuery      = errors.New("address barred by dont_query")
)

// resolve resolves name/qtype, following CNAMEs across zones.
func (q *query) resolve(name string, qtype uint16, depth int) (result, error) {
	var chainRRs []dns.RR
	var parts []*part
	cur := name
	seen := map[string]bool{name: true}
	for links := 0; ; {
		res, err := q.resolveOne(cur, qtype, depth)
		if err != nil {
			return result{}, err
		}
		res.answer = append(chainRRs, res.answer...)
		res.parts = append(parts, res.parts...)
		if res.rcode != dns.RcodeSuccess || qtype == dns.TypeCNAME || len(res.answer) == 0 {
			return res, nil
		}
		last := res.answer[len(res.answer)-1]
		c, ok := last.(*dns.CNAME)
		if !ok || res.soa != nil {
			return res, nil
		}
		// The chain left the server's zone: follow it from its end.
		for _, rr := range res.answer[len(chainRRs):] {
			if rr.Header().Rrtype == dns.TypeCNAME {
				links++
			}
		}
		next := strings.ToLower(dns.Fqdn(c.Target))
		if links > q.r.cfg.MaxCNAME {
			return result{}, fmt.Errorf("%w: more than %d links from %s", errLongChain, q.r.cfg.MaxCNAME, name)
		}
		if seen[next] {
			// A loop: SERVFAIL, as unbound and PowerDNS answer.
			return result{}, fmt.Errorf("%w: %s", errCNAMELoop, next)
		}
		seen[next] = true
		chainRRs = res.answer
		parts = res.parts
		cur = next
	}
}

// resolveOne resolves name/qtype down the delegations from the closest
// known one, without following a CNAME chain out of the answering zone.
func (q *query) resolveOne(name string, qtype uint16, depth int) (result, error) {
	r := q.r
	now := time.Now()
	if e, nx, ok := r.infra.getNeg(now, name, qtype); ok {
		res := result{rcode: dns.RcodeSuccess}
		if nx {
			res.rcode = dns.RcodeNameError
		}
		if e.soa != nil {
			soa := dns.Copy(e.soa).(*dns.SOA)
			left := uint32(time.Until(e.expire) / time.Second)
			soa.Hdr.Ttl = min(soa.Hdr.Ttl, left)
			res.soa = soa
		}
		if e.part != nil {
			res.parts = []*part{e.part}
		}
		return res, nil
	}
	from := name
	if qtype == dns.TypeDS && name != "." {
		// A DS record lives in the parent zone, above the cut: start
		// there even when the child's servers are known.
		off, _ := dns.NextLabel(name, 0)
		from = name[off:]
	}
	zone, names := r.infra.closest(now, from)
	fz := r.fwd.find(from)
	if fz != nil && (zone == "" || zone == fz.zone || !dnssec.IsSubDomain(fz.zone, zone)) {
		// A forward zone, unless a zone below it is known already
		// (delegated by its forwarders, which are then its
		// authorities): ask its servers rather than iterate down to it.
		zone, names = fz.zone, nil
	} else {
		fz = nil
	}
	if zone == "" {
		// Nothing known, not even the root's NS set: prime it from
		// the hints, so that the root servers' current names and
		// addresses are used rather than the hints' (RFC 8109); the
		// hints serve if priming fails.
		q.prime()
		if zone, names = r.infra.closest(time.Now(), "."); zone == "" {
			zone, names = ".", r.hints.Names
		}
	}
	// A recursive forwarder has no cuts to find: it gets the full name.
	m := minimiser{on: !r.cfg.NoQNAMEMinimisation && (fz == nil || !fz.recurse)}
	for {
		qn, qt := m.next(zone, name, qtype)
		if qn != name {
			// A minimised question answered before (a NODATA: an
			// empty non-terminal, or a name without the type, kept
			// as the answer to that question) is not asked again:
			// every new name under a wildcard below an empty
			// non-terminal would otherwise cost two queries. At worst
			// (the name is a cut after all) the full name asked here
			// brings the referral.
			if _, nx, ok := r.infra.getNeg(time.Now(), qn, qt); ok {
				if nx {
					m.on = false
				} else {
					m.deeper()
				}
				continue
			}
		}
		j, err := q.askZone(zone, names, fz, qn, qt, depth)
		if qn != name {
			// A minimised question only finds the cuts. Anything
			// but a referral means "no cut here": go one label deeper.
			// An error or NXDOMAIN (which some servers answer for an
			// empty non-terminal) means asking the full name instead,
			// as unbound's relaxed mode does.
			switch {
			case err != nil && (errors.Is(err, errTooManyQueries) || q.err() != nil):
				return result{}, fmt.Errorf("%s (zone %s): %w", name, zone, err)
			case err != nil || j.kind == kindNXDomain:
				m.on = false
			case j.kind == kindReferral:
				r.infra.putDeleg(time.Now(), j.deleg)
				zone, names, fz = j.deleg.zone, j.deleg.names, nil
				m.reset()
			default:
				if j.kind == kindNoData {
					// Kept as the answer to qn/qt, with its proof
					// for a later validation, as if it had been asked.
					now := time.Now()
					r.infra.putNeg(now, negKey{j.end, qt}, j.soa, q.newPart(zone, fz, j, qn, qt))
				}
				m.deeper()
			}
			continue
		}
		if err != nil {
			if fz == nil && zone != "." && !errors.Is(err, errTooManyQueries) && !errors.Is(err, errDontQuery) &&
				q.err() == nil && r.infra.dropDeleg(zone) {
				// None of the zone's servers worked: forget its NS
				// set, so that the next resolution asks the parent
				// again (it may have moved), as PowerDNS does. A set
				// barred by dont_query stays: asking the parent again
				// would only bring the same addresses back.
				r.counts.nssetInvalidations.Add(1)
			}
			return result{}, fmt.Errorf("%s (zone %s): %w", name, zone, err)
		}
		now := time.Now()
		var p *part
		if j.kind != kindReferral {
			p = q.newPart(zone, fz, j, name, qtype)
			if p != nil {
				j.answer = p.answer
			}
		}
		parts := func() []*part {
			if p == nil {
				return nil
			}
			return []*part{p}
		}
		switch j.kind {
		case kindReferral:
			if qtype == dns.TypeDS && j.deleg.zone == name {
				// The parent sent us to the child for its DS: wrong
				// side of the cut, nothing to follow.
				return result{}, fmt.Errorf("%s: referral to the child for DS", name)
			}
			r.infra.putDeleg(now, j.deleg)
			zone, names, fz = j.deleg.zone, j.deleg.names, nil
			m.reset()
			continue
		case kindNXDomain:
			r.infra.putNeg(now, negKey{j.end, 0}, j.soa, p)
			return result{rcode: dns.RcodeNameError, answer: fixCase(j.answer), soa: copySOA(j.soa), parts: parts()}, nil
		case kindNoData:
			r.infra.putNeg(now, negKey{j.end, qtype}, j.soa, p)
			return result{rcode: dns.RcodeSuccess, answer: fixCase(j.answer), soa: copySOA(j.soa), parts: parts()}, nil
		case kindYXDomain:
			return result{rcode: dns.RcodeYXDomain, answer: fixCase(j.answer), parts: parts()}, nil
		default:
			ans := fixCase(j.answer)
			if qtype == dns.TypeA || qtype == dns.TypeAAAA {
				q.rememberAddrs(now, ans, j.end)
			}
			return result{rcode: dns.RcodeSuccess, answer: ans, parts: parts()}, nil
		}
	}
}

// newPart is what zone's reply j to name/qtype gives the validator, or nil
// with DNSSEC off.
func (q *query) newPart(zone string, fz *forwardZone, j judged, name string, qtype uint16) *part {
	if q.r.sec.mode == ModeOff {
		return nil
	}
	pz := zone
	if fz != nil && fz.recurse && j.soa != nil {
		// A recursive forwarder answers for the zones below the forward
		// zone too: a denial is checked with the keys of the zone whose
		// SOA it carries.
		if o := strings.ToLower(j.soa.Hdr.Name); dnssec.IsSubDomain(zone, o) {
			pz = o
		}
	}
	// The part's SOA is the reply's own record, not a copy: nothing
	// changes it (the negative cache keeps it too, and copies it for each
	// answer; the validator reads it).
	return &part{zone: pz, kind: j.kind, qname: name, qtype: qtype, end: j.end,
		answer: fixCase(j.answer), sigs: j.sigs, proof: j.proof, soa: j.soa}
}

// prime asks the hints' servers for the root's NS set and keeps it, with
// the addresses the answer gives for it, in the infrastructure cache.
func (q *query) prime() {
	if q.primed {
		return
	}
	q.primed = true
	j, err := q.askZone(".", q.r.hints.Names, nil, ".", dns.TypeNS, 0)
	if err != nil || j.kind != kindAnswer {
		return
	}
	d := &delegation{zone: ".", glue: j.glue, gttl: j.gttl}
	for _, rr := range j.answer {
		if ns, ok := rr.(*dns.NS); ok && rr.Header().Name == "." {
			n := strings.ToLower(dns.Fqdn(ns.Ns))
			if len(d.names) == 0 || rr.Header().Ttl < d.ttl {
				d.ttl = rr.Header().Ttl
			}
			if !slices.Contains(d.names, n) {
				d.names = append(d.names, n)
			}
		}
	}
	// Without an address for any of them the hints are better.
	if len(d.names) > 0 && len(d.glue) > 0 {
		q.r.infra.putDeleg(time.Now(), d)
	}
}

func copySOA(s *dns.SOA) *dns.SOA {
	if s == nil {
		return nil
	}
	c := dns.Copy(s).(*dns.SOA)
	c.Hdr.Name = strings.ToLower(c.Hdr.Name)
	return c
}

// fixCase lower-cases the owner names of records whose case came back as
// 0x20 randomised them, so that the answer reads as the zone wrote it.
func fixCase(rrs []dns.RR) []dns.RR {
	for i, rr := range rrs {
		rr = dns.Copy(rr)
		rr.Header().Name = strings.ToLower(rr.Header().Name)
		rrs[i] = rr
	}
	return rrs
}

// rememberAddrs keeps the addresses in an answer for name (the end of its
// chain) as a nameserver's addresses, in case name is one.
func (q *query) rememberAddrs(now time.Time, ans []dns.RR, end string) {
	var addrs []netip.Addr
	ttl := uint32(1<<32 - 1)
	for _, rr := range ans {
		if !strings.EqualFold(rr.Header().Name, end) {
			continue
		}
		if a, ok := rrAddr(rr); ok {
			addrs = append(addrs, a)
			ttl = min(ttl, rr.Header().Ttl)
		}
	}
	if len(addrs) == 0 {
		return
	}
	q.r.infra.addMore(now, end, addrs, ttl)
}

// askZone asks zone's servers about name/qtype, best first, until one gives
// a usable reply. Servers whose names have no known address are resolved
// only when every known one has failed. A forward zone's (fz) servers are
// its configured addresses instead of names.
func (q *query) askZone(zone string, names []string, fz *forwardZone, name string, qtype uint16, depth int) (judged, error) {
	r := q.r
	tried := map[netip.Addr]bool{}
	var lastErr error = errNoServer
	resolved := map[string]bool{}
	var timedOut []netip.Addr
	round := 0
	for {
		var addrs []netip.Addr
		var unresolved []string
		if fz != nil {
			// Chosen by the operator: loopback ones too.
			for _, x := range fz.addrs {
				if !tried[x] {
					addrs = append(addrs, x)
				}
			}
		}
		for _, n := range names {
			a, ok := q.addrsOf(zone, n)
			if !ok {
				unresolved = append(unresolved, n)
				continue
			}
			for _, x := range a {
				if tried[x] {
					continue
				}
				if r.barred(x) {
					// Counted once per resolution, as PowerDNS's
					// dont-outqueries counts the queries not sent.
					tried[x] = true
					r.counts.dontOut.Add(1)
					lastErr = fmt.Errorf("%s: %w", x, errDontQuery)
					continue
				}
				if r.reachable(x) { // barred, just above, not again
					addrs = append(addrs, x)
				}
			}
		}
		if len(addrs) == 0 {
			// Resolve one more nameserver name, then try again.
			progress := false
			for _, n := range unresolved {
				if resolved[n] {
					continue
				}
				resolved[n] = true
				if err := q.resolveNS(zone, n, depth); err != nil {
					lastErr = err
					if errors.Is(err, errTooManyQueries) || q.err() != nil {
						return judged{}, err
					}
					continue
				}
				progress = true
				break
			}
			if !progress {
				if round == 0 && len(timedOut) > 0 && time.Now().Before(q.deadline) {
					// A second round over the servers that timed out:
					// a lost datagram must not fail a zone with one
					// server. Lame and refusing servers are not asked
					// again.
					round++
					for _, a := range timedOut {
						delete(tried, a)
					}
					timedOut = nil
					continue
				}
				return judged{}, lastErr
			}
			continue
		}
		ranked := r.infra.rank(time.Now(), zone, addrs, rand.Float64)
		// A throttled server is not asked while the zone has one that
		// is not (counted: PowerDNS's throttled-out). When every server
		// left is throttled they are asked anyway, best first (the last
		// resort unbound keeps too), so that a zone whose only server
		// lost one datagram is not dead for the throttling period.
		skip := round == 0 && slices.ContainsFunc(ranked, func(a netip.Addr) bool { return !r.infra.throttled(time.Now(), a) })
		for _, a := range ranked {
			if skip && r.infra.throttled(time.Now(), a) {
				tried[a] = true
				r.counts.throttledOut.Add(1)
				lastErr = fmt.Errorf("%s: %w", a, errThrottled)
				continue
			}
			tried[a] = true
			j, err := q.askServer(zone, a, fz, name, qtype)
			if err == nil {
				return j, nil
			}
			if errors.Is(err, errTimeout) {
				timedOut = append(timedOut, a)
			}
			lastErr = err
			if errors.Is(err, errTooManyQueries) || q.err() != nil {
				return judged{}, err
			}
		}
	}
}

// usable says whether an address may be asked at all.
func (r *Recursor) usable(a netip.Addr) bool {
	return r.reachable(a) && !r.barred(a)
}

// reachable says whether an address may be asked, dont_query aside.
func (r *Recursor) reachable(a netip.Addr) bool {
	if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() {
		return false
	}
	if a.Is6() && !a.Is4In6() && r.cfg.NoIPv6 {
		return false
	}
	if a.IsLoopback() || (a.Is4In6() && a.Unmap().IsLoopback()) {
		return r.cfg.QueryLoopback
	}
	return true
}

// barred says whether dont_query keeps a (not loopback: QueryLoopback
// decides those) from being asked.
func (r *Recursor) barred(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() {
		return false
	}
	for _, p := range r.cfg.DontQuery {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// addrsOf returns a nameserver name's known addresses: the root hints for
// the root's servers, else the infrastructure cache.
func (q *query) addrsOf(zone, n string) ([]netip.Addr, bool) {
	if zone == "." {
		if a, ok := q.r.hints.Addrs[n]; ok {
			if c, ok := q.r.infra.getAddrs(time.Now(), n); ok {
				return append(append([]netip.Addr(nil), c...), a...), true
			}
			return a, true
		}
	}
	return q.r.infra.getAddrs(time.Now(), n)
}

// resolveNS finds a nameserver name's addresses (A, then AAAA) with a
// resolution of its own, one level deeper.
func (q *query) resolveNS(zone, n string, depth int) error {
	if depth+1 > q.r.cfg.MaxDepth {
		return fmt.Errorf("%w: %s for %s", errTooDeep, n, zone)
	}
	if q.busy[n] {
		return fmt.Errorf("%w: %s for %s", errCycle, n, zone)
	}
	if q.busy == nil {
		q.busy = map[string]bool{} // made when needed: most misses resolve no nameserver
	}
	q.busy[n] = true
	defer delete(q.busy, n)
	var found bool
	var lastErr error
	types := []uint16{dns.TypeA, dns.TypeAAAA}
	if q.r.cfg.NoIPv6 {
		types = types[:1]
	}
	for _, t := range types {
		res, err := q.resolve(n, t, depth+1)
		if err != nil {
			lastErr = err
			if errors.Is(err, errTooManyQueries) || q.err() != nil {
				return err
			}
			continue
		}
		for _, rr := range res.answer {
			if a, ok := rrAddr(rr); ok && q.r.usable(a) {
				found = true
			}
		}
		if found {
			// The addresses went into the cache as the answer came.
			if _, ok := q.r.infra.getAddrs(time.Now(), n); !ok {
				q.putChainAddrs(n, res.answer)
			}
			return nil
		}
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("nameserver %s of %s has no usable address", n, zone)
	}
	return lastErr
}

// putChainAddrs keeps the addresses at the end of a CNAME chain under the
// nameserver name that led to them (a nameserver name should not be a
// CNAME, but real ones are).
func (q *query) putChainAddrs(n string, ans []dns.RR) {
	var addrs []netip.Addr
	ttl := uint32(1<<32 - 1)
	for _, rr := range ans {
		if a, ok := rrAddr(rr); ok {
			addrs = append(addrs, a)
			ttl = min(ttl, rr.Header().Ttl)
		}
	}
	if len(addrs) > 0 {
		q.r.infra.addMore(time.Now(), n, addrs, ttl)
	}
}

// askServer asks one server and judges its reply; a reply that says nothing
// usable marks the server lame for the zone and is an error. A forward
// zone's server is asked on its own port, and with RD when it recurses.
func (q *query) askServer(zone string, a netip.Addr, fz *forwardZone, name string, qtype uint16) (judged, error) {
	r := q.r
	if q.sent >= r.cfg.MaxQueries {
		return judged{}, fmt.Errorf("%w (%d)", errTooManyQueries, r.cfg.MaxQueries)
	}
	if err := q.err(); err != nil {
		return judged{}, err
	}
	edns := !r.infra.wantsNoEDNS(time.Now(), a)
	ap, rd := netip.AddrPortFrom(a, r.cfg.Port), false
	if fz != nil {
		ap, rd = netip.AddrPortFrom(a, fz.port[a]), fz.recurse
	}
	reply, rtt, err := q.ask(ap, rd, name, qtype, edns)
	if err != nil && edns && errors.Is(err, errTimeout) && q.err() == nil && q.sent < r.cfg.MaxQueries &&
		r.infra.firstEDNSTimeout(a) {
		// Some servers (and firewalls before them) drop queries with
		// EDNS. A server that never answered one and times out the
		// first time is asked once more without it, as unbound and
		// PowerDNS do; a dead server pays this once, then it is
		// throttled.
		if reply2, rtt2, err2 := q.ask(ap, rd, name, qtype, false); err2 == nil {
			r.infra.setNoEDNS(time.Now(), a)
			reply, rtt, err = reply2, rtt2, nil
			edns = false
		}
	}
	if err != nil {
		if q.err() == nil {
			r.infra.failed(time.Now(), a, r.cfg.Timeout)
		}
		return judged{}, err
	}
	r.infra.answered(time.Now(), a, rtt)
	if edns {
		r.infra.sawEDNS(a)
	}
	if edns && (reply.Rcode == dns.RcodeFormatError || reply.Rcode == dns.RcodeNotImplemented || reply.Rcode == dns.RcodeBadVers) {
		// RFC 6891 section 7: a server that does not understand EDNS
		// is asked again without it.
		if q.sent >= r.cfg.MaxQueries {
			return judged{}, fmt.Errorf("%w (%d)", errTooManyQueries, r.cfg.MaxQueries)
		}
		reply2, rtt2, err := q.ask(ap, rd, name, qtype, false)
		if err != nil {
			return judged{}, err
		}
		if reply2.Rcode != dns.RcodeFormatError && reply2.Rcode != dns.RcodeNotImplemented {
			r.infra.setNoEDNS(time.Now(), a)
			reply, rtt = reply2, rtt2
			r.infra.answered(time.Now(), a, rtt)
		}
	}
	j := judge(reply, zone, name, qtype)
	if j.kind == kindLame {
		r.infra.markLame(time.Now(), zone, a)
		return judged{}, fmt.Errorf("%s lame for %s: %s", a, zone, dns.RcodeToString[reply.Rcode])
	}
	if r.sec.mode != ModeOff {
		attachSec(&j, reply, zone)
	}
	return j, nil
}
