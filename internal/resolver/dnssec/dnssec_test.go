package dnssec

import (
	"crypto"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

var t0 = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)

type signer struct {
	key  *dns.DNSKEY
	priv crypto.PrivateKey
}

func newSigner(t testing.TB, zone string, flags uint16) signer {
	t.Helper()
	k := &dns.DNSKEY{Hdr: dns.RR_Header{Name: zone, Rrtype: dns.TypeDNSKEY, Class: dns.ClassINET, Ttl: 3600},
		Flags: flags, Protocol: 3, Algorithm: dns.ECDSAP256SHA256}
	priv, err := k.Generate(256)
	if err != nil {
		t.Fatal(err)
	}
	return signer{k, priv}
}

// sign signs rrset; mod changes the RRSIG before signing.
func (s signer) sign(t testing.TB, rrset []dns.RR, mod func(*dns.RRSIG)) *dns.RRSIG {
	t.Helper()
	h := rrset[0].Header()
	sig := &dns.RRSIG{Hdr: dns.RR_Header{Name: h.Name, Rrtype: dns.TypeRRSIG, Class: dns.ClassINET, Ttl: h.Ttl},
		Algorithm: s.key.Algorithm, SignerName: s.key.Hdr.Name, KeyTag: s.key.KeyTag(),
		Inception: uint32(t0.Add(-24 * time.Hour).Unix()), Expiration: uint32(t0.Add(24 * time.Hour).Unix())}
	if mod != nil {
		mod(sig)
	}
	if err := sig.Sign(s.priv.(crypto.Signer), rrset); err != nil {
		t.Fatal(err)
	}
	return sig
}

