package recursor

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnssec"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// Mode is the DNSSEC mode, with PowerDNS Recursor's meanings.
type Mode uint8

const (
	// ModeOff: no DO bit on outgoing queries, no validation, no AD.
	ModeOff Mode = iota
	// ModeProcess: the DO bit on every outgoing query; DNSSEC records
	// returned to clients that ask with DO; validation only for clients
	// that ask with DO or AD (bogus → SERVFAIL for them alone).
	ModeProcess
	// ModeValidate: every answer is validated; bogus → SERVFAIL for all.
	ModeValidate
)

func (m Mode) String() string {
	return [...]string{"off", "process", "validate"}[m]
}

// ParseMode reads "off", "process" or "validate".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "off", "":
		return ModeOff, nil
	case "process":
		return ModeProcess, nil
	case "validate":
		return ModeValidate, nil
	}
	return ModeOff, fmt.Errorf("recursor: dnssec mode %q: want off, process or validate", s)
}

// ValidationError is a bogus answer: the resolver answers SERVFAIL with
// the extended error code EDE (RFC 8914). It Is ErrAllFailed.
type ValidationError struct {
	Name   string
	Qtype  uint16
	Result dnssec.Result
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("recursor: %s %s: %v", e.Name, dns.TypeToString[e.Qtype], e.Result)
}

// Is makes a bogus answer a failure to both the recursor's and upstream's
// callers.
func (e *ValidationError) Is(target error) bool {
	return target == ErrAllFailed || target == upstream.ErrAllFailed
}

// EDE is the RFC 8914 code that says why the answer is bogus.
func (e *ValidationError) EDE() uint16 { return e.Result.EDE }

// Key states are kept this long: a secure or insecure zone's for at most
// keyTTL (and the DNSKEY/DS TTLs), a bogus one's for bogusTTL, so that a
// repaired zone validates soon (unbound's val-bogus-ttl is 60 s).
const (
	keyTTL   = time.Hour
	bogusTTL = time.Minute
)

// keyState is a zone's place in the chain of trust: secure with its keys,
// insecure, bogus (why), or indeterminate (no anchor above it).
type keyState struct {
	res dnssec.Result
	// keys: the zone keys, with their tags computed once.
	keys   dnssec.Keys
	expire time.Time
}

// sec is the recursor's DNSSEC configuration and its key cache.
type sec struct {
	mode    Mode
	anchors dnssec.Anchors
	ntas    []string
	now     func() time.Time
	skew    time.Duration
	max     int
	mu      sync.Mutex
	keys    map[string]keyState
	// verified holds fingerprints of signatures verified, until the
	// signature's expiration (at most keyTTL): the same signature over
	// the same records, met again, costs a hash instead of public-key
	// arithmetic (see dnssec.SigCache).
	verified map[[32]byte]time.Time
	// hashes holds NSEC3 hashes of the names denials hash again and
	// again (a zone's apex, its wildcard): see dnssec.HashCache.
	hashes map[nsec3Name]string
}

// nsec3Name is a name hashed with an NSEC3 salt (upper case hex) and
// iterations.
type nsec3Name struct {
	name, salt string
	iterations uint16
}

// NSEC3Hash is dnssec.HashCache's lookup.
func (s *sec) NSEC3Hash(name, salt string, iterations uint16) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.hashes[nsec3Name{name, salt, iterations}]
	return h, ok
}

// AddNSEC3Hash is dnssec.HashCache's insertion.
func (s *sec) AddNSEC3Hash(name, salt string, iterations uint16, hash string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	trim(s.hashes, s.max)
	s.hashes[nsec3Name{name, salt, iterations}] = hash
}

// Verified is dnssec.SigCache's lookup.
func (s *sec) Verified(fp [32]byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp, ok := s.verified[fp]
	return ok && time.Now().Before(exp)
}

// Add is dnssec.SigCache's insertion.
func (s *sec) Add(fp [32]byte, expiration time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	trim(s.verified, s.max)
	if limit := time.Now().Add(keyTTL); limit.Before(expiration) {
		expiration = limit
	}
	s.verified[fp] = expiration
}

