package cache_test

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/cache"
)

// TestRecordServeStale: an expired entry is not a Get hit, but GetStale
// serves it with every TTL at StaleTTL until serve_stale has passed;
// Sweep keeps it until then; MarkFailed holds for StaleRecheck; a new Put
// makes it fresh again.
func TestRecordServeStale(t *testing.T) {
	c := newRecord(t, func(c *cache.RecordConfig) { c.ServeStale = time.Hour; c.Shards = 1 })
	k := cache.RecordKey{Name: "stale.example.", Type: dns.TypeA, Class: dns.ClassINET}
	m := upstream(t, "stale.example.", dns.TypeA, 0, []dns.RR{rr(t, "stale.example. 60 IN A 192.0.2.7")}, nil)
	if _, err := c.Put(k, m, t0); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.GetStale(k, t0.Add(59*time.Second)); ok {
		t.Error("GetStale served a fresh entry")
	}
	at := t0.Add(61 * time.Second)
	if _, ok := c.Get(k, at); ok {
		t.Fatal("Get served an expired entry")
	}
	ra, ok := c.GetStale(k, at)
	if !ok || !ra.Stale || ra.Failing || ra.TTL != cache.StaleTTL || len(ra.Answer) != 1 || ra.Answer[0].Header().Ttl != cache.StaleTTL {
		t.Fatalf("GetStale = %+v, %v; want the record with TTL %d", ra, ok, cache.StaleTTL)
	}
	if a := ra.Answer[0].(*dns.A).A.String(); a != "192.0.2.7" {
		t.Errorf("stale address %s", a)
	}
	c.MarkFailed(k, at)
	if ra, _ := c.GetStale(k, at.Add(cache.StaleRecheck-time.Second)); !ra.Failing {
		t.Error("not Failing within the recheck time")
	}
	if ra, _ := c.GetStale(k, at.Add(cache.StaleRecheck)); ra.Failing {
		t.Error("still Failing after the recheck time")
	}
	if n := c.Sweep(t0.Add(time.Hour + 59*time.Second)); n != 0 {
		t.Errorf("Sweep removed %d within serve_stale", n)
	}
	if _, ok := c.GetStale(k, t0.Add(time.Hour+60*time.Second)); ok {
		t.Error("GetStale served an entry past serve_stale")
	}
	if n := c.Sweep(t0.Add(time.Hour + 60*time.Second)); n != 1 {
		t.Errorf("Sweep removed %d past serve_stale, want 1", n)
	}
	if s := c.Stats(); s.Entries != 0 {
		t.Errorf("entries %d after the sweep", s.Entries)
	}
	// Stored again: fresh, no failure remembered.
	if _, err := c.Put(k, m, at); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(k, at); !ok {
		t.Error("Get missed the new entry")
	}
	if _, ok := c.GetStale(k, at); ok {
		t.Error("GetStale served the fresh entry")
	}
}

// TestRecordServeStaleOff: serve_stale 0 serves nothing stale and sweeps
// at expiry, as before.
func TestRecordServeStaleOff(t *testing.T) {
	c := newRecord(t, nil)
	k := cache.RecordKey{Name: "stale.example.", Type: dns.TypeA, Class: dns.ClassINET}
	if _, err := c.Put(k, upstream(t, "stale.example.", dns.TypeA, 0, []dns.RR{rr(t, "stale.example. 60 IN A 192.0.2.7")}, nil), t0); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.GetStale(k, t0.Add(61*time.Second)); ok {
		t.Error("GetStale with serve_stale 0")
	}
	if n := c.Sweep(t0.Add(61 * time.Second)); n != 1 {
		t.Errorf("Sweep removed %d, want 1", n)
	}
}