func rr(t testing.TB, s string) dns.RR {
	t.Helper()
	r, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestVerifyRRset(t *testing.T) {
	zsk := newSigner(t, "example.", 256)
	other := newSigner(t, "example.", 256)
	set := []dns.RR{rr(t, "www.example. 300 IN A 192.0.2.1"), rr(t, "www.example. 300 IN A 192.0.2.2")}
	wild := []dns.RR{rr(t, "x.wild.example. 300 IN A 192.0.2.3")}
	keys := []*dns.DNSKEY{zsk.key}
	cases := []struct {
		name  string
		set   []dns.RR
		sigs  func() []*dns.RRSIG
		now   time.Time
		skew  time.Duration
		state State
		ede   uint16
	}{
		{"good", set, func() []*dns.RRSIG { return []*dns.RRSIG{zsk.sign(t, set, nil)} }, t0, 0, Secure, 0},
		{"no signature", set, func() []*dns.RRSIG { return nil }, t0, 0, Bogus, dns.ExtendedErrorCodeRRSIGsMissing},
		{"expired", set, func() []*dns.RRSIG { return []*dns.RRSIG{zsk.sign(t, set, nil)} }, t0.Add(48 * time.Hour), 0, Bogus, dns.ExtendedErrorCodeSignatureExpired},
		{"expired within skew", set, func() []*dns.RRSIG { return []*dns.RRSIG{zsk.sign(t, set, nil)} }, t0.Add(25 * time.Hour), 2 * time.Hour, Secure, 0},
		{"not yet valid", set, func() []*dns.RRSIG { return []*dns.RRSIG{zsk.sign(t, set, nil)} }, t0.Add(-48 * time.Hour), 0, Bogus, dns.ExtendedErrorCodeSignatureNotYetValid},
		{"expires before inception", set, func() []*dns.RRSIG {
			return []*dns.RRSIG{zsk.sign(t, set, func(s *dns.RRSIG) { s.Inception, s.Expiration = s.Expiration, s.Inception })}
		}, t0, 0, Bogus, dns.ExtendedErrorCodeSignatureExpiredBeforeValid},
		{"other key", set, func() []*dns.RRSIG { return []*dns.RRSIG{other.sign(t, set, nil)} }, t0, 0, Bogus, dns.ExtendedErrorCodeDNSKEYMissing},
		{"wrong signer", set, func() []*dns.RRSIG {
			return []*dns.RRSIG{zsk.sign(t, set, func(s *dns.RRSIG) { s.SignerName = "evil." })}
		}, t0, 0, Bogus, dns.ExtendedErrorCodeDNSBogus},
		{"unsupported algorithm", set, func() []*dns.RRSIG {
			s := zsk.sign(t, set, nil)
			s.Algorithm = dns.RSAMD5
			return []*dns.RRSIG{s}
		}, t0, 0, Bogus, dns.ExtendedErrorCodeUnsupportedDNSKEYAlgorithm},
		{"tampered", set, func() []*dns.RRSIG {
			s := zsk.sign(t, set, nil)
			set[1] = rr(t, "www.example. 300 IN A 192.0.2.99")
			return []*dns.RRSIG{s}
		}, t0, 0, Bogus, dns.ExtendedErrorCodeDNSBogus},
		{"too many labels", wild, func() []*dns.RRSIG {
			s := zsk.sign(t, wild, nil)
			s.Labels = 4 // Sign sets the count: claim more afterwards
			return []*dns.RRSIG{s}
		}, t0, 0, Bogus, dns.ExtendedErrorCodeDNSBogus},
		{"wildcard expansion", wild, func() []*dns.RRSIG {
			// Signed as *.wild.example.: the signature covers the wildcard owner.
			w := []dns.RR{rr(t, "*.wild.example. 300 IN A 192.0.2.3")}
			s := zsk.sign(t, w, func(s *dns.RRSIG) { s.Labels = 2 })
			s.Hdr.Name = "x.wild.example."
			return []*dns.RRSIG{s}
		}, t0, 0, Secure, 0},
		{"good among bad", set, func() []*dns.RRSIG {
			set[1] = rr(t, "www.example. 300 IN A 192.0.2.2")
			return []*dns.RRSIG{other.sign(t, set, nil), zsk.sign(t, set, nil)}
		}, t0, 0, Secure, 0},
	}
	for _, c := range cases {
		sigs := c.sigs()
		r := VerifyRRset(c.set, sigs, keys, "example.", c.now, c.skew)
		if r.State != c.state || r.EDE != c.ede {
			t.Errorf("%s: %s EDE %d (%s), want %s EDE %d", c.name, r.State, r.EDE, r.Reason, c.state, c.ede)
		}
	}
	if r := VerifyRRset(set, nil, keys, "other.", t0, 0); r.State != Bogus {
		t.Errorf("out of zone: %v", r)
	}
}

func TestVerifyKeys(t *testing.T) {
	ksk := newSigner(t, "example.", 257)
	zsk := newSigner(t, "example.", 256)
	set := []dns.RR{ksk.key, zsk.key}
	sigs := []*dns.RRSIG{ksk.sign(t, set, nil)}
	zsigned := []*dns.RRSIG{zsk.sign(t, set, nil)}
	ds := func(d uint8) *dns.DS { return ksk.key.ToDS(d) }
	bad := ds(dns.SHA256)
	bad = &dns.DS{Hdr: bad.Hdr, KeyTag: bad.KeyTag, Algorithm: bad.Algorithm, DigestType: bad.DigestType, Digest: strings.Repeat("00", 32)}
	gost := &dns.DS{Hdr: bad.Hdr, KeyTag: bad.KeyTag, Algorithm: bad.Algorithm, DigestType: dns.GOST94, Digest: "00"}
	rsamd5 := &dns.DS{Hdr: bad.Hdr, KeyTag: bad.KeyTag, Algorithm: dns.RSAMD5, DigestType: dns.SHA256, Digest: "00"}
	for _, c := range []struct {
		name    string
		sigs    []*dns.RRSIG
		ds      []*dns.DS
		anchors []*dns.DNSKEY
		state   State
		ede     uint16
	}{
		{"SHA-1", sigs, []*dns.DS{ds(dns.SHA1)}, nil, Secure, 0},
		{"SHA-256", sigs, []*dns.DS{ds(dns.SHA256)}, nil, Secure, 0},
		{"SHA-384", sigs, []*dns.DS{ds(dns.SHA384)}, nil, Secure, 0},
		{"DNSKEY anchor", sigs, nil, []*dns.DNSKEY{ksk.key}, Secure, 0},
		{"digest matches no key", sigs, []*dns.DS{bad}, nil, Bogus, dns.ExtendedErrorCodeDNSKEYMissing},
		{"set signed by the ZSK only", zsigned, []*dns.DS{ds(dns.SHA256)}, nil, Bogus, dns.ExtendedErrorCodeDNSKEYMissing},
		{"unsupported digest only", sigs, []*dns.DS{gost}, nil, Insecure, dns.ExtendedErrorCodeUnsupportedDSDigestType},
		{"unsupported algorithm only", sigs, []*dns.DS{rsamd5}, nil, Insecure, dns.ExtendedErrorCodeUnsupportedDNSKEYAlgorithm},
		{"unsupported beside a good one", sigs, []*dns.DS{gost, ds(dns.SHA256)}, nil, Secure, 0},
	} {
		keys, r := VerifyKeys(set, c.sigs, c.ds, c.anchors, "example.", t0, 0)
		if r.State != c.state || r.EDE != c.ede {
			t.Errorf("%s: %s EDE %d (%s), want %s EDE %d", c.name, r.State, r.EDE, r.Reason, c.state, c.ede)
		}
		if r.State == Secure && len(keys) != 2 {
			t.Errorf("%s: %d keys", c.name, len(keys))
		}
	}
	if _, r := VerifyKeys(nil, nil, []*dns.DS{ds(dns.SHA256)}, nil, "example.", t0, 0); r.EDE != dns.ExtendedErrorCodeDNSKEYMissing {
		t.Errorf("no keys: %v", r)
	}
}

// zone is a small zone's names and types, for building NSEC and NSEC3
// chains: example. with a, c (a delegation without DS), *.w, x.y (y an
// empty non-terminal).
var zone = map[string][]uint16{
	"example.":      {dns.TypeSOA, dns.TypeNS, dns.TypeDNSKEY},
	"a.example.":    {dns.TypeA},
	"c.example.":    {dns.TypeNS},
	"*.w.example.":  {dns.TypeTXT},
	"x.y.example.":  {dns.TypeA},
	"ds.example.":   {dns.TypeNS, dns.TypeDS},
	"w.example.":    {},
	"y.example.":    {},
	"zzz.example.":  {dns.TypeCNAME},
	"sub.example.":  {dns.TypeNS, dns.TypeSOA}, // a child's apex, as its NSEC says
	"deep.example.": {dns.TypeA},
}

func nsecChain() []dns.RR {
	var names []string
	for n, types := range zone {
		if len(types) > 0 {
			names = append(names, n)
		}
	}
	sort.Slice(names, func(i, j int) bool { return canonCmp(names[i], names[j]) < 0 })
	var out []dns.RR
	for i, n := range names {
		next := names[(i+1)%len(names)]
		out = append(out, &dns.NSEC{Hdr: dns.RR_Header{Name: n, Rrtype: dns.TypeNSEC, Class: dns.ClassINET, Ttl: 300},
			NextDomain: next, TypeBitMap: append(slices.Clone(zone[n]), dns.TypeNSEC, dns.TypeRRSIG)})
	}
	return out
}

func nsec3Chain(optOut bool, iter uint16) []dns.RR {
	type h struct {
		hash  string
		types []uint16
	}
	var hs []h
	for n, types := range zone {
		if optOut && slices.Equal(types, []uint16{dns.TypeNS}) {
			continue // an unsigned delegation: left out of an opt-out chain
		}
		hs = append(hs, h{dns.HashName(n, dns.SHA1, iter, "AB"), types})
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].hash < hs[j].hash })
	var out []dns.RR
	for i, x := range hs {
		r := &dns.NSEC3{Hdr: dns.RR_Header{Name: strings.ToLower(x.hash) + ".example.", Rrtype: dns.TypeNSEC3, Class: dns.ClassINET, Ttl: 300},
			Hash: dns.SHA1, Iterations: iter, Salt: "AB", SaltLength: 1, NextDomain: hs[(i+1)%len(hs)].hash,
			HashLength: 20, TypeBitMap: x.types}
		if optOut {
			r.Flags = 1
		}
		out = append(out, r)
	}
	return out
}