func newSec(cfg Config) (*sec, error) {
	s := &sec{mode: cfg.DNSSEC, now: cfg.Now, skew: cfg.SigSkew, max: cfg.CacheSize, keys: map[string]keyState{},
		verified: map[[32]byte]time.Time{}, hashes: map[nsec3Name]string{}}
	if cfg.DNSSEC > ModeValidate {
		return nil, fmt.Errorf("recursor: DNSSEC mode %d", cfg.DNSSEC)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if cfg.SigSkew < 0 {
		return nil, fmt.Errorf("recursor: SigSkew %v negative", cfg.SigSkew)
	}
	text := cfg.TrustAnchors
	if text == "" {
		text = dnssec.RootAnchors
	}
	a, err := dnssec.ParseAnchors(text)
	if err != nil {
		return nil, fmt.Errorf("recursor: %w", err)
	}
	s.anchors = a
	for _, n := range cfg.NTA {
		n = strings.ToLower(dns.Fqdn(n))
		if _, ok := dns.IsDomainName(n); !ok {
			return nil, fmt.Errorf("recursor: negative trust anchor %q is not a domain name", n)
		}
		s.ntas = append(s.ntas, n)
	}
	return s, nil
}

func (s *sec) get(zone string, now time.Time) (keyState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k, ok := s.keys[zone]
	if ok && !now.Before(k.expire) {
		delete(s.keys, zone)
		return keyState{}, false
	}
	return k, ok
}

func (s *sec) put(zone string, k keyState, ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	trim(s.keys, s.max)
	k.expire = time.Now().Add(ttl)
	s.keys[zone] = k
}

// keysFor returns zone's place in the chain of trust, from the cache or
// by walking up to a trust anchor: the zone's DS asked at its parent,
// validated with the parent's keys, then its DNSKEY set checked against
// it; a proven absent DS makes the zone insecure.
func (q *query) keysFor(zone string) keyState {
	s := q.r.sec
	if k, ok := s.get(zone, time.Now()); ok {
		return k
	}
	if q.keyBusy[zone] {
		return keyState{res: dnssec.Result{State: dnssec.Bogus, EDE: dns.ExtendedErrorCodeDNSBogus, Reason: "chain of trust loops at " + zone}}
	}
	if q.keyBusy == nil {
		q.keyBusy = map[string]bool{}
	}
	q.keyBusy[zone] = true
	defer delete(q.keyBusy, zone)
	k := q.fetchKeys(zone)
	if q.err() != nil {
		return k // not cached: the failure is the deadline's
	}
	ttl := min(keyTTL, q.r.cfg.MaxTTL)
	if k.res.State == dnssec.Bogus {
		ttl = bogusTTL
	}
	s.put(zone, k, ttl)
	return k
}

func bogusKeys(code uint16, format string, a ...any) keyState {
	return keyState{res: dnssec.Result{State: dnssec.Bogus, EDE: code, Reason: fmt.Sprintf(format, a...)}}
}

func (q *query) fetchKeys(zone string) keyState {
	s := q.r.sec
	if n := dnssec.UnderNTA(s.ntas, zone); n != "" {
		return keyState{res: dnssec.Result{State: dnssec.Insecure, NTA: true, Reason: "negative trust anchor " + n}}
	}
	a := s.anchors.Closest(zone)
	if a == nil {
		return keyState{res: dnssec.Result{State: dnssec.Indeterminate, Reason: "no trust anchor above " + zone}}
	}
	if a.Zone == zone {
		return q.zoneKeys(zone, a.DS, a.Keys)
	}
	res, err := q.resolveOne(zone, dns.TypeDS, 0)
	if err != nil || len(res.parts) == 0 {
		return bogusKeys(dns.ExtendedErrorCodeDNSBogus, "DS of %s: %v", zone, err)
	}
	p := res.parts[len(res.parts)-1]
	parent := p.zone
	if parent == zone || !dnssec.IsSubDomain(parent, zone) {
		return bogusKeys(dns.ExtendedErrorCodeDNSBogus, "DS of %s answered by %s", zone, parent)
	}
	pk := q.keysFor(parent)
	if pk.res.State != dnssec.Secure {
		return keyState{res: pk.res}
	}
	now := s.now()
	switch p.kind {
	case kindAnswer:
		var ds []*dns.DS
		var set []dns.RR
		for _, rr := range p.answer {
			if d, ok := rr.(*dns.DS); ok && strings.EqualFold(d.Hdr.Name, zone) {
				ds = append(ds, d)
				set = append(set, d)
			}
		}
		if len(ds) == 0 {
			return bogusKeys(dns.ExtendedErrorCodeDNSBogus, "DS of %s: no DS in the answer", zone)
		}
		if r := dnssec.VerifyRRsetKeys(set, p.sigs, pk.keys, parent, now, s.skew, s); r.State != dnssec.Secure {
			return keyState{res: r}
		}
		return q.zoneKeys(zone, ds, nil)
	case kindNoData:
		if r := q.verifyProof(p, pk.keys); r.State != dnssec.Secure {
			return keyState{res: r}
		}
		switch r := dnssec.Deny(dnssec.NoData, zone, dns.TypeDS, parent, p.proof); r.State {
		case dnssec.Secure:
			return keyState{res: dnssec.Result{State: dnssec.Insecure, Reason: "no DS for " + zone}}
		case dnssec.Insecure:
			return keyState{res: r}
		default:
			return keyState{res: r}
		}
	}
	return bogusKeys(dns.ExtendedErrorCodeDNSBogus, "DS of %s: %s", zone, p.kind)
}

// zoneKeys fetches zone's DNSKEY set and checks it against ds or anchor
// keys.
func (q *query) zoneKeys(zone string, ds []*dns.DS, anchors []*dns.DNSKEY) keyState {
	s := q.r.sec
	res, err := q.resolveOne(zone, dns.TypeDNSKEY, 0)
	if err != nil || len(res.parts) == 0 {
		return bogusKeys(dns.ExtendedErrorCodeDNSKEYMissing, "DNSKEY of %s: %v", zone, err)
	}
	p := res.parts[len(res.parts)-1]
	keys, r := dnssec.VerifyKeys(p.answer, p.sigs, ds, anchors, zone, s.now(), s.skew)
	return keyState{res: r, keys: dnssec.NewKeys(keys)}
}

// part is what one zone said on the way to an answer, with its signatures
// and denial proofs: the validator checks each part with its zone's keys.
type part struct {
	zone   string
	kind   kind
	qname  string
	qtype  uint16
	end    string
	answer []dns.RR
	sigs   []*dns.RRSIG
	proof  []dns.RR
	soa    *dns.SOA
}

// rrsets groups records by owner and type, in order of appearance (RRSIGs
// left out).
func rrsets(rrs []dns.RR) [][]dns.RR {
	return groupRRsets(nil, nil, rrs)
}

// groupRRsets is rrsets appending to sets, the records of all sets held
// in one slice appended to buf (both usually on the caller's stack) rather
// than each set grown on its own. A section holds few RRsets, so each
// record is matched against those found so far (owner without case,
// type) rather than through a map of built keys: every validated answer
// goes through here.
func groupRRsets(sets [][]dns.RR, buf []dns.RR, rrs []dns.RR) [][]dns.RR {
	n := 0
	for _, rr := range rrs {
		if rr.Header().Rrtype != dns.TypeRRSIG {
			n++
		}
	}
	if n == 0 {
		return sets
	}
	if cap(buf)-len(buf) < n {
		buf = make([]dns.RR, 0, n)
	}
	buf = buf[len(buf):]
	base := len(sets) // the sets made here start there
	taken := 0        // records of rrs placed so far
	for taken < n {
		// The first record not yet placed opens a set; every later one
		// of its owner and type joins it, in order.
		var first dns.RR
		start := len(buf)
		for _, rr := range rrs {
			h := rr.Header()
			if h.Rrtype == dns.TypeRRSIG {
				continue
			}
			if first == nil {
				if placed(sets[base:], rr) {
					continue
				}
				first = rr
			} else if fh := first.Header(); fh.Rrtype != h.Rrtype || !strings.EqualFold(fh.Name, h.Name) {
				continue
			}
			buf = append(buf, rr)
			taken++
		}
		sets = append(sets, buf[start:len(buf):len(buf)])
	}
	return sets
}

// placed: rr's owner and type are those of a set already made.
func placed(sets [][]dns.RR, rr dns.RR) bool {
	h := rr.Header()
	for _, set := range sets {
		if sh := set[0].Header(); sh.Rrtype == h.Rrtype && strings.EqualFold(sh.Name, h.Name) {
			return true
		}
	}
	return false
}

// verifyProof checks the signatures of a part's denial records and SOA.
// Every NXDOMAIN and NODATA miss comes here: the signatures and RRsets are
// gathered into slices sized once (on the stack for the usual proof of up
// to 8 records), not grown record by record.
func (q *query) verifyProof(p *part, keys dnssec.Keys) dnssec.Result {
	s := q.r.sec
	var sigStack [8]*dns.RRSIG
	sigs := sigStack[:0]
	for _, rr := range p.proof {
		if sg, ok := rr.(*dns.RRSIG); ok {
			sigs = append(sigs, sg)
		}
	}
	// One array for the records of all sets, the SOA's last: it goes to
	// the heap (the records reach miekg/dns's Verify), once.
	var rrStack [9]dns.RR
	var setStack [8][]dns.RR
	sets := groupRRsets(setStack[:0], rrStack[0:0:8], p.proof)
	if p.soa != nil {
		rrStack[8] = p.soa
		sets = append(sets, rrStack[8:9:9])
	}
	now := s.now()
	for _, set := range sets {
		if r := dnssec.VerifyRRsetKeys(set, sigs, keys, p.zone, now, s.skew, s); r.State != dnssec.Secure {
			return r
		}
	}
	return dnssec.Result{State: dnssec.Secure}
}

// validate checks every part of a resolution, each with its zone's keys:
// bogus if any part is, secure if all are, else insecure (or
// indeterminate).
func (q *query) validate(res result) dnssec.Result {
	if len(res.parts) == 0 {
		return dnssec.Result{State: dnssec.Indeterminate, Reason: "nothing to validate"}
	}
	out := dnssec.Result{State: dnssec.Secure}
	for _, p := range res.parts {
		r := q.validatePart(p)
		if r.State == dnssec.Bogus {
			return r
		}
		if r.State != dnssec.Secure && out.State == dnssec.Secure {
			out = r
		}
	}
	return out
}

func (q *query) validatePart(p *part) dnssec.Result {
	s := q.r.sec
	if n := dnssec.UnderNTA(s.ntas, p.qname); n != "" {
		// A negative trust anchor on a name inside a zone, not a zone.
		return dnssec.Result{State: dnssec.Insecure, NTA: true, Reason: "negative trust anchor " + n}
	}
	ks := q.keysFor(p.zone)
	if ks.res.State != dnssec.Secure {
		return ks.res
	}
	now := s.now()
	var dname *dns.DNAME
	for _, set := range rrsets(p.answer) {
		h := set[0].Header()
		zone, keys := p.zone, ks.keys
		for _, sg := range p.sigs {
			// A zone below the one asked, served by the same server.
			signer := strings.ToLower(dns.Fqdn(sg.SignerName))
			if sg.TypeCovered == h.Rrtype && strings.EqualFold(sg.Hdr.Name, h.Name) && signer != zone &&
				dnssec.IsSubDomain(zone, signer) && dnssec.IsSubDomain(signer, strings.ToLower(h.Name)) {
				sk := q.keysFor(signer)
				if sk.res.State != dnssec.Secure {
					return sk.res
				}
				zone, keys = signer, sk.keys
				break
			}
		}
		if c, ok := set[0].(*dns.CNAME); ok && dname != nil && len(set) == 1 &&
			strings.EqualFold(c.Target, synthesise(dname, c.Hdr.Name)) {
			continue // the CNAME a validated DNAME implies (unsigned)
		}
		r := dnssec.VerifyRRsetKeys(set, p.sigs, keys, zone, now, s.skew, s)
		if r.State != dnssec.Secure {
			return r
		}
		if d, ok := set[0].(*dns.DNAME); ok {
			dname = d
		}
		labels := uint8(255)
		for _, sg := range p.sigs {
			if sg.TypeCovered == h.Rrtype && strings.EqualFold(sg.Hdr.Name, h.Name) {
				labels = min(labels, sg.Labels)
			}
		}
		if int(labels) < dns.CountLabel(h.Name) {
			if r := q.verifyProof(p, keys); r.State != dnssec.Secure {
				return r
			}
			if r := dnssec.Expanded(h.Name, labels, zone, p.proof); r.State != dnssec.Secure {
				return r
			}
		}
	}
	switch p.kind {
	case kindNXDomain, kindNoData:
		if r := q.verifyProof(p, ks.keys); r.State != dnssec.Secure {
			return r
		}
		kind := dnssec.NoData
		if p.kind == kindNXDomain {
			kind = dnssec.NXDomain
		}
		return dnssec.DenyCached(kind, p.end, p.qtype, p.zone, p.proof, s)
	}
	return dnssec.Result{State: dnssec.Secure}
}

// synthesise is the CNAME target a DNAME implies for name.
func synthesise(d *dns.DNAME, name string) string {
	name = strings.ToLower(dns.Fqdn(name))
	owner := strings.ToLower(dns.Fqdn(d.Hdr.Name))
	if !dnssec.IsSubDomain(owner, name) || name == owner {
		return ""
	}
	return name[:len(name)-len(owner)] + strings.ToLower(dns.Fqdn(d.Target))
}
