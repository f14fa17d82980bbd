package resolver

import (
	"net/netip"
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
// identity, get from the memo exactly the policy the engine compiles for
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
			t.Errorf("%d identities memoised, want %d", len(m.byDocs), len(users))
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
