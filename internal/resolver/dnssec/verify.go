package dnssec

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// SupportedAlgorithm says whether signatures of a DNSKEY algorithm are
// checked: unbound's default set. A zone whose DS records name only other
// algorithms is treated as insecure (RFC 4035 section 5.2).
func SupportedAlgorithm(alg uint8) bool {
	switch alg {
	case dns.RSASHA1, dns.RSASHA1NSEC3SHA1, dns.RSASHA256, dns.RSASHA512,
		dns.ECDSAP256SHA256, dns.ECDSAP384SHA384, dns.ED25519:
		return true
	}
	return false
}

// SupportedDigest says whether a DS digest type is computed: SHA-1, SHA-256,
// SHA-384.
func SupportedDigest(t uint8) bool {
	return t == dns.SHA1 || t == dns.SHA256 || t == dns.SHA384
}

// year68 is 2^31 seconds: RRSIG times are serial numbers (RFC 4034 3.1.5).
const year68 = 1 << 31

// sigTimes returns an RRSIG's inception and expiration as Unix times, read
// in serial arithmetic near now.
func sigTimes(s *dns.RRSIG, now int64) (int64, int64) {
	ti := int64(s.Inception) + (int64(s.Inception)-now)/year68*year68
	te := int64(s.Expiration) + (int64(s.Expiration)-now)/year68*year68
	return ti, te
}

// VerifyRRset checks that one of sigs, made by zone, signs rrset (one owner,
// type and class) under one of keys. now and skew are the clock: a
// signature is accepted from inception-skew to expiration+skew. rrset's
// TTLs are not changed. A secure result needs one good signature; when none
// is good, the reason is the most telling failure met.
func VerifyRRset(rrset []dns.RR, sigs []*dns.RRSIG, keys []*dns.DNSKEY, zone string, now time.Time, skew time.Duration) Result {
	return VerifyRRsetCached(rrset, sigs, keys, zone, now, skew, nil)
}

// SigCache remembers signatures already verified, by Fingerprint, so that
// the same signature over the same records under the same key, met again
// (the resolver's cache expired, the server sent the same data), costs a
// hash instead of public-key arithmetic. Every other check (signer,
// labels, validity period at now, the key being trusted now) is made
// again each time.
type SigCache interface {
	Verified(fp [32]byte) bool
	Add(fp [32]byte, expiration time.Time)
}

// VerifyRRsetCached is VerifyRRset with a cache of verified signatures
// (nil: none).
func VerifyRRsetCached(rrset []dns.RR, sigs []*dns.RRSIG, keys []*dns.DNSKEY, zone string, now time.Time, skew time.Duration, cache SigCache) Result {
	return verifyRRset(rrset, sigs, keys, nil, zone, now, skew, cache)
}

// Keys is a zone's keys with their tags, computed once (NewKeys): a
// validating resolver checks every answer of a zone against the same keys,
// and matching a signature to its key by tag would otherwise decode each
// key's base64 anew for each signature.
type Keys struct {
	List []*dns.DNSKEY
	tags []uint16
}

// NewKeys computes the tags of list's keys.
func NewKeys(list []*dns.DNSKEY) Keys {
	tags := make([]uint16, len(list))
	for i, k := range list {
		tags[i] = KeyTag(k)
	}
	return Keys{List: list, tags: tags}
}

// VerifyRRsetKeys is VerifyRRsetCached with keys whose tags are known.
func VerifyRRsetKeys(rrset []dns.RR, sigs []*dns.RRSIG, keys Keys, zone string, now time.Time, skew time.Duration, cache SigCache) Result {
	tags := keys.tags
	if len(tags) != len(keys.List) {
		tags = nil // a Keys not from NewKeys
	}
	return verifyRRset(rrset, sigs, keys.List, tags, zone, now, skew, cache)
}

