package orgstore

import (
	"fmt"
	"net/netip"
)

// A CIDR is stored as a binary key: family byte (4 or 6), network address
// (4 or 16 bytes), prefix length (1 byte). Byte-wise comparison of keys, which
// both SQLite (BLOB) and PostgreSQL (BYTEA) use, then orders IPv4 before IPv6,
// then by address, then by length: the API's order, served straight from the
// primary-key index. Keys of one family all have the same length, so a key
// range [family|first|0x00, family|last|0xff] holds exactly the prefixes whose
// network address lies in [first, last].
const (
	famV4   = 4
	famV6   = 6
	keyLen4 = 1 + 4 + 1
	keyLen6 = 1 + 16 + 1
)

// validPrefix reports why p cannot be stored, or nil. Callers normally pass
// the output of cidr.Parse; this is the store's own guard.
func validPrefix(p netip.Prefix) error {
	if !p.IsValid() {
		return fmt.Errorf("%w: invalid CIDR", ErrInvalidInput)
	}
	if p.Masked() != p {
		return fmt.Errorf("%w: CIDR %s has host bits set", ErrInvalidInput, p)
	}
	return nil
}

// appendKey appends the key of a valid, masked prefix.
func appendKey(dst []byte, p netip.Prefix) []byte {
	a := p.Addr()
	if a.Is4() {
		b := a.As4()
		dst = append(dst, famV4)
		dst = append(dst, b[:]...)
	} else {
		b := a.As16()
		dst = append(dst, famV6)
		dst = append(dst, b[:]...)
	}
	return append(dst, byte(p.Bits()))
}

func prefixKey(p netip.Prefix) []byte {
	return appendKey(make([]byte, 0, keyLen6), p)
}

// decodeKey is the inverse of appendKey. A malformed key means a corrupted or
// foreign row; it is reported, never trusted.
func decodeKey(b []byte) (netip.Prefix, error) {
	var a netip.Addr
	switch {
	case len(b) == keyLen4 && b[0] == famV4:
		a = netip.AddrFrom4([4]byte(b[1:5]))
	case len(b) == keyLen6 && b[0] == famV6:
		a = netip.AddrFrom16([16]byte(b[1:17]))
	default:
		return netip.Prefix{}, fmt.Errorf("orgstore: malformed CIDR key %x in the database", b)
	}
	bits := int(b[len(b)-1])
	if bits > a.BitLen() {
		return netip.Prefix{}, fmt.Errorf("orgstore: malformed CIDR key %x in the database", b)
	}
	p := netip.PrefixFrom(a, bits)
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("orgstore: malformed CIDR key %x in the database", b)
	}
	return p, nil
}

// coveredKeyRange returns the key bounds of all prefixes whose network address
// lies inside p: p itself, everything p contains, and the shorter prefixes
// that start at p's first address (which contain p).
func coveredKeyRange(p netip.Prefix) (lo, hi []byte) {
	first := p.Addr()
	last := lastAddr(p)
	lo = appendKey(make([]byte, 0, keyLen6), netip.PrefixFrom(first, 0))
	lo[len(lo)-1] = 0x00
	hi = appendKey(make([]byte, 0, keyLen6), netip.PrefixFrom(last, 0))
	hi[len(hi)-1] = 0xff
	return lo, hi
}

// ancestorKeys returns the keys of the strictly shorter prefixes containing
// p. Together with coveredKeyRange they find every prefix that overlaps p:
// CIDRs either nest or are disjoint, and a prefix overlapping p that does not
// start inside p must contain it.
func ancestorKeys(p netip.Prefix) [][]byte {
	out := make([][]byte, 0, p.Bits())
	for bits := 0; bits < p.Bits(); bits++ {
		anc, _ := p.Addr().Prefix(bits)
		out = append(out, prefixKey(anc))
	}
	return out
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr()
	if a.Is4() {
		b := a.As4()
		for i := p.Bits(); i < 32; i++ {
			b[i/8] |= 0x80 >> (i % 8)
		}
		return netip.AddrFrom4(b)
	}
	b := a.As16()
	for i := p.Bits(); i < 128; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	return netip.AddrFrom16(b)
}
