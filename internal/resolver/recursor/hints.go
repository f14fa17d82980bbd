package recursor

import (
	_ "embed"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// builtinHints is IANA's root hints (named.root).
//
//go:embed named.root
var builtinHints string

// BuiltinHints returns the root hints built into the recursor (IANA's
// named.root), in zone-file format.
func BuiltinHints() string { return builtinHints }

// Hints are the root's nameservers and their addresses: where resolution
// starts when nothing better is known.
type Hints struct {
	// Names are the root's nameserver names, lower case.
	Names []string
	// Addrs maps each name to its addresses.
	Addrs map[string][]netip.Addr
}

// maxHintsRecords bounds the hints file: the real one has 39 records.
const maxHintsRecords = 1000

// ParseHints reads root hints in zone-file format (as named.root): NS
// records owned by the root, and A/AAAA records for their names. Other
// records are an error, so that a wrong file is noticed; every name must
// have at least one address.
func ParseHints(text string) (Hints, error) {
	h := Hints{Addrs: map[string][]netip.Addr{}}
	zp := dns.NewZoneParser(strings.NewReader(text), ".", "hints")
	zp.SetDefaultTTL(3600000) // named.root's TTL, for records that give none
	zp.SetIncludeAllowed(false)
	var addrs []dns.RR
	n := 0
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		if n++; n > maxHintsRecords {
			return Hints{}, fmt.Errorf("root hints: more than %d records", maxHintsRecords)
		}
		if rr.Header().Class != dns.ClassINET {
			return Hints{}, fmt.Errorf("root hints: %s: class is not IN", rr.Header().Name)
		}
		switch rr := rr.(type) {
		case *dns.NS:
			if rr.Hdr.Name != "." {
				return Hints{}, fmt.Errorf("root hints: NS record owned by %s, not the root", rr.Hdr.Name)
			}
			name := strings.ToLower(rr.Ns)
			if !slices.Contains(h.Names, name) {
				h.Names = append(h.Names, name)
			}
		case *dns.A, *dns.AAAA:
			addrs = append(addrs, rr)
		default:
			return Hints{}, fmt.Errorf("root hints: unexpected %s record for %s", dns.TypeToString[rr.Header().Rrtype], rr.Header().Name)
		}
	}
	if err := zp.Err(); err != nil {
		return Hints{}, fmt.Errorf("root hints: %w", err)
	}
	if len(h.Names) == 0 {
		return Hints{}, errors.New("root hints: no NS record for the root")
	}
	for _, rr := range addrs {
		name := strings.ToLower(rr.Header().Name)
		if !slices.Contains(h.Names, name) {
			return Hints{}, fmt.Errorf("root hints: address for %s, which is not a root nameserver", name)
		}
		a, ok := rrAddr(rr)
		if !ok {
			continue
		}
		if !slices.Contains(h.Addrs[name], a) {
			h.Addrs[name] = append(h.Addrs[name], a)
		}
	}
	for _, n := range h.Names {
		if len(h.Addrs[n]) == 0 {
			return Hints{}, fmt.Errorf("root hints: no address for %s", n)
		}
	}
	return h, nil
}

// rrAddr is an A or AAAA record's address.
func rrAddr(rr dns.RR) (netip.Addr, bool) {
	switch rr := rr.(type) {
	case *dns.A:
		a, ok := netip.AddrFromSlice(rr.A.To4())
		return a, ok
	case *dns.AAAA:
		a, ok := netip.AddrFromSlice(rr.AAAA.To16())
		return a, ok && !a.Is4In6()
	}
	return netip.Addr{}, false
}
