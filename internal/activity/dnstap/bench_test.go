package dnstap

import (
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// benchAnswered is a typical answered query: an A record's reply of about
// a hundred bytes.
func benchAnswered(b *testing.B, blocked bool) *resolver.Answered {
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.", dns.TypeA)
	m.Response = true
	m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: "www.example.com.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
		A: netip.MustParseAddr("192.0.2.1").AsSlice()}}
	m.SetEdns0(1232, false)
	reply, err := m.Pack()
	if err != nil {
		b.Fatal(err)
	}
	a := &resolver.Answered{Name: "www.example.com.", Type: dns.TypeA, Transport: policy.TransportUDP,
		Client: netip.MustParseAddrPort("192.0.2.10:40000"), Took: 200 * time.Microsecond, Reply: reply,
		Decision: resolver.Summary{Verdict: policy.VerdictAllow, Action: policy.ActionAllow, Reason: policy.ReasonDefault}}
	if blocked {
		a.Decision = resolver.Summary{Verdict: policy.VerdictBlock, Action: policy.ActionNXDomain, Reason: policy.ReasonBlocklist,
			Rule: "blocklist:www.example.com"}
	}
	return a
}

// reportDropped reports the share of the calls that found the queue full
// and took the cheaper path of a drop.
func reportDropped(b *testing.B, w *Writer) {
	b.ReportMetric(testutil.ToFloat64(w.droppedFull)/float64(b.N), "dropped/op")
}

// BenchmarkAnswered is the resolver's cost of the dnstap observer per
// query: queued (every call copies and queues: the queue is emptied, as
// the writer would, with the timer stopped, whenever it fills), and
// dropped (the queue full). dropped/op says which path the calls took.
func BenchmarkAnswered(b *testing.B) {
	for _, blocked := range []bool{false, true} {
		name := "allowed"
		if blocked {
			name = "blocked"
		}
		b.Run("queued/"+name, func(b *testing.B) {
			w, err := New(Config{Socket: "unix:/nonexistent/dnstap.sock", Queue: 4096})
			if err != nil {
				b.Fatal(err)
			}
			a := benchAnswered(b, blocked)
			b.ReportAllocs()
			for b.Loop() {
				w.Answered(a)
				if len(w.queue) == cap(w.queue) {
					b.StopTimer()
					for range cap(w.queue) {
						r := <-w.queue
						w.release(r.buf)
					}
					b.StartTimer()
				}
			}
			reportDropped(b, w)
		})
	}
	b.Run("dropped", func(b *testing.B) {
		w, err := New(Config{Socket: "unix:/nonexistent/dnstap.sock", Queue: 1})
		if err != nil {
			b.Fatal(err)
		}
		a := benchAnswered(b, false)
		w.Answered(a) // the queue is full from here on
		b.ReportAllocs()
		for b.Loop() {
			w.Answered(a)
		}
		reportDropped(b, w)
	})
}

// BenchmarkEncode is the writer goroutine's cost per message: the dnstap
// payload and its frame, in reused buffers.
func BenchmarkEncode(b *testing.B) {
	a := benchAnswered(b, true)
	r := newRecord(a.Reply, "", a.Decision.Rule, a.Client, time.Now(), a.Took)
	r.blocked, r.reason, r.action = true, reasonIndex(a.Decision.Reason), policyAction(a.Decision.Action)
	var frame, scratch []byte
	identity, version := []byte("node-1"), []byte("svc-pf v1")
	b.ReportAllocs()
	for b.Loop() {
		frame, scratch = appendDnstap(frame[:0], scratch, identity, version, r)
	}
	b.ReportMetric(float64(len(frame)), "bytes/msg")
}
