package cache_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/cache"
)

// upstream builds an upstream response to name/qtype.
func upstream(t testing.TB, name string, qtype uint16, rcode int, answer, ns []dns.RR) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.Response, m.RecursionAvailable = true, true
	m.Rcode = rcode
	m.Answer, m.Ns = answer, ns
	return m
}

// TestRecordKeyADCD: an answer stored for a DO-less query is kept apart
// for queries with and without AD (the AD bit it carries depends on it),
// and apart for CD (a validating source gives CD queries data it refuses
// to others); NXDOMAIN entries too.
func TestRecordKeyADCD(t *testing.T) {
	c := newRecord(t, nil)
	key := func(ad, cd bool) cache.RecordKey {
		return cache.RecordKey{Name: "www.example.com.", Type: dns.TypeA, Class: dns.ClassINET, AD: ad, CD: cd}
	}
	for _, k := range []cache.RecordKey{key(false, false), key(true, false), key(false, true)} {
		data := "www.example.com. 300 IN A 192.0.2.1"
		if k.CD {
			data = "www.example.com. 300 IN A 192.0.2.66" // bogus data, for CD only
		}
		m := upstream(t, "www.example.com.", dns.TypeA, 0, []dns.RR{rr(t, data)}, nil)
		m.AuthenticatedData = k.AD
		if _, err := c.Put(k, m, t0); err != nil {
			t.Fatal(err)
		}
	}
	for _, tt := range []struct {
		k      cache.RecordKey
		ad     bool
		answer string
	}{
		{key(false, false), false, "192.0.2.1"},
		{key(true, false), true, "192.0.2.1"},
		{key(false, true), false, "192.0.2.66"},
	} {
		got, hit := c.Get(tt.k, t0)
		if !hit || got.AuthenticatedData != tt.ad || got.Answer[0].(*dns.A).A.String() != tt.answer {
			t.Errorf("%+v: hit %v AD %v %v; want AD %v %s", tt.k, hit, got.AuthenticatedData, got.Answer, tt.ad, tt.answer)
		}
	}
	if _, hit := c.Get(key(true, true), t0); hit {
		t.Error("AD+CD served an entry stored for another key")
	}
	nx := upstream(t, "nx.example.com.", dns.TypeA, dns.RcodeNameError, nil, []dns.RR{rr(t, "example.com. 300 IN SOA ns. h. 1 2 3 4 300")})
	if _, err := c.Put(cache.RecordKey{Name: "nx.example.com.", Type: dns.TypeA, Class: dns.ClassINET, CD: true}, nx, t0); err != nil {
		t.Fatal(err)
	}
	if _, hit := c.Get(cache.RecordKey{Name: "nx.example.com.", Type: dns.TypeAAAA, Class: dns.ClassINET}, t0); hit {
		t.Error("an NXDOMAIN stored for CD served a query without CD")
	}
	if _, hit := c.Get(cache.RecordKey{Name: "nx.example.com.", Type: dns.TypeAAAA, Class: dns.ClassINET, CD: true}, t0); !hit {
		t.Error("an NXDOMAIN stored for CD not served to another type with CD")
	}
}

