package recursor_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/dnslab"
	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// counter counts the recursor's outgoing queries and ignored packets.
type counter struct {
	upstream.NopMetrics
	out, tcp, unexpected, caseMismatch atomic.Int64
}

func (c *counter) OutQuery(_, tcp bool) {
	c.out.Add(1)
	if tcp {
		c.tcp.Add(1)
	}
}
func (c *counter) UnexpectedPacket() { c.unexpected.Add(1) }
func (c *counter) CaseMismatch()     { c.caseMismatch.Add(1) }

// log records the questions a Go server was asked.
type log struct {
	mu sync.Mutex
	qs []string
}

func (l *log) add(q dns.Question) {
	l.mu.Lock()
	l.qs = append(l.qs, strings.ToLower(q.Name)+" "+dns.TypeToString[q.Qtype])
	l.mu.Unlock()
}

func (l *log) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, q := range l.qs {
		if strings.Contains(q, sub) {
			return true
		}
	}
	return false
}

func rr(t *testing.T, s string) dns.RR {
	r, err := dns.NewRR(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// hostileLab is the standard lab plus Go servers that misbehave, each
// delegated from test.:
//   - evil.test.: answers every question for itself, and adds records for
//     secure.test. in every section (an answer for another name, an NS
//     taking over secure.test., glue pointing secure.test.'s server to
//     itself);
//   - noisy.test.: sends, before each real answer, a reply with another id,
//     one for another name, and one with the name in another case;
//   - self.test.: refers every question to self.test. itself;
//   - down.test.: refers each name one label further down, to itself;
//   - trunc.test.: truncates every UDP answer, answers over TCP;
//   - oldedns.test.: answers FORMERR to any query with EDNS;
//   - dropedns.test.: drops every query with EDNS;
//   - lossy.test.: drops the first query about each name starting with
//     "lost"; records the queries' source addresses, ids and names;
//   - oldroot (no zone): a root server's former address, answering only
//     the priming question;
//   - qmin.test.: answers every name, and logs the questions;
//   - slow.test.: two servers, one never answers;
//   - dead.test.: two servers, one never answers, one is not there (no
//     lab uses 127.53.0.0/24, so nothing listens).
//
// And through nsd: cyca.test. and cycb.test., each served by a name in
// the other, without glue.
type hostileLab struct {
	*dnslab.Lab
	evil, noisy, trunc, oldedns, hole, qmin, lossy log
	ports                                          map[string]bool
	ids                                            map[uint16]bool
	lost                                           map[string]bool
}

func startHostileLab(t *testing.T) *hostileLab {
	h := &hostileLab{ports: map[string]bool{}, ids: map[uint16]bool{}, lost: map[string]bool{}}
	d := dnslab.Standard()
	// The handlers need the lab's addresses, known once Start returns;
	// they are first asked after that.
	var labp atomic.Pointer[dnslab.Lab]
	addr := func(name string) string { return labp.Load().Addr(name).String() }
	var downMu sync.Mutex
	downN := map[string]int{}
	evilAddr := func() string { return addr("evil") }
	answer := func(w dns.ResponseWriter, req *dns.Msg, extra func(m *dns.Msg)) {
		m := new(dns.Msg)
		m.SetReply(req)
		m.Authoritative = true
		q := req.Question[0]
		if q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, rr(t, q.Name+" 300 IN A 192.0.2.99"))
		} else {
			m.Ns = append(m.Ns, rr(t, "x.test. 300 IN SOA ns hostmaster 1 2 3 4 300"))
		}
		if extra != nil {
			extra(m)
		}
		_ = w.WriteMsg(m)
	}
	d.Servers = append(d.Servers,
		dnslab.Server{Name: "evil", Host: "ns.evil.test.", Zones: []string{"evil.test."}, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			h.evil.add(req.Question[0])
			answer(w, req, func(m *dns.Msg) {
				for i := range m.Ns {
					m.Ns[i].Header().Name = "evil.test."
				}
				m.Answer = append(m.Answer, rr(t, "www.secure.test. 300 IN A 6.6.6.6"))
				m.Ns = append(m.Ns, rr(t, "secure.test. 300 IN NS ns.evil.test."), rr(t, "test. 300 IN NS ns.evil.test."))
				m.Extra = append(m.Extra, rr(t, "ns1.secure.test. 300 IN A "+evilAddr()), rr(t, "www.secure.test. 300 IN A 6.6.6.6"),
					rr(t, "ns.nic.test. 300 IN A "+evilAddr()))
			})
		})},
		dnslab.Server{Name: "noisy", Host: "ns.noisy.test.", Zones: []string{"noisy.test."}, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			h.noisy.add(req.Question[0])
			if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
				q := req.Question[0]
				bad := func(mod func(m *dns.Msg)) {
					m := new(dns.Msg)
					m.SetReply(req)
					m.Authoritative = true
					m.Answer = []dns.RR{rr(t, q.Name+" 300 IN A 6.6.6.6")}
					mod(m)
					_ = w.WriteMsg(m)
				}
				bad(func(m *dns.Msg) { m.Id ^= 0x5a5a })
				bad(func(m *dns.Msg) { m.Question[0].Name = "other.noisy.test." })
				bad(func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAAAA })
				bad(func(m *dns.Msg) { m.Question[0].Name = swapCase(q.Name) })
			}
			answer(w, req, nil)
		})},
		dnslab.Server{Name: "self", Host: "ns.self.test.", Zones: []string{"self.test."}, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			m := new(dns.Msg)
			m.SetReply(req)
			m.Ns = []dns.RR{rr(t, "self.test. 300 IN NS ns.self.test.")}
			m.Extra = []dns.RR{rr(t, "ns.self.test. 300 IN A "+addr("self"))}
			_ = w.WriteMsg(m)
		})},
		dnslab.Server{Name: "down", Host: "ns.down.test.", Zones: []string{"down.test."}, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			// Refer one label further down towards the question on
			// each query about it, with glue for a new server name each
			// time, all at this address: a referral chain as long as
			// the name.
			m := new(dns.Msg)
			m.SetReply(req)
			q := strings.ToLower(req.Question[0].Name)
			downMu.Lock()
			downN[q]++
			n := 2 + downN[q]
			downMu.Unlock()
			labels := dns.SplitDomainName(q)
			cut := q
			if n < len(labels) {
				cut = strings.Join(labels[len(labels)-n:], ".") + "."
			}
			m.Ns = []dns.RR{rr(t, cut+" 300 IN NS ns."+cut)}
			m.Extra = []dns.RR{rr(t, "ns."+cut+" 300 IN A "+addr("down"))}
			_ = w.WriteMsg(m)
		})},
		dnslab.Server{Name: "trunc", Host: "ns.trunc.test.", Zones: []string{"trunc.test."}, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			h.trunc.add(req.Question[0])
			if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
				m := new(dns.Msg)
				m.SetReply(req)
				m.Truncated = true
				_ = w.WriteMsg(m)
				return
			}
			answer(w, req, func(m *dns.Msg) { m.Answer = append(m.Answer, rr(t, req.Question[0].Name+" 300 IN A 192.0.2.98")) })
		})},
		dnslab.Server{Name: "oldedns", Host: "ns.oldedns.test.", Zones: []string{"oldedns.test."}, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			h.oldedns.add(req.Question[0])
			if req.IsEdns0() != nil {
				m := new(dns.Msg)
				m.SetRcode(req, dns.RcodeFormatError)
				_ = w.WriteMsg(m)
				return
			}
			answer(w, req, nil)
		})},
		dnslab.Server{Name: "fast", Host: "ns1.slow.test.", Zones: []string{"slow.test."}, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			answer(w, req, nil)
		})},
		dnslab.Server{Name: "hole", Host: "ns2.slow.test.", Zones: []string{"slow.test.", "dead.test."}, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			h.hole.add(req.Question[0]) // and never answers
		})},
		dnslab.Server{Name: "qmin", Host: "ns.qmin.test.", Zones: []string{"qmin.test."}, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			h.qmin.add(req.Question[0])
			answer(w, req, nil)
		})},
		dnslab.Server{Name: "dropedns", Host: "ns.dropedns.test.", Zones: []string{"dropedns.test."}, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			if req.IsEdns0() != nil {
				return // dropped, as some firewalls do
			}
			answer(w, req, nil)
		})},
		dnslab.Server{Name: "lossy", Host: "ns.lossy.test.", Zones: []string{"lossy.test."}, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			// Drops the first query about each name starting with
			// "lost", and records source ports, ids and names.
			q := req.Question[0]
			h.lossy.mu.Lock()
			h.lossy.qs = append(h.lossy.qs, q.Name)
			h.ports[w.RemoteAddr().String()] = true
			h.ids[req.Id] = true
			first := !h.lost[strings.ToLower(q.Name)]
			h.lost[strings.ToLower(q.Name)] = true
			h.lossy.mu.Unlock()
			if first && strings.HasPrefix(strings.ToLower(q.Name), "lost") {
				return
			}
			answer(w, req, nil)
		})},
		dnslab.Server{Name: "oldroot", Host: "old.root.", Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
			// A root server's former address: it answers the priming
			// question with the current root servers, and refuses the
			// rest.
			m := new(dns.Msg)
			q := req.Question[0]
			if q.Name != "." || q.Qtype != dns.TypeNS {
				m.SetRcode(req, dns.RcodeRefused)
				_ = w.WriteMsg(m)
				return
			}
			m.SetReply(req)
			m.Authoritative = true
			m.Answer = []dns.RR{rr(t, ". 3600 IN NS ns.root.")}
			m.Extra = []dns.RR{rr(t, "ns.root. 3600 IN A "+addr("root")), rr(t, "evil.test. 3600 IN A 6.6.6.6")}
			_ = w.WriteMsg(m)
		})},
		dnslab.Server{Name: "cyc", Host: "ns.cyc.invalid.", Zones: []string{"cyca.test.", "cycb.test."}},
	)
	d.Zones = append(d.Zones,
		dnslab.Zone{Name: "cyca.test.", Records: "@ SOA ns.cycb.test. h 1 3600 600 86400 300\n@ NS ns.cycb.test.\nwww A 192.0.2.70\n"},
		dnslab.Zone{Name: "cycb.test.", Records: "@ SOA ns.cyca.test. h 1 3600 600 86400 300\n@ NS ns.cyca.test.\nns A %cyc%\n"},
	)
	for i, z := range d.Zones {
		if z.Name == "test." {
			d.Zones[i].Records += `
evil NS ns.evil
ns.evil A %evil%
noisy NS ns.noisy
ns.noisy A %noisy%
self NS ns.self
ns.self A %self%
down NS ns.down
ns.down A %down%
trunc NS ns.trunc
ns.trunc A %trunc%
oldedns NS ns.oldedns
ns.oldedns A %oldedns%
cyca NS ns.cycb
lossy NS ns.lossy
ns.lossy A %lossy%
dropedns NS ns.dropedns
ns.dropedns A %dropedns%
qmin NS ns.qmin
ns.qmin A %qmin%
slow NS ns1.slow
slow NS ns2.slow
ns1.slow A %fast%
ns2.slow A %hole%
dead NS ns1.dead
dead NS ns2.dead
ns1.dead A %hole%
ns2.dead A 127.53.0.1
cycb NS ns.cyca
`
		}
	}
	h.Lab = dnslab.Start(t, d)
	labp.Store(h.Lab)
	return h
}

func swapCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' {
			b[i] = c ^ 0x20
		}
	}
	return string(b)
}

func answerAddrs(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, strings.ToLower(a.Hdr.Name)+"="+a.A.String())
		}
	}
	return out
}

// TestHostileServers runs the cases of hostileLab on one recursor.
func TestHostileServers(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	h := startHostileLab(t)
	var m counter
	r := newLabRecursor(t, h.Hints, func(c *recursor.Config) {
		c.Metrics = &m
		c.MaxQueries = 30
	})
	ctx := context.Background()
	ask := func(name string, qtype uint16) (*dns.Msg, error) {
		return r.Exchange(ctx, question(name, qtype))
	}

	t.Run("bailiwick", func(t *testing.T) {
		got, err := ask("a.evil.test.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if a := answerAddrs(got); len(a) != 1 || a[0] != "a.evil.test.=192.0.2.99" {
			t.Fatalf("answer %v: the injected www.secure.test. record must be dropped", a)
		}
		got, err = ask("www.secure.test.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if a := answerAddrs(got); len(a) != 1 || a[0] != "www.secure.test.=192.0.2.10" {
			t.Fatalf("www.secure.test.: %v, want the real address", a)
		}
		if h.evil.has("secure.test.") {
			t.Fatalf("the evil server was asked about secure.test. after injecting an NS: %v", h.evil.qs)
		}
	})

	t.Run("mismatched replies ignored", func(t *testing.T) {
		before := m.unexpected.Load()
		beforeCase := m.caseMismatch.Load()
		got, err := ask("www.noisy.test.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if a := answerAddrs(got); len(a) != 1 || a[0] != "www.noisy.test.=192.0.2.99" {
			t.Fatalf("answer %v, want the real one after the decoys", a)
		}
		if n := m.unexpected.Load() - before; n < 3 {
			t.Errorf("%d unexpected packets counted, want ≥ 3", n)
		}
		if m.caseMismatch.Load() == beforeCase {
			// The swapped-case name equals the sent one only if it
			// has no letters, which www.noisy.test. has.
			t.Error("the reply with the name in another case was not counted")
		}
	})

	t.Run("self delegation", func(t *testing.T) {
		before := m.out.Load()
		_, err := ask("www.self.test.", dns.TypeA)
		if !errors.Is(err, recursor.ErrAllFailed) {
			t.Fatalf("err %v, want ErrAllFailed", err)
		}
		t.Log(err)
		if n := m.out.Load() - before; n > 30 {
			t.Fatalf("%d queries sent, more than the bound", n)
		}
	})

	t.Run("referral chain bounded", func(t *testing.T) {
		before := m.out.Load()
		long := strings.Repeat("a.", 100) + "down.test."
		_, err := ask(long, dns.TypeA)
		if !errors.Is(err, recursor.ErrAllFailed) {
			t.Fatalf("err %v, want ErrAllFailed", err)
		}
		t.Log(err)
		if n := m.out.Load() - before; n > 30 {
			t.Fatalf("%d queries sent, more than MaxQueries 30", n)
		}
	})

	t.Run("nameservers in each other's zones", func(t *testing.T) {
		start := time.Now()
		_, err := ask("www.cyca.test.", dns.TypeA)
		if !errors.Is(err, recursor.ErrAllFailed) {
			t.Fatalf("err %v, want ErrAllFailed", err)
		}
		t.Log(err)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("took %v", d)
		}
	})

	t.Run("truncated over TCP", func(t *testing.T) {
		before := m.tcp.Load()
		got, err := ask("www.trunc.test.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if a := answerAddrs(got); len(a) != 2 {
			t.Fatalf("answer %v, want the two records sent over TCP", a)
		}
		if m.tcp.Load() == before {
			t.Fatal("no TCP query counted")
		}
	})

	t.Run("EDNS fallback", func(t *testing.T) {
		got, err := ask("www.oldedns.test.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if a := answerAddrs(got); len(a) != 1 {
			t.Fatalf("answer %v", a)
		}
		// The server is remembered: the next question goes without EDNS
		// at once (one query, not two).
		before := m.out.Load()
		if _, err := ask("mail.oldedns.test.", dns.TypeA); err != nil {
			t.Fatal(err)
		}
		if n := m.out.Load() - before; n != 1 {
			t.Fatalf("%d queries for the second name, want 1", n)
		}
	})

	t.Run("server dropping EDNS", func(t *testing.T) {
		got, err := ask("www.dropedns.test.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if a := answerAddrs(got); len(a) != 1 {
			t.Fatalf("answer %v", a)
		}
		// Remembered: the next name costs one query and no timeout.
		before := m.out.Load()
		if _, err := ask("mail.dropedns.test.", dns.TypeA); err != nil {
			t.Fatal(err)
		}
		if n := m.out.Load() - before; n != 1 {
			t.Fatalf("%d queries for the second name, want 1", n)
		}
	})

	t.Run("lost datagram retried", func(t *testing.T) {
		// First a name that is answered at once, so the server is
		// known to take EDNS; then one whose first query is lost.
		if _, err := ask("www.lossy.test.", dns.TypeA); err != nil {
			t.Fatal(err)
		}
		got, err := ask("lost.lossy.test.", dns.TypeA)
		if err != nil {
			t.Fatalf("one lost datagram failed the only server's zone: %v", err)
		}
		if a := answerAddrs(got); len(a) != 1 {
			t.Fatalf("answer %v", a)
		}
	})

	t.Run("random ports, ids and case", func(t *testing.T) {
		for i := range 20 {
			if _, err := ask(fmt.Sprintf("name%d.lossy.test.", i), dns.TypeA); err != nil {
				t.Fatal(err)
			}
		}
		h.lossy.mu.Lock()
		defer h.lossy.mu.Unlock()
		mixed := 0
		for _, n := range h.lossy.qs {
			if n != strings.ToLower(n) && n != strings.ToUpper(n) {
				mixed++
			}
		}
		// 20 names (and the lost ones before): every query from a port
		// and with an id of its own, barring a rare coincidence; most
		// names in mixed case (a name of this length comes out all
		// lower or all upper case with a chance of 2^-13 each).
		if len(h.ports) < 18 || len(h.ids) < 18 || mixed < 15 {
			t.Fatalf("%d queries: %d source ports, %d ids, %d names in mixed case", len(h.lossy.qs), len(h.ports), len(h.ids), mixed)
		}
	})

	t.Run("fastest server chosen", func(t *testing.T) {
		for i := range 10 {
			got, err := ask(fmt.Sprintf("n%d.slow.test.", i), dns.TypeA)
			if err != nil {
				t.Fatal(err)
			}
			if a := answerAddrs(got); len(a) != 1 {
				t.Fatalf("answer %v", a)
			}
		}
		// The silent server is asked about one name at most (twice: with
		// EDNS, then without, in case it drops EDNS): then it is
		// throttled, and its estimate is the timeout, far behind the
		// other's.
		h.hole.mu.Lock()
		names := map[string]bool{}
		for _, q := range h.hole.qs {
			names[q] = true
		}
		h.hole.mu.Unlock()
		n := len(names)
		if n > 1 {
			t.Fatalf("the silent server was asked about %d names: %v", n, names)
		}
		if st := r.Stats(); n == 1 && st.Throttled == 0 {
			t.Errorf("stats %+v: the silent server is not throttled", st)
		}
	})

	t.Run("every server down", func(t *testing.T) {
		start := time.Now()
		_, err := ask("www.dead.test.", dns.TypeA)
		if !errors.Is(err, recursor.ErrAllFailed) || !errors.Is(err, upstream.ErrAllFailed) {
			t.Fatalf("err %v, want ErrAllFailed", err)
		}
		t.Log(err)
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("took %v, more than MaxTime", d)
		}
	})

	t.Run("QNAME minimisation", func(t *testing.T) {
		got, err := ask("a.b.c.qmin.test.", dns.TypeMX)
		if err != nil {
			t.Fatal(err)
		}
		if got.Rcode != dns.RcodeSuccess {
			t.Fatalf("rcode %s", dns.RcodeToString[got.Rcode])
		}
		h.qmin.mu.Lock()
		qs := slices.Clone(h.qmin.qs)
		h.qmin.mu.Unlock()
		// The zone's server is asked one label at a time (type A),
		// then the full question.
		want := []string{"c.qmin.test. A", "b.c.qmin.test. A", "a.b.c.qmin.test. MX"}
		if !slices.Equal(qs, want) {
			t.Fatalf("questions %q, want %q", qs, want)
		}
	})

	t.Run("infrastructure cache", func(t *testing.T) {
		if _, err := ask("www.sub.secure.test.", dns.TypeA); err != nil {
			t.Fatal(err)
		}
		before := m.out.Load()
		got, err := ask("other.sub.secure.test.", dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if got.Rcode != dns.RcodeNameError {
			t.Fatalf("rcode %s", dns.RcodeToString[got.Rcode])
		}
		if n := m.out.Load() - before; n != 1 {
			t.Fatalf("%d queries, want 1: the zone's server is known", n)
		}
		// And the NXDOMAIN is cached (RFC 2308): no query at all.
		before = m.out.Load()
		got, err = ask("other.sub.secure.test.", dns.TypeA)
		if err != nil || got.Rcode != dns.RcodeNameError || len(got.Ns) != 1 {
			t.Fatalf("cached NXDOMAIN: %v %v", err, got)
		}
		if n := m.out.Load() - before; n != 0 {
			t.Fatalf("%d queries for a cached NXDOMAIN", n)
		}
	})
}

// TestPriming: hints that name only a root server's former address, which
// answers nothing but the priming question (. NS) with the current root
// servers: resolution works through them.
func TestPriming(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	h := startHostileLab(t)
	hints := ". 3600000 IN NS old.root.\nold.root. 3600000 IN A " + h.Addr("oldroot").String() + "\n"
	r := newLabRecursor(t, hints, nil)
	got, err := r.Exchange(context.Background(), question("www.secure.test.", dns.TypeA))
	if err != nil {
		t.Fatal(err)
	}
	if a := answerAddrs(got); len(a) != 1 || a[0] != "www.secure.test.=192.0.2.10" {
		t.Fatalf("answer %v", a)
	}
}
