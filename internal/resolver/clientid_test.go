package resolver_test

import (
	"bytes"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// clientIDEngine is testEngine's view plus bob's phone: a session with
// the device id clientid:kid1 on an address no test query comes from, with
// bob's settings (blocked.test answered NODATA).
func clientIDEngine(t testing.TB) *policy.Engine {
	t.Helper()
	fs := &fakeSettings{global: mustDoc(t, globalDoc), users: map[string]*settings.Document{
		"bob": mustDoc(t, subscribers["127.0.0.3"].doc)}}
	p := netip.MustParsePrefix("10.9.9.9/32")
	a := identity.Attributes{Username: "bob", DeviceID: resolver.ClientIDDevicePrefix + "kid1"}
	s := &session.Session{ID: session.NewID(identity.Identity{Org: "acme", Attributes: a}, p), Org: "acme",
		Allocations: []netip.Prefix{p}, Attributes: a}
	v := policy.View{Sessions: sessionindex.Empty().Apply([]*session.Session{s}, nil), Settings: fs, Categories: testCats}
	eng, err := policy.NewEngine(policy.EngineConfig{View: func() policy.View { return v }})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

// TestClientIDIdentifies: a client id whose session exists decides the
// query by that session's policy, before the source address (which has
// none here); an unknown client id falls back to the source address. The
// EDE text of a block and the CHAOS trace say which identity was used,
// and the observer reports the client id's subscriber.
func TestClientIDIdentifies(t *testing.T) {
	rec := &recorder{}
	e := newEncEnv(t, func(c *resolver.Config) {
		c.Engine = clientIDEngine(t)
		c.Observer = rec
		c.Debug = true
	})
	c := e.httpClient(false)
	ask := func(path, name string, class uint16) *dns.Msg {
		t.Helper()
		m := query(name, dns.TypeA, 1232, false)
		if m.Question[0].Qclass = class; class == dns.ClassCHAOS {
			m.Question[0].Qtype = dns.TypeTXT
		}
		req, _ := http.NewRequest(http.MethodPost, e.dohURL(path), bytes.NewReader(mustPack(t, m)))
		req.Header.Set("Content-Type", "application/dns-message")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s %q", path, name, resp.Status, buf.Bytes())
		}
		return mustUnpack(t, buf.Bytes())
	}
	edeText := func(m *dns.Msg) string {
		ede, ok := edeOf(m)
		if !ok {
			t.Fatalf("no EDE in %v", m)
		}
		return ede.ExtraText
	}

	// kid1: bob's policy (blocked.test NODATA), not the address's.
	r := ask("/dns-query/kid1", "blocked.test", dns.ClassINET)
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || !strings.Contains(edeText(r), "identity: client id kid1") {
		t.Fatalf("kid1 blocked.test: %v", r)
	}
	if ev := rec.next(t, 0); ev.Subscriber.Username != "bob" || ev.ClientID != "kid1" {
		t.Fatalf("observer: %+v", ev.Subscriber)
	}
	// Without a client id, or with one no session has, the address's
	// (no session: the global layer) decides: blocked.test is allowed,
	// global.test blocked, the EDE naming the source address.
	for _, path := range []string{"/dns-query", "/dns-query/nobody"} {
		if r := ask(path, "blocked.test", dns.ClassINET); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("%s blocked.test: %v", path, r)
		}
	}
	if r := ask("/dns-query", "global.test", dns.ClassINET); !strings.HasSuffix(edeText(r), "; identity: source address") {
		t.Fatalf("global.test: EDE %q", edeText(r))
	}
	if r := ask("/dns-query/nobody", "global.test", dns.ClassINET); !strings.HasSuffix(edeText(r),
		"; identity: source address (client id nobody matches no session)") {
		t.Fatalf("nobody global.test: EDE %q", edeText(r))
	}
	// The CHAOS trace.
	r = ask("/dns-query/kid1", "blocked.test", dns.ClassCHAOS)
	if len(r.Answer) != 1 {
		t.Fatalf("trace: %v", r)
	}
	trace := strings.Join(r.Answer[0].(*dns.TXT).Txt, "|")
	t.Logf("trace: %s", trace)
	if !strings.Contains(trace, "identity used: client id kid1") || !strings.Contains(trace, "by deviceid") {
		t.Fatalf("trace: %s", trace)
	}
	r = ask("/dns-query/nobody", "blocked.test", dns.ClassCHAOS)
	if trace := strings.Join(r.Answer[0].(*dns.TXT).Txt, "|"); !strings.Contains(trace,
		"identity used: source address (client id nobody matches no session)") {
		t.Fatalf("trace: %s", trace)
	}
}
