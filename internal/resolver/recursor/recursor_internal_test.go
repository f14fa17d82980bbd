package recursor

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

func TestConfigValidation(t *testing.T) {
	for _, c := range []Config{
		{Timeout: -time.Second},
		{Timeout: 5 * time.Second, MaxTime: time.Second},
		{MaxQueries: -1},
		{MaxDepth: -1},
		{MaxCNAME: -1},
		{CacheSize: -1},
		{UDPSize: 100},
		{Hints: ". NS a.\n"},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("New(%+v): no error", c)
		}
	}
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.Port != 53 || r.cfg.MaxCNAME != DefaultMaxCNAME || len(r.hints.Names) != 13 {
		t.Fatalf("defaults: %+v, %d root servers", r.cfg, len(r.hints.Names))
	}
}

// TestBadQueries: what Exchange refuses before sending anything, and the
// errors it says so with (upstream's too, for the resolver).
func TestBadQueries(t *testing.T) {
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q := func(name string, qtype, class uint16) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.Question[0].Qclass = class
		return m
	}
	resp := q("a.", dns.TypeA, dns.ClassINET)
	resp.Response = true
	two := q("a.", dns.TypeA, dns.ClassINET)
	two.Question = append(two.Question, two.Question[0])
	for _, m := range []*dns.Msg{nil, new(dns.Msg), resp, two, q("a.", dns.TypeA, dns.ClassCHAOS), q("a.", dns.TypeAXFR, dns.ClassINET),
		q(strings.Repeat("a", 64)+".", dns.TypeA, dns.ClassINET)} {
		_, err := r.Exchange(ctx, m)
		if !errors.Is(err, ErrBadQuery) || !errors.Is(err, upstream.ErrBadQuery) {
			t.Errorf("%v: err %v, want ErrBadQuery", m, err)
		}
	}
	r.Close()
	if _, err := r.Exchange(ctx, q("a.", dns.TypeA, dns.ClassINET)); !errors.Is(err, ErrClosed) || !errors.Is(err, upstream.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

// TestCancelled: a cancelled context ends an Exchange at once with
// ErrAllFailed and the context's error, and charges no server.
func TestCancelled(t *testing.T) {
	r, err := New(Config{Hints: ". NS a.\na. A 198.18.0.1\n"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	m := new(dns.Msg)
	m.SetQuestion("www.example.", dns.TypeA)
	_, err = r.Exchange(ctx, m)
	if !errors.Is(err, ErrAllFailed) || !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if st := r.Stats(); st.Throttled != 0 {
		t.Fatalf("a server was throttled for our cancellation: %+v", st)
	}
}

// FuzzParseHints: any text is parsed or refused, never a panic; what is
// accepted has an address for every root server.
func FuzzParseHints(f *testing.F) {
	f.Add(BuiltinHints())
	f.Add(". NS a.\na. A 192.0.2.1\n")
	f.Add(". 1 IN NS a.\na. 1 IN AAAA 2001:db8::1\n$TTL 5\n")
	f.Add("$INCLUDE /etc/passwd\n")
	f.Fuzz(func(t *testing.T, text string) {
		h, err := ParseHints(text)
		if err != nil {
			return
		}
		if len(h.Names) == 0 {
			t.Fatal("accepted without names")
		}
		for _, n := range h.Names {
			if len(h.Addrs[n]) == 0 {
				t.Fatalf("accepted %s without address", n)
			}
		}
	})
}

// TestUsable: which addresses are asked: loopback only with
// QueryLoopback, IPv6 not with NoIPv6, never unspecified or multicast
// ones, nor what dont_query bars (by default private and documentation
// ranges; an empty list bars nothing).
func TestUsable(t *testing.T) {
	r, _ := New(Config{})
	l, _ := New(Config{QueryLoopback: true, NoIPv6: true})
	open, _ := New(Config{DontQuery: []netip.Prefix{}})
	for _, c := range []struct {
		a               string
		r, lv4six, open bool
	}{
		{"198.18.0.1", true, true, true},
		{"2620:fe::fe", true, false, true},
		{"192.0.2.1", false, false, true},
		{"10.1.2.3", false, false, true},
		{"::ffff:10.1.2.3", false, false, true},
		{"2001:db8::1", false, false, true},
		{"fd00::1", false, false, true},
		{"127.0.0.1", false, true, false},
		{"::1", false, false, false},
		{"::ffff:127.0.0.1", false, true, false},
		{"0.0.0.0", false, false, false},
		{"224.0.0.1", false, false, false},
	} {
		a := netip.MustParseAddr(c.a)
		if r.usable(a) != c.r || l.usable(a) != c.lv4six || open.usable(a) != c.open {
			t.Errorf("%s: usable %v (loopback, no IPv6: %v; nothing barred: %v), want %v, %v, %v",
				a, r.usable(a), l.usable(a), open.usable(a), c.r, c.lv4six, c.open)
		}
	}
}
