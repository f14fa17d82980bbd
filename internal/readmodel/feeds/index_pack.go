package feeds

// Packed names. An entry holds 24 bytes of name: 77 % of the synthetic
// feed's names fit as they are, and the rest had a record, which a lookup
// reads after the entry's line has arrived: a second wait for memory that
// depends on the first (a hit on such a name took about twice as long,
// docs/feed-index.md). A name of DNS characters (a-z, 0-9, '-', '.', '_')
// needs 6 bits a character, so 24 bytes hold 32 of them: packed, 91 % of
// the names fit an entry. A lookup that finds a packed entry's
// fingerprint compares by packing its suffix (packedEqual), which costs
// a few nanoseconds and no wait; names with other bytes (upper case,
// which a name in a feed never has, or anything else) keep their record.
//
// A packed name is four groups of eight characters, each 48 bits (six
// bytes, little-endian), character j of a group at bits 6j; a name
// shorter than 32 characters is padded with code 0, which no character
// has.

// packedMax is the longest name an entry holds packed.
const packedMax = 32

// packTable is each byte's 6-bit code, 0 for a byte that has none; a
// string, so that it is a constant.
const packTable = "" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x02\x00\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0d" +
	"\x00\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x20\x21\x22\x23\x24\x25\x26\x27\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"

// unpackTable is each code's byte.
const unpackTable = "\x00-.0123456789_abcdefghijklmnopqrstuvwxyz"

// packGroup packs the characters [8k, 8k+8) of name (those it has) into
// 48 bits; ok is false if one of them has no code.
func packGroup(name string, k int) (g uint64, ok bool) {
	end := min(8*k+8, len(name))
	for i := 8 * k; i < end; i++ {
		c := packTable[name[i]]
		if c == 0 {
			return 0, false
		}
		g |= uint64(c) << (6 * (i - 8*k))
	}
	return g, true
}

// packable reports whether name can be held packed.
func packable(name string) bool {
	if len(name) > packedMax {
		return false
	}
	for i := 0; i < len(name); i++ {
		if packTable[name[i]] == 0 {
			return false
		}
	}
	return true
}

// packName writes name, packable, packed into dst (24 bytes).
func packName(dst []byte, name string) {
	_ = dst[23]
	for k := range 4 {
		g, _ := packGroup(name, k)
		for j := range 6 {
			dst[6*k+j] = byte(g >> (8 * j))
		}
	}
}

// packedGroup is group k of the packed name at p (the entry's name
// bytes, 24 of them), read without touching a byte past them.
func packedGroup(p string, k int) uint64 {
	if k == 3 {
		return le64str(p, 16) >> 16
	}
	return le64str(p, 6*k) & (1<<48 - 1)
}

// packedEqual reports whether the packed name at p, of length n, is
// name.
func packedEqual(p string, n int, name string) bool {
	if len(name) != n {
		return false
	}
	for k := 0; 8*k < n; k++ {
		g, ok := packGroup(name, k)
		if !ok || g != packedGroup(p, k) {
			return false
		}
	}
	return true
}

// unpackName is the name packed at p, of length n (it allocates: for
// Apply and All, not for lookups).
func unpackName(p string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = unpackTable[packedGroup(p, i/8)>>(6*(i%8))&63]
	}
	return string(b)
}
