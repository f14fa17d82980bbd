package dnswire_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

// query packs a query the way a stub resolver sends it; each opt adjusts the
// message before packing.
func query(t testing.TB, name string, qtype uint16, opts ...func(*dns.Msg)) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Id = 0xBEEF
	for _, o := range opts {
		o(m)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatalf("pack %s: %v", name, err)
	}
	return b
}

func withEDNS(size uint16, do bool) func(*dns.Msg) {
	return func(m *dns.Msg) { m.SetEdns0(size, do) }
}

func withOption(o dns.EDNS0) func(*dns.Msg) {
	return func(m *dns.Msg) {
		opt := m.IsEdns0()
		if opt == nil {
			m.SetEdns0(1232, false)
			opt = m.IsEdns0()
		}
		opt.Option = append(opt.Option, o)
	}
}

func withFlags(f func(*dns.Msg)) func(*dns.Msg) { return f }

// parseQuery parses b into a new Query, as a socket worker's reused one
// would be.
func parseQuery(b []byte) (dnswire.Query, error) {
	var q dnswire.Query
	err := q.Parse(b)
	return q, err
}

func mustRR(t testing.TB, s string) dns.RR {
	t.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatalf("rr %q: %v", s, err)
	}
	return rr
}

// wire is a name in wire form, built by hand so tests do not trust the code
// under test to produce it.
func wire(labels ...string) []byte {
	var b []byte
	for _, l := range labels {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	return append(b, 0)
}

// header builds a 12-byte header.
func header(id, flags, qd, an, ns, ar uint16) []byte {
	return []byte{
		byte(id >> 8), byte(id), byte(flags >> 8), byte(flags),
		byte(qd >> 8), byte(qd), byte(an >> 8), byte(an),
		byte(ns >> 8), byte(ns), byte(ar >> 8), byte(ar),
	}
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}