func TestRecordGet(t *testing.T) {
	c := newRecord(t, func(c *cache.RecordConfig) { c.MinTTL, c.MaxTTL = 10*time.Second, time.Hour })
	m := upstream(t, "www.example.com.", dns.TypeA, 0, []dns.RR{
		rr(t, "www.example.com. 86400 IN CNAME web.example.com."),
		rr(t, "web.example.com. 300 IN A 192.0.2.1"),
		rr(t, "web.example.com. 2 IN A 192.0.2.2"),
	}, nil)
	m.AuthenticatedData = true
	m.SetEdns0(1232, true)
	k := cache.RecordKey{Name: "www.example.com.", Type: dns.TypeA, Class: dns.ClassINET, DO: true}
	if life, err := c.Put(k, m, t0); err != nil || life != 10 {
		t.Fatalf("Put = %d, %v; want 10 (min_ttl raised the 2)", life, err)
	}
	m.Answer[1].(*dns.A).A[3] = 99 // the caller's message stays the caller's

	tests := []struct {
		name     string
		key      cache.RecordKey
		at       time.Duration
		hit      bool
		wantTTLs []uint32
	}{
		{"same key, TTLs clamped to [10s, 1h]", k, 0, true, []uint32{3600, 300, 10}},
		{"any letter case", cache.RecordKey{Name: "WWW.Example.COM.", Type: dns.TypeA, Class: dns.ClassINET, DO: true}, 0, true, []uint32{3600, 300, 10}},
		{"aged", k, 4*time.Second + 500*time.Millisecond, true, []uint32{3596, 296, 6}},
		{"expired", k, 10 * time.Second, false, nil},
		{"DO differs", cache.RecordKey{Name: "www.example.com.", Type: dns.TypeA, Class: dns.ClassINET}, 0, false, nil},
		{"AD beside DO changes nothing", cache.RecordKey{Name: "www.example.com.", Type: dns.TypeA, Class: dns.ClassINET, DO: true, AD: true}, 0, true, []uint32{3600, 300, 10}},
		{"CD differs", cache.RecordKey{Name: "www.example.com.", Type: dns.TypeA, Class: dns.ClassINET, DO: true, CD: true}, 0, false, nil},
		{"other type", cache.RecordKey{Name: "www.example.com.", Type: dns.TypeAAAA, Class: dns.ClassINET, DO: true}, 0, false, nil},
		{"other class", cache.RecordKey{Name: "www.example.com.", Type: dns.TypeA, Class: dns.ClassCHAOS, DO: true}, 0, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, hit := c.Get(tt.key, t0.Add(tt.at))
			if hit != tt.hit {
				t.Fatalf("hit = %v", hit)
			}
			if !hit {
				return
			}
			if got.Rcode != dns.RcodeSuccess || got.Negative || !got.AuthenticatedData || len(got.Answer) != 3 {
				t.Fatalf("answer %+v", got)
			}
			for i, r := range got.Answer {
				if r.Header().Ttl != tt.wantTTLs[i] {
					t.Errorf("record %d TTL %d, want %d", i, r.Header().Ttl, tt.wantTTLs[i])
				}
			}
			if got.TTL != tt.wantTTLs[2] {
				t.Errorf("TTL %d", got.TTL)
			}
			if a := got.Answer[1].(*dns.A).A.String(); a != "192.0.2.1" {
				t.Errorf("stored record follows the caller's message: %s", a)
			}
			got.Answer[0].Header().Ttl = 0 // nor does the cache follow the copy it returned
			if again, _ := c.Get(k, t0); again.Answer[0].Header().Ttl != 3600 {
				t.Error("returned records share memory with the cache")
			}
		})
	}
}

