package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/gaissmai/bart"
)

// mapSuffixSet is the map the suffix set replaced: the reference its
// answers are checked against.
type mapSuffixSet map[string]string

func newMapSuffixSet(prefix string, names []string) mapSuffixSet {
	s := make(mapSuffixSet, len(names))
	for _, n := range names {
		n = strings.TrimSuffix(n, ".")
		s[n] = prefix + n
	}
	return s
}

func (s mapSuffixSet) match(name string) (string, bool) {
	for {
		if r, ok := s[name]; ok {
			return r, true
		}
		i := strings.IndexByte(name, '.')
		if i < 0 {
			return "", false
		}
		name = name[i+1:]
	}
}

func checkSuffixSet(t *testing.T, prefix string, names, queries []string) {
	t.Helper()
	s, ref := newSuffixSet(prefix, names), newMapSuffixSet(prefix, names)
	for _, q := range queries {
		r, ok := s.match(q)
		wr, wok := ref.match(q)
		if len(names) == 0 {
			wr, wok = "", false // an empty list matches nothing, as a nil map
		}
		if r != wr || ok != wok {
			t.Fatalf("names %q: match(%q) = %q, %v; the map says %q, %v", names, q, r, ok, wr, wok)
		}
	}
}

func TestSuffixSetMatchesTheMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	label := func() string { return fmt.Sprintf("l%d", r.IntN(40)) }
	name := func() string {
		ls := make([]string, 1+r.IntN(4))
		for i := range ls {
			ls[i] = label()
		}
		return strings.Join(ls, ".")
	}
	for _, n := range []int{0, 1, 2, 7, 8, 9, 100, 3000} {
		names := make([]string, n)
		for i := range names {
			names[i] = name()
			if i%10 == 3 {
				names[i] += "." // trimmed, and so a duplicate of another entry now and then
			}
		}
		queries := make([]string, 2000)
		for i := range queries {
			queries[i] = name()
			if i%3 == 0 && n > 0 {
				queries[i] = label() + "." + strings.TrimSuffix(names[r.IntN(n)], ".")
			}
		}
		checkSuffixSet(t, "blocklist:", names, append(queries, "", "l1", "x.l1"))
	}
	checkSuffixSet(t, "allowlist:", []string{"a.example", "b.a.example", "."}, []string{"", "a.example", "x.b.a.example", "example"})
}

// The suffix set is a hash table of its own: fuzz it against the map.
func FuzzSuffixSet(f *testing.F) {
	f.Add("ads.example,b.ads.example,example.org.", "www.b.ads.example")
	f.Add("a,a,a.", "x.a")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, list, query string) {
		var names []string
		if list != "" {
			names = strings.Split(list, ",")
		}
		checkSuffixSet(t, "blocklist:", names, []string{query, strings.ToLower(query), list})
	})
}

func TestSetLookupsDoNotAllocate(t *testing.T) {
	s := newSuffixSet("blocklist:", []string{"ads.example", "tracker.example.org"})
	if n := testing.AllocsPerRun(100, func() { s.match("a.b.tracker.example.org") }); n != 0 {
		t.Errorf("match allocates %v times", n)
	}
	ns := newNetworkSet([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.1.0.0/16")})
	a := netip.MustParseAddr("10.1.2.3")
	if n := testing.AllocsPerRun(100, func() { ns.lookup(a) }); n != 0 {
		t.Errorf("lookup allocates %v times", n)
	}
}

// checkNetworks compares a short list's search with the prefix table a
// long list gets (and every list got before).
func checkNetworks(t *testing.T, nets []netip.Prefix, addrs []netip.Addr) {
	t.Helper()
	s := newNetworkSet(nets)
	ref := new(bart.Table[string])
	for _, n := range nets {
		ref.Insert(n, "network:"+n.String())
	}
	if s.empty() != (len(nets) == 0) {
		t.Fatalf("%v: empty() = %v", nets, s.empty())
	}
	for _, a := range addrs {
		r, ok := s.lookup(a)
		wr, wok := ref.Lookup(a)
		if r != wr || ok != wok {
			t.Fatalf("%v: lookup(%v) = %q, %v; the table says %q, %v", nets, a, r, ok, wr, wok)
		}
	}
}

func TestNetworkSetMatchesTheTable(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	addr := func() netip.Addr {
		if r.IntN(3) == 0 {
			var b [16]byte
			b[0], b[1], b[15] = 0x20, 0x01, byte(r.IntN(4))
			return netip.AddrFrom16(b)
		}
		return netip.AddrFrom4([4]byte{10, byte(r.IntN(3)), byte(r.IntN(3)), byte(r.IntN(4))})
	}
	for _, n := range []int{0, 1, 2, 5, maxLinearNetworks, maxLinearNetworks + 1, 40} {
		for range 20 {
			nets := make([]netip.Prefix, n)
			for i := range nets {
				a := addr()
				nets[i] = netip.PrefixFrom(a, r.IntN(a.BitLen()+1)) // unmasked, equal networks now and then
			}
			addrs := make([]netip.Addr, 200)
			for i := range addrs {
				addrs[i] = addr()
			}
			checkNetworks(t, nets, addrs)
		}
	}
}

func FuzzNetworkSet(f *testing.F) {
	f.Add("10.0.0.0/8,10.1.0.0/16,10.1.2.3/8,::/0", "10.1.2.3")
	f.Add("2001:db8::/32,2001:db8::1/128", "2001:db8::1")
	f.Add("fe80::/10", "fe80::1%eth0") // a zone: ignored, as the table ignores it
	f.Fuzz(func(t *testing.T, list, addr string) {
		var nets []netip.Prefix
		for _, s := range strings.Split(list, ",") {
			if p, err := netip.ParsePrefix(s); err == nil {
				nets = append(nets, p)
			}
		}
		a, err := netip.ParseAddr(addr)
		if err != nil || len(nets) > maxLinearNetworks {
			return
		}
		checkNetworks(t, nets, []netip.Addr{a, a.Unmap()})
	})
}

func TestCodeSetSharesIncreasingCodes(t *testing.T) {
	codes := []uint16{1, 5, 9}
	if c := newCodeSet(codes); &c[0] != &codes[0] || !slices.Equal(c, codes) {
		t.Errorf("increasing codes copied: %v", c)
	}
	for _, in := range [][]uint16{{5, 1, 9}, {1, 1, 9}, {65535, 3}} {
		c := newCodeSet(in)
		if &c[0] == &in[0] || !slices.IsSorted(c) || len(slices.Compact(slices.Clone(c))) != len(c) {
			t.Errorf("newCodeSet(%v) = %v", in, c)
		}
	}
}
