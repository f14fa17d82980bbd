package dnssec

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/miekg/dns"
)

// RootAnchors is the built-in trust anchor: the DS records of the IANA root
// zone's key-signing keys, KSK-2017 (key tag 20326) and KSK-2024 (key tag
// 38696), algorithm 8 (RSA/SHA-256), digest type 2 (SHA-256), as IANA's
// root-anchors.xml publishes them.
const RootAnchors = `. IN DS 20326 8 2 E06D44B80B8F1D39A95C0B0D7C65D08458E880409BBC683457104237C7F8EC8D
. IN DS 38696 8 2 683D2D0ACB8C9B712A1948B27F741219298D0A450D612C483AF444A4C0FB2B16
`

// Anchor is what is trusted for one zone: DS records, DNSKEY records, or
// both.
type Anchor struct {
	Zone string // lower case, fully qualified
	DS   []*dns.DS
	Keys []*dns.DNSKEY
}

// Anchors are trust anchors by zone.
type Anchors map[string]*Anchor

// Closest returns the anchor of the closest zone at or above name.
func (a Anchors) Closest(name string) *Anchor {
	name = strings.ToLower(dns.Fqdn(name))
	for off, end := 0, false; !end; off, end = dns.NextLabel(name, off) {
		if x, ok := a[name[off:]]; ok {
			return x
		}
	}
	return a["."]
}

// Zones lists the anchored zones, sorted.
func (a Anchors) Zones() []string {
	out := make([]string, 0, len(a))
	for z := range a {
		out = append(out, z)
	}
	sort.Strings(out)
	return out
}

// maxAnchors bounds an anchors file: a handful of keys is normal.
const maxAnchors = 1000

// ParseAnchors reads trust anchors in zone-file format (as unbound's
// trust-anchor-file): DS and DNSKEY records; comments and blank lines are
// allowed, any other record type is an error. A DNSKEY must be a zone key
// (flag bit 7) of protocol 3.
func ParseAnchors(text string) (Anchors, error) {
	out := Anchors{}
	zp := dns.NewZoneParser(strings.NewReader(text), ".", "")
	zp.SetIncludeAllowed(false)
	n := 0
	for rr, more := zp.Next(); more; rr, more = zp.Next() {
		if n++; n > maxAnchors {
			return nil, fmt.Errorf("trust anchors: more than %d records", maxAnchors)
		}
		h := rr.Header()
		if h.Class != dns.ClassINET {
			return nil, fmt.Errorf("trust anchors: %s: class %s", h.Name, dns.ClassToString[h.Class])
		}
		z := strings.ToLower(dns.Fqdn(h.Name))
		a := out[z]
		if a == nil {
			a = &Anchor{Zone: z}
		}
		switch x := rr.(type) {
		case *dns.DS:
			if x.Digest == "" {
				return nil, fmt.Errorf("trust anchors: %s: DS without digest", z)
			}
			a.DS = append(a.DS, x)
		case *dns.DNSKEY:
			if x.Flags&dns.ZONE == 0 || x.Protocol != 3 || x.PublicKey == "" {
				return nil, fmt.Errorf("trust anchors: %s: DNSKEY is not a zone key of protocol 3", z)
			}
			a.Keys = append(a.Keys, x)
		default:
			return nil, fmt.Errorf("trust anchors: %s: type %s (only DS and DNSKEY)", z, dns.TypeToString[h.Rrtype])
		}
		out[z] = a
	}
	if err := zp.Err(); err != nil {
		return nil, fmt.Errorf("trust anchors: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("trust anchors: no DS or DNSKEY record")
	}
	return out, nil
}

// UnderNTA returns the negative trust anchor at or above name, or "".
func UnderNTA(ntas []string, name string) string {
	for _, z := range ntas {
		if IsSubDomain(z, name) {
			return z
		}
	}
	return ""
}
