package cache_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

func TestPacketGet(t *testing.T) {
	stored := clientQuery{name: "www.example.com.", qtype: dns.TypeA, edns: true, do: true}
	answer := reply(t, stored, dns.RcodeSuccess, []dns.RR{
		rr(t, "www.example.com. 3600 IN CNAME web.example.com."),
		rr(t, "web.example.com. 300 IN A 192.0.2.1"),
	}, nil)
	c := newPacket(t, nil)
	if life, err := c.Put(key(t, parse(t, stored), "fpA"), answer, nil, t0); err != nil || life != 300 {
		t.Fatalf("Put = %d, %v", life, err)
	}

	tests := []struct {
		name     string
		query    clientQuery
		fp       string
		at       time.Duration
		hit      bool
		wantTTLs []uint32
	}{
		{"same query", stored, "fpA", 0, true, []uint32{3600, 300}},
		{"0x20 client", clientQuery{"wWw.ExAmPlE.cOm.", dns.TypeA, true, true, false, false}, "fpA", 0, true, []uint32{3600, 300}},
		{"aged by whole seconds", stored, "fpA", 10*time.Second + 900*time.Millisecond, true, []uint32{3590, 290}},
		{"last second", stored, "fpA", 299 * time.Second, true, []uint32{3301, 1}},
		{"expired", stored, "fpA", 300 * time.Second, false, nil},
		{"clock behind the insertion", stored, "fpA", -5 * time.Second, true, []uint32{3600, 300}},
		{"DO differs", clientQuery{"www.example.com.", dns.TypeA, true, false, false, false}, "fpA", 0, false, nil},
		{"no EDNS", clientQuery{"www.example.com.", dns.TypeA, false, false, false, false}, "fpA", 0, false, nil},
		{"CD differs", clientQuery{"www.example.com.", dns.TypeA, true, true, true, false}, "fpA", 0, false, nil},
		{"other policy class", stored, "fpB", 0, false, nil},
		{"no policy class", stored, "", 0, false, nil},
		{"other type", clientQuery{"www.example.com.", dns.TypeAAAA, true, true, false, false}, "fpA", 0, false, nil},
		{"other name", clientQuery{"ww.example.com.", dns.TypeA, true, true, false, false}, "fpA", 0, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := parse(t, tt.query)
			before := c.Stats()
			dst := make([]byte, 0, 4096)
			got, _, hit := c.Get(key(t, q, tt.fp), q.RawName(), t0.Add(tt.at), dst)
			after := c.Stats()
			if hit != tt.hit {
				t.Fatalf("hit = %v", hit)
			}
			if !hit {
				if len(got) != 0 || after.Misses != before.Misses+1 {
					t.Errorf("miss returned %d bytes, misses %d→%d", len(got), before.Misses, after.Misses)
				}
				return
			}
			if after.Hits != before.Hits+1 {
				t.Errorf("hits %d→%d", before.Hits, after.Hits)
			}
			if &got[0] != &dst[:1][0] {
				t.Error("Get did not reuse dst")
			}
			m := unpack(t, got)
			if m.Question[0].Name != tt.query.name {
				t.Errorf("question %q, client sent %q", m.Question[0].Name, tt.query.name)
			}
			for i, rr := range m.Answer {
				if rr.Header().Ttl != tt.wantTTLs[i] {
					t.Errorf("record %d TTL %d, want %d", i, rr.Header().Ttl, tt.wantTTLs[i])
				}
			}
			if opt := m.IsEdns0(); opt == nil || !opt.Do() {
				t.Errorf("OPT %v", opt)
			}
		})
	}
}

// The stored copy is the cache's own: the caller's buffer may be reused.
func TestPacketPutCopies(t *testing.T) {
	cq := clientQuery{name: "example.com.", qtype: dns.TypeA}
	answer := reply(t, cq, dns.RcodeSuccess, []dns.RR{rr(t, "example.com. 60 IN A 192.0.2.1")}, nil)
	c := newPacket(t, nil)
	q := parse(t, cq)
	if _, err := c.Put(key(t, q, "fp"), answer, nil, t0); err != nil {
		t.Fatal(err)
	}
	want := string(answer)
	for i := range answer {
		answer[i] = 0xFF
	}
	got, _, hit := c.Get(key(t, q, "fp"), q.RawName(), t0, nil)
	if !hit || string(got) != want {
		t.Fatalf("hit %v, answer changed with the caller's buffer", hit)
	}
}

