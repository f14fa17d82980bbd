package resolver_test

import (
	"testing"

	"github.com/miekg/dns"
)

// TestPacketCacheByPolicyClass: the packet cache is keyed by the policy,
// never by the subscriber. A second identical query is a hit; another
// client of the same class (no session: the global layer) shares it;
// a client of another class (other settings) does not, and is answered
// from the record cache instead of the forwarder.
func TestPacketCacheByPolicyClass(t *testing.T) {
	e := newEnv(t, nil)
	names := []string{"packetcache-hits", "packetcache-misses", "cache-hits", "cache-misses", "all-outqueries"}
	steps := []struct {
		from, what string
		moved      map[string]uint64
	}{
		{"127.0.0.1", "first: a miss, asked upstream",
			map[string]uint64{"packetcache-hits": 0, "packetcache-misses": 1, "cache-misses": 1, "all-outqueries": 1}},
		{"127.0.0.1", "same client again: a hit",
			map[string]uint64{"packetcache-hits": 1, "packetcache-misses": 0, "cache-hits": 0, "all-outqueries": 0}},
		{"127.0.0.20", "another client, same class: a hit",
			map[string]uint64{"packetcache-hits": 1, "packetcache-misses": 0, "all-outqueries": 0}},
		{"127.0.0.8", "another class: a miss, from the record cache",
			map[string]uint64{"packetcache-hits": 0, "packetcache-misses": 1, "cache-hits": 1, "all-outqueries": 0}},
		{"127.0.0.8", "that class again: a hit",
			map[string]uint64{"packetcache-hits": 1, "packetcache-misses": 0, "all-outqueries": 0}},
	}
	for _, st := range steps {
		before := e.stats(names...)
		r := e.mustAsk("udp", st.from, query("cached.test", dns.TypeA, 1232, false))
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || !r.Answer[0].(*dns.A).A.Equal(upstreamA) {
			t.Fatalf("%s: %v", st.what, r)
		}
		e.wantMoved(st.what, before, st.moved)
	}
	if n := e.stat("packetcache-entries"); n != 2 {
		t.Errorf("packetcache-entries %d, want 2 (two classes)", n)
	}
}

// TestPacketCacheBlockedPerClass: a blocked answer cached for one class is
// not replayed to another.
func TestPacketCacheBlockedPerClass(t *testing.T) {
	e := newEnv(t, nil)
	for i, st := range []struct {
		from  string
		rcode int
	}{
		{"127.0.0.2", dns.RcodeNameError}, // alice blocks category 3
		{"127.0.0.2", dns.RcodeNameError}, // from the packet cache
		{"127.0.0.20", dns.RcodeSuccess},  // the global class does not
		{"127.0.0.2", dns.RcodeNameError},
	} {
		r := e.mustAsk("udp", st.from, query("bad.test", dns.TypeA, 1232, false))
		if r.Rcode != st.rcode {
			t.Fatalf("%d from %s: %s, want %s", i, st.from, dns.RcodeToString[r.Rcode], dns.RcodeToString[st.rcode])
		}
	}
	if n := e.stat("packetcache-hits"); n != 2 {
		t.Errorf("packetcache-hits %d, want 2", n)
	}
}

// TestPacketCacheGeneration: when the feeds or RPZ zones change
// (Generation), the packet cache is emptied within the housekeeping tick
// (1 s), and the next query is a miss.
func TestPacketCacheGeneration(t *testing.T) {
	e := newEnv(t, nil)
	q := query("generation.test", dns.TypeA, 1232, false)
	e.mustAsk("udp", "", q)
	e.mustAsk("udp", "", q)
	if n := e.stat("packetcache-hits"); n != 1 {
		t.Fatalf("packetcache-hits %d, want 1", n)
	}
	if n := e.stat("packetcache-entries"); n != 1 {
		t.Fatalf("packetcache-entries %d, want 1", n)
	}
	e.gen.Add(1)
	eventually(t, "packet cache emptied after a generation change", func() bool { return e.stat("packetcache-entries") == 0 })
	misses := e.stat("packetcache-misses")
	e.mustAsk("udp", "", q)
	if n := e.stat("packetcache-misses") - misses; n != 1 {
		t.Errorf("after the change: %d misses, want 1", n)
	}
	if n := e.stat("packetcache-hits"); n != 1 {
		t.Errorf("packetcache-hits %d, want still 1", n)
	}
}

// TestPacketCacheScheduleTTL: a policy with schedules gets its answers'
// TTLs cut at the end of the current minute (its windows open and close
// on minutes), from the forwarder and from the packet cache; a policy
// without keeps the forwarder's TTL.
func TestPacketCacheScheduleTTL(t *testing.T) {
	e := newEnv(t, nil)
	for i := range 2 {
		r := e.mustAsk("udp", "127.0.0.9", query("ttl.test", dns.TypeA, 1232, false))
		if len(r.Answer) != 1 || r.Answer[0].Header().Ttl > 60 {
			t.Errorf("%d: scheduled policy: %v, want TTL ≤ 60", i, r.Answer)
		}
	}
	r := e.mustAsk("udp", "127.0.0.1", query("ttl.test", dns.TypeA, 1232, false))
	if len(r.Answer) != 1 || r.Answer[0].Header().Ttl <= 60 {
		t.Errorf("no schedules: %v, want the forwarder's TTL (300, aged)", r.Answer)
	}
	r = e.mustAsk("udp", "127.0.0.9", query("bad.test", dns.TypeA, 1232, false))
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 || r.Ns[0].Header().Ttl > 60 {
		t.Errorf("scheduled block: %v, want NODATA with an SOA of TTL ≤ 60", r)
	}
}
