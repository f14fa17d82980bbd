package dnstap

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// TestAnsweredCopies: what Answered queued does not change when the
// resolver reuses the event's memory after the call, as it does.
func TestAnsweredCopies(t *testing.T) {
	w, err := New(Config{Socket: "unix:/nonexistent/dnstap.sock", Queue: 2,
		Clock: func() time.Time { return time.Unix(1_800_000_000, 5) }})
	if err != nil {
		t.Fatal(err)
	}
	m := new(dns.Msg)
	m.SetQuestion("blocked.example.", dns.TypeA)
	m.SetRcode(m, dns.RcodeNameError)
	reply, _ := m.Pack()
	want := bytes.Clone(reply)
	rule := []byte("blocklist:blocked.example")
	a := &resolver.Answered{Name: "blocked.example.", Type: dns.TypeA, Transport: policy.TransportTCP,
		Client: netip.MustParseAddrPort("192.0.2.1:1234"), Rcode: dns.RcodeNameError, Took: time.Millisecond, Reply: reply,
		Decision: resolver.Summary{Verdict: policy.VerdictBlock, Action: policy.ActionNXDomain, Reason: policy.ReasonBlocklist,
			Rule: string(rule)}}
	w.Answered(a)
	for i := range reply { // the resolver's next query
		reply[i] = 0xff
	}
	r := <-w.queue
	if !bytes.Equal(r.reply(), want) || string(r.rule()) != "blocklist:blocked.example" || r.client != a.Client ||
		r.transport != policy.TransportTCP || !r.blocked || r.action != actionNXDomain || reasons[r.reason] != policy.ReasonBlocklist ||
		!r.at.Equal(time.Unix(1_800_000_000, 5)) || r.took != time.Millisecond || r.dropped {
		t.Errorf("queued %+v (reply %x), want a copy of the event", r, r.reply())
	}
}

// TestQueueFullDropsAndCounts: past the queue's size Answered drops and
// counts; a writer that never connects counts what is left when it stops,
// and Run returns at once.
func TestQueueFullDropsAndCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	w, err := New(Config{Socket: "unix:" + filepath.Join(t.TempDir(), "nobody.sock"), Queue: 3, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	a := &resolver.Answered{Name: "x.example.", Type: dns.TypeA, Client: netip.MustParseAddrPort("192.0.2.1:1"), Reply: make([]byte, 40)}
	for range 10 {
		w.Answered(a)
	}
	if n := testutil.ToFloat64(w.droppedFull); n != 7 {
		t.Errorf("dropped (queue_full) %v, want 7", n)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if n := testutil.ToFloat64(w.droppedStop); n != 3 {
		t.Errorf("dropped (shutdown) %v, want the 3 queued", n)
	}
	if n, err := testutil.GatherAndCount(reg, "svcpf_dnstap_dropped_total"); err != nil || n != 3 {
		t.Errorf("registered dropped series %d (%v), want 3 (queue_full, connection, shutdown)", n, err)
	}
}

// TestHandshakeRefusesOtherContentType: a reader that accepts another
// content type is not written to; the error says why.
func TestHandshakeRefusesOtherContentType(t *testing.T) {
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := readControl(c); err != nil { // READY
			return
		}
		_, _ = c.Write(appendControl(nil, ctrlAccept, "protobuf:other.Thing"))
		_, _ = c.Read(make([]byte, 1))
	}()
	c, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	err = handshake(c)
	if err == nil || !strings.Contains(err.Error(), "protobuf:other.Thing") || !strings.Contains(err.Error(), contentType) {
		t.Errorf("handshake with a reader of another content type: %v, want an error naming both", err)
	}
}

func TestNewRefuses(t *testing.T) {
	for _, cfg := range []Config{{}, {Socket: "udp:1.2.3.4:6000"}, {Socket: "unix:/x", Queue: -1}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v): no error", cfg)
		}
	}
}

// TestAnsweredUsesItsTime: the response time is the resolver's (At), not
// another reading of the writer's clock; its Clock stands in only for an
// event without one. The name, a view of memory the resolver rewrites for
// its next query, is copied.
func TestAnsweredUsesItsTime(t *testing.T) {
	w, err := New(Config{Socket: "unix:/nonexistent/dnstap.sock", Queue: 2,
		Clock: func() time.Time { return time.Unix(1_800_000_000, 5) }})
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_900_000_000, 7)
	name := []byte("a.example.")
	a := &resolver.Answered{Name: unsafe.String(&name[0], len(name)), Type: dns.TypeA, Transport: policy.TransportUDP,
		Client: netip.MustParseAddrPort("192.0.2.1:1234"), Rcode: resolver.RcodeDropped, At: at, Took: time.Millisecond}
	w.Answered(a)
	copy(name, "zzzzzzzzzz")
	r := <-w.queue
	if !r.at.Equal(at) {
		t.Errorf("response time %v, want the event's %v", r.at, at)
	}
	if got := string(r.name()); got != "a.example." {
		t.Errorf("name %q after the resolver reused its buffer, want a copy, a.example.", got)
	}
}