func TestRecordNegative(t *testing.T) {
	soa := func(ttl, minimum int) dns.RR {
		return rr(t, fmt.Sprintf("example.com. %d IN SOA ns.example.com. host.example.com. 1 7200 900 1209600 %d", ttl, minimum))
	}
	key := func(name string, qtype uint16) cache.RecordKey {
		return cache.RecordKey{Name: name, Type: qtype, Class: dns.ClassINET}
	}
	tests := []struct {
		name     string
		cfg      func(*cache.RecordConfig)
		put      cache.RecordKey
		msg      *dns.Msg
		wantLife uint32
		wantErr  cache.NotCached
		hits     []cache.RecordKey
		misses   []cache.RecordKey
		rcode    int
	}{
		{
			name:     "NXDOMAIN holds for every type of the name",
			put:      key("nope.example.com.", dns.TypeA),
			msg:      upstream(t, "nope.example.com.", dns.TypeA, dns.RcodeNameError, nil, []dns.RR{soa(900, 300)}),
			wantLife: 300, rcode: dns.RcodeNameError,
			hits:   []cache.RecordKey{key("nope.example.com.", dns.TypeA), key("NOPE.example.com.", dns.TypeMX)},
			misses: []cache.RecordKey{key("example.com.", dns.TypeA), key("x.nope.example.com.", dns.TypeA)},
		},
		{
			name:     "NXDOMAIN: SOA TTL below MINIMUM",
			put:      key("nope.example.com.", dns.TypeA),
			msg:      upstream(t, "nope.example.com.", dns.TypeA, dns.RcodeNameError, nil, []dns.RR{soa(30, 300)}),
			wantLife: 30, rcode: dns.RcodeNameError,
			hits: []cache.RecordKey{key("nope.example.com.", dns.TypeA)},
		},
		{
			name:     "negative_ttl caps",
			cfg:      func(c *cache.RecordConfig) { c.NegativeTTL = 20 * time.Second },
			put:      key("nope.example.com.", dns.TypeA),
			msg:      upstream(t, "nope.example.com.", dns.TypeA, dns.RcodeNameError, nil, []dns.RR{soa(900, 300)}),
			wantLife: 20, rcode: dns.RcodeNameError,
			hits: []cache.RecordKey{key("nope.example.com.", dns.TypeA)},
		},
		{
			name:     "NODATA holds for its type only",
			put:      key("example.com.", dns.TypeAAAA),
			msg:      upstream(t, "example.com.", dns.TypeAAAA, 0, nil, []dns.RR{soa(900, 600)}),
			wantLife: 600, rcode: dns.RcodeSuccess,
			hits:   []cache.RecordKey{key("example.com.", dns.TypeAAAA)},
			misses: []cache.RecordKey{key("example.com.", dns.TypeA)},
		},
		{
			name: "NXDOMAIN through a CNAME holds for the question only",
			put:  key("alias.example.com.", dns.TypeA),
			msg: upstream(t, "alias.example.com.", dns.TypeA, dns.RcodeNameError,
				[]dns.RR{rr(t, "alias.example.com. 3600 IN CNAME gone.example.net.")},
				[]dns.RR{rr(t, "example.net. 900 IN SOA a. b. 1 2 3 4 120")}),
			wantLife: 120, rcode: dns.RcodeNameError,
			hits:   []cache.RecordKey{key("alias.example.com.", dns.TypeA)},
			misses: []cache.RecordKey{key("alias.example.com.", dns.TypeTXT)},
		},
		{
			name:    "NXDOMAIN without SOA",
			put:     key("nope.example.com.", dns.TypeA),
			msg:     upstream(t, "nope.example.com.", dns.TypeA, dns.RcodeNameError, nil, nil),
			wantErr: cache.NotCachedNoSOA,
			misses:  []cache.RecordKey{key("nope.example.com.", dns.TypeA)},
		},
		{
			name:    "negative_ttl 0",
			cfg:     func(c *cache.RecordConfig) { c.NegativeTTL = 0 },
			put:     key("nope.example.com.", dns.TypeA),
			msg:     upstream(t, "nope.example.com.", dns.TypeA, dns.RcodeNameError, nil, []dns.RR{soa(900, 300)}),
			wantErr: cache.NotCachedZeroTTL,
		},
		{
			name:    "SERVFAIL",
			put:     key("example.com.", dns.TypeA),
			msg:     upstream(t, "example.com.", dns.TypeA, dns.RcodeServerFailure, nil, nil),
			wantErr: cache.NotCachedRcode,
			misses:  []cache.RecordKey{key("example.com.", dns.TypeA)},
		},
		{
			name: "truncated",
			put:  key("example.com.", dns.TypeA),
			msg: func() *dns.Msg {
				m := upstream(t, "example.com.", dns.TypeA, 0, []dns.RR{rr(t, "example.com. 60 IN A 192.0.2.1")}, nil)
				m.Truncated = true
				return m
			}(),
			wantErr: cache.NotCachedTruncated,
		},
		{
			name:    "response to another question",
			put:     key("example.com.", dns.TypeA),
			msg:     upstream(t, "example.com.", dns.TypeAAAA, 0, []dns.RR{rr(t, "example.com. 60 IN AAAA ::1")}, nil),
			wantErr: cache.NotCachedMismatch,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newRecord(t, tt.cfg)
			life, err := c.Put(tt.put, tt.msg, t0)
			if tt.wantErr != 0 {
				var nc cache.NotCached
				if !errors.As(err, &nc) || nc != tt.wantErr {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
			} else if err != nil || life != tt.wantLife {
				t.Fatalf("Put = %d, %v; want %d", life, err, tt.wantLife)
			}
			for _, k := range tt.hits {
				got, hit := c.Get(k, t0.Add(time.Second))
				if !hit {
					t.Errorf("%v: miss", k)
					continue
				}
				if !got.Negative || got.Rcode != tt.rcode || got.TTL != tt.wantLife-1 {
					t.Errorf("%v: %+v", k, got)
				}
				soa, ok := got.Ns[len(got.Ns)-1].(*dns.SOA)
				if !ok || soa.Hdr.Ttl != tt.wantLife-1 {
					t.Errorf("%v: authority %v, want the SOA with TTL %d", k, got.Ns, tt.wantLife-1)
				}
				if _, hit := c.Get(k, t0.Add(time.Duration(tt.wantLife)*time.Second)); hit {
					t.Errorf("%v: served past its lifetime", k)
				}
			}
			for _, k := range tt.misses {
				if _, hit := c.Get(k, t0.Add(time.Second)); hit {
					t.Errorf("%v: hit", k)
				}
			}
			s := c.Stats()
			if tt.wantErr == 0 && (s.NegEntries != 1 || s.Entries != 0) {
				t.Errorf("stats %+v, want one negative entry", s)
			}
		})
	}
}

