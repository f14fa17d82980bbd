package radius

import (
	"context"
	"net"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"layeh.com/radius"
	"layeh.com/radius/rfc2865"
	"layeh.com/radius/rfc2866"
	"layeh.com/radius/rfc3162"
	"layeh.com/radius/rfc4818"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/session"
)

// writes is how many IP Mapper calls of op the server made.
func (e *env) writes(op string) uint64 {
	e.t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != "svcpf_radius_mapper_write_seconds" {
			continue
		}
		for _, m := range mf.Metric {
			if labelIs(m, "op", op) {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.Label {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func prefixes(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParsePrefix(s)
	}
	return out
}

func TestStartInterimStop(t *testing.T) {
	e := startEnv(t, nil)
	n := e.nas(testSecret)
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_Start, "sess-1", framedIP("100.64.0.7"),
		userName("alice@Example.NET"), callingStation("+44 7700 900123"), sessionTime(0)))
	ss := e.byIP("100.64.0.7")
	if len(ss) != 1 {
		t.Fatalf("sessions for 100.64.0.7: %+v", ss)
	}
	s := ss[0]
	want := identity.Attributes{Username: "alice", DeviceID: "msisdn:447700900123"}
	if s.Org != "netco" || s.Attributes != want || s.Producer != session.ProducerRADIUS ||
		s.OpaqueID != "radius-nas:127.0.0.1" || !slices.Equal(s.Allocations, prefixes("100.64.0.7/32")) {
		t.Fatalf("stored session %+v", s)
	}
	if s.ID != sessionID("127.0.0.1", []byte("sess-1")) || !session.ValidID(s.ID) {
		t.Fatalf("session id %q", s.ID)
	}

	// An Interim-Update with a new address replaces the allocation and
	// keeps what it does not carry.
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_InterimUpdate, "sess-1", framedIP("100.64.0.8"), sessionTime(60)))
	if got := e.byIP("100.64.0.7"); len(got) != 0 {
		t.Fatalf("old address still mapped: %+v", got)
	}
	ss = e.byIP("100.64.0.8")
	if len(ss) != 1 || ss[0].ID != s.ID || ss[0].Username != "alice" || ss[0].DeviceID != "msisdn:447700900123" {
		t.Fatalf("after interim: %+v", ss)
	}

	n.exchange(n.acct(rfc2866.AcctStatusType_Value_Stop, "sess-1", sessionTime(90)))
	if got := e.sessions("netco"); len(got) != 0 {
		t.Fatalf("after stop: %+v", got)
	}
	e.rec.producersAllRADIUS(t)
	if got := e.count("requests", "start", resultAcknowledged); got != 1 {
		t.Fatalf("start acknowledged = %v", got)
	}
	if got := e.count("requests", "stop", resultAcknowledged); got != 1 {
		t.Fatalf("stop acknowledged = %v", got)
	}
}

func TestClientOrgAndMAC(t *testing.T) {
	e := startEnv(t, nil)
	n := e.nas(testSecret)
	// No realm named in realms: the client entry's organisation, and the
	// username keeps its realm.
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_Start, "s-mac", framedIP("100.64.1.1"),
		userName("bob@elsewhere.org"), callingStation("AA-BB-CC-00-11-22")))
	ss := e.sessions("acme")
	if len(ss) != 1 || ss[0].Username != "bob@elsewhere.org" || ss[0].DeviceID != "mac:aa:bb:cc:00:11:22" {
		t.Fatalf("sessions of acme: %+v", ss)
	}
}

func TestDuplicateAnsweredWithoutSecondWrite(t *testing.T) {
	e := startEnv(t, nil)
	n := e.nas(testSecret)
	b := n.exchange(n.acct(rfc2866.AcctStatusType_Value_Start, "dup-1", framedIP("100.64.2.1")))
	if n.send(b, 5*time.Second) == nil {
		t.Fatal("the retransmission was not answered")
	}
	if got := e.writes("set"); got != 1 {
		t.Fatalf("set calls = %d, want 1", got)
	}
	if got := e.count("requests", "start", resultDuplicate); got != 1 {
		t.Fatalf("duplicates = %v", got)
	}
}