func TestPacketPutLifetime(t *testing.T) {
	soa := func(ttl, minimum int) dns.RR {
		return rr(t, fmt.Sprintf("example.com. %d IN SOA ns.example.com. host.example.com. 1 7200 900 1209600 %d", ttl, minimum))
	}
	a := func(ttl int) dns.RR { return rr(t, fmt.Sprintf("example.com. %d IN A 192.0.2.1", ttl)) }
	plain := clientQuery{name: "example.com.", qtype: dns.TypeA}

	tests := []struct {
		name     string
		cfg      func(*cache.PacketConfig)
		query    clientQuery
		answer   func(clientQuery) []byte
		wantLife uint32
		wantErr  cache.NotCached
		wantTTLs []uint32 // answer and authority, as served right after the Put
	}{
		{
			name:     "positive: the smallest TTL",
			answer:   func(q clientQuery) []byte { return reply(t, q, 0, []dns.RR{a(300), a(60)}, nil) },
			wantLife: 60, wantTTLs: []uint32{300, 60},
		},
		{
			name:     "positive: max_ttl caps the life and every TTL",
			cfg:      func(c *cache.PacketConfig) { c.MaxTTL = time.Hour },
			answer:   func(q clientQuery) []byte { return reply(t, q, 0, []dns.RR{a(86400), a(7200)}, nil) },
			wantLife: 3600, wantTTLs: []uint32{3600, 3600},
		},
		{
			name:     "NXDOMAIN: SOA MINIMUM below the SOA TTL",
			cfg:      func(c *cache.PacketConfig) { c.NegativeTTL = time.Hour },
			answer:   func(q clientQuery) []byte { return reply(t, q, dns.RcodeNameError, nil, []dns.RR{soa(900, 300)}) },
			wantLife: 300, wantTTLs: []uint32{300},
		},
		{
			name:     "NXDOMAIN: SOA TTL below MINIMUM",
			cfg:      func(c *cache.PacketConfig) { c.NegativeTTL = time.Hour },
			answer:   func(q clientQuery) []byte { return reply(t, q, dns.RcodeNameError, nil, []dns.RR{soa(120, 300)}) },
			wantLife: 120, wantTTLs: []uint32{120},
		},
		{
			name:     "NXDOMAIN: negative_ttl caps",
			answer:   func(q clientQuery) []byte { return reply(t, q, dns.RcodeNameError, nil, []dns.RR{soa(900, 300)}) },
			wantLife: 60, wantTTLs: []uint32{60},
		},
		{
			name:     "NODATA",
			cfg:      func(c *cache.PacketConfig) { c.NegativeTTL = time.Hour },
			answer:   func(q clientQuery) []byte { return reply(t, q, 0, nil, []dns.RR{soa(900, 600)}) },
			wantLife: 600, wantTTLs: []uint32{600},
		},
		{
			name:    "NXDOMAIN without SOA",
			answer:  func(q clientQuery) []byte { return reply(t, q, dns.RcodeNameError, nil, nil) },
			wantErr: cache.NotCachedNoSOA,
		},
		{
			name:    "negative_ttl 0",
			cfg:     func(c *cache.PacketConfig) { c.NegativeTTL = 0 },
			answer:  func(q clientQuery) []byte { return reply(t, q, dns.RcodeNameError, nil, []dns.RR{soa(900, 300)}) },
			wantErr: cache.NotCachedZeroTTL,
		},
		{
			name:    "SERVFAIL is not cached by default",
			answer:  func(q clientQuery) []byte { return reply(t, q, dns.RcodeServerFailure, nil, nil) },
			wantErr: cache.NotCachedRcode,
		},
		{
			name:     "SERVFAIL with servfail_ttl",
			cfg:      func(c *cache.PacketConfig) { c.ServfailTTL = 5 * time.Second },
			answer:   func(q clientQuery) []byte { return reply(t, q, dns.RcodeServerFailure, nil, nil) },
			wantLife: 5,
		},
		{
			name:    "REFUSED",
			answer:  func(q clientQuery) []byte { return reply(t, q, dns.RcodeRefused, nil, nil) },
			wantErr: cache.NotCachedRcode,
		},
		{
			name:    "BADVERS",
			query:   clientQuery{name: "example.com.", qtype: dns.TypeA, edns: true},
			answer:  func(q clientQuery) []byte { return reply(t, q, dns.RcodeBadVers, nil, nil) },
			wantErr: cache.NotCachedRcode,
		},
		{
			name:    "zero TTL",
			answer:  func(q clientQuery) []byte { return reply(t, q, 0, []dns.RR{a(0)}, nil) },
			wantErr: cache.NotCachedZeroTTL,
		},
		{
			name: "truncated",
			answer: func(q clientQuery) []byte {
				b := reply(t, q, 0, []dns.RR{a(60)}, nil)
				b[2] |= byte(dnswire.FlagTC >> 8)
				return b
			},
			wantErr: cache.NotCachedTruncated,
		},
		{
			name: "answer to another question",
			answer: func(q clientQuery) []byte {
				return reply(t, clientQuery{name: "example.org.", qtype: dns.TypeA}, 0, []dns.RR{a(60)}, nil)
			},
			wantErr: cache.NotCachedMismatch,
		},
		{
			name: "OPT for a query without EDNS",
			answer: func(q clientQuery) []byte {
				q.edns = true
				return reply(t, q, 0, []dns.RR{a(60)}, nil)
			},
			wantErr: cache.NotCachedMismatch,
		},
		{
			name:    "not a DNS message",
			answer:  func(clientQuery) []byte { return []byte{1, 2, 3} },
			wantErr: cache.NotCachedMalformed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newPacket(t, tt.cfg)
			cq := tt.query
			if cq.name == "" {
				cq = plain
			}
			q := parse(t, cq)
			life, err := c.Put(key(t, q, "fp"), tt.answer(cq), nil, t0)
			if tt.wantErr != 0 {
				var nc cache.NotCached
				if !errors.As(err, &nc) || nc != tt.wantErr {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if _, _, hit := c.Get(key(t, q, "fp"), q.RawName(), t0, nil); hit {
					t.Error("refused answer is served")
				}
				return
			}
			if err != nil || life != tt.wantLife {
				t.Fatalf("Put = %d, %v; want %d", life, err, tt.wantLife)
			}
			got, _, hit := c.Get(key(t, q, "fp"), q.RawName(), t0, nil)
			if !hit {
				t.Fatal("miss right after Put")
			}
			m := unpack(t, got)
			var ttls []uint32
			for _, r := range append(m.Answer, m.Ns...) {
				ttls = append(ttls, r.Header().Ttl)
			}
			if fmt.Sprint(ttls) != fmt.Sprint(tt.wantTTLs) && !(len(ttls) == 0 && len(tt.wantTTLs) == 0) {
				t.Errorf("TTLs %v, want %v", ttls, tt.wantTTLs)
			}
			if _, _, hit := c.Get(key(t, q, "fp"), q.RawName(), t0.Add(time.Duration(life)*time.Second), nil); hit {
				t.Error("served past its lifetime")
			}
		})
	}
}