// verifyRRset is VerifyRRsetCached; tags, when not nil, are keys' tags.
func verifyRRset(rrset []dns.RR, sigs []*dns.RRSIG, keys []*dns.DNSKEY, tags []uint16, zone string, now time.Time, skew time.Duration, cache SigCache) Result {
	if len(rrset) == 0 {
		return bogus(dns.ExtendedErrorCodeDNSBogus, "empty RRset")
	}
	h := rrset[0].Header()
	owner := strings.ToLower(h.Name)
	labels := uint8(dns.CountLabel(owner))
	if strings.HasPrefix(owner, "*.") {
		labels--
	}
	if !IsSubDomain(zone, owner) {
		return bogus(dns.ExtendedErrorCodeDNSBogus, "%s is not in zone %s", owner, zone)
	}
	// The failure to report is built only when there is one: a secure
	// RRset, the usual case, formats nothing.
	var best Result
	rank := 0
	worse := func(n int, r Result) {
		if n > rank {
			rank, best = n, r
		}
	}
	unix := now.Unix()
	for _, s := range sigs {
		if s.TypeCovered != h.Rrtype || s.Hdr.Class != h.Class || !strings.EqualFold(s.Hdr.Name, owner) {
			continue
		}
		if !strings.EqualFold(dns.Fqdn(s.SignerName), zone) {
			worse(1, bogus(dns.ExtendedErrorCodeDNSBogus, "%s signed by %s, not its zone %s", owner, s.SignerName, zone))
			continue
		}
		if s.Labels > labels {
			worse(1, bogus(dns.ExtendedErrorCodeDNSBogus, "signature of %s claims %d labels", owner, s.Labels))
			continue
		}
		if !SupportedAlgorithm(s.Algorithm) {
			worse(2, bogus(dns.ExtendedErrorCodeUnsupportedDNSKEYAlgorithm, "algorithm %d", s.Algorithm))
			continue
		}
		ti, te := sigTimes(s, unix)
		if te < ti {
			worse(3, bogus(dns.ExtendedErrorCodeSignatureExpiredBeforeValid, "signature of %s expires before its inception", owner))
			continue
		}
		if unix > te+int64(skew/time.Second) {
			worse(4, bogus(dns.ExtendedErrorCodeSignatureExpired, "signature of %s %s expired %s", owner,
				dns.TypeToString[h.Rrtype], time.Unix(te, 0).UTC().Format(time.RFC3339)))
			continue
		}
		if unix < ti-int64(skew/time.Second) {
			worse(4, bogus(dns.ExtendedErrorCodeSignatureNotYetValid, "signature of %s %s valid from %s", owner,
				dns.TypeToString[h.Rrtype], time.Unix(ti, 0).UTC().Format(time.RFC3339)))
			continue
		}
		found := false
		for i, k := range keys {
			if k.Algorithm != s.Algorithm || k.Flags&dns.ZONE == 0 || k.Protocol != 3 {
				continue
			}
			if tags != nil && tags[i] != s.KeyTag || tags == nil && KeyTag(k) != s.KeyTag {
				continue
			}
			found = true
			var fp [32]byte
			usable := false
			if cache != nil {
				if fp, usable = Fingerprint(s, k, rrset); usable && cache.Verified(fp) {
					return ok
				}
			}
			if err := s.Verify(k, rrset); err == nil {
				if usable {
					cache.Add(fp, time.Unix(te, 0))
				}
				return ok
			}
		}
		if found {
			worse(5, bogus(dns.ExtendedErrorCodeDNSBogus, "signature of %s %s does not verify", owner, dns.TypeToString[h.Rrtype]))
		} else {
			worse(3, bogus(dns.ExtendedErrorCodeDNSKEYMissing, "no key %d/%d of %s for %s", s.KeyTag, s.Algorithm, zone, owner))
		}
	}
	if rank == 0 {
		return bogus(dns.ExtendedErrorCodeRRSIGsMissing, "no signature of %s %s by %s", owner, dns.TypeToString[h.Rrtype], zone)
	}
	return best
}

