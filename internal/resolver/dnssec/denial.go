package dnssec

import (
	"crypto/sha1"
	"encoding/base32"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// MaxNSEC3Iterations is the most NSEC3 iterations a proof may use; above
// it, the answer is treated as insecure (RFC 9276 section 3.2, with
// unbound's limit of 150).
const MaxNSEC3Iterations = 150

// Denial kinds: what a proof must show.
const (
	// NXDomain: the name does not exist, nor a wildcard that would match it.
	NXDomain = iota
	// NoData: the name exists without the type (or a wildcard matches it
	// without the type).
	NoData
)

// canonLess orders names canonically (RFC 4034 section 6.1): label by
// label from the right, each compared as lower-case bytes.
func canonCmp(a, b string) int {
	la := dns.SplitDomainName(strings.ToLower(a))
	lb := dns.SplitDomainName(strings.ToLower(b))
	for i, j := len(la)-1, len(lb)-1; i >= 0 && j >= 0; i, j = i-1, j-1 {
		if c := strings.Compare(la[i], lb[j]); c != 0 {
			return c
		}
	}
	return len(la) - len(lb)
}

// nsecCovers says whether an NSEC record proves that name does not exist:
// name sorts strictly between its owner and next name (the last NSEC wraps
// to the apex).
func nsecCovers(n *dns.NSEC, name string) bool {
	owner, next := n.Hdr.Name, n.NextDomain
	if canonCmp(owner, name) >= 0 {
		return false
	}
	if canonCmp(next, owner) <= 0 { // the last NSEC of the zone
		return IsSubDomain(next, name)
	}
	return canonCmp(name, next) < 0
}

func split(proof []dns.RR) (nsec []*dns.NSEC, nsec3 []*dns.NSEC3) {
	// Counted first, so that each slice is made once at its size: every
	// validated denial comes here.
	n, n3 := 0, 0
	for _, rr := range proof {
		switch rr.(type) {
		case *dns.NSEC:
			n++
		case *dns.NSEC3:
			n3++
		}
	}
	if n > 0 {
		nsec = make([]*dns.NSEC, 0, n)
	}
	if n3 > 0 {
		nsec3 = make([]*dns.NSEC3, 0, n3)
	}
	for _, rr := range proof {
		switch x := rr.(type) {
		case *dns.NSEC:
			nsec = append(nsec, x)
		case *dns.NSEC3:
			nsec3 = append(nsec3, x)
		}
	}
	return nsec, nsec3
}

// Deny checks that proof (NSEC or NSEC3 records of zone whose signatures
// were verified) shows what kind says about qname/qtype. Secure: proven.
// Insecure: an NSEC3 opt-out span covers the name (it may hold an
// unsigned delegation), or NSEC3 iterations above MaxNSEC3Iterations.
// Bogus (NSEC Missing): not proven.
func Deny(kind int, qname string, qtype uint16, zone string, proof []dns.RR) Result {
	return DenyCached(kind, qname, qtype, zone, proof, nil)
}

// HashCache remembers NSEC3 hashes (SHA-1) of names by salt and
// iterations. Most names an NSEC3 proof hashes are the same from one
// denial to the next in a zone (its apex as the closest encloser, the
// wildcard below it): with a cache, only the name asked is hashed anew.
// Names are lower case FQDNs.
type HashCache interface {
	NSEC3Hash(name, salt string, iterations uint16) (string, bool)
	AddNSEC3Hash(name, salt string, iterations uint16, hash string)
}

// DenyCached is Deny with a cache of NSEC3 hashes (nil: none).
func DenyCached(kind int, qname string, qtype uint16, zone string, proof []dns.RR, hc HashCache) Result {
	qname = strings.ToLower(dns.Fqdn(qname))
	nsec, nsec3 := split(proof)
	if len(nsec) > 0 {
		return denyNSEC(kind, qname, qtype, zone, nsec)
	}
	if len(nsec3) > 0 {
		return denyNSEC3(kind, qname, qtype, zone, nsec3, hc)
	}
	return bogus(dns.ExtendedErrorCodeNSECMissing, "no NSEC or NSEC3 for %s", qname)
}

// typeAbsent: a record at qname's owner, of its types, proves qtype (and a
// CNAME that would redirect) absent. For DS, the NSEC must come from the
// parent side: a delegation (NS) without SOA, or no NS at all.
func typeAbsent(types []uint16, qtype uint16) bool {
	if slices.Contains(types, qtype) || slices.Contains(types, dns.TypeCNAME) {
		return false
	}
	if qtype == dns.TypeDS {
		return !slices.Contains(types, dns.TypeSOA)
	}
	// Any other type at a delegation point is the child's to answer: an
	// NSEC of the parent with NS and without SOA proves nothing about it.
	return !(slices.Contains(types, dns.TypeNS) && !slices.Contains(types, dns.TypeSOA)) || qtype == dns.TypeNS
}

func denyNSEC(kind int, qname string, qtype uint16, zone string, nsec []*dns.NSEC) Result {
	for _, n := range nsec {
		if !IsSubDomain(zone, n.Hdr.Name) {
			return bogus(dns.ExtendedErrorCodeDNSBogus, "NSEC %s outside zone %s", n.Hdr.Name, zone)
		}
	}
	if kind == NoData {
		for _, n := range nsec {
			if strings.EqualFold(n.Hdr.Name, qname) {
				if typeAbsent(n.TypeBitMap, qtype) {
					return ok
				}
				return bogus(dns.ExtendedErrorCodeDNSBogus, "NSEC of %s lists %s", qname, dns.TypeToString[qtype])
			}
		}
		// An empty non-terminal: an NSEC whose next name is below qname.
		for _, n := range nsec {
			if nsecCovers(n, qname) && IsSubDomain(qname, strings.ToLower(n.NextDomain)) && qname != strings.ToLower(n.NextDomain) {
				return ok
			}
		}
	}
	// The name does not exist: covered; its closest encloser is the
	// longest ancestor that the covering NSEC's owner or next name shows
	// to exist; the wildcard below it must not exist (NXDOMAIN) or must
	// exist without the type (NODATA by wildcard).
	var cover *dns.NSEC
	for _, n := range nsec {
		if nsecCovers(n, qname) {
			cover = n
			break
		}
	}
	if cover == nil {
		return bogus(dns.ExtendedErrorCodeNSECMissing, "no NSEC proves %s absent", qname)
	}
	ce := closestEncloser(qname, cover)
	wild := "*." + ce
	for _, n := range nsec {
		if kind == NoData && strings.EqualFold(n.Hdr.Name, wild) && typeAbsent(n.TypeBitMap, qtype) {
			return ok
		}
		if kind == NXDomain && (nsecCovers(n, wild) || ce != "" && wildcardBelowCovered(n, ce)) {
			return ok
		}
	}
	return bogus(dns.ExtendedErrorCodeNSECMissing, "no NSEC proves the wildcard %s absent", wild)
}

// wildcardBelowCovered: "*.ce" sorts right after ce, so an NSEC owned by ce
// whose next name is not below ce also covers the wildcard; nsecCovers
// already decides that, this only guards against the owner being ce
// itself being compared strictly.
func wildcardBelowCovered(n *dns.NSEC, ce string) bool {
	return strings.EqualFold(n.Hdr.Name, ce) && nsecCovers(n, "*."+ce)
}

// closestEncloser: the longest ancestor of qname shared with the covering
// NSEC's owner or next name.
func closestEncloser(qname string, n *dns.NSEC) string {
	best := "."
	for _, other := range []string{n.Hdr.Name, n.NextDomain} {
		other = strings.ToLower(other)
		c := dns.CompareDomainName(qname, other)
		labels := dns.SplitDomainName(qname)
		if c > len(labels) {
			continue
		}
		anc := "."
		if c > 0 {
			anc = strings.Join(labels[len(labels)-c:], ".") + "."
		}
		if dns.CountLabel(anc) > dns.CountLabel(best) {
			best = anc
		}
	}
	return best
}

func denyNSEC3(kind int, qname string, qtype uint16, zone string, nsec3 []*dns.NSEC3, hc HashCache) Result {
	for _, n := range nsec3 {
		if n.Hash != dns.SHA1 {
			return insecure("NSEC3 hash algorithm %d", n.Hash)
		}
		if n.Iterations > MaxNSEC3Iterations {
			r := insecure("NSEC3 with %d iterations", n.Iterations)
			r.EDE = dns.ExtendedErrorCodeUnsupportedNSEC3IterValue
			return r
		}
		off, _ := dns.NextLabel(n.Hdr.Name, 0)
		if !strings.EqualFold(n.Hdr.Name[off:], zone) {
			return bogus(dns.ExtendedErrorCodeDNSBogus, "NSEC3 %s outside zone %s", n.Hdr.Name, zone)
		}
	}
	// All records of a proof use the zone's parameters (RFC 5155 section
	// 7.2): those of the first; others are ignored. Each name is hashed
	// once: a proof hashes three names at most (the closest encloser,
	// the next closer name, the wildcard), kept in a few slots rather
	// than a map.
	p := nsec3[0]
	type hashed struct{ name, hash string }
	var memo [4]hashed
	nmemo := 0
	salt := strings.ToUpper(p.Salt)
	hash := func(name string) string {
		for _, m := range memo[:nmemo] {
			if m.name == name {
				return m.hash
			}
		}
		var h string
		ok := false
		if hc != nil {
			h, ok = hc.NSEC3Hash(name, salt, p.Iterations)
		}
		if !ok {
			h = nsec3Hash(name, p.Hash, p.Iterations, p.Salt)
			if hc != nil && name != qname {
				// The name asked is new each time (a random label
				// misses every cache); its ancestors are not.
				hc.AddNSEC3Hash(name, salt, p.Iterations, h)
			}
		}
		if nmemo < len(memo) {
			memo[nmemo] = hashed{name, h}
			nmemo++
		}
		return h
	}
	same := nsec3
	for _, n := range nsec3 {
		if !sameParams(n, p) {
			same = nil
			break
		}
	}
	if same == nil {
		for _, n := range nsec3 {
			if sameParams(n, p) {
				same = append(same, n)
			}
		}
	}
	match := func(name string) *dns.NSEC3 {
		h := hash(name)
		for _, n := range same {
			off, _ := dns.NextLabel(n.Hdr.Name, 0)
			if strings.EqualFold(n.Hdr.Name[:off-1], h) {
				return n
			}
		}
		return nil
	}
	cover := func(name string) *dns.NSEC3 {
		h := hash(name)
		for _, n := range same {
			if nsec3CoversHash(n, h) {
				return n
			}
		}
		return nil
	}
	if kind == NoData {
		if n := match(qname); n != nil {
			if typeAbsent(n.TypeBitMap, qtype) {
				return ok
			}
			return bogus(dns.ExtendedErrorCodeDNSBogus, "NSEC3 of %s lists %s", qname, dns.TypeToString[qtype])
		}
	}
	// Closest encloser proof (RFC 5155 section 8.3): an ancestor that
	// matches, and the next closer name covered. Ancestors are suffixes
	// of qname, taken in place from its labels' offsets.
	var offStack [128]int
	offs := labelOffsets(offStack[:0], qname)
	ce, next := "", ""
	for i := 1; i <= len(offs); i++ {
		anc := "."
		if i < len(offs) {
			anc = qname[offs[i]:]
		}
		if !IsSubDomain(zone, anc) {
			break
		}
		if match(anc) != nil {
			ce, next = anc, qname[offs[i-1]:]
			break
		}
	}
	if ce == "" {
		return bogus(dns.ExtendedErrorCodeNSECMissing, "no NSEC3 closest encloser for %s", qname)
	}
	nc := cover(next)
	if nc == nil {
		return bogus(dns.ExtendedErrorCodeNSECMissing, "no NSEC3 covers %s", next)
	}
	if kind == NoData && qtype == dns.TypeDS && nc.Flags&1 == 1 {
		// Opt-out: an unsigned delegation may hide in the span.
		return insecure("NSEC3 opt-out covers %s", next)
	}
	wild := "*." + ce
	if kind == NoData {
		if n := match(wild); n != nil && typeAbsent(n.TypeBitMap, qtype) {
			return ok
		}
		if nc.Flags&1 == 1 {
			return insecure("NSEC3 opt-out covers %s", next)
		}
		return bogus(dns.ExtendedErrorCodeNSECMissing, "no NSEC3 proves %s %s absent", qname, dns.TypeToString[qtype])
	}
	if cover(wild) == nil {
		return bogus(dns.ExtendedErrorCodeNSECMissing, "no NSEC3 proves the wildcard %s absent", wild)
	}
	if nc.Flags&1 == 1 {
		return insecure("NSEC3 opt-out covers %s", next)
	}
	return ok
}

// Expanded checks a wildcard expansion's proof (RFC 4035 5.3.4, RFC 5155
// 8.8): an answer for qname signed with labels fewer than qname's comes
// from the wildcard at the ancestor of that many labels; the name one
// label longer than that ancestor towards qname (the next closer) must not
// exist.
func Expanded(qname string, sigLabels uint8, zone string, proof []dns.RR) Result {
	qname = strings.ToLower(dns.Fqdn(qname))
	var offStack [128]int
	offs := labelOffsets(offStack[:0], qname)
	if int(sigLabels) >= len(offs) {
		return ok
	}
	nsec, nsec3 := split(proof)
	if len(nsec) > 0 {
		for _, n := range nsec {
			if IsSubDomain(zone, n.Hdr.Name) && nsecCovers(n, qname) {
				return ok
			}
		}
		return bogus(dns.ExtendedErrorCodeNSECMissing, "no NSEC proves %s absent for its wildcard answer", qname)
	}
	next := qname[offs[len(offs)-int(sigLabels)-1]:]
	var last *dns.NSEC3 // the parameters h was computed with
	h := ""
	for _, n := range nsec3 {
		if n.Iterations > MaxNSEC3Iterations {
			return insecure("NSEC3 with %d iterations", n.Iterations)
		}
		if n.Hash != dns.SHA1 {
			continue
		}
		off, _ := dns.NextLabel(n.Hdr.Name, 0)
		if off == 0 || !IsSubDomain(n.Hdr.Name[off:], next) {
			continue
		}
		if last == nil || !sameParams(n, last) {
			last, h = n, nsec3Hash(next, n.Hash, n.Iterations, n.Salt)
		}
		if nsec3CoversHash(n, h) {
			return ok
		}
	}
	return bogus(dns.ExtendedErrorCodeNSECMissing, "no NSEC3 proves %s absent for the wildcard answer of %s", next, qname)
}

// sameParams: n uses p's hash algorithm, iterations and salt.
func sameParams(n, p *dns.NSEC3) bool {
	return n.Hash == p.Hash && n.Iterations == p.Iterations && strings.EqualFold(n.Salt, p.Salt)
}

// labelOffsets appends to offs the offset in name of each of its labels,
// as dns.Split gives them (none for the root).
func labelOffsets(offs []int, name string) []int {
	if name == "." || name == "" {
		return offs
	}
	offs = append(offs, 0)
	for off, end := dns.NextLabel(name, 0); !end; off, end = dns.NextLabel(name, off) {
		offs = append(offs, off)
	}
	return offs
}

// nsec3CoversHash says whether a hash (of a name, computed with the
// record's parameters; the caller checked the name is in the record's
// zone) sorts strictly between an NSEC3 record's owner hash and its next
// hash (wrapping at the end of the chain). miekg/dns's Cover also counts
// the owner's own hash as covered, which would let the record of an
// existing name deny it.
func nsec3CoversHash(n *dns.NSEC3, h string) bool {
	off, _ := dns.NextLabel(n.Hdr.Name, 0)
	if off == 0 {
		return false
	}
	// Base32hex hashes compare without case (HashName's are upper case,
	// owner names often lower): compared in place, nothing allocated.
	owner, next := n.Hdr.Name[:off-1], n.NextDomain
	switch ho, on := cmpUpper(h, owner), cmpUpper(owner, next); {
	case ho == 0:
		return false
	case on < 0:
		return ho > 0 && cmpUpper(h, next) < 0
	default: // the last record of the chain, or the only one
		return ho > 0 || cmpUpper(h, next) < 0
	}
}

// cmpUpper compares a and b as strings.Compare does their ASCII upper
// case forms.
func cmpUpper(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		if 'a' <= x && x <= 'z' {
			x -= 'a' - 'A'
		}
		if 'a' <= y && y <= 'z' {
			y -= 'a' - 'A'
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return len(a) - len(b)
}

// base32Hex is NSEC3's encoding of hashes: RFC 4648's "extended hex"
// alphabet, upper case, no padding (a SHA-1 hash is 20 bytes, 32
// characters).
var base32Hex = base32.HexEncoding.WithPadding(base32.NoPadding)

// nsec3Hash is dns.HashName (RFC 5155 section 5: the name in wire format,
// lower case, hashed with the salt, then the hash with the salt,
// iterations times more) with its work on the stack: miekg/dns makes the
// salt, the name's wire form, each round's hash and the encoding new
// slices; here only the result's string is allocated. The name's letters
// are lowered in wire form (RFC 4034 section 6.2), so an escaped capital
// (\065) is lowered too, which HashName, lowering the text, leaves. ""
// when name or salt cannot be encoded, or for an algorithm other than
// SHA-1.
func nsec3Hash(name string, alg uint8, iterations uint16, salt string) string {
	if alg != dns.SHA1 || len(salt)%2 != 0 || len(salt) > 2*255 {
		return ""
	}
	var buf [255 + 255]byte
	n, err := dns.PackDomainName(name, buf[:255], 0, nil, false)
	if err != nil {
		return ""
	}
	for i, c := range buf[:n] {
		if 'A' <= c && c <= 'Z' {
			buf[i] = c + 'a' - 'A'
		}
	}
	// The name's labels' lengths are bytes below 64, never letters: the
	// loop above only lowers the labels' text.
	var sb [255]byte
	sl := len(salt) / 2
	for i := range sl {
		hi, ok1 := fromHex(salt[2*i])
		lo, ok2 := fromHex(salt[2*i+1])
		if !ok1 || !ok2 {
			return ""
		}
		sb[i] = hi<<4 | lo
	}
	copy(buf[n:], sb[:sl])
	h := sha1.Sum(buf[:n+sl])
	for range iterations {
		copy(buf[:sha1.Size], h[:])
		copy(buf[sha1.Size:], sb[:sl])
		h = sha1.Sum(buf[:sha1.Size+sl])
	}
	var out [32]byte
	base32Hex.Encode(out[:], h[:])
	return string(out[:])
}

// fromHex is one hex digit's value.
func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
