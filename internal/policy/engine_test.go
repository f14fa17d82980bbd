package policy

import (
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/sessionindex"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// fakeSettings is a settings read model: documents by org and scope, one
// version for everything.
type fakeSettings struct {
	global  *settings.Document
	docs    map[string]map[settings.Scope]*settings.Document
	version uint64

	profileMaps    map[string]map[int]settings.Layer
	profileVersion uint64
	layers         map[string]map[settings.Scope]settings.Layer
	layerVersion   uint64
}

func (f *fakeSettings) Version(string) uint64 { return f.version }

// layer is org's layer of scope sc, its name built once per version (as
// the real read model holds them) so that Stack does not allocate.
func (f *fakeSettings) layer(org string, sc settings.Scope) settings.Layer {
	if f.layerVersion != f.version || f.layers == nil {
		f.layers, f.layerVersion = map[string]map[settings.Scope]settings.Layer{}, f.version
	}
	byScope := f.layers[org]
	if byScope == nil {
		byScope = map[settings.Scope]settings.Layer{}
		f.layers[org] = byScope
	}
	l, ok := byScope[sc]
	if !ok {
		if d := f.docs[org][sc]; d != nil {
			l = settings.Layer{Name: sc.Layer(org), Doc: d}
		}
		byScope[sc] = l
	}
	return l
}

// profiles are org's profile layers, built once per version (as the real
// read model holds them) so that Stack does not allocate.
func (f *fakeSettings) profiles(org string, layer func(settings.Scope) settings.Layer) map[int]settings.Layer {
	if f.profileVersion != f.version || f.profileMaps == nil {
		f.profileMaps, f.profileVersion = map[string]map[int]settings.Layer{}, f.version
	}
	if m, ok := f.profileMaps[org]; ok {
		return m
	}
	m := map[int]settings.Layer{}
	for sc := range f.docs[org] {
		if sc.Kind == settings.ScopeProfile {
			m[sc.Profile] = layer(sc)
		}
	}
	f.profileMaps[org] = m
	return m
}

func (f *fakeSettings) Stack(org string, a identity.Attributes) settings.Stack {
	var st settings.Stack
	if f.global != nil {
		st.Global = settings.Layer{Name: settings.LayerGlobal, Doc: f.global}
	}
	layer := func(sc settings.Scope) settings.Layer { return f.layer(org, sc) }
	st.Org = layer(settings.Scope{Kind: settings.ScopeOrg})
	st.Profiles = f.profiles(org, layer)
	if a.Location != "" {
		st.Location = layer(settings.Scope{Kind: settings.ScopeLocation, Value: a.Location})
	}
	if a.Username != "" {
		st.Username = layer(settings.Scope{Kind: settings.ScopeUsername, Value: a.Username})
	}
	if a.DeviceID != "" {
		st.DeviceID = layer(settings.Scope{Kind: settings.ScopeDeviceID, Value: a.DeviceID})
	}
	return st
}

func mustDoc(t testing.TB, s string) *settings.Document {
	t.Helper()
	d, err := settings.Parse([]byte(s))
	if err != nil {
		t.Fatalf("Parse(%s): %v", s, err)
	}
	return d
}

func sess(org, cidr string, a identity.Attributes) *session.Session {
	p := netip.MustParsePrefix(cidr)
	id := identity.Identity{Org: org, Attributes: a}
	return &session.Session{ID: session.NewID(id, p), Org: org, Allocations: []netip.Prefix{p}, Attributes: a}
}

type engineFixture struct {
	eng      *Engine
	settings *fakeSettings
	alice    *session.Session
}

func newEngineFixture(t testing.TB) *engineFixture {
	t.Helper()
	alice := sess("acme", "10.0.0.2/32", identity.Attributes{Username: "alice", Location: "hq"})
	ix := sessionindex.Empty().Apply([]*session.Session{
		sess("acme", "10.0.0.0/8", identity.Attributes{}),
		alice,
		sess("beta", "192.168.0.0/16", identity.Attributes{Username: "alice"}),
		sess("acme", "10.0.1.0/24", identity.Attributes{DeviceID: "mac:0a1b"}),
	}, nil)
	fs := &fakeSettings{
		global: mustDoc(t, `{"blocklist":["global-block.example"]}`),
		docs: map[string]map[settings.Scope]*settings.Document{
			"acme": {
				{Kind: settings.ScopeOrg}:                         mustDoc(t, `{"blocked_categories":[7]}`),
				{Kind: settings.ScopeUsername, Value: "alice"}:    mustDoc(t, `{"blocked_categories":[3],"profile":2}`),
				{Kind: settings.ScopeProfile, Profile: 2}:         mustDoc(t, `{"safe_search":true}`),
				{Kind: settings.ScopeProfile, Profile: 5}:         mustDoc(t, `{"paused":true}`),
				{Kind: settings.ScopeDeviceID, Value: "mac:0a1b"}: mustDoc(t, `{"filtering":false}`),
				{Kind: settings.ScopeLocation, Value: "hq"}:       mustDoc(t, `{"allowlist":["ok.example"]}`),
			},
		},
		version: 1,
	}
	eng, err := NewEngine(EngineConfig{View: func() View {
		return View{Sessions: ix, Settings: fs, Categories: testCats}
	}})
	if err != nil {
		t.Fatal(err)
	}
	return &engineFixture{eng: eng, settings: fs, alice: alice}
}

func TestEngineEvaluate(t *testing.T) {
	f := newEngineFixture(t)
	tests := []struct {
		name       string
		q          Query
		by, org    string
		verdict    Verdict
		reason     Reason
		layers     []string
		others     int
		profile    int
		hasProfile bool
	}{
		{name: "ip of alice: her category", q: Query{Input: Input{Domain: "bad.example"}, IP: netip.MustParseAddr("10.0.0.2")},
			by: ByIP, org: "acme", verdict: VerdictBlock, reason: ReasonCategory,
			layers: []string{"global", "org:acme", "profile:2", "location:hq", "username:alice"}, profile: 2, hasProfile: true},
		{name: "ip of the org: its category only", q: Query{Input: Input{Domain: "bad.example"}, IP: netip.MustParseAddr("10.9.9.9")},
			by: ByIP, org: "acme", verdict: VerdictAllow, reason: ReasonDefault, layers: []string{"global", "org:acme"}},
		{name: "username in two orgs: first by org", q: Query{Input: Input{Domain: "bad.example"}, Username: "alice"},
			by: ByUsername, org: "acme", verdict: VerdictBlock, reason: ReasonCategory, others: 1,
			layers: []string{"global", "org:acme", "profile:2", "location:hq", "username:alice"}, profile: 2, hasProfile: true},
		{name: "deviceid beats username and ip", q: Query{Input: Input{Domain: "bad.example"}, DeviceID: "mac:0a1b", Username: "alice", IP: netip.MustParseAddr("192.168.1.1")},
			by: ByDeviceID, org: "acme", verdict: VerdictAllow, reason: ReasonFilteringOff,
			layers: []string{"global", "org:acme", "deviceid:mac:0a1b"}},
		{name: "unknown deviceid falls to ip", q: Query{Input: Input{Domain: "bad.example"}, DeviceID: "mac:ffff", IP: netip.MustParseAddr("192.168.1.1")},
			by: ByIP, org: "beta", verdict: VerdictAllow, reason: ReasonDefault, layers: []string{"global"}},
		{name: "no identity: global alone", q: Query{Input: Input{Domain: "global-block.example"}},
			by: ByNone, verdict: VerdictBlock, reason: ReasonBlocklist, layers: []string{"global"}},
		{name: "unknown ip: global alone", q: Query{Input: Input{Domain: "bad.example"}, IP: netip.MustParseAddr("203.0.113.1")},
			by: ByNone, verdict: VerdictAllow, reason: ReasonDefault, layers: []string{"global"}},
		{name: "explicit profile replaces the derived one", q: Query{Input: Input{Domain: "x.example"}, IP: netip.MustParseAddr("10.0.0.2"), Profile: 5, HasProfile: true},
			by: ByIP, org: "acme", verdict: VerdictBlock, reason: ReasonPaused,
			layers: []string{"global", "org:acme", "profile:5", "location:hq", "username:alice"}, profile: 5, hasProfile: true},
		{name: "request settings are the most specific layer", q: Query{Input: Input{Domain: "bad.example"}, IP: netip.MustParseAddr("10.0.0.2"), Settings: mustDoc(t, `{"blocked_categories":[]}`)},
			by: ByIP, org: "acme", verdict: VerdictAllow, reason: ReasonDefault,
			layers: []string{"global", "org:acme", "profile:2", "location:hq", "username:alice", "request"}, profile: 2, hasProfile: true},
		{name: "location allowlist", q: Query{Input: Input{Domain: "www.ok.example"}, IP: netip.MustParseAddr("10.0.0.2")},
			by: ByIP, org: "acme", verdict: VerdictAllow, reason: ReasonAllowlist,
			layers: []string{"global", "org:acme", "profile:2", "location:hq", "username:alice"}, profile: 2, hasProfile: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.eng.Evaluate(&tt.q)
			if r.Subject.By != tt.by || r.Subject.Org != tt.org {
				t.Errorf("subject by %q org %q, want %q %q", r.Subject.By, r.Subject.Org, tt.by, tt.org)
			}
			if r.Verdict != tt.verdict || r.Reason != tt.reason {
				t.Errorf("verdict %s reason %s, want %s %s (trace %v)", r.Verdict, r.Reason, tt.verdict, tt.reason, r.Trace)
			}
			if !slices.Equal(r.Layers, tt.layers) {
				t.Errorf("layers %v, want %v", r.Layers, tt.layers)
			}
			if len(r.Subject.Others) != tt.others {
				t.Errorf("others %v, want %d", r.Subject.Others, tt.others)
			}
			if r.Subject.Profile != tt.profile || r.Subject.HasProfile != tt.hasProfile {
				t.Errorf("profile %d,%v want %d,%v", r.Subject.Profile, r.Subject.HasProfile, tt.profile, tt.hasProfile)
			}
			if len(r.Steps) != 2 || r.Steps[0].Step != StepIdentity || r.Steps[1].Step != StepSettings {
				t.Errorf("steps %v", r.Steps)
			}
			if tt.others > 0 && !strings.Contains(r.Steps[0].Result, r.Subject.Others[0]) {
				t.Errorf("identity step does not name the other session: %q", r.Steps[0].Result)
			}
			if r.Effective == nil || r.Fingerprint != r.Effective.Fingerprint {
				t.Errorf("effective %v fingerprint %q", r.Effective, r.Fingerprint)
			}
		})
	}
}