func TestPacketKeyLimits(t *testing.T) {
	var k cache.PacketKey
	if k.Set([]byte{0}, 1, 1, 0, strings.Repeat("f", cache.MaxFingerprintLen+1)) {
		t.Error("accepted an over-long fingerprint")
	}
	if k.Set(nil, 1, 1, 0, "fp") {
		t.Error("accepted an empty name")
	}
	c := newPacket(t, nil)
	if _, _, hit := c.Get(&k, nil, t0, nil); hit {
		t.Error("unset key hit")
	}
	answer := reply(t, clientQuery{name: "example.com.", qtype: dns.TypeA}, 0, []dns.RR{rr(t, "example.com. 60 IN A 192.0.2.1")}, nil)
	if _, err := c.Put(&k, answer, nil, t0); !errors.Is(err, cache.NotCachedKey) {
		t.Errorf("Put with an unset key: %v", err)
	}
	upper := []byte("\x07EXAMPLE\x03com\x00")
	if !k.Set(upper, dns.TypeA, dns.ClassINET, 0, "fp") {
		t.Fatal("Set")
	}
	if _, err := c.Put(&k, answer, nil, t0); !errors.Is(err, cache.NotCachedKey) {
		t.Errorf("Put with an upper-case key: %v", err)
	}
}

// distinct returns n queries for different names and the answers to them.
func distinct(t testing.TB, n int, ttl int) ([]*dnswire.Query, [][]byte) {
	qs := make([]*dnswire.Query, n)
	answers := make([][]byte, n)
	for i := range n {
		cq := clientQuery{name: fmt.Sprintf("host%d.example.com.", i), qtype: dns.TypeA}
		qs[i] = parse(t, cq)
		answers[i] = reply(t, cq, 0, []dns.RR{rr(t, fmt.Sprintf("%s %d IN A 192.0.2.1", cq.name, ttl))}, nil)
	}
	return qs, answers
}

