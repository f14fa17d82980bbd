package resolver

import (
	"net/netip"
	"strconv"
	"testing"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// memoSettings is a settings snapshot: the global layer and a document
// per username.
type memoSettings struct {
	global *settings.Document
	users  map[string]*settings.Document
}

func (f *memoSettings) Stack(org string, a identity.Attributes) settings.Stack {
	st := settings.Stack{Global: settings.Layer{Name: settings.LayerGlobal, Doc: f.global}}
	if d := f.users[a.Username]; d != nil {
		st.Username = settings.Layer{Name: settings.Scope{Kind: settings.ScopeUsername, Value: a.Username}.Layer(org), Doc: d}
	}
	return st
}

func memoDoc(t *testing.T, s string) *settings.Document {
	t.Helper()
	d, err := settings.Parse([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestPolicyMemo: more clients than the address memo holds, several per
// settings document, and as many without a document of their own, each
// with a username nobody else has (as the bench's million subscribers),
// get from the memo exactly the policy the engine compiles for
// them (the same cache key); a client without a session gets the global
// policy; a new settings snapshot is seen at once, by clients the memo
// held and by clients new to it.
func TestPolicyMemo(t *testing.T) {
	users := []string{"alice", "bob", "carol", ""}
	var sessions []*session.Session
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}) }
	const clients = 2 * memoSize // every address memo slot is taken twice over
	for i := range clients {
		p := netip.PrefixFrom(addr(i), 32)
		a := identity.Attributes{Username: users[i%len(users)]}
		if a.Username == "" {
			a.Username = "u" + strconv.Itoa(i) // no document: shares the stack of no username
		}
		sessions = append(sessions, &session.Session{ID: session.NewID(identity.Identity{Org: "acme", Attributes: a}, p),
			Org: "acme", Allocations: []netip.Prefix{p}, Attributes: a})
	}
	ix := sessionindex.Empty().Apply(sessions, nil)
	s1 := &memoSettings{global: memoDoc(t, `{}`), users: map[string]*settings.Document{
		"alice": memoDoc(t, `{"blocked_categories":[3]}`),
		"bob":   memoDoc(t, `{"blocklist":["b.test"]}`),
		"carol": memoDoc(t, `{"filtering":false}`),
	}}
	s2 := &memoSettings{global: s1.global, users: map[string]*settings.Document{
		"alice": memoDoc(t, `{"blocked_categories":[4]}`),
		"bob":   s1.users["bob"],
		"carol": s1.users["carol"],
	}}
	view := policy.View{Sessions: ix, Settings: s1}
	e, err := policy.NewEngine(policy.EngineConfig{View: func() policy.View { return view }})
	if err != nil {
		t.Fatal(err)
	}
	m := newPolicyMemo()
	check := func(when string, v policy.View, a netip.Addr) {
		t.Helper()
		got := m.policy(e, &v, a)
		want, _, _ := e.PolicyFor(&v, a)
		if got.CacheKey() != want.CacheKey() {
			t.Fatalf("%s, %s: memo's policy %q, engine's %q", when, a, got.CacheKey(), want.CacheKey())
		}
	}
	keys := map[string]bool{}
	for round := range 2 { // the second round finds the addresses evicted, the identities memoised
		for i := range clients {
			check("settings 1", view, addr(i))
			keys[m.policy(e, &view, addr(i)).CacheKey()] = true
		}
		if round == 0 && len(m.byDocs) != len(users) {
			t.Errorf("%d settings stacks memoised, want %d (one per username document, one for none)", len(m.byDocs), len(users))
		}
	}
	check("no session", view, netip.MustParseAddr("192.0.2.1"))
	if len(keys) != len(users) {
		t.Errorf("%d distinct policies, want %d (one per username)", len(keys), len(users))
	}
	alice := addr(0)
	before := m.policy(e, &view, alice).CacheKey()
	view = policy.View{Sessions: ix, Settings: s2}
	check("settings 2", view, alice)
	check("settings 2, another of alice's addresses", view, addr(len(users)))
	if after := m.policy(e, &view, alice).CacheKey(); after == before {
		t.Errorf("alice's policy after her settings changed: the same %q", after)
	}
}

// TestPolicyMemoBatch: policies prepared a batch at a time (lookAhead,
// then policyFor per datagram, as the UDP reader does) are the engine's:
// for clients new to the memo and clients it holds, a client twice in one
// batch, an IPv4-mapped source, a source without a session, and after the
// sessions change between two batches; an invalid source in the batch
// changes nothing for the others.
func TestPolicyMemoBatch(t *testing.T) {
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 2, byte(i >> 8), byte(i)}) }
	index := func(n int, user func(int) string) *sessionindex.Index {
		var sessions []*session.Session
		for i := range n {
			p := netip.PrefixFrom(addr(i), 32)
			a := identity.Attributes{Username: user(i)}
			sessions = append(sessions, &session.Session{ID: session.NewID(identity.Identity{Org: "acme", Attributes: a}, p),
				Org: "acme", Allocations: []netip.Prefix{p}, Attributes: a})
		}
		return sessionindex.Empty().Apply(sessions, nil)
	}
	st := &memoSettings{global: memoDoc(t, `{}`), users: map[string]*settings.Document{
		"alice": memoDoc(t, `{"blocked_categories":[3]}`),
		"bob":   memoDoc(t, `{"blocklist":["b.test"]}`),
	}}
	ix1 := index(300, func(i int) string { return []string{"alice", "bob", "u" + strconv.Itoa(i)}[i%3] })
	ix2 := index(300, func(i int) string { return []string{"bob", "u" + strconv.Itoa(i), "alice"}[i%3] })
	view := policy.View{Sessions: ix1, Settings: st}
	e, err := policy.NewEngine(policy.EngineConfig{View: func() policy.View { return view }})
	if err != nil {
		t.Fatal(err)
	}
	m := newPolicyMemo()
	run := func(when string, v policy.View, batch []netip.AddrPort) {
		t.Helper()
		m.lookAhead(&v, batch)
		for i, ap := range batch {
			if !ap.IsValid() {
				continue // the reader skips it
			}
			c := ap.Addr().Unmap()
			got, sess := m.policyFor(e, &v, c, i)
			want, ws, wok := e.PolicyFor(&v, c)
			if !sess.known || sess.ok != wok || sess.s != ws {
				t.Fatalf("%s, datagram %d from %s: memo's session %+v (known %v, ok %v), the index's %+v (ok %v)",
					when, i, ap, sess.subscriber(), sess.known, sess.ok, subscriberFrom(ws), wok)
			}
			if got.CacheKey() != want.CacheKey() {
				t.Fatalf("%s, datagram %d from %s: memo's policy %q, engine's %q", when, i, ap, got.CacheKey(), want.CacheKey())
			}
		}
	}
	batch := func(clients ...netip.Addr) []netip.AddrPort {
		var b []netip.AddrPort
		for _, c := range clients {
			b = append(b, netip.AddrPortFrom(c, 5353))
		}
		return b
	}
	mapped := netip.AddrFrom16(addr(4).As16())
	b1 := batch(addr(0), addr(1), addr(0), mapped, netip.MustParseAddr("192.0.2.1"), addr(2))
	b1 = append(b1, netip.AddrPort{})
	for round := range 2 { // the second finds the first's clients in the memo
		run("sessions 1, round "+strconv.Itoa(round), view, b1)
	}
	var big []netip.Addr
	for i := range 300 {
		big = append(big, addr(i))
	}
	run("sessions 1, a batch of 300", view, batch(big...))
	view = policy.View{Sessions: ix2, Settings: st}
	run("sessions 2", view, b1)
	run("sessions 2, a batch of 300", view, batch(big...))
}