func TestDeny(t *testing.T) {
	nsec, nsec3, optout, costly := nsecChain(), nsec3Chain(false, 1), nsec3Chain(true, 1), nsec3Chain(false, 500)
	hashes := &mapHashCache{m: map[string]string{}}
	for _, c := range []struct {
		name  string
		proof []dns.RR
		kind  int
		qname string
		qtype uint16
		state State
	}{
		{"NSEC NXDOMAIN", nsec, NXDomain, "b.example.", dns.TypeA, Secure},
		{"NSEC NXDOMAIN below a name", nsec, NXDomain, "q.a.example.", dns.TypeA, Secure},
		{"NSEC NXDOMAIN for an existing name", nsec, NXDomain, "a.example.", dns.TypeA, Bogus},
		{"NSEC NXDOMAIN under a wildcard", nsec, NXDomain, "q.w.example.", dns.TypeA, Bogus},
		{"NSEC NODATA", nsec, NoData, "a.example.", dns.TypeTXT, Secure},
		{"NSEC NODATA for a type present", nsec, NoData, "a.example.", dns.TypeA, Bogus},
		{"NSEC NODATA at a CNAME", nsec, NoData, "zzz.example.", dns.TypeA, Bogus},
		{"NSEC NODATA empty non-terminal", nsec, NoData, "y.example.", dns.TypeA, Secure},
		{"NSEC wildcard NODATA", nsec, NoData, "q.w.example.", dns.TypeA, Secure},
		{"NSEC no DS at a delegation", nsec, NoData, "c.example.", dns.TypeDS, Secure},
		{"NSEC DS present", nsec, NoData, "ds.example.", dns.TypeDS, Bogus},
		{"NSEC no DS from the child's apex", nsec, NoData, "sub.example.", dns.TypeDS, Bogus},
		{"NSEC A at a delegation from the parent", nsec, NoData, "c.example.", dns.TypeA, Bogus},
		{"NSEC nothing", nil, NXDomain, "b.example.", dns.TypeA, Bogus},
		{"NSEC3 NXDOMAIN", nsec3, NXDomain, "b.example.", dns.TypeA, Secure},
		{"NSEC3 NXDOMAIN deeper", nsec3, NXDomain, "q.b.a.example.", dns.TypeA, Secure},
		{"NSEC3 NXDOMAIN for an existing name", nsec3, NXDomain, "a.example.", dns.TypeA, Bogus},
		{"NSEC3 NXDOMAIN under a wildcard", nsec3, NXDomain, "q.w.example.", dns.TypeA, Bogus},
		{"NSEC3 NODATA", nsec3, NoData, "a.example.", dns.TypeTXT, Secure},
		{"NSEC3 NODATA type present", nsec3, NoData, "a.example.", dns.TypeA, Bogus},
		{"NSEC3 wildcard NODATA", nsec3, NoData, "q.w.example.", dns.TypeA, Secure},
		{"NSEC3 no DS", nsec3, NoData, "c.example.", dns.TypeDS, Secure},
		{"NSEC3 DS present", nsec3, NoData, "ds.example.", dns.TypeDS, Bogus},
		{"NSEC3 opt-out no DS", optout, NoData, "c.example.", dns.TypeDS, Insecure},
		{"NSEC3 opt-out NXDOMAIN", optout, NXDomain, "b.example.", dns.TypeA, Insecure},
		{"NSEC3 too many iterations", costly, NXDomain, "b.example.", dns.TypeA, Insecure},
		{"NSEC3 outside the zone", nsec3, NXDomain, "b.other.", dns.TypeA, Bogus},
	} {
		zoneName := "example."
		if strings.HasSuffix(c.qname, "other.") {
			zoneName = "other."
		}
		// Without a hash cache, then twice with one shared by every
		// case (the second time from it).
		for i, hc := range []HashCache{nil, hashes, hashes} {
			r := DenyCached(c.kind, c.qname, c.qtype, zoneName, c.proof, hc)
			if r.State != c.state {
				t.Errorf("%s (%d): %s (%s), want %s", c.name, i, r.State, r.Reason, c.state)
			}
			if r.State == Bogus && r.EDE == 0 {
				t.Errorf("%s: bogus without a code", c.name)
			}
		}
	}
	if len(hashes.m) == 0 || hashes.hits == 0 {
		t.Fatalf("hash cache: %d entries, %d hits", len(hashes.m), hashes.hits)
	}
}