// TestEngineSimulatorIsResolver: for every client, Evaluate (the
// simulator) and PolicyFor + DecideInto (the resolver) decide alike, and
// share the cached policy.
func TestEngineSimulatorIsResolver(t *testing.T) {
	f := newEngineFixture(t)
	clients := []string{"10.0.0.2", "10.9.9.9", "10.0.1.7", "192.168.3.3", "203.0.113.9", "::1"}
	domains := []string{"bad.example", "games.example", "www.google.com", "global-block.example", "ok.example", "clean.example"}
	d := &Decision{Trace: make([]TraceEntry, 0, TraceCap)}
	for _, c := range clients {
		addr := netip.MustParseAddr(c)
		for _, dom := range domains {
			r := f.eng.Evaluate(&Query{Input: Input{Domain: dom, Time: noon}, IP: addr})
			v := f.eng.View()
			p, _, _ := f.eng.PolicyFor(&v, addr)
			in := Input{Domain: dom, Time: noon, RPZ: v.RPZ}
			DecideInto(d, &in, p, v.Categories)
			if d.Verdict != r.Verdict || d.Action != r.Action || d.Reason != r.Reason || d.Rule() != r.Rule() {
				t.Errorf("%s %s: resolver %s/%s/%s/%q, simulator %s/%s/%s/%q", c, dom,
					d.Verdict, d.Action, d.Reason, d.Rule(), r.Verdict, r.Action, r.Reason, r.Rule())
			}
			if p.Fingerprint() != r.Fingerprint {
				t.Errorf("%s: fingerprints differ", c)
			}
		}
	}
}

