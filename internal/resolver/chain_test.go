package resolver_test

import (
	"net"
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

// handlerUpstream is a forwarder on 127.0.0.1 (UDP and TCP on one
// kernel-chosen port) whose answers answer builds; it runs until the test
// ends.
func handlerUpstream(t testing.TB, answer func(req *dns.Msg) *dns.Msg) netip.AddrPort {
	t.Helper()
	return serveDNS(t, dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) { _ = w.WriteMsg(answer(req)) }))
}

func rrA(name string, ttl uint32, ip string) dns.RR {
	return &dns.A{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: net.ParseIP(ip).To4()}
}

func rrCNAME(name, target string) dns.RR {
	return &dns.CNAME{Hdr: dns.RR_Header{Name: name, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 300}, Target: target}
}

// cloakingAnswer is a forwarder that cloaks: a name holding "cloaked" is
// a CNAME to download.bad.test (category 3 in testCats), "twice.test"
// reaches it in two hops, and download.bad.test itself has an address.
func cloakingAnswer(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	q := req.Question[0]
	const target = "download.bad.test."
	name := strings.ToLower(q.Name)
	switch {
	case q.Qtype != dns.TypeA:
		m.Ns = []dns.RR{upstreamSOA()}
	case strings.Contains(name, "cloaked"):
		m.Answer = []dns.RR{rrCNAME(q.Name, target), rrA(target, 300, "192.0.2.7")}
	case name == "twice.test.":
		m.Answer = []dns.RR{rrCNAME(q.Name, "hop.test."), rrCNAME("hop.test.", target), rrA(target, 300, "192.0.2.7")}
	default:
		m.Answer = []dns.RR{rrA(q.Name, 300, "192.0.2.7")}
	}
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(1232, opt.Do())
	}
	return m
}

// chainEngine is the policy engine of the cloaking tests: alice
// (127.0.0.2) blocks category 3; ivan (127.0.0.10) blocks it too but
// allowlists cloaked.test; grace (127.0.0.8) filters nothing; judy
// (127.0.0.11) blocks the forwarder's addresses' network, mallory
// (127.0.0.12) another; any other client gets the global layer, which does
// not block the category.
func chainEngine(t testing.TB) *policy.Engine {
	t.Helper()
	fs := &fakeSettings{global: mustDoc(t, globalDoc), users: map[string]*settings.Document{}}
	var sessions []*session.Session
	for ip, s := range map[string]struct{ user, doc string }{
		"127.0.0.2":  {"alice", `{"blocked_categories":[3]}`},
		"127.0.0.10": {"ivan", `{"blocked_categories":[3],"allowlist":["cloaked.test"]}`},
		"127.0.0.8":  {"grace", `{"filtering":false}`},
		"127.0.0.11": {"judy", `{"blocked_networks":["192.0.2.0/24"]}`},
		"127.0.0.12": {"mallory", `{"blocked_networks":["198.51.100.0/24"]}`},
	} {
		p := netip.PrefixFrom(netip.MustParseAddr(ip), 32)
		a := identity.Attributes{Username: s.user}
		sessions = append(sessions, &session.Session{ID: session.NewID(identity.Identity{Org: "acme", Attributes: a}, p),
			Org: "acme", Allocations: []netip.Prefix{p}, Attributes: a})
		fs.users[s.user] = mustDoc(t, s.doc)
	}
	v := policy.View{Sessions: sessionindex.Empty().Apply(sessions, nil), Settings: fs, Categories: testCats}
	eng, err := policy.NewEngine(policy.EngineConfig{View: func() policy.View { return v }})
	if err != nil {
		t.Fatal(err)
	}
	return eng
}

func newCloakingEnv(t *testing.T) (*testEnv, *policy.Engine) {
	eng := chainEngine(t)
	fwd := handlerUpstream(t, cloakingAnswer)
	e := newEnv(t, func(c *resolver.Config) {
		c.Forwarders = []netip.AddrPort{fwd}
		c.Engine = eng
	})
	return e, eng
}

const (
	directEDE  = "category: category:3 feed=threats key=bad.test"
	cloakedEDE = directEDE + " via CNAME download.bad.test"
)

// wantBlocked checks an NXDOMAIN block of name with EDE 17 and text, and
// that nothing of the forwarder's answer got through.
func wantBlocked(t *testing.T, what string, r *dns.Msg, name, text string) {
	t.Helper()
	ede, ok := edeOf(r)
	switch {
	case r.Rcode != dns.RcodeNameError || len(r.Answer) != 0:
		t.Errorf("%s: rcode %s, answer %v; want NXDOMAIN and no answer", what, dns.RcodeToString[r.Rcode], r.Answer)
	case len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA || !strings.EqualFold(r.Ns[0].Header().Name, name):
		t.Errorf("%s: authority %v; want the block's SOA for %s", what, r.Ns, name)
	case !ok || ede.InfoCode != policy.EDEFiltered || ede.ExtraText != text:
		t.Errorf("%s: EDE %v; want %d %q", what, ede, policy.EDEFiltered, text)
	}
}