// mapHashCache is a HashCache in a map, counting hits.
type mapHashCache struct {
	m    map[string]string
	hits int
}

func (c *mapHashCache) NSEC3Hash(name, salt string, iterations uint16) (string, bool) {
	h, ok := c.m[fmt.Sprint(name, "/", salt, "/", iterations)]
	if ok {
		c.hits++
	}
	return h, ok
}

func (c *mapHashCache) AddNSEC3Hash(name, salt string, iterations uint16, hash string) {
	c.m[fmt.Sprint(name, "/", salt, "/", iterations)] = hash
}

// TestDenyHashCacheUsed: the closest encloser's hash comes from the cache
// (a wrong one there breaks the proof), and the name asked is not kept.
func TestDenyHashCacheUsed(t *testing.T) {
	proof := nsec3Chain(false, 1)
	hc := &mapHashCache{m: map[string]string{}}
	if r := DenyCached(NXDomain, "b.example.", dns.TypeA, "example.", proof, hc); r.State != Secure {
		t.Fatalf("first: %s (%s)", r.State, r.Reason)
	}
	if _, kept := hc.m["b.example./AB/1"]; kept || hc.m["example./AB/1"] == "" {
		t.Fatalf("cache after one denial: %v", hc.m)
	}
	if r := DenyCached(NXDomain, "nx.example.", dns.TypeA, "example.", proof, hc); r.State != Secure {
		t.Fatalf("from the cache: %s (%s)", r.State, r.Reason)
	}
	hc.m["example./AB/1"] = strings.Repeat("0", 32)
	if r := DenyCached(NXDomain, "nx.example.", dns.TypeA, "example.", proof, hc); r.State != Bogus {
		t.Fatalf("with a wrong cached hash of the apex: %s, want bogus (the cache is not used)", r.State)
	}
}