func TestReorderedEventsNeverWinOverNewer(t *testing.T) {
	e := startEnv(t, nil)
	n := e.nas(testSecret)
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_Start, "ord-1", framedIP("100.64.3.1"), sessionTime(0)))
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_InterimUpdate, "ord-1", framedIP("100.64.3.2"), sessionTime(120)))
	// An older Interim arriving late is answered but not written.
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_InterimUpdate, "ord-1", framedIP("100.64.3.3"), sessionTime(60)))
	if got := e.byIP("100.64.3.2"); len(got) != 1 {
		t.Fatalf("newest address lost: %+v", got)
	}
	if got := e.byIP("100.64.3.3"); len(got) != 0 {
		t.Fatalf("stale interim written: %+v", got)
	}
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_Stop, "ord-1", sessionTime(200)))
	// An Interim sent before the Stop but arriving after it does not
	// bring the session back; neither does a late Start.
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_InterimUpdate, "ord-1", framedIP("100.64.3.4"), sessionTime(180)))
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_Start, "ord-1", framedIP("100.64.3.4")))
	if got := e.sessions("acme"); len(got) != 0 {
		t.Fatalf("stopped session resurrected: %+v", got)
	}
	if got := e.count("requests", "interim", resultStale); got != 2 {
		t.Fatalf("stale interims = %v, want 2", got)
	}

	// Event-Timestamp orders too, before Acct-Session-Time.
	t0 := time.Unix(1_800_000_000, 0)
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_InterimUpdate, "ord-2", framedIP("100.64.3.10"), eventTime(t0.Add(time.Minute))))
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_Start, "ord-2", framedIP("100.64.3.11"), eventTime(t0)))
	if got := e.byIP("100.64.3.10"); len(got) != 1 {
		t.Fatalf("a Start older than the Interim overwrote it: %+v", e.sessions("acme"))
	}
}

func TestAccountingOnRemovesOnlyThatNASsSessions(t *testing.T) {
	e := startEnv(t, nil)
	n1 := e.nas(testSecret)
	// A second NAS: another source address in the client network.
	c2, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.2:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	n2 := &nas{t: t, conn: c2, secret: []byte(testSecret), to: e.addr}

	n1.exchange(n1.acct(rfc2866.AcctStatusType_Value_Start, "a", framedIP("100.64.4.1"), userName("a")))
	n1.exchange(n1.acct(rfc2866.AcctStatusType_Value_Start, "b", framedIP("100.64.4.2"), userName("b@example.net")))
	n2.exchange(n2.acct(rfc2866.AcctStatusType_Value_Start, "a", framedIP("100.64.4.3"), userName("c")))
	// The orgmanager's session of the same organisation.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.client.SetSession(ctx, session.Session{ID: "om-1", Org: "acme", Allocations: prefixes("10.9.0.0/16")}, 0); err != nil {
		t.Fatal(err)
	}

	n1.exchange(n1.acct(rfc2866.AcctStatusType_Value_AccountingOn, ""))
	var left []string
	for _, s := range append(e.sessions("acme"), e.sessions("netco")...) {
		left = append(left, s.ID)
	}
	slices.Sort(left)
	want := []string{"om-1", sessionID("127.0.0.2", []byte("a"))}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("left after Accounting-On: %v, want %v", left, want)
	}
	e.rec.producersAllRADIUS(t)
	// The NAS's sessions begin again after it.
	n1.exchange(n1.acct(rfc2866.AcctStatusType_Value_Start, "a2", framedIP("100.64.4.1")))
	if got := e.byIP("100.64.4.1"); len(got) != 1 {
		t.Fatalf("new session after Accounting-On: %+v", got)
	}
	n2.exchange(n2.acct(rfc2866.AcctStatusType_Value_AccountingOff, ""))
	if got := e.byIP("100.64.4.3"); len(got) != 0 {
		t.Fatalf("Accounting-Off left %+v", got)
	}
	if got := e.byIP("100.64.4.1"); len(got) != 1 {
		t.Fatal("Accounting-Off of one NAS removed another's session")
	}
}

func TestIPv6Prefixes(t *testing.T) {
	e := startEnv(t, nil)
	n := e.nas(testSecret)
	_, framed, _ := net.ParseCIDR("2001:db8:1:2::/64")
	_, delegated, _ := net.ParseCIDR("2001:db8:ff00::/56")
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_Start, "v6", framedIP("100.64.5.1"), func(p *radius.Packet) {
		_ = rfc3162.FramedIPv6Prefix_Add(p, framed)
		_ = rfc4818.DelegatedIPv6Prefix_Add(p, delegated)
	}))
	ss := e.byIP("2001:db8:ff00:42::1")
	if len(ss) != 1 {
		t.Fatalf("no session for an address in the delegated prefix")
	}
	if want := prefixes("100.64.5.1/32", "2001:db8:1:2::/64", "2001:db8:ff00::/56"); !slices.Equal(ss[0].Allocations, want) {
		t.Fatalf("allocations %v, want %v", ss[0].Allocations, want)
	}
}