func TestPacketEvictionAtTheBound(t *testing.T) {
	c := newPacket(t, func(c *cache.PacketConfig) { c.Entries, c.Shards = 20, 1 })
	if c.Capacity() != 24 {
		t.Fatalf("Capacity %d, want 20 rounded up to 24", c.Capacity())
	}
	qs, answers := distinct(t, 500, 300)
	for i := range qs {
		if _, err := c.Put(key(t, qs[i], "fp"), answers[i], nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	s := c.Stats()
	if s.Entries > int64(c.Capacity()) || s.Entries < int64(c.Capacity())/2 {
		t.Errorf("entries %d for capacity %d", s.Entries, c.Capacity())
	}
	if s.Inserts != 500 || s.Evictions != s.Inserts-uint64(s.Entries) {
		t.Errorf("stats %+v", s)
	}
	hits := 0
	for i := range qs {
		if _, _, hit := c.Get(key(t, qs[i], "fp"), qs[i].RawName(), t0, nil); hit {
			hits++
		}
	}
	if int64(hits) != s.Entries {
		t.Errorf("%d hits for %d entries", hits, s.Entries)
	}
}

// With one bucket (8 ways), the entry hit since the last eviction survives
// the next one: CLOCK's second chance.
func TestPacketSecondChance(t *testing.T) {
	c := newPacket(t, func(c *cache.PacketConfig) { c.Entries, c.Shards = 8, 1 })
	qs, answers := distinct(t, 9, 300)
	for i := range 8 {
		if _, err := c.Put(key(t, qs[i], "fp"), answers[i], nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, hit := c.Get(key(t, qs[0], "fp"), qs[0].RawName(), t0, nil); !hit {
		t.Fatal("miss before eviction")
	}
	if _, err := c.Put(key(t, qs[8], "fp"), answers[8], nil, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, hit := c.Get(key(t, qs[0], "fp"), qs[0].RawName(), t0, nil); !hit {
		t.Error("the entry just hit was evicted")
	}
	if _, _, hit := c.Get(key(t, qs[8], "fp"), qs[8].RawName(), t0, nil); !hit {
		t.Error("the new entry is missing")
	}
	if s := c.Stats(); s.Entries != 8 || s.Evictions != 1 {
		t.Errorf("stats %+v", s)
	}
}

// An expired entry is reused before any live one is evicted.
func TestPacketExpiredFirst(t *testing.T) {
	c := newPacket(t, func(c *cache.PacketConfig) { c.Entries, c.Shards = 8, 1 })
	short, shortAnswers := distinct(t, 1, 10)
	if _, err := c.Put(key(t, short[0], "short"), shortAnswers[0], nil, t0); err != nil {
		t.Fatal(err)
	}
	qs, answers := distinct(t, 8, 300)
	for i := range qs {
		if _, err := c.Put(key(t, qs[i], "fp"), answers[i], nil, t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range qs {
		if _, _, hit := c.Get(key(t, qs[i], "fp"), qs[i].RawName(), t0.Add(time.Minute), nil); !hit {
			t.Errorf("entry %d evicted while an expired one was there", i)
		}
	}
	if s := c.Stats(); s.Evictions != 0 || s.Entries != 8 {
		t.Errorf("stats %+v", s)
	}
}

func TestPacketByteBound(t *testing.T) {
	const budget = 4096
	c := newPacket(t, func(c *cache.PacketConfig) { c.MaxBytes, c.Shards = budget, 1 })
	qs, answers := distinct(t, 100, 300)
	for i := range qs {
		if _, err := c.Put(key(t, qs[i], "fp"), answers[i], nil, t0); err != nil {
			t.Fatal(err)
		}
		if s := c.Stats(); s.Bytes > budget {
			t.Fatalf("after %d puts: %d bytes", i+1, s.Bytes)
		}
	}
	s := c.Stats()
	if s.Evictions == 0 || s.Entries >= 100 || s.Entries == 0 {
		t.Errorf("stats %+v", s)
	}
	big := clientQuery{name: "big.example.com.", qtype: dns.TypeTXT}
	var txt []dns.RR
	for range 30 {
		txt = append(txt, rr(t, `big.example.com. 60 IN TXT "`+strings.Repeat("x", 200)+`"`))
	}
	if _, err := c.Put(key(t, parse(t, big), "fp"), reply(t, big, 0, txt, nil), nil, t0); !errors.Is(err, cache.NotCachedTooLarge) {
		t.Errorf("Put of a 6 KB answer into a 4 KB cache: %v", err)
	}
}

func TestPacketReplace(t *testing.T) {
	c := newPacket(t, nil)
	cq := clientQuery{name: "example.com.", qtype: dns.TypeA}
	q := parse(t, cq)
	for _, addr := range []string{"192.0.2.1", "192.0.2.2"} {
		if _, err := c.Put(key(t, q, "fp"), reply(t, cq, 0, []dns.RR{rr(t, "example.com. 60 IN A "+addr)}, nil), nil, t0); err != nil {
			t.Fatal(err)
		}
	}
	got, _, _ := c.Get(key(t, q, "fp"), q.RawName(), t0, nil)
	if a := unpack(t, got).Answer[0].(*dns.A).A.String(); a != "192.0.2.2" {
		t.Errorf("served %s", a)
	}
	if s := c.Stats(); s.Entries != 1 || s.Evictions != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestPacketFlushAndSweep(t *testing.T) {
	c := newPacket(t, nil)
	names := []string{"example.com.", "www.example.com.", "a.b.example.com.", "example.org.", "xample.com."}
	for i, n := range names {
		cq := clientQuery{name: n, qtype: dns.TypeA}
		ttl := 60 * (i + 1)
		for _, fp := range []string{"fpA", "fpB"} {
			if _, err := c.Put(key(t, parse(t, cq), fp), reply(t, cq, 0, []dns.RR{rr(t, fmt.Sprintf("%s %d IN A 192.0.2.1", n, ttl))}, nil), nil, t0); err != nil {
				t.Fatal(err)
			}
		}
	}
	exampleCom := []byte("\x07example\x03com\x00")
	if n := c.Flush(exampleCom, false); n != 2 {
		t.Errorf("exact flush removed %d, want 2 (one per policy class)", n)
	}
	if n := c.Flush(exampleCom, true); n != 4 {
		t.Errorf("subtree flush removed %d, want 4", n)
	}
	// example.org lives 240 s, xample.com 300 s.
	if n := c.Sweep(t0.Add(250 * time.Second)); n != 2 {
		t.Errorf("sweep removed %d, want 2", n)
	}
	if s := c.Stats(); s.Entries != 2 {
		t.Errorf("entries %d, want 2", s.Entries)
	}
}

// The fast path's promise, checked as a test and not only a benchmark.
func TestPacketGetAllocatesNothing(t *testing.T) {
	c := newPacket(t, nil)
	cq := clientQuery{name: "www.example.com.", qtype: dns.TypeA, edns: true}
	q := parse(t, cq)
	if _, err := c.Put(key(t, q, "fp"), reply(t, cq, 0, []dns.RR{rr(t, "www.example.com. 60 IN A 192.0.2.1")}, nil), nil, t0); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 0, 4096)
	var k cache.PacketKey
	r := c.NewReader()
	for _, get := range []func(*cache.PacketKey, []byte, time.Time, []byte) ([]byte, []byte, bool){c.Get, r.Get} {
		hit := testing.AllocsPerRun(1000, func() {
			k.SetQuery(q, "fp")
			dst, _, _ = get(&k, q.RawName(), t0.Add(2*time.Second), dst)
		})
		miss := testing.AllocsPerRun(1000, func() {
			k.SetQuery(q, "other")
			dst, _, _ = get(&k, q.RawName(), t0, dst)
		})
		if hit != 0 || miss != 0 {
			t.Errorf("allocations: hit %v, miss %v", hit, miss)
		}
	}
}

// A note stored with an answer comes back with every hit, unchanged by
// the answer's aging, and counts in the entry's bytes; an answer stored
// without one has none.
func TestPacketNote(t *testing.T) {
	c := newPacket(t, nil)
	cq := clientQuery{name: "example.com.", qtype: dns.TypeA}
	q := parse(t, cq)
	answer := reply(t, cq, 0, []dns.RR{rr(t, "example.com. 60 IN A 192.0.2.1")}, nil)
	note := []byte("the decision")
	if _, err := c.Put(key(t, q, "fp"), answer, note, t0); err != nil {
		t.Fatal(err)
	}
	bytesWith := c.Stats().Bytes
	note[0] = 'X' // Put copied it
	r := c.NewReader()
	for _, at := range []time.Duration{0, 10 * time.Second} {
		got, gotNote, hit := r.Get(key(t, q, "fp"), q.RawName(), t0.Add(at), nil)
		if !hit || string(gotNote) != "the decision" || len(got) != len(answer) {
			t.Fatalf("at +%v: hit %v, note %q, answer %d bytes; want the note and the %d-byte answer", at, hit, gotNote, len(got), len(answer))
		}
	}
	if _, err := c.Put(key(t, q, "fp"), answer, nil, t0); err != nil {
		t.Fatal(err)
	}
	if _, gotNote, hit := r.Get(key(t, q, "fp"), q.RawName(), t0, nil); !hit || len(gotNote) != 0 {
		t.Errorf("stored without a note: hit %v, note %q", hit, gotNote)
	}
	if without := c.Stats().Bytes; bytesWith-without != int64(len(note)) {
		t.Errorf("bytes %d with the note, %d without: want %d apart", bytesWith, without, len(note))
	}
}

// Stats adds up what Packet.Get and every reader counted.
func TestPacketReaderCounts(t *testing.T) {
	c := newPacket(t, nil)
	cq := clientQuery{name: "example.com.", qtype: dns.TypeA}
	q := parse(t, cq)
	if _, err := c.Put(key(t, q, "fp"), reply(t, cq, 0, []dns.RR{rr(t, "example.com. 60 IN A 192.0.2.1")}, nil), nil, t0); err != nil {
		t.Fatal(err)
	}
	r1, r2 := c.NewReader(), c.NewReader()
	r1.Get(key(t, q, "fp"), q.RawName(), t0, nil)
	r1.Get(key(t, q, "fp"), q.RawName(), t0, nil)
	r2.Get(key(t, q, "nope"), q.RawName(), t0, nil)
	c.Get(key(t, q, "fp"), q.RawName(), t0, nil)
	if s := c.Stats(); s.Hits != 3 || s.Misses != 1 {
		t.Errorf("hits %d misses %d, want 3 and 1", s.Hits, s.Misses)
	}
}

// TestPacketKeyAD: a DO-less query with AD has a key of its own (its
// answer may carry AD, the same query without AD must not); with DO the AD
// bit changes nothing.
func TestPacketKeyAD(t *testing.T) {
	k := func(cq clientQuery) string { return string(key(t, parse(t, cq), "fp").Append(nil)) }
	plain := clientQuery{name: "www.example.com.", qtype: dns.TypeA, edns: true}
	withAD := plain
	withAD.ad = true
	if k(plain) == k(withAD) {
		t.Error("a DO-less query with AD shares the key of one without")
	}
	do, doAD := plain, withAD
	do.do, doAD.do = true, true
	if k(do) != k(doAD) {
		t.Error("with DO, the AD bit splits the key")
	}
	noEDNS, noEDNSAD := clientQuery{name: "www.example.com.", qtype: dns.TypeA}, clientQuery{name: "www.example.com.", qtype: dns.TypeA, ad: true}
	if k(noEDNS) == k(noEDNSAD) {
		t.Error("a query without EDNS with AD shares the key of one without")
	}
}

// TestPacketWarm: Warm over a batch of keys — stored, not stored, unset,
// repeated — changes nothing: no count moves, and each Get after it
// answers as it would have without it (the same bytes, a miss a miss).
// An empty batch is fine.
func TestPacketWarm(t *testing.T) {
	c := newPacket(t, nil)
	stored := clientQuery{name: "warm.example.", qtype: dns.TypeA, edns: true}
	answer := reply(t, stored, 0, []dns.RR{rr(t, "warm.example. 300 IN A 192.0.2.7")}, nil)
	if _, err := c.Put(key(t, parse(t, stored), "fp"), answer, nil, t0); err != nil {
		t.Fatal(err)
	}
	q := parse(t, stored)
	other := parse(t, clientQuery{name: "cold.example.", qtype: dns.TypeA, edns: true})
	keys := make([]cache.PacketKey, 4)
	keys[0].SetQuery(q, "fp")
	keys[1].SetQuery(other, "fp")
	keys[3].SetQuery(q, "fp") // keys[2] stays unset
	r := c.NewReader()
	before := c.Stats()
	r.Warm(keys)
	r.Warm(nil)
	if after := c.Stats(); after != before {
		t.Fatalf("Warm moved the counts: %+v, then %+v", before, after)
	}
	now := t0.Add(time.Second)
	for i, want := range []bool{true, false, false, true} {
		got, _, hit := r.Get(&keys[i], q.RawName(), now, nil)
		if hit != want {
			t.Fatalf("key %d: hit %v, want %v", i, hit, want)
		}
		if hit && len(got) != len(answer) {
			t.Fatalf("key %d: %d bytes, want %d", i, len(got), len(answer))
		}
	}
}
