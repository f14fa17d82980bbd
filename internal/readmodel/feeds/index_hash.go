package feeds

import (
	"hash/maphash"
	"math/bits"
)

// nameHash is a name's 64-bit hash, computed label by label from the
// right: the hash of "a.rest" is step(hash of "rest", "a"), and a name
// without a dot is hashed from root. A lookup walks a name and all its
// parents; hashed this way, each parent's hash is a step on the way to
// the child's, so that the walk reads each byte of the name once instead
// of hashing every suffix again, as the index before did with
// maphash.String (docs/feed-index.md).
//
// The step is wyhash's (the mixing Go's runtime uses for maps where AES
// is absent): multiply-and-fold rounds keyed by three secrets. The
// secrets are drawn from the index lineage's maphash.Seed, so that, as
// before, nobody who does not know the seed can aim names at one shard or
// at one fingerprint.
type nameHash struct {
	root, k0, k1 uint64
}

func newNameHash(seed maphash.Seed) nameHash {
	return nameHash{
		root: maphash.String(seed, "feeds index: root"),
		k0:   maphash.String(seed, "feeds index: k0"),
		// Odd, so that a multiplication by it never loses the low bits.
		k1: maphash.String(seed, "feeds index: k1") | 1,
	}
}

// name is the hash of name: the steps over its labels from the right.
func (k *nameHash) name(name string) uint64 {
	h, end := k.root, len(name)
	var dots [maxDots]int
	if nd := findDots(name, &dots); nd <= maxDots {
		for i := nd - 1; i >= 0; i-- {
			h = k.step(h, name[dots[i]+1:end])
			end = dots[i]
		}
		return k.step(h, name[:end])
	}
	for {
		start := labelStart(name, end)
		h = k.step(h, name[start:end])
		if start == 0 {
			return h
		}
		end = start - 1
	}
}

// labelStart is where the label that ends at end (exclusive) begins: after
// the last dot before end, or 0.
func labelStart(name string, end int) int {
	for i := end - 1; i >= 0; i-- {
		if name[i] == '.' {
			return i + 1
		}
	}
	return 0
}

// findDots stores the offsets of name's dots in d, in order, and returns
// their number, or len(d)+1 if there are more. It tests eight bytes at a
// time (dotBytes): finding the labels byte by byte was most of the cost
// of hashing a name (39 of 65 ns for the benchmark's names).
func findDots(name string, d *[maxDots]int) int {
	n, i := 0, 0
	for ; i+8 <= len(name); i += 8 {
		for m := dotBytes(le64str(name, i)); m != 0; m &= m - 1 {
			if n == maxDots {
				return n + 1
			}
			d[n] = i + bits.TrailingZeros64(m)>>3
			n++
		}
	}
	if i == len(name) {
		return n
	}
	if len(name) < 8 {
		for ; i < len(name); i++ {
			if name[i] == '.' {
				if n == maxDots {
					return n + 1
				}
				d[n] = i
				n++
			}
		}
		return n
	}
	// The last word overlaps the one before: only its top bytes, from i
	// on, are new.
	base := len(name) - 8
	for m := dotBytes(le64str(name, base)) &^ (1<<(8*(i-base)) - 1); m != 0; m &= m - 1 {
		if n == maxDots {
			return n + 1
		}
		d[n] = base + bits.TrailingZeros64(m)>>3
		n++
	}
	return n
}

// dotBytes has the high bit set in each byte of w that is a '.', and no
// other bit (exact, unlike the shorter zero-byte test that may also mark
// the byte after a match).
func dotBytes(w uint64) uint64 {
	const lo7, dots = 0x7f7f7f7f7f7f7f7f, 0x2e2e2e2e2e2e2e2e
	x := w ^ dots
	return ^((x&lo7 + lo7) | x | lo7)
}

// step extends the hash h of a parent by one label. It reads the label in
// at most two overlapping words for up to 16 bytes (nearly every label),
// as wyhash does, and longer labels take stepLong. Lookup has a copy of
// it, inlined by hand (the compiler's budget is smaller than step).
func (k *nameHash) step(h uint64, label string) uint64 {
	n := len(label)
	if n > 16 {
		return k.stepLong(h, label)
	}
	var a, b uint64
	switch {
	case n >= 8:
		a, b = le64str(label, 0), le64str(label, n-8)
	case n >= 4:
		a, b = uint64(le32(label, 0)), uint64(le32(label, n-4))
	case n > 0:
		a = uint64(label[0])<<16 | uint64(label[n>>1])<<8 | uint64(label[n-1])
	}
	return mix(k.k1^uint64(n), mix(a^k.k1, b^h^k.k0))
}

// stepLong is step for labels of more than 16 bytes.
func (k *nameHash) stepLong(h uint64, label string) uint64 {
	seed := h ^ k.k0
	n := len(label)
	i := 0
	for ; n-i > 16; i += 16 {
		seed = mix(le64str(label, i)^k.k1, le64str(label, i+8)^seed)
	}
	a, b := le64str(label, n-16), le64str(label, n-8)
	return mix(k.k1^uint64(n), mix(a^k.k1, b^seed))
}

// mix folds the 128-bit product of a and b into 64 bits.
func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

func le64str(s string, i int) uint64 {
	_ = s[i+7]
	return uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
}