// wantCloakedAnswer checks that the forwarder's CNAME and address came
// through.
func wantCloakedAnswer(t *testing.T, what string, r *dns.Msg) {
	t.Helper()
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 2 || r.Answer[0].Header().Rrtype != dns.TypeCNAME ||
		!r.Answer[1].(*dns.A).A.Equal(net.IPv4(192, 0, 2, 7)) {
		t.Errorf("%s: %v; want the CNAME and its address", what, r)
	}
	if _, ok := edeOf(r); ok {
		t.Errorf("%s: an EDE on an allowed answer", what)
	}
}

// TestCNAMECloaking: a name whose answer is a CNAME to a blocked name is
// blocked as the blocked name is when asked directly, over UDP and TCP,
// with the EDE naming the chain name that matched; the simulator's
// decision (Engine.Evaluate with the chain) says the same.
func TestCNAMECloaking(t *testing.T) {
	e, eng := newCloakingEnv(t)
	for _, netw := range []string{"udp", "tcp"} {
		r := e.mustAsk(netw, "127.0.0.2", query("download.bad.test", dns.TypeA, 1232, false))
		wantBlocked(t, netw+" direct", r, "download.bad.test.", directEDE)
		r = e.mustAsk(netw, "127.0.0.2", query("cloaked-"+netw+".test", dns.TypeA, 1232, false))
		wantBlocked(t, netw+" cloaked", r, "cloaked-"+netw+".test.", cloakedEDE)
		r = e.mustAsk(netw, "127.0.0.2", query("twice.test", dns.TypeA, 1232, false))
		wantBlocked(t, netw+" two hops", r, "twice.test.", cloakedEDE)
	}
	// Without EDNS: the same NXDOMAIN, no OPT.
	r := e.mustAsk("udp", "127.0.0.2", query("cloaked-noedns.test", dns.TypeA, 0, false))
	if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 || r.IsEdns0() != nil {
		t.Errorf("no EDNS: %v", r)
	}

	res := eng.Evaluate(&policy.Query{Input: policy.Input{Domain: "cloaked-udp.test", Chain: []string{"download.bad.test"}},
		IP: netip.MustParseAddr("127.0.0.2")})
	if res.EDE != policy.EDEFiltered || string(res.Reason)+": "+res.Rule() != cloakedEDE {
		t.Errorf("simulator: EDE %d %q; the resolver said %d %q", res.EDE, string(res.Reason)+": "+res.Rule(),
			policy.EDEFiltered, cloakedEDE)
	}
}

// TestCNAMECloakingCache: the record cache holds the cloaked answer for
// every class and the packet cache holds each class's outcome: whichever
// class asks first, a subscriber who blocks the category gets the block
// (from the record cache, then from the packet cache), and one who does
// not, or allowlists the name asked, or filters nothing, gets the answer.
func TestCNAMECloakingCache(t *testing.T) {
	e, _ := newCloakingEnv(t)
	type step struct {
		from    string
		blocked bool
	}
	for _, order := range []struct {
		name  string
		steps []step
	}{
		{"allowed first", []step{{"127.0.0.20", false}, {"127.0.0.2", true}, {"127.0.0.2", true}, {"127.0.0.20", false},
			{"127.0.0.10", false}, {"127.0.0.8", false}}},
		{"blocked first", []step{{"127.0.0.2", true}, {"127.0.0.20", false}, {"127.0.0.20", false}, {"127.0.0.2", true},
			{"127.0.0.10", false}}},
	} {
		t.Run(order.name, func(t *testing.T) {
			e := e.with(t)
			name := strings.ReplaceAll(order.name, " ", "-") + ".cloaked.test" // under ivan's allowlist
			seen := map[string]bool{}
			for i, st := range order.steps {
				before := e.stats("all-outqueries", "packetcache-hits", "cache-hits")
				r := e.mustAsk("udp", st.from, query(name, dns.TypeA, 1232, false))
				what := st.from
				if st.blocked {
					wantBlocked(t, what, r, name+".", cloakedEDE)
				} else {
					wantCloakedAnswer(t, what, r)
				}
				moved := map[string]uint64{"all-outqueries": 0, "packetcache-hits": 1, "cache-hits": 0}
				switch {
				case i == 0:
					moved = map[string]uint64{"all-outqueries": 1, "packetcache-hits": 0}
				case !seen[st.from]: // another class: the record cache, decided again
					moved = map[string]uint64{"all-outqueries": 0, "packetcache-hits": 0, "cache-hits": 1}
				}
				seen[st.from] = true
				e.wantMoved(what, before, moved)
			}
		})
	}
}

// TestCNAMECloakingNetworks: blocked_networks still judges the answer's
// final addresses, behind an allowed chain as without one; a network that
// holds none of them blocks nothing.
func TestCNAMECloakingNetworks(t *testing.T) {
	e, _ := newCloakingEnv(t)
	const text = "network: network:192.0.2.0/24"
	for _, name := range []string{"plain.test", "net.cloaked.test"} {
		for _, netw := range []string{"udp", "tcp"} {
			r := e.mustAsk(netw, "127.0.0.11", query(name, dns.TypeA, 1232, false))
			wantBlocked(t, name+" over "+netw, r, name+".", text)
			r = e.mustAsk(netw, "127.0.0.12", query(name, dns.TypeA, 1232, false))
			if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
				t.Errorf("%s over %s, another network blocked: %v", name, netw, r)
			}
		}
	}
}