func TestExpanded(t *testing.T) {
	nsec, nsec3 := nsecChain(), nsec3Chain(false, 1)
	for _, c := range []struct {
		name   string
		proof  []dns.RR
		qname  string
		labels uint8
		state  State
	}{
		{"NSEC", nsec, "q.w.example.", 2, Secure},
		{"NSEC3", nsec3, "q.w.example.", 2, Secure},
		{"NSEC3 deeper", nsec3, "r.q.w.example.", 2, Secure},
		{"no expansion", nil, "a.example.", 2, Secure},
		{"NSEC name exists", nsec, "a.example.", 1, Bogus},
		{"no proof", nil, "q.w.example.", 2, Bogus},
	} {
		if r := Expanded(c.qname, c.labels, "example.", c.proof); r.State != c.state {
			t.Errorf("%s: %s (%s), want %s", c.name, r.State, r.Reason, c.state)
		}
	}
}

func TestParseAnchors(t *testing.T) {
	a, err := ParseAnchors(RootAnchors)
	if err != nil {
		t.Fatal(err)
	}
	root := a["."]
	if root == nil || len(root.DS) != 2 || root.DS[0].KeyTag != 20326 || root.DS[1].KeyTag != 38696 {
		t.Fatalf("built-in anchors: %+v", root)
	}
	ksk := newSigner(t, "example.", 257)
	text := "; comment\n\n" + ksk.key.String() + "\nsub.example. 3600 IN DS 1 8 2 " + strings.Repeat("AB", 32) + "\n"
	a, err = ParseAnchors(text)
	if err != nil {
		t.Fatal(err)
	}
	if len(a["example."].Keys) != 1 || len(a["sub.example."].DS) != 1 || !slices.Equal(a.Zones(), []string{"example.", "sub.example."}) {
		t.Fatalf("anchors %v", a.Zones())
	}
	if c := a.Closest("www.sub.example."); c == nil || c.Zone != "sub.example." {
		t.Errorf("closest: %+v", c)
	}
	if c := a.Closest("other."); c != nil {
		t.Errorf("closest of other.: %+v", c)
	}
	zsk := newSigner(t, "example.", 0)
	for _, bad := range []string{"", "; nothing\n", "example. A 192.0.2.1", zsk.key.String(), "example. CH DS 1 8 2 AB", "example. DS 1 8", "$INCLUDE /etc/passwd"} {
		if _, err := ParseAnchors(bad); err == nil {
			t.Errorf("ParseAnchors(%q) accepted", bad)
		}
	}
	if UnderNTA([]string{"bad.example."}, "www.bad.example.") != "bad.example." || UnderNTA([]string{"bad.example."}, "good.example.") != "" {
		t.Error("UnderNTA")
	}
}