// TestRecordStaleNXDomain: a name's NXDOMAIN is served stale for every
// type, its SOA at StaleTTL.
func TestRecordStaleNXDomain(t *testing.T) {
	c := newRecord(t, func(c *cache.RecordConfig) { c.ServeStale = time.Hour })
	soa := rr(t, "example. 300 IN SOA ns.example. host.example. 1 2 3 4 60")
	nx := upstream(t, "gone.example.", dns.TypeA, dns.RcodeNameError, nil, []dns.RR{soa})
	if _, err := c.Put(cache.RecordKey{Name: "gone.example.", Type: dns.TypeA, Class: dns.ClassINET}, nx, t0); err != nil {
		t.Fatal(err)
	}
	ra, ok := c.GetStale(cache.RecordKey{Name: "Gone.Example.", Type: dns.TypeMX, Class: dns.ClassINET}, t0.Add(2*time.Minute))
	if !ok || ra.Rcode != dns.RcodeNameError || !ra.Negative || len(ra.Ns) != 1 || ra.Ns[0].Header().Ttl != cache.StaleTTL {
		t.Fatalf("GetStale = %+v, %v", ra, ok)
	}
}

// TestRecordPrefetch: hits before the last tenth of the TTL count
// nothing; the prefetch-th hit inside it reports Refresh, once.
func TestRecordPrefetch(t *testing.T) {
	c := newRecord(t, func(c *cache.RecordConfig) { c.Prefetch = 3 })
	k := cache.RecordKey{Name: "pop.example.", Type: dns.TypeA, Class: dns.ClassINET}
	if _, err := c.Put(k, upstream(t, "pop.example.", dns.TypeA, 0, []dns.RR{rr(t, "pop.example. 100 IN A 192.0.2.1")}, nil), t0); err != nil {
		t.Fatal(err)
	}
	var refreshes []int
	for i, at := range []time.Duration{0, 50 * time.Second, 89 * time.Second, 90 * time.Second, 91 * time.Second,
		92 * time.Second, 93 * time.Second, 99 * time.Second} {
		ra, ok := c.Get(k, t0.Add(at))
		if !ok {
			t.Fatalf("hit %d missed", i)
		}
		if ra.Refresh {
			refreshes = append(refreshes, i)
		}
	}
	// Hits 3, 4 and 5 are in the last tenth (90 s on): the third of them.
	if len(refreshes) != 1 || refreshes[0] != 5 {
		t.Errorf("Refresh on hits %v, want [5]", refreshes)
	}
}

// TestPacketPrefetch: the packet cache counts the same way, through
// GetRefresh; with prefetch 0 it never asks.
func TestPacketPrefetch(t *testing.T) {
	for _, n := range []int{0, 2} {
		c := newPacket(t, func(c *cache.PacketConfig) { c.Prefetch = n })
		cq := clientQuery{name: "pop.example.", qtype: dns.TypeA, edns: true}
		q := parse(t, cq)
		k := key(t, q, "fp")
		if _, err := c.Put(k, reply(t, cq, 0, []dns.RR{rr(t, "pop.example. 100 IN A 192.0.2.1")}, nil), nil, t0); err != nil {
			t.Fatal(err)
		}
		rd := c.NewReader()
		var refreshes []int
		for i, at := range []time.Duration{10 * time.Second, 90 * time.Second, 95 * time.Second, 96 * time.Second} {
			_, _, hit, refresh := rd.GetRefresh(k, q.RawName(), t0.Add(at), make([]byte, 0, 512))
			if !hit {
				t.Fatalf("prefetch %d: hit %d missed", n, i)
			}
			if refresh {
				refreshes = append(refreshes, i)
			}
		}
		want := "[2]"
		if n == 0 {
			want = "[]"
		}
		if got := fmtInts(refreshes); got != want {
			t.Errorf("prefetch %d: Refresh on hits %s, want %s", n, got, want)
		}
	}
	if _, err := cache.NewPacket(cache.PacketConfig{Entries: 8, MaxTTL: time.Hour, Prefetch: -1}); err == nil {
		t.Error("NewPacket accepted prefetch -1")
	}
}

func fmtInts(v []int) string {
	s := "["
	for i, x := range v {
		if i > 0 {
			s += " "
		}
		s += string(rune('0' + x))
	}
	return s + "]"
}
