package cache_test

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

// t0 is the tests' clock origin; tests move time by adding to it.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// clientQuery is what a client sends: the name in its own letter case.
type clientQuery struct {
	name     string
	qtype    uint16
	edns, do bool
	cd       bool
	ad       bool
}

// parse packs and parses a client query, the way the server's fast path
// sees it.
func parse(t testing.TB, cq clientQuery) *dnswire.Query {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(cq.name, cq.qtype)
	m.Id = 0x1234
	m.CheckingDisabled = cq.cd
	m.AuthenticatedData = cq.ad
	if cq.edns {
		m.SetEdns0(1232, cq.do)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	q := new(dnswire.Query)
	if err := q.Parse(b); err != nil {
		t.Fatal(err)
	}
	return q
}

func key(t testing.TB, q *dnswire.Query, fingerprint string) *cache.PacketKey {
	t.Helper()
	var k cache.PacketKey
	if !k.SetQuery(q, fingerprint) {
		t.Fatalf("SetQuery %q", fingerprint)
	}
	return &k
}

// reply builds the pipeline's answer to cq: rcode, records, and an OPT when
// the query had one.
func reply(t testing.TB, cq clientQuery, rcode int, answer, ns []dns.RR) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.CanonicalName(cq.name), cq.qtype)
	m.Id = 0x1234
	m.Response, m.RecursionAvailable, m.RecursionDesired = true, true, true
	m.Rcode = rcode
	m.Answer, m.Ns = answer, ns
	if cq.edns {
		m.SetEdns0(1232, cq.do)
	}
	m.Compress = true
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rr(t testing.TB, s string) dns.RR {
	t.Helper()
	r, err := dns.NewRR(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return r
}

func unpack(t testing.TB, b []byte) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	return m
}

func newPacket(t testing.TB, mod func(*cache.PacketConfig)) *cache.Packet {
	t.Helper()
	cfg := cache.DefaultPacketConfig()
	cfg.Entries = 1024
	if mod != nil {
		mod(&cfg)
	}
	c, err := cache.NewPacket(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newRecord(t testing.TB, mod func(*cache.RecordConfig)) *cache.Record {
	t.Helper()
	cfg := cache.DefaultRecordConfig()
	cfg.Entries = 1024
	// Serve-stale and prefetch off unless a test turns them on
	// (stale_test.go): the other tests are about fresh entries.
	cfg.ServeStale, cfg.Prefetch = 0, 0
	if mod != nil {
		mod(&cfg)
	}
	c, err := cache.NewRecord(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
