package cache_test

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
)

// Readers, writers, flushes and sweeps at once on a cache small enough to
// evict all the time: run with -race. Every hit must be a whole, valid
// answer to the question asked, whatever the writers were doing.
func TestPacketConcurrent(t *testing.T) {
	for _, cfg := range []func(*cache.PacketConfig){
		func(c *cache.PacketConfig) { c.Entries, c.Shards = 64, 2 },
		func(c *cache.PacketConfig) { c.Entries, c.Shards, c.MaxBytes = 4096, 1, 8<<10 },
	} {
		c := newPacket(t, cfg)
		const names = 200
		qs := make([]*dnswire.Query, names)
		answers := make([][]byte, names)
		for i := range names {
			// Mixed case in the query, so 0x20 restoration runs on every hit.
			cq := clientQuery{name: fmt.Sprintf("Host%d.Example.com.", i), qtype: dns.TypeA, edns: i%2 == 0}
			qs[i] = parse(t, cq)
			answers[i] = reply(t, cq, 0, []dns.RR{rr(t, fmt.Sprintf("host%d.example.com. %d IN A 10.0.%d.%d", i, 1+i%50, i/256, i%256))}, nil)
		}

		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() { // writer
				var k cache.PacketKey
				for n := range 3000 {
					i := (n*7 + g*13) % names
					k.SetQuery(qs[i], fmt.Sprint("fp", n%3))
					c.Put(&k, answers[i], nil, t0.Add(time.Duration(n)*10*time.Millisecond))
				}
			})
			wg.Go(func() { // reader
				var k cache.PacketKey
				dst := make([]byte, 0, 512)
				get := c.Get
				if g%2 == 0 {
					get = c.NewReader().Get
				}
				for n := range 6000 {
					i := (n*11 + g) % names
					k.SetQuery(qs[i], fmt.Sprint("fp", n%3))
					var hit bool
					dst, _, hit = get(&k, qs[i].RawName(), t0.Add(time.Duration(n)*5*time.Millisecond), dst)
					if !hit {
						continue
					}
					m := new(dns.Msg)
					if err := m.Unpack(dst); err != nil {
						t.Errorf("hit does not unpack: %v", err)
						return
					}
					want := netip.AddrFrom4([4]byte{10, 0, byte(i / 256), byte(i % 256)})
					a, ok := m.Answer[0].(*dns.A)
					if !ok || m.Question[0].Name != fmt.Sprintf("Host%d.Example.com.", i) || a.A.String() != want.String() {
						t.Errorf("asked for %d, got %v", i, m)
						return
					}
				}
			})
		}
		wg.Go(func() { // housekeeping
			for n := range 50 {
				c.Sweep(t0.Add(time.Duration(n) * time.Second))
				c.Flush([]byte("\x05host1\x07example\x03com\x00"), false)
				c.Flush([]byte("\x07example\x03org\x00"), true)
				_ = c.Stats()
			}
		})
		wg.Wait()
		s := c.Stats()
		if s.Entries < 0 || s.Entries > int64(c.Capacity()) || s.Bytes < 0 {
			t.Errorf("stats after the storm: %+v", s)
		}
	}
}

func TestRecordConcurrent(t *testing.T) {
	c := newRecord(t, func(c *cache.RecordConfig) { c.Entries, c.Shards = 50, 4 })
	const names = 120
	soa := rr(t, "example.com. 60 IN SOA a. b. 1 2 3 4 60")
	msgs := make([]*dns.Msg, names)
	for i := range names {
		name := fmt.Sprintf("h%d.example.com.", i)
		if i%5 == 0 {
			msgs[i] = upstream(t, name, dns.TypeA, dns.RcodeNameError, nil, []dns.RR{soa})
		} else {
			msgs[i] = upstream(t, name, dns.TypeA, 0, []dns.RR{rr(t, name+" 30 IN A 192.0.2.1")}, nil)
		}
	}
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for n := range 2000 {
				i := (n*7 + g) % names
				// Put only reads the message: writers share them.
				c.Put(cache.RecordKey{Name: msgs[i].Question[0].Name, Type: dns.TypeA, Class: dns.ClassINET}, msgs[i], t0.Add(time.Duration(n)*time.Millisecond))
			}
		})
		wg.Go(func() {
			for n := range 4000 {
				i := (n*3 + g) % names
				name := fmt.Sprintf("H%d.example.com.", i)
				got, hit := c.Get(cache.RecordKey{Name: name, Type: dns.TypeA, Class: dns.ClassINET}, t0.Add(time.Duration(n)*time.Millisecond))
				if !hit {
					continue
				}
				if got.Negative != (i%5 == 0) || (!got.Negative && !strings.EqualFold(got.Answer[0].Header().Name, name)) {
					t.Errorf("asked for %s, got %+v", name, got)
					return
				}
				got.Answer = append(got.Answer, soa) // copies are the caller's to change
			}
		})
	}
	wg.Go(func() {
		for n := range 50 {
			c.Sweep(t0.Add(time.Duration(n) * time.Second))
			c.Flush("h1.example.com.", false)
			_ = c.Stats()
		}
	})
	wg.Wait()
	if s := c.Stats(); s.Entries+s.NegEntries > 50+4 || s.Entries < 0 || s.NegEntries < 0 {
		t.Errorf("stats %+v", s)
	}
}
