package resolver_test

import (
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// unreadyEnv is a resolver whose node says what it waits for through
// waiting ("" once loaded), with an observer and its own registry.
type unreadyEnv struct {
	*testEnv
	waiting *atomic.Pointer[string]
	obs     *recorder
	reg     *prometheus.Registry
}

func newUnreadyEnv(t *testing.T, mode resolver.UnreadyMode) *unreadyEnv {
	t.Helper()
	u := &unreadyEnv{waiting: new(atomic.Pointer[string]), obs: &recorder{}, reg: prometheus.NewRegistry()}
	u.set("sessions")
	u.testEnv = newEnv(t, func(c *resolver.Config) {
		c.Waiting = func() string { return *u.waiting.Load() }
		c.Unready, c.Observer, c.Registerer = mode, u.obs, u.reg
	})
	return u
}

func (u *unreadyEnv) set(why string) { u.waiting.Store(&why) }

// counter reads one child of the unready counters.
func (u *unreadyEnv) counter(name, reason string) float64 {
	u.t.Helper()
	mfs, err := u.reg.Gather()
	if err != nil {
		u.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	u.t.Fatalf("no %s{reason=%q}", name, reason)
	return 0
}

// TestUnreadyOpen: while the node waits for its sessions, an allowed
// name is answered from the forwarders (unfiltered), every answer is
// counted by what is missing, the observer sees the reason "unready"
// with the verdict allow, and the packet cache is neither read nor
// written (the same question twice goes the slow path twice). Once the
// node has loaded, the answers are the policy's again (reason default,
// and a blocked name blocked), nothing more is counted, and the resolver
// stays ready even when its node would say otherwise later.
func TestUnreadyOpen(t *testing.T) {
	u := newUnreadyEnv(t, "") // "" is open
	if u.r.UnreadyMode() != resolver.UnreadyOpen || u.r.Waiting() != "sessions" {
		t.Fatalf("mode %q, waiting %q", u.r.UnreadyMode(), u.r.Waiting())
	}
	hits := u.stat("packetcache-hits")
	for i := range 2 {
		m := u.mustAsk("udp", "", query("www.example.test", dns.TypeA, 1232, false))
		if m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0 {
			t.Fatalf("answer %d while unready: %v", i, m)
		}
		ev := u.obs.next(t, i)
		if ev.Decision.Verdict != policy.VerdictAllow || ev.Decision.Reason != resolver.ReasonUnready {
			t.Fatalf("event %d: verdict %q reason %q, want allow/unready", i, ev.Decision.Verdict, ev.Decision.Reason)
		}
	}
	if got := u.stat("packetcache-hits"); got != hits {
		t.Fatalf("packet-cache hits moved while unready: %d → %d", hits, got)
	}
	if got := u.counter("svcpf_resolver_unfiltered_total", "sessions"); got != 2 {
		t.Fatalf("svcpf_resolver_unfiltered_total{reason=sessions} = %v, want 2", got)
	}
	u.set("feeds")
	u.mustAsk("udp", "", query("www.example.test", dns.TypeA, 1232, false))
	if got := u.counter("svcpf_resolver_unfiltered_total", "feeds"); got != 1 {
		t.Fatalf("svcpf_resolver_unfiltered_total{reason=feeds} = %v, want 1", got)
	}
	// The global layer blocks global.test, but RPZ and what has loaded
	// still decide while unready: the policy is consulted, not skipped.
	if m := u.mustAsk("udp", "", query("global.test", dns.TypeA, 1232, false)); m.Rcode != dns.RcodeNameError {
		t.Fatalf("global.test while unready: %v", m)
	}

	// The four answers so far have all reached the observer (it hears of
	// an answer after the client has it) before the next is told apart.
	u.obs.next(t, 3)
	u.set("")
	n := u.obs.count()
	m := u.mustAsk("udp", "", query("www.example.test", dns.TypeA, 1232, false))
	if m.Rcode != dns.RcodeSuccess {
		t.Fatalf("answer once ready: %v", m)
	}
	if ev := u.obs.next(t, n); ev.Decision.Reason != policy.ReasonDefault {
		t.Fatalf("once ready: reason %q, want default", ev.Decision.Reason)
	}
	if u.r.Waiting() != "" {
		t.Fatalf("Waiting once ready: %q", u.r.Waiting())
	}
	// Latched: a node that would say "not loaded" later does not make
	// the resolver unready again.
	u.set("sessions")
	before := u.counter("svcpf_resolver_unfiltered_total", "sessions")
	u.mustAsk("udp", "", query("www.example.test", dns.TypeA, 1232, false))
	u.mustAsk("udp", "", query("www.example.test", dns.TypeA, 1232, false))
	if got := u.counter("svcpf_resolver_unfiltered_total", "sessions"); got != before {
		t.Fatalf("counted after ready: %v → %v", before, got)
	}
	if u.r.Waiting() != "" {
		t.Fatalf("unready again: %q", u.r.Waiting())
	}
	// And the packet cache serves again.
	if got := u.stat("packetcache-hits"); got == hits {
		t.Fatalf("no packet-cache hit once ready")
	}
}

// TestUnreadyClosed: while the node waits, every query is SERVFAIL — over
// UDP and TCP, with EDE 14 "Not Ready" naming what is missing when the
// client sent EDNS, without an OPT when it did not — the forwarders are
// not asked, each is counted by what is missing, and the observer sees
// the reason "unready" with no verdict. Once loaded, answers resume.
func TestUnreadyClosed(t *testing.T) {
	u := newUnreadyEnv(t, resolver.UnreadyClosed)
	u.set("settings")
	for _, netw := range []string{"udp", "tcp"} {
		m := u.mustAsk(netw, "", query("www.example.test", dns.TypeA, 1232, false))
		e, ok := edeOf(m)
		if m.Rcode != dns.RcodeServerFailure || !ok || e.InfoCode != dns.ExtendedErrorCodeNotReady ||
			!strings.Contains(e.ExtraText, "settings") {
			t.Fatalf("%s with EDNS while unready: %v", netw, m)
		}
	}
	m := u.mustAsk("udp", "", query("www.example.test", dns.TypeA, 0, false))
	if m.Rcode != dns.RcodeServerFailure || m.IsEdns0() != nil {
		t.Fatalf("without EDNS while unready: %v", m)
	}
	if asked := u.up.asked("www.example.test."); len(asked) != 0 {
		t.Fatalf("the forwarders were asked while unready: %v", asked)
	}
	if got := u.counter("svcpf_resolver_unready_servfail_total", "settings"); got != 3 {
		t.Fatalf("svcpf_resolver_unready_servfail_total{reason=settings} = %v, want 3", got)
	}
	if got := u.counter("svcpf_resolver_unfiltered_total", "settings"); got != 0 {
		t.Fatalf("closed counted unfiltered answers: %v", got)
	}
	ev := u.obs.next(t, 0)
	if ev.Decision.Verdict != "" || ev.Decision.Reason != resolver.ReasonUnready || ev.Rcode != dns.RcodeServerFailure {
		t.Fatalf("event: verdict %q reason %q rcode %d", ev.Decision.Verdict, ev.Decision.Reason, ev.Rcode)
	}

	u.set("")
	if m := u.mustAsk("udp", "", query("www.example.test", dns.TypeA, 1232, false)); m.Rcode != dns.RcodeSuccess {
		t.Fatalf("once ready: %v", m)
	}
	if got := u.counter("svcpf_resolver_unready_servfail_total", "settings"); got != 3 {
		t.Fatalf("counted once ready: %v", got)
	}
}

// TestUnreadyModeRefused: a mode other than open or closed is refused
// by New, naming the key; without Waiting the resolver is ready at once.
func TestUnreadyModeRefused(t *testing.T) {
	if _, err := resolver.ParseUnreadyMode("half"); err == nil || !strings.Contains(err.Error(), "unready") {
		t.Fatalf("ParseUnreadyMode(half) = %v", err)
	}
	_, err := resolver.New(resolver.Config{Listen: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")},
		Forwarders: []netip.AddrPort{closedPort(t)}, Engine: testEngine(t, nil), Unready: "half"})
	if err == nil || !strings.Contains(err.Error(), `unready: "half" is neither open nor closed`) {
		t.Fatalf("New with unready half: %v", err)
	}
	e := newEnv(t, nil)
	if e.r.Waiting() != "" {
		t.Fatalf("no Waiting, yet waiting for %q", e.r.Waiting())
	}
}