func TestRecordEvictionAtTheBound(t *testing.T) {
	c := newRecord(t, func(c *cache.RecordConfig) { c.Entries, c.Shards = 4, 1 })
	put := func(i int, at time.Duration) {
		name := fmt.Sprintf("h%d.example.", i)
		m := upstream(t, name, dns.TypeA, 0, []dns.RR{rr(t, name+" 300 IN A 192.0.2.1")}, nil)
		if _, err := c.Put(cache.RecordKey{Name: name, Type: dns.TypeA, Class: dns.ClassINET}, m, t0.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	get := func(i int, at time.Duration) bool {
		_, hit := c.Get(cache.RecordKey{Name: fmt.Sprintf("h%d.example.", i), Type: dns.TypeA, Class: dns.ClassINET}, t0.Add(at))
		return hit
	}
	for i := range 4 {
		put(i, time.Duration(i)*time.Second)
	}
	get(0, 10*time.Second) // h0 becomes the most recently used; h1 the least
	put(4, 11*time.Second)
	if s := c.Stats(); s.Entries != 4 || s.Evictions != 1 {
		t.Fatalf("stats %+v", s)
	}
	for i, want := range []bool{true, false, true, true, true} {
		if got := get(i, 12*time.Second); got != want {
			t.Errorf("h%d present = %v, want %v", i, got, want)
		}
	}
	for i := 5; i < 50; i++ {
		put(i, 20*time.Second)
	}
	if s := c.Stats(); s.Entries != 4 {
		t.Errorf("entries %d above the bound", s.Entries)
	}
}

func TestRecordStatsFlushSweep(t *testing.T) {
	c := newRecord(t, nil)
	soa := rr(t, "example.com. 60 IN SOA a. b. 1 2 3 4 60")
	puts := []struct {
		name  string
		qtype uint16
		m     *dns.Msg
	}{
		{"example.com.", dns.TypeA, upstream(t, "example.com.", dns.TypeA, 0, []dns.RR{rr(t, "example.com. 300 IN A 192.0.2.1")}, nil)},
		{"www.example.com.", dns.TypeA, upstream(t, "www.example.com.", dns.TypeA, 0, []dns.RR{rr(t, "www.example.com. 300 IN A 192.0.2.1")}, nil)},
		{"nope.example.com.", dns.TypeA, upstream(t, "nope.example.com.", dns.TypeA, dns.RcodeNameError, nil, []dns.RR{soa})},
		{"example.org.", dns.TypeA, upstream(t, "example.org.", dns.TypeA, 0, []dns.RR{rr(t, "example.org. 30 IN A 192.0.2.1")}, nil)},
	}
	for _, p := range puts {
		if _, err := c.Put(cache.RecordKey{Name: p.name, Type: p.qtype, Class: dns.ClassINET}, p.m, t0); err != nil {
			t.Fatal(err)
		}
	}
	c.Get(cache.RecordKey{Name: "example.com.", Type: dns.TypeA, Class: dns.ClassINET}, t0)
	c.Get(cache.RecordKey{Name: "nope.example.com.", Type: dns.TypeTXT, Class: dns.ClassINET}, t0)
	c.Get(cache.RecordKey{Name: "example.net.", Type: dns.TypeA, Class: dns.ClassINET}, t0)
	if s := c.Stats(); s.Hits != 2 || s.Misses != 1 || s.Entries != 3 || s.NegEntries != 1 {
		t.Errorf("stats %+v", s)
	}
	if n := c.Sweep(t0.Add(45 * time.Second)); n != 1 {
		t.Errorf("sweep removed %d, want example.org", n)
	}
	if n := c.Flush("Example.COM.", false); n != 1 {
		t.Errorf("exact flush removed %d", n)
	}
	if n := c.Flush("example.com.", true); n != 2 {
		t.Errorf("subtree flush removed %d", n)
	}
	if s := c.Stats(); s.Entries != 0 || s.NegEntries != 0 {
		t.Errorf("stats %+v", s)
	}
}

// TestRecordNXDomainAfterRemovals: a Get looks for a name's NXDOMAIN only
// while its shard holds one (a count kept as entries come and go): the
// name-wide NXDOMAIN answers other types after it is stored, stops after
// it is flushed or swept, answers again when stored again, and a positive
// entry stored over it for the same name does not stop the count.
func TestRecordNXDomainAfterRemovals(t *testing.T) {
	c := newRecord(t, func(c *cache.RecordConfig) { c.Shards = 1; c.NegativeTTL = time.Hour })
	soa := rr(t, "example.com. 3600 IN SOA ns.example.com. host.example.com. 1 2 3 4 300")
	nx := upstream(t, "gone.example.com.", dns.TypeA, dns.RcodeNameError, nil, []dns.RR{soa})
	kA := cache.RecordKey{Name: "gone.example.com.", Type: dns.TypeA, Class: dns.ClassINET}
	kMX := cache.RecordKey{Name: "gone.example.com.", Type: dns.TypeMX, Class: dns.ClassINET}
	hit := func(k cache.RecordKey, at time.Duration) bool {
		got, ok := c.Get(k, t0.Add(at))
		if ok && (got.Rcode != dns.RcodeNameError || len(got.Ns) != 1) {
			t.Fatalf("Get(%v) = %+v, want the NXDOMAIN with its SOA", k, got)
		}
		return ok
	}
	if hit(kMX, 0) {
		t.Fatal("hit before any Put")
	}
	for round := range 2 {
		if _, err := c.Put(kA, nx, t0); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(kA, nx, t0); err != nil { // the same entry replaced: still one
			t.Fatal(err)
		}
		if !hit(kMX, 0) || !hit(kA, 0) {
			t.Fatalf("round %d: the name's NXDOMAIN does not answer", round)
		}
		if round == 0 {
			if n := c.Flush("gone.example.com.", false); n != 1 {
				t.Fatalf("Flush removed %d, want 1", n)
			}
		} else if n := c.Sweep(t0.Add(2 * time.Hour)); n != 1 {
			t.Fatalf("Sweep removed %d, want 1", n)
		}
		if hit(kMX, 0) {
			t.Fatalf("round %d: NXDOMAIN still answers after its removal", round)
		}
	}
	// A positive entry for another type does not hide a later NXDOMAIN.
	pos := upstream(t, "gone.example.com.", dns.TypeAAAA, 0, []dns.RR{rr(t, "gone.example.com. 60 IN AAAA 2001:db8::1")}, nil)
	if _, err := c.Put(cache.RecordKey{Name: "gone.example.com.", Type: dns.TypeAAAA, Class: dns.ClassINET}, pos, t0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(kA, nx, t0); err != nil {
		t.Fatal(err)
	}
	if !hit(kMX, 0) {
		t.Fatal("NXDOMAIN stored beside a positive entry does not answer")
	}
}

// TestRecordWireRoundTrip: the cache keeps records packed; what a Get
// returns is each record as stored (types with names, strings, options
// and unknown types alike), TTLs clamped and aged, OPT left out, the
// authority section apart from the answer's.
func TestRecordWireRoundTrip(t *testing.T) {
	c := newRecord(t, func(c *cache.RecordConfig) { c.MinTTL, c.MaxTTL = time.Second, time.Hour })
	answer := []dns.RR{
		rr(t, "x.example.com. 7200 IN CNAME y.example.com."),
		rr(t, "y.example.com. 300 IN A 192.0.2.1"),
		rr(t, "y.example.com. 300 IN AAAA 2001:db8::7"),
		rr(t, `y.example.com. 300 IN TXT "one" "two words" "`+string(make([]byte, 0))+`"`),
		rr(t, "y.example.com. 300 IN MX 10 mail.example.com."),
		rr(t, "y.example.com. 300 IN SRV 1 2 443 svc.example.com."),
		rr(t, "y.example.com. 300 IN HTTPS 1 . alpn=h2,h3 ipv4hint=192.0.2.9"),
		rr(t, "y.example.com. 300 IN TYPE65300 \\# 3 010203"),
		rr(t, "y.example.com. 300 IN RRSIG A 13 3 300 20300101000000 20200101000000 12345 example.com. dGVzdA=="),
	}
	ns := []dns.RR{rr(t, "example.com. 900 IN NS ns1.example.com."), rr(t, "example.com. 900 IN NS ns2.example.com.")}
	m := upstream(t, "x.example.com.", dns.TypeA, 0, answer, ns)
	m.SetEdns0(1232, true)
	m.Answer = append(m.Answer, m.Extra[0]) // an OPT out of place is left out too
	k := cache.RecordKey{Name: "x.example.com.", Type: dns.TypeA, Class: dns.ClassINET, DO: true}
	if life, err := c.Put(k, m, t0); err != nil || life != 300 {
		t.Fatalf("Put = %d, %v; want 300", life, err)
	}
	got, ok := c.Get(k, t0.Add(5*time.Second))
	if !ok || len(got.Answer) != len(answer) || len(got.Ns) != len(ns) {
		t.Fatalf("Get = %+v, %v; want %d answers and %d authority records", got, ok, len(answer), len(ns))
	}
	check := func(got, want dns.RR, ttl uint32) {
		t.Helper()
		w := dns.Copy(want)
		w.Header().Ttl = ttl
		if !dns.IsDuplicate(got, w) || got.Header().Ttl != ttl || got.String() != w.String() {
			t.Errorf("got %v, want %v", got, w)
		}
	}
	check(got.Answer[0], answer[0], 3600-5) // max_ttl
	for i := 1; i < len(answer); i++ {
		check(got.Answer[i], answer[i], 300-5)
	}
	for i := range ns {
		check(got.Ns[i], ns[i], 900-5)
	}
	if got.TTL != 300-5 {
		t.Errorf("TTL %d, want %d", got.TTL, 300-5)
	}
}

// TestRecordOctetStringWithBackslash: miekg/dns unpacks a URI target or a
// CAA value raw but packs it reading escapes. A forwarder's answer whose
// value holds a backslash (on the wire: the fuzzer's seed 79cd6de8ac2a4dc1
// is the URI case), taken through EscapeOctets as the resolver does, packs
// to the forwarder's bytes uncached, is cached, and comes back from Get
// packing to the same bytes again.
func TestRecordOctetStringWithBackslash(t *testing.T) {
	c := newRecord(t, nil)
	for _, s := range []struct {
		qtype uint16
		rr    dns.RR // escaped (presentation) form: packs to the forwarder's bytes
	}{
		{dns.TypeURI, &dns.URI{Hdr: dns.RR_Header{Name: "a.example.", Rrtype: dns.TypeURI, Class: dns.ClassINET, Ttl: 60}, Priority: 1, Weight: 1, Target: `http://x/\\y\\`}},
		{dns.TypeCAA, &dns.CAA{Hdr: dns.RR_Header{Name: "a.example.", Rrtype: dns.TypeCAA, Class: dns.ClassINET, Ttl: 60}, Tag: "issue", Value: `ca\\065.example`}},
		{dns.TypeCAA, &dns.CAA{Hdr: dns.RR_Header{Name: "a.example.", Rrtype: dns.TypeCAA, Class: dns.ClassINET, Ttl: 60}, Tag: "issue", Value: "ca.example"}},
	} {
		want := packRR(t, s.rr)
		m := new(dns.Msg)
		m.SetQuestion("a.example.", s.qtype)
		m.Response = true
		m.Answer = []dns.RR{s.rr}
		wire, err := m.Pack()
		if err != nil {
			t.Fatal(err)
		}
		up := new(dns.Msg) // the forwarder's answer as it arrives
		if err := up.Unpack(wire); err != nil {
			t.Fatal(err)
		}
		cache.EscapeOctets(up.Answer)
		if got := packRR(t, up.Answer[0]); string(got) != string(want) {
			t.Errorf("%v: packs to %q after EscapeOctets, the forwarder sent %q", s.rr, got, want)
		}
		k := cache.RecordKey{Name: "a.example.", Type: s.qtype, Class: dns.ClassINET}
		if _, err := c.Put(k, up, t0); err != nil {
			t.Errorf("%v: not cached: %v", s.rr, err)
			continue
		}
		ra, ok := c.Get(k, t0)
		if !ok || len(ra.Answer) != 1 {
			t.Errorf("%v: Get = %v, %v", s.rr, ra.Answer, ok)
			continue
		}
		if got := packRR(t, ra.Answer[0]); string(got) != string(want) {
			t.Errorf("%v: the cached copy packs to %q, the forwarder sent %q", s.rr, got, want)
		}
	}
}