// VerifyKeys checks a zone's DNSKEY RRset against the DS records its
// parent (or a trust anchor) gives, and anchor keys: secure when a key
// that a supported DS digests (or an anchor key) is in the set and signs
// it. Returned keys are the set's zone keys, to verify the zone's data.
// When no DS names a supported algorithm and digest, the zone is insecure
// (RFC 4035 section 5.2, RFC 6840 section 5.2).
func VerifyKeys(dnskeys []dns.RR, sigs []*dns.RRSIG, ds []*dns.DS, anchors []*dns.DNSKEY, zone string, now time.Time, skew time.Duration) ([]*dns.DNSKEY, Result) {
	var usable []*dns.DS
	var unsupAlg, unsupDigest bool
	for _, d := range ds {
		switch {
		case !SupportedAlgorithm(d.Algorithm):
			unsupAlg = true
		case !SupportedDigest(d.DigestType):
			unsupDigest = true
		default:
			usable = append(usable, d)
		}
	}
	if len(usable) == 0 && len(anchors) == 0 {
		r := insecure("no DS of %s with a supported algorithm and digest", zone)
		switch {
		case unsupAlg:
			r.EDE = dns.ExtendedErrorCodeUnsupportedDNSKEYAlgorithm
		case unsupDigest:
			r.EDE = dns.ExtendedErrorCodeUnsupportedDSDigestType
		}
		return nil, r
	}
	var keys []*dns.DNSKEY
	for _, rr := range dnskeys {
		if k, isKey := rr.(*dns.DNSKEY); isKey && strings.EqualFold(k.Hdr.Name, zone) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, bogus(dns.ExtendedErrorCodeDNSKEYMissing, "no DNSKEY for %s", zone)
	}
	var trusted []*dns.DNSKEY
	for _, k := range keys {
		if k.Protocol != 3 || k.Flags&dns.ZONE == 0 {
			continue
		}
		for _, d := range usable {
			if d.KeyTag != KeyTag(k) || d.Algorithm != k.Algorithm {
				continue
			}
			if c := k.ToDS(d.DigestType); c != nil && strings.EqualFold(c.Digest, d.Digest) {
				trusted = append(trusted, k)
				break
			}
		}
		for _, a := range anchors {
			if a.Algorithm == k.Algorithm && a.PublicKey == k.PublicKey && a.Protocol == k.Protocol {
				trusted = append(trusted, k)
				break
			}
		}
	}
	if len(trusted) == 0 {
		return nil, bogus(dns.ExtendedErrorCodeDNSKEYMissing, "no DNSKEY of %s matches its DS", zone)
	}
	if r := VerifyRRset(keys2rrs(keys), sigs, trusted, zone, now, skew); r.State != Secure {
		if r.EDE == dns.ExtendedErrorCodeRRSIGsMissing || r.EDE == dns.ExtendedErrorCodeDNSKEYMissing {
			r.Reason = "DNSKEY set of " + zone + " not signed by a key its DS names: " + r.Reason
		}
		return nil, r
	}
	var zk []*dns.DNSKEY
	for _, k := range keys {
		if k.Flags&dns.ZONE != 0 && k.Protocol == 3 {
			zk = append(zk, k)
		}
	}
	return zk, ok
}

func keys2rrs(keys []*dns.DNSKEY) []dns.RR {
	out := make([]dns.RR, len(keys))
	for i, k := range keys {
		out[i] = k
	}
	return out
}