// policy is the memo's answer for one client asking alone: a batch of one,
// as the reader makes it when one datagram is waiting.
func (m *policyMemo) policy(e *policy.Engine, v *policy.View, client netip.Addr) *policy.Policy {
	m.lookAhead(v, []netip.AddrPort{netip.AddrPortFrom(client, 53)})
	p, _ := m.policyFor(e, v, client, 0)
	return p
}

// countingSessions counts the subscriber index lookups.
type countingSessions struct {
	policy.Sessions
	lookups int
}

func (c *countingSessions) LookupIP(a netip.Addr) (sessionindex.Entry, bool) {
	c.lookups++
	return c.Sessions.LookupIP(a)
}

// TestPolicyMemoOneLookup: a client new to the memo costs one subscriber
// index lookup, whether its settings stack is new to the memo too (the
// engine is asked for the policy of the session found, not of the
// address again) or not; a client the memo holds costs none.
func TestPolicyMemoOneLookup(t *testing.T) {
	var sessions []*session.Session
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 3, 0, byte(i)}) }
	users := []string{"alice", "bob", "alice", "u3", "u4"}
	for i, u := range users {
		p := netip.PrefixFrom(addr(i), 32)
		a := identity.Attributes{Username: u}
		sessions = append(sessions, &session.Session{ID: session.NewID(identity.Identity{Org: "acme", Attributes: a}, p),
			Org: "acme", Allocations: []netip.Prefix{p}, Attributes: a})
	}
	cs := &countingSessions{Sessions: sessionindex.Empty().Apply(sessions, nil)}
	view := policy.View{Sessions: cs, Settings: &memoSettings{global: memoDoc(t, `{}`), users: map[string]*settings.Document{
		"alice": memoDoc(t, `{"blocked_categories":[3]}`),
		"bob":   memoDoc(t, `{"blocklist":["b.test"]}`),
	}}}
	e, err := policy.NewEngine(policy.EngineConfig{View: func() policy.View { return view }})
	if err != nil {
		t.Fatal(err)
	}
	m := newPolicyMemo()
	for round, want := range []int{1, 0} { // new to the memo, then held
		for i, u := range users {
			before := cs.lookups
			got := m.policy(e, &view, addr(i))
			if n := cs.lookups - before; n != want {
				t.Errorf("round %d, %s (%s): %d subscriber index lookups, want %d", round, addr(i), u, n, want)
			}
			if engine, _, _ := e.PolicyFor(&view, addr(i)); got.CacheKey() != engine.CacheKey() {
				t.Errorf("%s: memo's policy %q, engine's %q", addr(i), got.CacheKey(), engine.CacheKey())
			}
		}
	}
}