// TestEngineVersionRecompiles: a new settings version is a new policy; the
// old version's is not used again.
func TestEngineVersionRecompiles(t *testing.T) {
	f := newEngineFixture(t)
	addr := netip.MustParseAddr("10.0.0.2")
	v := f.eng.View()
	p1, _, ok := f.eng.PolicyFor(&v, addr)
	if !ok {
		t.Fatal("alice has no session")
	}
	if p2, _, _ := f.eng.PolicyFor(&v, addr); p2 != p1 {
		t.Fatal("the same version compiled twice")
	}
	f.settings.docs["acme"][settings.Scope{Kind: settings.ScopeUsername, Value: "alice"}] = mustDoc(t, `{"paused":true}`)
	f.settings.version++
	p3, _, _ := f.eng.PolicyFor(&v, addr)
	if p3 == p1 {
		t.Fatal("a new settings version reused the old policy")
	}
	var d Decision
	DecideInto(&d, &Input{Domain: "clean.example"}, p3, nil)
	if d.Reason != ReasonPaused {
		t.Fatalf("reason %s after the change, want paused", d.Reason)
	}
}

func TestEngineWithoutReadModels(t *testing.T) {
	eng, err := NewEngine(EngineConfig{View: func() View { return View{} }})
	if err != nil {
		t.Fatal(err)
	}
	r := eng.Evaluate(&Query{Input: Input{Domain: "bad.example"}, IP: netip.MustParseAddr("10.0.0.1"),
		Settings: mustDoc(t, `{"blocklist":["bad.example"]}`)})
	if r.Subject.By != ByNone || r.Reason != ReasonBlocklist || !slices.Equal(r.Layers, []string{LayerRequest}) {
		t.Fatalf("got by %s reason %s layers %v", r.Subject.By, r.Reason, r.Layers)
	}
	if _, err := NewEngine(EngineConfig{}); err == nil {
		t.Fatal("an engine without a view was accepted")
	}
}