// Fingerprint identifies a signature check: the key (algorithm and public
// key), the RRSIG's fields and signature, and the RRset's owner (lower
// case), type, class and each record's type, class and data, sorted (TTLs
// left out: they differ between copies of the same data). Equal
// fingerprints mean the same bytes went through the same verification.
// ok is false when a record cannot be packed (no fingerprint).
//
// It runs for every signature of every validated answer (a cache hit of
// the signature cache is this and nothing else), so it builds the hashed
// bytes in buffers on the stack for the usual small RRsets, and encodes
// the data of the types met at every miss from the records' fields
// (appendRdata) rather than packing them: 20 of the 117 allocations of a
// validated NSEC3 NXDOMAIN miss were NSEC3 records packed here.
func Fingerprint(s *dns.RRSIG, k *dns.DNSKEY, rrset []dns.RR) (fp [32]byte, ok bool) {
	var stack [1536]byte
	b := stack[:0]
	b = append(b, k.Algorithm)
	b = binary.BigEndian.AppendUint16(b, k.Flags)
	b = append(b, k.PublicKey...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint16(b, s.TypeCovered)
	b = append(b, s.Algorithm, s.Labels)
	b = binary.BigEndian.AppendUint32(b, s.OrigTtl)
	b = binary.BigEndian.AppendUint32(b, s.Expiration)
	b = binary.BigEndian.AppendUint32(b, s.Inception)
	b = binary.BigEndian.AppendUint16(b, s.KeyTag)
	b = appendLower(b, s.SignerName)
	if !dns.IsFqdn(s.SignerName) {
		b = append(b, '.')
	}
	b = append(b, 0)
	b = append(b, s.Signature...)
	b = append(b, 0)
	if len(rrset) == 0 {
		return sha256.Sum256(b), true
	}
	hd := rrset[0].Header()
	// The owner the signature covers: for a wildcard expansion (fewer
	// labels in the signature than in the owner) the wildcard's, as the
	// signer wrote it and as the check rebuilds it. So every name a
	// wildcard answers shares one fingerprint: the public-key check is
	// made once per wildcard, not per name; that the name is a valid
	// expansion (the NSEC/NSEC3 proof) is checked each time elsewhere.
	owner := hd.Name
	if n := dns.CountLabel(owner); int(s.Labels) < n {
		off, end := 0, false
		for range n - int(s.Labels) {
			off, end = dns.NextLabel(owner, off)
		}
		if end {
			owner = "*."
		} else {
			b = append(b, '*', '.')
			owner = owner[off:]
		}
	}
	b = appendLower(b, owner)
	b = binary.BigEndian.AppendUint16(b, hd.Rrtype)
	b = binary.BigEndian.AppendUint16(b, hd.Class)
	// Each record's encoding (its type, class and data) goes into recs;
	// spans[i] is the i-th record's, sorted before they are hashed.
	var recStack [1024]byte
	recs := recStack[:0]
	var spanStack [16][2]int
	spans := spanStack[:0]
	var wire []byte
	for _, rr := range rrset {
		start := len(recs)
		rh := rr.Header()
		recs = binary.BigEndian.AppendUint16(recs, rh.Rrtype)
		recs = binary.BigEndian.AppendUint16(recs, rh.Class)
		var done bool
		if recs, done = appendRdata(recs, rr); !done {
			// Any other type, or a field appendRdata does not take:
			// the record packed by miekg/dns (through the records'
			// interface, so into a buffer on the heap), its RDATA
			// taken after the name and the 10 bytes of type, class,
			// TTL and RDLENGTH.
			if n := dns.Len(rr) + 1; cap(wire) < n {
				wire = make([]byte, n)
			}
			end, err := dns.PackRR(rr, wire[:cap(wire)], 0, nil, false)
			if err != nil {
				return fp, false
			}
			rd := wire[min(wireNameLen(rh.Name)+10, end):end]
			recs = append(recs, 'w')
			recs = binary.BigEndian.AppendUint16(recs, uint16(len(rd)))
			recs = append(recs, rd...)
		}
		spans = append(spans, [2]int{start, len(recs)})
	}
	if len(spans) > 1 {
		slices.SortFunc(spans, func(x, y [2]int) int { return bytes.Compare(recs[x[0]:x[1]], recs[y[0]:y[1]]) })
	}
	for _, sp := range spans {
		b = append(b, recs[sp[0]:sp[1]]...)
	}
	return sha256.Sum256(b), true
}

// appendRdata appends an encoding of the data of rr, for the types whose
// records validation meets at every miss (A, AAAA, NS, CNAME, SOA, NSEC,
// NSEC3), made from the record's fields without packing it: miekg/dns
// decodes an NSEC3's base32 next name and hex salt into new slices, and
// packs any record through its interface into a heap buffer. done is
// false for any other type (the caller packs it).
//
// The encoding is a tag byte, then every field that miekg/dns packs into
// the record's wire data, fixed-size fields as they are, strings and type
// lists after their length: it is self-delimiting, and equal encodings
// mean equal fields, hence equal wire data, so that a fingerprint hit is
// the same bytes verified. Text is taken as it is (no case folding): two
// spellings of the same data are two fingerprints, a miss, never a false
// hit.
func appendRdata(b []byte, rr dns.RR) ([]byte, bool) {
	switch x := rr.(type) {
	case *dns.A:
		ip := x.A.To4()
		if ip == nil {
			return b, false
		}
		b = append(b, 'a')
		b = append(b, ip...)
	case *dns.AAAA:
		if len(x.AAAA) != 16 {
			return b, false
		}
		b = append(b, 'q')
		b = append(b, x.AAAA...)
	case *dns.NS:
		b = append(b, 'n')
		b = appendString(b, x.Ns)
	case *dns.CNAME:
		b = append(b, 'c')
		b = appendString(b, x.Target)
	case *dns.SOA:
		b = append(b, 's')
		b = appendString(b, x.Ns)
		b = appendString(b, x.Mbox)
		for _, v := range [...]uint32{x.Serial, x.Refresh, x.Retry, x.Expire, x.Minttl} {
			b = binary.BigEndian.AppendUint32(b, v)
		}
	case *dns.NSEC:
		b = append(b, 'e')
		b = appendString(b, x.NextDomain)
		b = appendTypes(b, x.TypeBitMap)
	case *dns.NSEC3:
		b = append(b, '3', x.Hash, x.Flags)
		b = binary.BigEndian.AppendUint16(b, x.Iterations)
		b = append(b, x.SaltLength)
		b = appendString(b, x.Salt)
		b = append(b, x.HashLength)
		b = appendString(b, x.NextDomain)
		b = appendTypes(b, x.TypeBitMap)
	default:
		return b, false
	}
	return b, true
}

// appendString appends s after its length (as 32 bits: no text field of
// a record comes near that, so the length never wraps).
func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// appendTypes appends a type bitmap's types after their count.
func appendTypes(b []byte, types []uint16) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(types)))
	for _, t := range types {
		b = binary.BigEndian.AppendUint16(b, t)
	}
	return b
}