func FuzzParseAnchors(f *testing.F) {
	f.Add(RootAnchors)
	f.Add("example. 3600 IN DNSKEY 257 3 13 kXKkvWU3vGYfTJGl3qBd4qhiWp5aRs7YtkCJxD2d+t7KXqwahww5IgJtxJT2yFItlggazyfXqJEVOmMJ3qT0tQ==")
	f.Add("sub.example. DS 1 8 2 ABAB")
	f.Fuzz(func(t *testing.T, text string) {
		a, err := ParseAnchors(text)
		if err != nil {
			return
		}
		for z, x := range a {
			if z != x.Zone || len(x.DS)+len(x.Keys) == 0 {
				t.Fatalf("anchor %q: %+v", z, x)
			}
		}
	})
}

// FuzzDeny feeds crafted NSEC/NSEC3 records and names to the denial
// proofs: any input gives a result, never a panic, and a bogus one has a
// code.
func FuzzDeny(f *testing.F) {
	for _, rr := range append(nsecChain(), nsec3Chain(true, 1)...) {
		f.Add(rr.String(), "b.example.", uint16(dns.TypeA), false, uint8(2))
	}
	f.Add("b.example. 300 IN NSEC3 1 1 0 - 2T7B4G4VSA5SMI47K61MV5BV1A22BOJR A", "*.example.", uint16(dns.TypeDS), true, uint8(0))
	f.Fuzz(func(t *testing.T, records, qname string, qtype uint16, nx bool, labels uint8) {
		if _, ok := dns.IsDomainName(qname); !ok {
			return
		}
		var proof []dns.RR
		zp := dns.NewZoneParser(strings.NewReader(records), "example.", "")
		for rr, more := zp.Next(); more && len(proof) < 20; rr, more = zp.Next() {
			proof = append(proof, rr)
		}
		proof = append(proof, nsec3Chain(false, 0)[:2]...)
		kind := NoData
		if nx {
			kind = NXDomain
		}
		r := Deny(kind, qname, qtype, "example.", proof)
		if r.State == Bogus && r.EDE == 0 {
			t.Fatalf("bogus without a code: %v", r)
		}
		// A hash cache changes nothing: filled by this proof, then
		// used by it again.
		hc := &mapHashCache{m: map[string]string{}}
		for range 2 {
			if c := DenyCached(kind, qname, qtype, "example.", proof, hc); c.State != r.State || c.EDE != r.EDE {
				t.Fatalf("with a hash cache: %v, without: %v", c, r)
			}
		}
		_ = Expanded(qname, labels, "example.", proof)
	})
}

type mapCache struct {
	m    map[[32]byte]time.Time
	hits int
}

func (c *mapCache) Verified(fp [32]byte) bool {
	_, ok := c.m[fp]
	if ok {
		c.hits++
	}
	return ok
}
func (c *mapCache) Add(fp [32]byte, exp time.Time) { c.m[fp] = exp }

