package radius

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"layeh.com/radius"
	"layeh.com/radius/rfc2866"
)

func TestDeviceID(t *testing.T) {
	for in, want := range map[string]string{
		"+44 7700 900123":   "msisdn:447700900123",
		"4915112345678":     "msisdn:4915112345678",
		"(030) 1234-567":    "msisdn:0301234567",
		"001122334455":      "msisdn:001122334455", // 12 decimal digits: a number
		"AA:BB:CC:DD:EE:FF": "mac:aa:bb:cc:dd:ee:ff",
		"aa-bb-cc-00-11-22": "mac:aa:bb:cc:00:11:22",
		"aabb.cc00.1122":    "mac:aa:bb:cc:00:11:22",
		"AABBCC001122":      "mac:aa:bb:cc:00:11:22",
		"aa:bb-cc:dd:ee:ff": "csid:aa:bb-cc:dd:ee:ff",
		"1234":              "csid:1234",
		"port 7/1":          "csid:port 7/1",
	} {
		if got := deviceID(in); got != want {
			t.Errorf("deviceID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestIPv6PrefixDecode(t *testing.T) {
	ok := map[string][]byte{
		"2001:db8::/32":   {0, 32, 0x20, 0x01, 0x0d, 0xb8},
		"2001:db8:1::/48": {0, 48, 0x20, 0x01, 0x0d, 0xb8, 0, 1, 0xff, 0xff}, // host bits masked
		"::/0":            {0, 0},
		"2001:db8::1/128": append([]byte{0, 128}, netip.MustParseAddr("2001:db8::1").AsSlice()...),
	}
	for want, b := range ok {
		got, err := ipv6Prefix(b)
		if err != nil || got != netip.MustParsePrefix(want) {
			t.Errorf("ipv6Prefix(%x) = %v, %v; want %s", b, got, err, want)
		}
	}
	for _, b := range [][]byte{{0}, {0, 129}, {0, 64, 0x20, 0x01}, make([]byte, 19)} {
		if p, err := ipv6Prefix(b); err == nil {
			t.Errorf("ipv6Prefix(%x) = %v, want an error", b, p)
		}
	}
}

func TestOrderRule(t *testing.T) {
	start := order{rank: 0, hasST: true, st: 0}
	interim60 := order{rank: 1, hasST: true, st: 60}
	interim120 := order{rank: 1, hasST: true, st: 120}
	stop := order{rank: 2}
	switch {
	case !interim60.olderThan(interim120), interim120.olderThan(interim60):
		t.Error("Acct-Session-Time does not order interims")
	case !start.olderThan(interim60):
		t.Error("start after interim")
	case interim60.olderThan(interim60):
		t.Error("a repeat counts as older")
	case !interim120.olderThan(stop):
		t.Error("an interim without times is not older than a stop")
	case !(order{rank: 1, hasTS: true, ts: 10, hasST: true, st: 500}).olderThan(order{rank: 1, hasTS: true, ts: 20, hasST: true, st: 5}):
		t.Error("Event-Timestamp does not come first")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := baseConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Config{
		Listen:     []string{"localhost"},
		Clients:    []ClientConfig{{Network: "192.0.2.0/33", Secret: "", Org: ""}, {Network: "2001:db8::/32", Secret: "topsecret-value", Org: "a"}, {Network: "2001:db8::/32", Secret: "x", Org: "b"}},
		Realms:     map[string]string{"a@b": "x", "Example.net": "o", "example.NET": "o"},
		Attributes: AttributesConfig{Username: "framed-ip"},
		SessionTTL: -time.Second,
	}
	err := bad.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"radius.listen[0]", "radius.clients[0].network", "radius.clients[0].secret is required",
		"radius.clients[0].org", "radius.clients[2].network", "radius.realms \"a@b\"", "same realm", "radius.attributes.username", "session_ttl"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "topsecret") {
		t.Error("a secret is quoted in an error")
	}
	if _, err := New(ServerConfig{Config: baseConfig()}); err == nil {
		t.Error("New without a Mapper")
	}
}

// TestConfigValidateRealmsInOrder: the realms' errors come in the realms'
// sorted order, so one file gives one message (svc-pf check, a reload's
// log), not one of many orders a map iterates in.
func TestConfigValidateRealmsInOrder(t *testing.T) {
	c := baseConfig()
	c.Realms = map[string]string{"e@x": "", "d": "", "c@x": "o", "B": "o", "b": "o", "a": "", "": "o", "f g": "o"}
	want := bad(c.Validate())
	for range 50 {
		if got := bad(c.Validate()); got != want {
			t.Fatalf("one config, two messages:\n%s\n%s", want, got)
		}
	}
	if i, j := strings.Index(want, `radius.realms "": a realm`), strings.Index(want, `radius.realms "f g": a realm`); i < 0 || j < i ||
		!strings.Contains(want, `radius.realms: "B" and "b" are the same realm`) {
		t.Fatalf("realm errors out of order:\n%s", want)
	}
}

func bad(err error) string {
	if err == nil {
		return "accepted"
	}
	return err.Error()
}

func TestClientLongestMatch(t *testing.T) {
	tab := newClientTable([]ClientConfig{
		{Network: "10.0.0.0/8", Secret: "a", Org: "wide"},
		{Network: "10.1.2.3", Secret: "b", Org: "host"},
		{Network: "10.1.0.0/16", Secret: "c", Org: "mid"},
	})
	for ip, want := range map[string]string{"10.1.2.3": "host", "10.1.9.9": "mid", "10.9.9.9": "wide", "::ffff:10.1.2.3": "host"} {
		if c := tab.lookup(netip.MustParseAddr(ip)); c == nil || c.org != want {
			t.Errorf("lookup(%s) = %+v, want %s", ip, c, want)
		}
	}
	if tab.lookup(netip.MustParseAddr("192.0.2.1")) != nil {
		t.Error("an address outside every network matched")
	}
}

// FuzzPacket feeds arbitrary datagrams from a known NAS into the handler:
// it must never panic, and a datagram whose Request Authenticator does not
// verify must be dropped (counted) without an answer or a write.
func FuzzPacket(f *testing.F) {
	n := &nas{t: f, secret: []byte(testSecret)}
	seed := func(p *radius.Packet) { f.Add(n.encode(p)) }
	seed(n.acct(rfc2866.AcctStatusType_Value_Start, "f1", framedIP("100.64.9.1"), userName("u@example.net"), callingStation("+1 555 0100")))
	seed(n.acct(rfc2866.AcctStatusType_Value_InterimUpdate, "f1", sessionTime(10)))
	seed(n.acct(rfc2866.AcctStatusType_Value_Stop, "f1"))
	seed(n.acct(rfc2866.AcctStatusType_Value_AccountingOn, ""))
	_, pfx, _ := net.ParseCIDR("2001:db8::/56")
	seed(n.acct(rfc2866.AcctStatusType_Value_Start, "f2", func(p *radius.Packet) {
		b, _ := radius.NewIPv6Prefix(pfx)
		p.Add(97, b)
		p.Add(123, b)
	}))
	f.Add([]byte{4, 1, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{4, 1, 255, 255})
	e := startEnv(f, nil)
	src := netip.MustParseAddrPort("127.0.0.1:9")
	conn := e.rs.conns[0]
	f.Fuzz(func(t *testing.T, b []byte) {
		// An authentic input before this one may still be in its IP
		// Mapper write, and counted as answered in between.
		e.idle(t)
		before := e.totals(t)
		e.rs.handle(conn, b, src)
		after := e.totals(t)
		authentic := false
		if h, err := checkHeader(b); err == nil {
			authentic = radius.IsAuthenticRequest(b[:h.length], []byte(testSecret))
		}
		if !authentic && (after.dropped != before.dropped+1 || after.answered != before.answered || after.queued != before.queued) {
			t.Fatalf("a datagram that does not authenticate was not just dropped: %+v → %+v", before, after)
		}
	})
}

type totals struct{ dropped, answered, queued float64 }

// idle waits until no request is in its IP Mapper write
// (svcpf_radius_in_flight is 0).
func (e *env) idle(tb testing.TB) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		mfs, err := e.reg.Gather()
		if err != nil {
			tb.Fatal(err)
		}
		busy := 0.0
		for _, mf := range mfs {
			if mf.GetName() == "svcpf_radius_in_flight" {
				for _, m := range mf.Metric {
					busy += m.GetGauge().GetValue()
				}
			}
		}
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%v requests still in flight after 10s", busy)
		}
	}
}

// totals sums the drop counters, the answered requests and the requests
// admitted for a write.
func (e *env) totals(tb testing.TB) totals {
	tb.Helper()
	var t totals
	mfs, err := e.reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.Metric {
			switch mf.GetName() {
			case "svcpf_radius_dropped_total":
				t.dropped += m.GetCounter().GetValue()
			case "svcpf_radius_requests_total":
				t.answered += m.GetCounter().GetValue()
			}
		}
	}
	t.queued = float64(e.rs.state.now())
	return t
}