func TestDroppedAndCountedNeverAnswered(t *testing.T) {
	e := startEnv(t, func(c *Config) {
		c.Clients = []ClientConfig{{Network: "127.0.0.1", Secret: testSecret, Org: "acme"}}
	})
	good := e.nas(testSecret)
	bad := e.nas("wrong-secret")
	c3, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.3:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer c3.Close()
	stranger := &nas{t: t, conn: c3, secret: []byte(testSecret), to: e.addr}

	start := func(n *nas) []byte {
		return n.encode(n.acct(rfc2866.AcctStatusType_Value_Start, "x", framedIP("100.64.6.1")))
	}
	if stranger.send(start(stranger), 300*time.Millisecond) != nil {
		t.Fatal("unknown NAS answered")
	}
	if bad.send(start(bad), 300*time.Millisecond) != nil {
		t.Fatal("bad authenticator answered")
	}
	// A correct packet with one byte changed after signing.
	tampered := start(good)
	tampered[len(tampered)-1] ^= 1
	if good.send(tampered, 300*time.Millisecond) != nil {
		t.Fatal("tampered packet answered")
	}
	if good.send([]byte("not radius"), 300*time.Millisecond) != nil {
		t.Fatal("garbage answered")
	}
	access := radius.New(radius.CodeAccessRequest, []byte(testSecret))
	_ = rfc2865.UserName_SetString(access, "x")
	if good.send(good.encode(access), 300*time.Millisecond) != nil {
		t.Fatal("Access-Request answered")
	}
	// No Acct-Session-Id on a Start: malformed.
	if good.send(good.encode(good.acct(rfc2866.AcctStatusType_Value_Start, "")), 300*time.Millisecond) != nil {
		t.Fatal("Start without Acct-Session-Id answered")
	}
	for reason, want := range map[string]float64{dropUnknownNAS: 1, dropBadAuthenticator: 2, dropMalformed: 2, dropNotAccounting: 1} {
		if got := e.count("dropped", reason); got != want {
			t.Errorf("dropped{%s} = %v, want %v", reason, got, want)
		}
	}
	if got := e.sessions("acme"); len(got) != 0 {
		t.Fatalf("a dropped packet was written: %+v", got)
	}
}

// outage is how long TestMapperAwayNoAnswerUntilBack keeps the IP Mapper
// away: 2s by default, SVCPF_RADIUS_OUTAGE (a Go duration) in CI.
func outage(t *testing.T) time.Duration {
	v := os.Getenv("SVCPF_RADIUS_OUTAGE")
	if v == "" {
		return 2 * time.Second
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("SVCPF_RADIUS_OUTAGE %q: want a positive Go duration (1m)", v)
	}
	return d
}

func TestMapperAwayNoAnswerUntilBack(t *testing.T) {
	e := startEnv(t, func(c *Config) { c.WriteTimeout = 500 * time.Millisecond })
	n := e.nas(testSecret)
	n.exchange(n.acct(rfc2866.AcctStatusType_Value_Start, "before", framedIP("100.64.7.1")))
	if err := e.mapper.Stop(); err != nil {
		t.Fatal(err)
	}
	req := n.encode(n.acct(rfc2866.AcctStatusType_Value_Start, "during", framedIP("100.64.7.2")))
	stopReq := n.encode(n.acct(rfc2866.AcctStatusType_Value_Stop, "before"))
	// The NAS retransmits the same packets through the outage.
	end := time.Now().Add(outage(t))
	for time.Now().Before(end) {
		if n.send(req, 250*time.Millisecond) != nil {
			t.Fatal("a Start was answered while the IP Mapper was away")
		}
		if n.send(stopReq, 250*time.Millisecond) != nil {
			t.Fatal("a Stop was answered while the IP Mapper was away")
		}
	}
	if e.count("requests", "start", resultUnavailable) == 0 || e.count("requests", "stop", resultUnavailable) == 0 {
		t.Fatal("unanswered requests not counted as mapper_unavailable")
	}
	if e.rs.Health() == nil {
		t.Fatal("Health is nil while the IP Mapper is away")
	}
	e.startMapper()
	// The next retransmissions are stored and answered.
	deadline := time.Now().Add(30 * time.Second)
	for n.send(req, time.Second) == nil {
		if time.Now().After(deadline) {
			t.Fatal("no answer after the IP Mapper came back")
		}
	}
	for n.send(stopReq, time.Second) == nil {
		if time.Now().After(deadline) {
			t.Fatal("no answer to the Stop after the IP Mapper came back")
		}
	}
	if got := e.byIP("100.64.7.2"); len(got) != 1 {
		t.Fatalf("the retransmitted Start was not stored: %+v", got)
	}
	if got := e.byIP("100.64.7.1"); len(got) != 0 {
		t.Fatalf("the retransmitted Stop was not applied: %+v", got)
	}
	if err := e.rs.Health(); err != nil {
		t.Fatalf("Health after recovery: %v", err)
	}
}

func TestRefusedByAnotherProducerIsNotAnswered(t *testing.T) {
	e := startEnv(t, nil)
	n := e.nas(testSecret)
	// The orgmanager owns a session in another organisation under the id
	// this NAS's session would get: the IP Mapper refuses the write.
	id := sessionID("127.0.0.1", []byte("clash"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := e.client.SetSession(ctx, session.Session{ID: id, Org: "other"}, 0); err != nil {
		t.Fatal(err)
	}
	if n.send(n.encode(n.acct(rfc2866.AcctStatusType_Value_Start, "clash", framedIP("100.64.8.1"))), time.Second) != nil {
		t.Fatal("a refused write was answered")
	}
	if got := e.count("requests", "start", resultRefused); got != 1 {
		t.Fatalf("refused = %v", got)
	}
}