// BenchmarkPolicyMemoNewClients: 65 536 subscribers, each with a username
// of its own, asking in turn, a batch of 32 at a time: every client is new
// to the address memo (16 times its size), every stack known to the
// stack memo (bench/resolver.sh's hit-subs phase, the reader's part of it).
func BenchmarkPolicyMemoNewClients(b *testing.B) {
	const clients = 1 << 16
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 4, byte(i >> 8), byte(i)}) }
	var sessions []*session.Session
	for i := range clients {
		p := netip.PrefixFrom(addr(i), 32)
		a := identity.Attributes{Username: "u" + strconv.Itoa(i)}
		sessions = append(sessions, &session.Session{ID: session.NewID(identity.Identity{Org: "acme", Attributes: a}, p),
			Org: "acme", Allocations: []netip.Prefix{p}, Attributes: a})
	}
	d, err := settings.Parse([]byte(`{}`))
	if err != nil {
		b.Fatal(err)
	}
	view := policy.View{Sessions: sessionindex.Empty().Apply(sessions, nil),
		Settings: &memoSettings{global: d, users: map[string]*settings.Document{}}}
	e, err := policy.NewEngine(policy.EngineConfig{View: func() policy.View { return view }})
	if err != nil {
		b.Fatal(err)
	}
	m := newPolicyMemo()
	batch := make([]netip.AddrPort, 32)
	next := 0
	b.ReportAllocs()
	b.ResetTimer()
	for done := 0; done < b.N; done += len(batch) {
		for j := range batch {
			batch[j] = netip.AddrPortFrom(addr(next%clients), 53)
			next += 7919 // not in address order
		}
		m.lookAhead(&view, batch)
		for j, ap := range batch {
			if p, _ := m.policyFor(e, &view, ap.Addr(), j); p == nil {
				b.Fatal("no policy")
			}
		}
	}
}
