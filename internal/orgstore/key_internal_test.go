package orgstore

import (
	"net/netip"
	"slices"
	"testing"
)

// TestKeyRoundTripAndOrder: keys decode to their prefix, and byte order of
// keys is netip's order of masked prefixes (IPv4 before IPv6, then address,
// then length), the order the API lists CIDRs in.
func TestKeyRoundTripAndOrder(t *testing.T) {
	ps := []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/0"),
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("10.0.0.0/9"),
		netip.MustParsePrefix("10.128.0.0/9"),
		netip.MustParsePrefix("255.255.255.255/32"),
		netip.MustParsePrefix("::/0"),
		netip.MustParsePrefix("::ffff:0.0.0.0/96"),
		netip.MustParsePrefix("2001:db8::/32"),
		netip.MustParsePrefix("2001:db8::/128"),
		netip.MustParsePrefix("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"),
	}
	for i, p := range ps {
		k := prefixKey(p)
		got, err := decodeKey(k)
		if err != nil || got != p {
			t.Fatalf("decodeKey(prefixKey(%s)) = %s, %v", p, got, err)
		}
		if i > 0 {
			if string(prefixKey(ps[i-1])) >= string(k) || ps[i-1].Compare(p) >= 0 {
				t.Fatalf("%s does not sort before %s", ps[i-1], p)
			}
		}
	}
	for _, bad := range [][]byte{nil, {4}, {4, 1, 2, 3, 4, 33}, {4, 10, 0, 0, 1, 8}, {5, 1, 2, 3, 4, 8}, make([]byte, 18)} {
		if p, err := decodeKey(bad); err == nil {
			t.Errorf("decodeKey(%x) = %s, want an error", bad, p)
		}
	}
}

func FuzzDecodeKey(f *testing.F) {
	f.Add([]byte{4, 10, 0, 0, 0, 8})
	f.Add(make([]byte, 18))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeKey(b)
		if err != nil {
			return
		}
		if !slices.Equal(prefixKey(p), b) {
			t.Fatalf("decodeKey(%x) = %s, which encodes as %x", b, p, prefixKey(p))
		}
	})
}

// TestOverlapLookups checks the two index lookups of findOverlap against
// netip's own Overlaps, exhaustively over a small address space.
func TestOverlapLookups(t *testing.T) {
	var all []netip.Prefix
	for bits := 0; bits <= 8; bits++ {
		for a := 0; a < 256; a += 1 << (8 - bits) {
			all = append(all, netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a), 0, 0, 0}), bits))
		}
	}
	for _, p := range all {
		lo, hi := coveredKeyRange(p)
		anc := map[string]bool{}
		for _, k := range ancestorKeys(p) {
			anc[string(k)] = true
		}
		for _, q := range all {
			k := string(prefixKey(q))
			found := (k >= string(lo) && k <= string(hi)) || anc[k]
			if found != p.Overlaps(q) {
				t.Fatalf("p=%s q=%s: lookup says %v, Overlaps says %v", p, q, found, p.Overlaps(q))
			}
		}
	}
	// And across families nothing is found.
	lo, hi := coveredKeyRange(netip.MustParsePrefix("::/0"))
	if k := string(prefixKey(netip.MustParsePrefix("0.0.0.0/0"))); k >= string(lo) && k <= string(hi) {
		t.Fatal("::/0 range covers IPv4 keys")
	}
}