// wireNameLen is the length of a FQDN in wire format, uncompressed: a
// length byte per label and the root's zero, so one more than the text
// when nothing is escaped; escaped names are packed to be measured.
func wireNameLen(name string) int {
	if name == "." {
		return 1
	}
	if strings.IndexByte(name, '\\') < 0 {
		return len(name) + 1
	}
	var buf [256]byte
	n, err := dns.PackDomainName(name, buf[:], 0, nil, false)
	if err != nil {
		return 0
	}
	return n
}

// appendLower appends name in ASCII lower case (DNS names compare without
// case; the other bytes as they are).
func appendLower(b []byte, name string) []byte {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	return b
}

// KeyTag is k.KeyTag() (RFC 4034, appendix B) without its allocations:
// miekg/dns packs the whole record into a new buffer, decoding the public
// key from base64 into another, and the validator asks for the tag of
// each key of the zone against each signature of every answer (1.3 % of
// svc-pf's CPU per validated NXDOMAIN in bench/recursor.sh before this).
// The key is decoded into a stack buffer; a key too large for it, one
// that is not valid base64 and the RSA/MD5 algorithm (its tag is computed
// otherwise) go to miekg/dns.
func KeyTag(k *dns.DNSKEY) uint16 {
	var src [1024]byte
	var key [768]byte
	if k.Algorithm == dns.RSAMD5 || len(k.PublicKey) > len(src) ||
		base64.StdEncoding.DecodedLen(len(k.PublicKey)) > len(key) {
		return k.KeyTag()
	}
	n := copy(src[:], k.PublicKey)
	kn, err := base64.StdEncoding.Decode(key[:], src[:n])
	if err != nil {
		return k.KeyTag()
	}
	// The RDATA: flags, protocol, algorithm, key; each byte at an even
	// offset is the high half of a 16-bit word.
	sum := uint32(k.Flags) + uint32(k.Protocol)<<8 + uint32(k.Algorithm)
	for i, b := range key[:kn] {
		if i&1 == 0 {
			sum += uint32(b) << 8
		} else {
			sum += uint32(b)
		}
	}
	sum += sum >> 16 & 0xffff
	return uint16(sum)
}
