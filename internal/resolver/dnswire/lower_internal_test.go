package dnswire

import "testing"

// Every byte value at every position of a word lower-cases as the scalar
// rule says, neighbours unaffected.
func TestLowerASCIIExhaustive(t *testing.T) {
	for pos := range 8 {
		for v := range 256 {
			var p [16]byte
			for i := range p {
				p[i] = byte(v + i*37) // neighbours of every kind too
			}
			p[pos] = byte(v)
			want := p
			for i, c := range want {
				if c >= 'A' && c <= 'Z' {
					want[i] = c + 32
				}
			}
			lowerASCII(p[:])
			if p != want {
				t.Fatalf("pos %d value %#x: got %x want %x", pos, v, p, want)
			}
		}
	}
}