// TestSigCache: a signature met again is a hit; the same signature over
// other data, under another key, or outside its validity is not, and the
// data's TTLs and order do not matter.
func TestSigCache(t *testing.T) {
	zsk := newSigner(t, "example.", 256)
	other := newSigner(t, "example.", 256)
	set := []dns.RR{rr(t, "www.example. 300 IN A 192.0.2.1"), rr(t, "www.example. 300 IN A 192.0.2.2")}
	sigs := []*dns.RRSIG{zsk.sign(t, set, nil)}
	c := &mapCache{m: map[[32]byte]time.Time{}}
	keys := []*dns.DNSKEY{zsk.key}
	if r := VerifyRRsetCached(set, sigs, keys, "example.", t0, 0, c); r.State != Secure || c.hits != 0 || len(c.m) != 1 {
		t.Fatalf("first: %v, %d hits, %d entries", r, c.hits, len(c.m))
	}
	again := []dns.RR{rr(t, "WWW.example. 100 IN A 192.0.2.2"), rr(t, "www.example. 100 IN A 192.0.2.1")}
	if r := VerifyRRsetCached(again, sigs, keys, "example.", t0, 0, c); r.State != Secure || c.hits != 1 {
		t.Fatalf("again: %v, %d hits", r, c.hits)
	}
	forged := []dns.RR{rr(t, "www.example. 300 IN A 192.0.2.1"), rr(t, "www.example. 300 IN A 203.0.113.9")}
	if r := VerifyRRsetCached(forged, sigs, keys, "example.", t0, 0, c); r.State != Bogus || c.hits != 1 {
		t.Fatalf("forged: %v, %d hits", r, c.hits)
	}
	if r := VerifyRRsetCached(set, sigs, keys, "example.", t0.Add(72*time.Hour), 0, c); r.EDE != dns.ExtendedErrorCodeSignatureExpired || c.hits != 1 {
		t.Fatalf("expired: %v, %d hits", r, c.hits)
	}
	k2 := *zsk.key
	k2.PublicKey = other.key.PublicKey
	if fp1, _ := Fingerprint(sigs[0], zsk.key, set); fp1 == func() [32]byte { fp, _ := Fingerprint(sigs[0], &k2, set); return fp }() {
		t.Fatal("fingerprint ignores the key")
	}
}

func BenchmarkVerifyRRsetCached(b *testing.B) {
	zsk := newSigner(b, "example.", 256)
	set := []dns.RR{rr(b, "www.example. 300 IN A 192.0.2.1")}
	sigs := []*dns.RRSIG{zsk.sign(b, set, nil)}
	keys := []*dns.DNSKEY{zsk.key}
	c := &mapCache{m: map[[32]byte]time.Time{}}
	b.ReportAllocs()
	for b.Loop() {
		if r := VerifyRRsetCached(set, sigs, keys, "example.", t0, 0, c); r.State != Secure {
			b.Fatal(r)
		}
	}
}

// TestFingerprintLargeRRset: an RRset too big for Fingerprint's stack
// buffers (40 records, several KB) is fingerprinted as a small one is: the
// same whatever the order and TTLs, different when one record differs.
func TestFingerprintLargeRRset(t *testing.T) {
	zsk := newSigner(t, "example.", 256)
	var set, shuffled, changed []dns.RR
	for i := range 40 {
		text := fmt.Sprintf("txt.example. 300 IN TXT \"record %d %s\"", i, strings.Repeat("x", 100))
		set = append(set, rr(t, text))
		shuffled = append([]dns.RR{rr(t, strings.Replace(text, " 300 ", " 60 ", 1))}, shuffled...)
		if i == 39 {
			text = strings.Replace(text, "record", "RECORD", 1)
		}
		changed = append(changed, rr(t, text))
	}
	sig := zsk.sign(t, set, nil)
	a, okA := Fingerprint(sig, zsk.key, set)
	b, okB := Fingerprint(sig, zsk.key, shuffled)
	c, okC := Fingerprint(sig, zsk.key, changed)
	if !okA || !okB || !okC || a != b || a == c {
		t.Fatalf("ok %v %v %v; same set reordered equal: %v; changed record differs: %v", okA, okB, okC, a == b, a != c)
	}
	if r := VerifyRRsetCached(shuffled, []*dns.RRSIG{sig}, []*dns.DNSKEY{zsk.key}, "example.", t0, 0, &mapCache{m: map[[32]byte]time.Time{}}); r.State != Secure {
		t.Fatalf("large RRset: %v", r)
	}
}