// BenchmarkEnginePolicyFor is the resolver's per-query path: client
// address → session → cached policy → decision (feed hit, blocked).
func BenchmarkEnginePolicyFor(b *testing.B) {
	f := newEngineFixture(b)
	addr := netip.MustParseAddr("10.0.0.2")
	d := &Decision{Trace: make([]TraceEntry, 0, TraceCap), Categories: make([]feed.Category, 0, 8)}
	in := Input{Domain: "a.b.www.bad.example", Time: noon}
	b.ReportAllocs()
	for b.Loop() {
		v := f.eng.View()
		p, _, _ := f.eng.PolicyFor(&v, addr)
		in.RPZ = v.RPZ
		DecideInto(d, &in, p, v.Categories)
	}
	if d.Reason != ReasonCategory {
		b.Fatal(d.Reason)
	}
}

func TestDecisionEDE(t *testing.T) {
	f := newEngineFixture(t)
	tests := []struct {
		q    Query
		code uint16
		ok   bool
	}{
		// alice's own blocked_categories: filtered
		{Query{Input: Input{Domain: "bad.example"}, IP: netip.MustParseAddr("10.0.0.2")}, EDEFiltered, true},
		// the global blocklist: operator policy
		{Query{Input: Input{Domain: "global-block.example"}, IP: netip.MustParseAddr("10.0.0.2")}, EDEBlocked, true},
		// allowed
		{Query{Input: Input{Domain: "clean.example"}, IP: netip.MustParseAddr("10.0.0.2")}, 0, false},
	}
	for _, tt := range tests {
		r := f.eng.Evaluate(&tt.q)
		v := f.eng.View()
		p, _, _ := f.eng.PolicyFor(&v, tt.q.IP)
		if code, ok := r.Decision.EDE(p); code != tt.code || ok != tt.ok || r.EDE != tt.code {
			t.Errorf("%s: EDE %d,%v want %d,%v", tt.q.Domain, code, ok, tt.code, tt.ok)
		}
	}
}

// countLookups is a Metrics counting hits and misses.
type countLookups struct{ hits, misses atomic.Int64 }

func (c *countLookups) PolicyLookup(hit bool) {
	if hit {
		c.hits.Add(1)
	} else {
		c.misses.Add(1)
	}
}

// TestEngineMetricsCountPolicyLookups: the first lookup of a client's
// documents is a miss (compiled), the next ones, from the resolver's
// PolicyFor or the simulator's Evaluate, hits; a client with other
// documents misses once; a simulation with its own settings compiles
// outside the cache and counts nothing.
func TestEngineMetricsCountPolicyLookups(t *testing.T) {
	f := newEngineFixture(t)
	m := &countLookups{}
	eng, err := NewEngine(EngineConfig{View: f.eng.view, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	alice, other := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("203.0.113.9")
	v := eng.View()
	eng.PolicyFor(&v, alice)
	eng.PolicyFor(&v, alice)
	eng.Evaluate(&Query{Input: Input{Domain: "x.example", Time: noon}, IP: alice})
	eng.PolicyFor(&v, other)
	eng.Evaluate(&Query{Input: Input{Domain: "x.example", Time: noon}, IP: alice, Settings: mustDoc(t, `{"paused":true}`)})
	if h, mi := m.hits.Load(), m.misses.Load(); h != 2 || mi != 2 {
		t.Fatalf("hits %d misses %d, want 2 and 2", h, mi)
	}
}
