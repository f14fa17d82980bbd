package resolver

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// FuzzZoneFind: the zone table's lookup picks, for any name, the longest
// listed zone the name is at or under (compared ignoring ASCII case), as a
// plain scan over the zones with dns.IsSubDomain does, and never panics.
func FuzzZoneFind(f *testing.F) {
	f.Add("www.corp.example.", "corp.example.", "dev.corp.example.")
	f.Add("X.DEV.Corp.Example.", "corp.example.", "dev.corp.example.")
	f.Add("corp.example.", "corp.example.", ".")
	f.Add(`a\.b.corp.example.`, "b.corp.example.", "corp.example.")
	f.Add("notcorp.example.", "corp.example.", "example.")
	f.Add(strings.Repeat(`\255`, 70)+".corp.", "corp.", "x.")
	f.Fuzz(func(t *testing.T, name, z1, z2 string) {
		t1 := &zoneTable{byName: map[string]*zoneClient{}}
		for _, z := range []string{z1, z2} {
			z = toLower(dns.Fqdn(z))
			if _, ok := dns.IsDomainName(z); !ok || t1.byName[z] != nil {
				continue
			}
			zc := &zoneClient{zone: z}
			t1.byName[z], t1.list = zc, append(t1.list, zc)
		}
		if _, ok := dns.IsDomainName(name); !ok || !dns.IsFqdn(name) {
			return
		}
		got := t1.find(name)
		var want *zoneClient
		for _, zc := range t1.list {
			if dns.IsSubDomain(zc.zone, toLower(name)) && (want == nil || dns.CountLabel(zc.zone) > dns.CountLabel(want.zone)) {
				want = zc
			}
		}
		if got != want {
			t.Fatalf("find(%q) over %v = %v, want %v", name, zoneNames(t1.list), got, want)
		}
	})
}

// BenchmarkZoneFind: a miss's zone lookup with two zones, for a name in
// the nested zone and one in none: no allocation.
func BenchmarkZoneFind(b *testing.B) {
	t := &zoneTable{byName: map[string]*zoneClient{}}
	for _, z := range []string{"corp.example.", "dev.corp.example."} {
		zc := &zoneClient{zone: z}
		t.byName[z], t.list = zc, append(t.list, zc)
	}
	b.ReportAllocs()
	for b.Loop() {
		if t.find("Www.A.Dev.Corp.Example.") == nil || t.find("www.other.test.") != nil {
			b.Fatal("wrong zone")
		}
	}
}