// TestSigCacheWildcard: the names a wildcard answers share the
// wildcard's signature check (one fingerprint: the second name is a cache
// hit), a different record under the wildcard does not verify, and a
// signature that is not a wildcard's keeps one fingerprint per owner.
func TestSigCacheWildcard(t *testing.T) {
	zsk := newSigner(t, "example.", 256)
	keys := []*dns.DNSKEY{zsk.key}
	w := []dns.RR{rr(t, "*.wild.example. 300 IN A 192.0.2.3")}
	sig := zsk.sign(t, w, func(s *dns.RRSIG) { s.Labels = 2 })
	c := &mapCache{m: map[[32]byte]time.Time{}}
	for i, name := range []string{"x.wild.example.", "Y.wild.example.", "a.b.wild.example."} {
		s := *sig
		s.Hdr.Name = name
		set := []dns.RR{rr(t, name+" 300 IN A 192.0.2.3")}
		if r := VerifyRRsetCached(set, []*dns.RRSIG{&s}, keys, "example.", t0, 0, c); r.State != Secure || c.hits != i || len(c.m) != 1 {
			t.Fatalf("%s: %v, %d hits, %d entries", name, r, c.hits, len(c.m))
		}
	}
	s := *sig
	s.Hdr.Name = "z.wild.example."
	if r := VerifyRRsetCached([]dns.RR{rr(t, "z.wild.example. 300 IN A 192.0.2.4")}, []*dns.RRSIG{&s}, keys, "example.", t0, 0, c); r.State != Bogus {
		t.Fatalf("other data under the wildcard: %v", r)
	}
	a := []dns.RR{rr(t, "a.example. 300 IN A 192.0.2.5")}
	b := []dns.RR{rr(t, "b.example. 300 IN A 192.0.2.5")}
	sa := zsk.sign(t, a, nil)
	fa, _ := Fingerprint(sa, zsk.key, a)
	fb, _ := Fingerprint(sa, zsk.key, b)
	if fa == fb {
		t.Fatal("a signature of a.example. fingerprints b.example.'s records the same")
	}
}

// TestFingerprintEscapedOwner: an owner with an escaped dot (a label
// holding "."), whose wire length is not its text's plus one: its records'
// data is still found where it is (a second record differs in data, so
// the fingerprints differ; the same set again hits the cache).
func TestFingerprintEscapedOwner(t *testing.T) {
	zsk := newSigner(t, "example.", 256)
	keys := []*dns.DNSKEY{zsk.key}
	set := []dns.RR{rr(t, `a\.b.example. 300 IN A 192.0.2.1`)}
	other := []dns.RR{rr(t, `a\.b.example. 300 IN A 192.0.2.2`)}
	sig := zsk.sign(t, set, nil)
	fa, okA := Fingerprint(sig, zsk.key, set)
	fo, okO := Fingerprint(sig, zsk.key, other)
	if !okA || !okO || fa == fo {
		t.Fatalf("escaped owner: ok %v %v, fingerprints equal for different data: %v", okA, okO, fa == fo)
	}
	c := &mapCache{m: map[[32]byte]time.Time{}}
	for i := range 2 {
		if r := VerifyRRsetCached(set, []*dns.RRSIG{sig}, keys, "example.", t0, 0, c); r.State != Secure || c.hits != i {
			t.Fatalf("round %d: %v, %d hits", i, r, c.hits)
		}
	}
	if r := VerifyRRsetCached(other, []*dns.RRSIG{sig}, keys, "example.", t0, 0, c); r.State != Bogus {
		t.Fatalf("other data: %v", r)
	}
}
