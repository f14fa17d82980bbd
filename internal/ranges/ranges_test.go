package ranges

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/svc-pf/svc-pf/internal/identity"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func TestEffectiveExamples(t *testing.T) {
	user := func(u string) identity.Attributes { return identity.Attributes{Username: u} }
	tests := []struct {
		name      string
		prefixes  []string
		overrides []Override
		want      []string // "from-to orig attrs"
	}{
		{
			name:     "bare prefix",
			prefixes: []string{"10.0.0.0/8"},
			want:     []string{"10.0.0.0-10.255.255.255 10.0.0.0/8 {  }"},
		},
		{
			name:      "two /9 prefixes under a /8 override give one /8 range",
			prefixes:  []string{"10.0.0.0/9", "10.128.0.0/9"},
			overrides: []Override{{pfx("10.0.0.0/8"), user("a")}},
			want:      []string{"10.0.0.0-10.255.255.255 10.0.0.0/8 {a  }"},
		},
		{
			name:      "nested override splits its parent",
			prefixes:  []string{"10.0.0.0/8"},
			overrides: []Override{{pfx("10.0.0.0/16"), user("a")}, {pfx("10.0.1.0/24"), user("b")}},
			want: []string{
				"10.0.0.0-10.0.0.255 10.0.0.0/16 {a  }",
				"10.0.1.0-10.0.1.255 10.0.1.0/24 {b  }",
				"10.0.2.0-10.0.255.255 10.0.0.0/16 {a  }",
				"10.1.0.0-10.255.255.255 10.0.0.0/8 {  }",
			},
		},
		{
			name:      "override outside the prefixes is held back",
			prefixes:  []string{"10.0.0.0/9"},
			overrides: []Override{{pfx("10.0.0.0/8"), user("a")}, {pfx("192.168.0.0/24"), user("b")}},
			want:      []string{"10.0.0.0-10.127.255.255 10.0.0.0/9 {  }"},
		},
		{
			name:      "no attribute inheritance",
			prefixes:  []string{"10.0.0.0/24"},
			overrides: []Override{{pfx("10.0.0.0/24"), identity.Attributes{Username: "a", Location: "x"}}, {pfx("10.0.0.0/25"), identity.Attributes{DeviceID: "mac:1"}}},
			want: []string{
				"10.0.0.0-10.0.0.127 10.0.0.0/25 { mac:1 }",
				"10.0.0.128-10.0.0.255 10.0.0.0/24 {a  x}",
			},
		},
		{
			name:      "ends of the address spaces",
			prefixes:  []string{"0.0.0.0/0", "::/0"},
			overrides: []Override{{pfx("255.255.255.255/32"), user("hi")}, {pfx("0.0.0.0/32"), user("lo")}, {pfx("ffff::/16"), user("v6")}},
			want: []string{
				"0.0.0.0-0.0.0.0 0.0.0.0/32 {lo  }",
				"0.0.0.1-255.255.255.254 0.0.0.0/0 {  }",
				"255.255.255.255-255.255.255.255 255.255.255.255/32 {hi  }",
				"::-fffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff ::/0 {  }",
				"ffff::-ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff::/16 {v6  }",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ps []netip.Prefix
			for _, s := range tt.prefixes {
				ps = append(ps, pfx(s))
			}
			got := Effective(ps, tt.overrides)
			if len(got) != len(tt.want) {
				t.Fatalf("got %d ranges %v, want %v", len(got), got, tt.want)
			}
			for i, r := range got {
				if s := fmt.Sprintf("%s-%s %s %v", r.From, r.To, r.Orig, r.Attrs); s != tt.want[i] {
					t.Errorf("range %d = %q, want %q", i, s, tt.want[i])
				}
			}
		})
	}
}

func TestCoverageUnion(t *testing.T) {
	c := NewCoverage([]netip.Prefix{pfx("10.0.0.0/9"), pfx("10.128.0.0/9"), pfx("2001:db8::/33"), pfx("2001:db8:8000::/33")})
	for s, want := range map[string]bool{
		"10.0.0.0/8": true, "10.1.0.0/16": true, "0.0.0.0/0": false, "11.0.0.0/8": false,
		"2001:db8::/32": true, "2001:db8::/31": false, "::/0": false,
	} {
		if got := c.Covers(pfx(s)); got != want {
			t.Errorf("Covers(%s) = %v, want %v", s, got, want)
		}
	}
}

// TestEffectiveMatchesOracle checks random nested prefixes and overrides, in
// both families, against a brute-force decision for every single address.
func TestEffectiveMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 1000; iter++ {
		var prefixes []netip.Prefix
		var overrides []Override
		seen := map[netip.Prefix]bool{}
		for _, base := range []netip.Prefix{pfx("10.1.0.0/20"), pfx("2001:db8::/116")} {
			for range rng.IntN(6) {
				prefixes = append(prefixes, randomSub(rng, base, 0, 12))
			}
			// Overrides reach two bits above the base so some fall outside.
			wide, _ := base.Addr().Prefix(base.Bits() - 2)
			for range rng.IntN(25) {
				p := randomSub(rng, wide, 0, 14)
				if seen[p] { // one override per CIDR, as in the store
					continue
				}
				seen[p] = true
				overrides = append(overrides, Override{CIDR: p, Attrs: identity.Attributes{Username: fmt.Sprint("u", rng.IntN(3))}})
			}
		}
		got := Effective(prefixes, overrides)
		checkAgainstOracle(t, prefixes, overrides, got)
		if t.Failed() {
			t.Fatalf("iteration %d: prefixes %v overrides %v", iter, prefixes, overrides)
		}
	}
}

func randomSub(rng *rand.Rand, base netip.Prefix, minExtra, maxExtra int) netip.Prefix {
	bits := base.Bits() + minExtra + rng.IntN(maxExtra-minExtra+1)
	a := base.Addr().As16()
	// Randomise the host bits of base, then mask to the chosen length.
	for i := base.Bits(); i < base.Addr().BitLen(); i++ {
		if rng.IntN(2) == 1 {
			bit := i
			if base.Addr().Is4() {
				bit += 96
			}
			a[bit/8] |= 0x80 >> (bit % 8)
		}
	}
	addr := netip.AddrFrom16(a)
	if base.Addr().Is4() {
		addr = addr.Unmap()
	}
	p, _ := addr.Prefix(bits)
	return p
}

type source struct {
	orig  netip.Prefix
	attrs identity.Attributes
}

// activeOverrides keeps the overrides whose every address is in some prefix.
func activeOverrides(prefixes []netip.Prefix, overrides []Override) []Override {
	covered := func(a netip.Addr) bool {
		for _, p := range prefixes {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	var active []Override
next:
	for _, o := range overrides {
		for x := o.CIDR.Addr(); o.CIDR.Contains(x); x = x.Next() {
			if !covered(x) {
				continue next
			}
		}
		active = append(active, o)
	}
	return active
}

func oracle(prefixes []netip.Prefix, active []Override, a netip.Addr) (source, bool) {
	best := -1
	var win source
	for _, o := range active {
		if o.CIDR.Contains(a) && o.CIDR.Bits() > best {
			best, win = o.CIDR.Bits(), source{o.CIDR, o.Attrs}
		}
	}
	if best >= 0 {
		return win, true
	}
	for _, p := range prefixes {
		if p.Contains(a) && p.Bits() > best {
			best, win = p.Bits(), source{orig: p}
		}
	}
	return win, best >= 0
}

func checkAgainstOracle(t *testing.T, prefixes []netip.Prefix, overrides []Override, got []Range) {
	t.Helper()
	for i, r := range got {
		if r.From.Compare(r.To) > 0 {
			t.Errorf("range %d inverted: %v", i, r)
		}
		if i > 0 {
			prev := got[i-1]
			if prev.To.Compare(r.From) >= 0 {
				t.Errorf("ranges %d and %d overlap or are unsorted", i-1, i)
			}
			if prev.To.Next() == r.From && prev.Orig == r.Orig && prev.Attrs == r.Attrs {
				t.Errorf("ranges %d and %d are adjacent with the same source %v", i-1, i, r.Orig)
			}
		}
	}
	active := activeOverrides(prefixes, overrides)
	// Walk every address of both universes (with a margin) and compare.
	for _, universe := range []netip.Prefix{pfx("10.0.0.0/18"), pfx("2001:db8::/114")} {
		k := 0
		for a := universe.Addr(); universe.Contains(a); a = a.Next() {
			for k < len(got) && got[k].To.Compare(a) < 0 {
				k++
			}
			inRange := k < len(got) && got[k].From.Compare(a) <= 0
			want, ok := oracle(prefixes, active, a)
			if ok != inRange {
				t.Errorf("%s: covered=%v, in a range=%v", a, ok, inRange)
				return
			}
			if ok && (got[k].Orig != want.orig || got[k].Attrs != want.attrs) {
				t.Errorf("%s: range says %v %v, oracle %v %v", a, got[k].Orig, got[k].Attrs, want.orig, want.attrs)
				return
			}
		}
	}
}

func BenchmarkEffective100k(b *testing.B) {
	prefixes := []netip.Prefix{pfx("10.0.0.0/8"), pfx("2001:db8::/32")}
	rng := rand.New(rand.NewPCG(3, 4))
	var overrides []Override
	seen := map[netip.Prefix]bool{}
	for len(overrides) < 100_000 {
		base := prefixes[len(overrides)%2]
		p := randomSub(rng, base, 8, 16)
		if !seen[p] {
			seen[p] = true
			overrides = append(overrides, Override{CIDR: p, Attrs: identity.Attributes{Username: "u"}})
		}
	}
	b.Run("unsorted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Effective(prefixes, slices.Clone(overrides))
		}
	})
	// The store returns overrides sorted by address and length.
	slices.SortFunc(overrides, func(x, y Override) int {
		if c := x.CIDR.Addr().Compare(y.CIDR.Addr()); c != 0 {
			return c
		}
		return x.CIDR.Bits() - y.CIDR.Bits()
	})
	b.Run("sorted", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Effective(prefixes, overrides)
		}
	})
}
