package sessionindex

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/session"
)

func sess(id, org, user, dev string, prefixes ...string) *session.Session {
	s := &session.Session{ID: id, Org: org, Attributes: identity.Attributes{Username: user, DeviceID: dev}}
	for _, p := range prefixes {
		s.Allocations = append(s.Allocations, netip.MustParsePrefix(p))
	}
	return s
}

func ids(es []Entry) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.ID())
	}
	slices.Sort(out)
	return out
}

func lookupID(ix *Index, addr string) string {
	e, ok := ix.LookupIP(netip.MustParseAddr(addr))
	if !ok {
		return ""
	}
	return e.ID()
}

func orgOf(s *session.Session) string    { return s.Org }
func userOf(s *session.Session) string   { return s.Username }
func deviceOf(s *session.Session) string { return s.DeviceID }

func TestLookupIP(t *testing.T) {
	ix := Empty().Apply([]*session.Session{
		sess("wide", "o", "", "", "10.0.0.0/8"),
		sess("mid", "o", "", "", "10.1.0.0/16", "2001:db8::/32"),
		sess("host", "o", "", "", "10.1.2.3/32"),
		sess("v6", "o", "", "", "2001:db8:1::/48"),
		sess("mapped", "o", "", "", "::ffff:192.0.2.0/120"),
		sess("hostbits", "o", "", "", "198.51.100.77/24"),
		sessWithInvalid(), // holds no valid prefix
	}, nil)
	cases := []struct{ addr, want string }{
		{"10.9.9.9", "wide"},
		{"10.1.9.9", "mid"},
		{"10.1.2.3", "host"},
		{"10.1.2.4", "mid"},
		{"11.0.0.1", ""},
		{"2001:db8:2::1", "mid"},
		{"2001:db8:1::1", "v6"},
		{"2001:db9::1", ""},
		{"::ffff:10.1.2.3", "host"}, // v4-mapped query matches the IPv4 allocation
		{"192.0.2.9", "mapped"},     // v4-mapped allocation matches IPv4 queries
		{"198.51.100.1", "hostbits"},
		{"fe80::1%eth0", ""},
	}
	for _, c := range cases {
		if got := lookupID(ix, c.addr); got != c.want {
			t.Errorf("LookupIP(%s) = %q, want %q", c.addr, got, c.want)
		}
	}
	if _, ok := ix.LookupIP(netip.Addr{}); ok {
		t.Error("LookupIP(invalid) found a session")
	}
	if ix.Len() != 7 {
		t.Errorf("Len = %d, want 7", ix.Len())
	}
}

func sessWithInvalid() *session.Session {
	return &session.Session{ID: "invalid", Org: "o", Allocations: []netip.Prefix{{}}}
}

func TestInvalidAllocationIsSkipped(t *testing.T) {
	s := sessWithInvalid()
	s.Allocations = append(s.Allocations, netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("10.0.0.0/8"))
	ix := Empty().Apply([]*session.Session{s, nil}, nil)
	if got := lookupID(ix, "10.2.3.4"); got != "invalid" {
		t.Fatalf("LookupIP = %q", got)
	}
	ix = ix.Apply(nil, []string{"invalid"})
	if got := lookupID(ix, "10.2.3.4"); got != "" || ix.Len() != 0 {
		t.Fatalf("after delete: LookupIP = %q, Len = %d", got, ix.Len())
	}
}

// TestSamePrefix covers two sessions holding the exact same prefix, which
// happens while the producer replaces a session: the newest answers, and
// removing either side leaves the right one.
func TestSamePrefix(t *testing.T) {
	const p = "10.0.0.0/24"
	a := sess("a", "o", "", "", p)
	b := sess("b", "o", "", "", p)
	c := sess("c", "o", "", "", p, "10.0.1.0/24")
	type step struct {
		up   []*session.Session
		del  []string
		want string // LookupIP(10.0.0.1)
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"new wins, delete old keeps new", []step{
			{up: []*session.Session{a}, want: "a"},
			{up: []*session.Session{b}, want: "b"},
			{del: []string{"a"}, want: "b"},
			{del: []string{"b"}, want: ""},
		}},
		{"delete winner uncovers previous", []step{
			{up: []*session.Session{a, b}, want: "b"},
			{del: []string{"b"}, want: "a"},
			{del: []string{"a"}, want: ""},
		}},
		{"three holders, delete middle then top", []step{
			{up: []*session.Session{a}, want: "a"},
			{up: []*session.Session{b}, want: "b"},
			{up: []*session.Session{c}, want: "c"},
			{del: []string{"b"}, want: "c"},
			{del: []string{"c"}, want: "a"},
		}},
		{"re-upsert moves to top", []step{
			{up: []*session.Session{a, b}, want: "b"},
			{up: []*session.Session{sess("a", "o", "", "", p)}, want: "a"},
			{del: []string{"a"}, want: "b"},
		}},
		{"upsert that drops the prefix uncovers previous", []step{
			{up: []*session.Session{a, b}, want: "b"},
			{up: []*session.Session{sess("b", "o", "", "", "10.9.0.0/16")}, want: "a"},
		}},
		{"upsert and delete in one call", []step{
			{up: []*session.Session{a}, want: "a"},
			{up: []*session.Session{b}, del: []string{"b"}, want: "a"},
			{up: []*session.Session{b}, del: []string{"a"}, want: "b"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix := Empty()
			var b *Builder = NewBuilder(0)
			for i, st := range c.steps {
				prev, prevWant := ix, ""
				if i > 0 {
					prevWant = c.steps[i-1].want
				}
				ix = ix.Apply(st.up, st.del)
				if got := lookupID(ix, "10.0.0.1"); got != st.want {
					t.Fatalf("step %d: LookupIP = %q, want %q", i, got, st.want)
				}
				if got := lookupID(prev, "10.0.0.1"); got != prevWant {
					t.Fatalf("step %d changed the previous snapshot: %q, want %q", i, got, prevWant)
				}
				// The builder follows the same rules.
				for _, s := range st.up {
					b.Put(s)
				}
				for _, id := range st.del {
					b.Delete(id)
				}
				if got := lookupID(b.Index(), "10.0.0.1"); got != st.want {
					t.Fatalf("step %d: builder LookupIP = %q, want %q", i, got, st.want)
				}
			}
		})
	}
}

func TestSecondaryIndexes(t *testing.T) {
	ix := Empty().Apply([]*session.Session{
		sess("1", "org-a", "alice", "phone", "10.0.0.1/32"),
		sess("2", "org-a", "alice", "laptop", "10.0.0.2/32"),
		sess("3", "org-a", "bob", "", "10.0.0.3/32"),
		sess("4", "org-b", "", "phone", "2001:db8::/64"),
	}, nil)
	cases := []struct {
		name string
		got  []Entry
		want []string
	}{
		{"org-a", ix.ByOrg("org-a"), []string{"1", "2", "3"}},
		{"org-b", ix.ByOrg("org-b"), []string{"4"}},
		{"org-none", ix.ByOrg("org-c"), []string{}},
		{"alice", ix.ByUsername("alice"), []string{"1", "2"}},
		{"bob", ix.ByUsername("bob"), []string{"3"}},
		{"empty username is not a key", ix.ByUsername(""), []string{}},
		{"phone", ix.ByDeviceID("phone"), []string{"1", "4"}},
		{"laptop", ix.ByDeviceID("laptop"), []string{"2"}},
	}
	for _, c := range cases {
		if got := ids(c.got); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	// Moving a session between keys updates both keys.
	ix2 := ix.Apply([]*session.Session{sess("2", "org-b", "bob", "phone", "10.0.0.2/32")}, []string{"1"})
	for _, c := range []struct {
		got  []Entry
		want []string
	}{
		{ix2.ByOrg("org-a"), []string{"3"}},
		{ix2.ByOrg("org-b"), []string{"2", "4"}},
		{ix2.ByUsername("alice"), []string{}},
		{ix2.ByUsername("bob"), []string{"2", "3"}},
		{ix2.ByDeviceID("phone"), []string{"2", "4"}},
		{ix2.ByDeviceID("laptop"), []string{}},
		{ix.ByUsername("alice"), []string{"1", "2"}}, // old snapshot intact
	} {
		if got := ids(c.got); !slices.Equal(got, c.want) {
			t.Errorf("after move: %v, want %v", got, c.want)
		}
	}
	if s, ok := ix2.Get("2"); !ok || s.Org() != "org-b" {
		t.Errorf("Get(2) = %v %v", s, ok)
	}
	if _, ok := ix2.Get("1"); ok {
		t.Error("Get(1) found a deleted session")
	}
	if ix2.Apply(nil, nil) != ix2 {
		t.Error("empty Apply should return the same snapshot")
	}
}

func TestAllIteratesEverySession(t *testing.T) {
	b := NewBuilder(10)
	for i := 0; i < 1000; i++ {
		b.Put(sess(fmt.Sprint(i), "o", "", "", fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)))
	}
	ix := b.Index()
	var got []string
	for e := range ix.All {
		got = append(got, e.ID())
	}
	if len(got) != 1000 || len(ids(ix.ByOrg("o"))) != 1000 {
		t.Fatalf("All yielded %d sessions, ByOrg %d", len(got), len(ix.ByOrg("o")))
	}
	n := 0
	for range ix.All {
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Fatalf("early break yielded %d", n)
	}
}

// model is the reference the randomized test compares against: a map and a
// linear scan, with an apply counter for the same-prefix rule.
type model struct {
	seq  int
	sess map[string]*session.Session
	at   map[string]int
}

func newModel() *model {
	return &model{sess: map[string]*session.Session{}, at: map[string]int{}}
}

func (m *model) clone() *model {
	c := newModel()
	c.seq = m.seq
	for k, v := range m.sess {
		c.sess[k], c.at[k] = v, m.at[k]
	}
	return c
}

func (m *model) put(s *session.Session) {
	m.seq++
	m.sess[s.ID], m.at[s.ID] = s, m.seq
}

func (m *model) del(id string) { delete(m.sess, id); delete(m.at, id) }

func (m *model) lookup(a netip.Addr) string {
	a = a.Unmap().WithZone("")
	best, bestBits, bestAt := "", -1, 0
	for id, s := range m.sess {
		for _, p := range s.Allocations {
			p, ok := modelNorm(p)
			if !ok || !p.Contains(a) {
				continue
			}
			if p.Bits() > bestBits || p.Bits() == bestBits && m.at[id] > bestAt {
				best, bestBits, bestAt = id, p.Bits(), m.at[id]
			}
		}
	}
	return best
}

// modelNorm is the model's own reading of an allocation: invalid ones are
// skipped, host bits ignored, IPv4-mapped ones of /96 or longer are IPv4.
func modelNorm(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() {
		return p, false
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), true
}

func (m *model) by(field func(*session.Session) string, key string) []string {
	out := []string{}
	if key == "" {
		return out
	}
	for id, s := range m.sess {
		if field(s) == key {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

type randGen struct {
	r     *rand.Rand
	pool  []netip.Prefix
	addrs []netip.Addr
}

func newRandGen(seed uint64) *randGen {
	g := &randGen{r: rand.New(rand.NewPCG(seed, 99))}
	for _, s := range []string{
		"10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24", "10.1.2.0/25", "10.1.2.128/25", "10.1.2.3/32", "10.1.2.4/32",
		"10.1.3.0/24", "10.2.0.0/16", "192.0.2.0/24", "192.0.2.7/32", "0.0.0.0/0",
		"2001:db8::/32", "2001:db8:1::/48", "2001:db8:1:1::/64", "2001:db8:1:1::1/128", "2001:db8:1:2::/64",
		"2001:db8:2::/48", "::/0", "::ffff:10.1.2.0/120", "fd00::/8",
		"2001:db8:1:1::/96", "2001:db8:1:1::/127", "2001:db8:1:2:8000::/65", "10.1.2.2/31",
	} {
		g.pool = append(g.pool, netip.MustParsePrefix(s))
	}
	for _, p := range g.pool {
		first := p.Masked().Addr()
		g.addrs = append(g.addrs, first, first.Next(), lastAddr(p), lastAddr(p).Next())
	}
	g.addrs = append(g.addrs, netip.MustParseAddr("::ffff:10.1.2.3"), netip.MustParseAddr("10.200.0.1"), netip.MustParseAddr("203.0.113.1"))
	return g
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func (g *randGen) session() *session.Session {
	r := g.r
	pick := func(prefix string, n int) string {
		i := r.IntN(n + 1)
		if i == n {
			return ""
		}
		return fmt.Sprintf("%s%d", prefix, i)
	}
	s := &session.Session{
		ID: fmt.Sprintf("s%02d", r.IntN(60)), Org: fmt.Sprintf("org%d", r.IntN(3)),
		Attributes: identity.Attributes{Username: pick("u", 5), DeviceID: pick("d", 5), Location: pick("loc", 2)},
		// The rest is only stored, and must come back exactly.
		Revision: r.Int64N(5) - 1, TraceID: pick("trace-", 3), OpaqueID: pick("opaque-", 8),
		UpdatedAt: g.time(),
	}
	if r.IntN(10) == 0 { // too long to be stored inline
		s.DeviceID = strings.Repeat("device-", 6) + s.DeviceID
	}
	if r.IntN(2) == 0 {
		exp := g.time()
		s.ExpiresAt = &exp
	}
	switch r.IntN(6) {
	case 0: // nil allocations
	case 1:
		s.Allocations = []netip.Prefix{}
	default:
		for n := r.IntN(4) + 1; n > 0; n-- {
			s.Allocations = append(s.Allocations, g.pool[r.IntN(len(g.pool))])
		}
	}
	if r.IntN(20) == 0 {
		s.Allocations = append(s.Allocations, netip.Prefix{}) // invalid, skipped
	}
	return s
}

// time returns the kinds of time.Time a session may carry: zero, UTC
// (compact), and ones that are kept whole (a zone, a monotonic reading,
// outside the nanosecond range).
func (g *randGen) time() time.Time {
	base := time.Unix(1_700_000_000, g.r.Int64N(1e9)).UTC()
	switch g.r.IntN(6) {
	case 0:
		return time.Time{}
	case 1:
		return base.In(time.FixedZone("CEST", 2*3600))
	case 2:
		return time.Now()
	case 3:
		return time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	}
	return base
}

func compareToModel(t *testing.T, what string, ix *Index, m *model, g *randGen) {
	t.Helper()
	if ix.Len() != len(m.sess) {
		t.Fatalf("%s: Len = %d, want %d", what, ix.Len(), len(m.sess))
	}
	for i := 0; i < 60; i++ {
		id := fmt.Sprintf("s%02d", i)
		got, ok := ix.Get(id)
		want, wok := m.sess[id]
		if ok != wok || ok && !reflect.DeepEqual(got.Session(), want) {
			t.Fatalf("%s: Get(%s) = %+v %v, want %+v %v", what, id, got.Session(), ok, want, wok)
		}
	}
	for _, a := range g.addrs {
		got := ""
		if e, ok := ix.LookupIP(a); ok {
			got = e.ID()
		}
		if want := m.lookup(a); got != want {
			t.Fatalf("%s: LookupIP(%s) = %q, want %q", what, a, got, want)
		}
	}
	for i := 0; i <= 5; i++ {
		for _, c := range []struct {
			field func(*session.Session) string
			by    func(string) []Entry
			key   string
		}{
			{orgOf, ix.ByOrg, fmt.Sprintf("org%d", i)},
			{userOf, ix.ByUsername, fmt.Sprintf("u%d", i)},
			{deviceOf, ix.ByDeviceID, fmt.Sprintf("d%d", i)},
			{deviceOf, ix.ByDeviceID, strings.Repeat("device-", 6) + fmt.Sprintf("d%d", i)},
		} {
			if got, want := ids(c.by(c.key)), m.by(c.field, c.key); !slices.Equal(got, want) {
				t.Fatalf("%s: by %q = %v, want %v", what, c.key, got, want)
			}
		}
	}
	var all []string
	ix.All(func(e Entry) bool { all = append(all, e.ID()); return true })
	slices.Sort(all)
	var want []string
	for id := range m.sess {
		want = append(want, id)
	}
	slices.Sort(want)
	if !slices.Equal(all, want) {
		t.Fatalf("%s: All = %v, want %v", what, all, want)
	}
}

// TestRandomAgainstModel drives Apply and Builder with random batches over a
// small pool of ids and overlapping prefixes (so the same-prefix rule is
// exercised constantly) and compares every query with the reference model,
// including snapshots taken earlier, which must never change.
//
// With a narrow tag mask every hash collides (4 tags, or 1), which drives
// the confirmation paths of every table: keys told apart by their entries,
// a session that holds a prefix without answering for it while answering
// for another prefix with the same tag, leaves that cannot split.
func TestRandomAgainstModel(t *testing.T) {
	for _, mask := range []uint32{^uint32(0), 3, 0} {
		for seed := uint64(1); seed <= 8; seed++ {
			t.Run(fmt.Sprintf("mask%x/%d", mask, seed), func(t *testing.T) { randomAgainstModel(t, seed, mask) })
		}
	}
}

func randomAgainstModel(t *testing.T, seed uint64, mask uint32) {
	{
		{
			g := newRandGen(seed)
			r := g.r
			m := newModel()
			ix := Empty()
			ix.tagMask = mask
			b := NewBuilder(0)
			b.m.ix.tagMask = mask
			type snap struct {
				ix *Index
				m  *model
			}
			var snaps []snap
			for round := 0; round < 200; round++ {
				var ups []*session.Session
				var dels []string
				for n := r.IntN(6); n > 0; n-- {
					ups = append(ups, g.session())
				}
				for n := r.IntN(3); n > 0; n-- {
					dels = append(dels, fmt.Sprintf("s%02d", r.IntN(60)))
				}
				ix = ix.Apply(ups, dels)
				for _, s := range ups {
					m.put(s)
					b.Put(s)
				}
				for _, id := range dels {
					m.del(id)
					b.Delete(id)
				}
				compareToModel(t, fmt.Sprintf("apply round %d", round), ix, m, g)
				if round%10 == 0 {
					compareToModel(t, fmt.Sprintf("builder round %d", round), b.Index(), m, g)
					snaps = append(snaps, snap{ix, m.clone()})
				}
			}
			for i, s := range snaps {
				compareToModel(t, fmt.Sprintf("old snapshot %d", i), s.ix, s.m, g)
			}
		}
	}
}

// TestLargeBatch applies a batch that touches most of the table, where
// nodes copied early in the call are changed in place later, and checks
// that the source snapshot is untouched.
func TestLargeBatch(t *testing.T) {
	b := NewBuilder(4096)
	for i := 0; i < 4096; i++ {
		b.Put(sess(fmt.Sprint(i), "o", fmt.Sprint("u", i%7), "", fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)))
	}
	base := b.Index()
	var ups []*session.Session
	var dels []string
	for i := 0; i < 1000; i++ {
		ups = append(ups, sess(fmt.Sprint(i), "p", "", "", fmt.Sprintf("172.16.%d.%d/32", i/256, i%256)))
		dels = append(dels, fmt.Sprint(2000+i))
	}
	nx := base.Apply(ups, dels)
	if nx.Len() != 3096 || base.Len() != 4096 {
		t.Fatalf("Len = %d (base %d)", nx.Len(), base.Len())
	}
	if got := lookupID(nx, "10.0.5.1"); got != "" {
		t.Fatalf("moved session still at its old prefix: %q", got)
	}
	if got := lookupID(base, "10.0.5.1"); got != "5" {
		t.Fatalf("base changed: %q", got)
	}
	if got := lookupID(nx, "172.16.0.5"); got != "5" {
		t.Fatalf("new prefix: %q", got)
	}
	if got := len(nx.ByOrg("p")); got != 1000 {
		t.Fatalf("ByOrg(p) = %d", got)
	}
	if got := len(base.ByUsername("u1")); got != 585 {
		t.Fatalf("base ByUsername(u1) = %d", got)
	}
	if got := lookupID(nx, "10.7.208.9"); got != "" {
		t.Fatalf("deleted session still answers: %q", got)
	}
	if got := lookupID(base, "10.7.208.9"); got != "2000" {
		t.Fatalf("base lost a session: %q", got)
	}
}

// TestConcurrentReadersAndWriter runs readers on whatever snapshot is
// current while a writer publishes new ones; with -race it proves readers
// need no lock. Each reader checks an invariant every snapshot keeps: the
// session answering for 10.0.0.1 is the one Get returns for its id.
func TestConcurrentReadersAndWriter(t *testing.T) {
	var cur atomic.Pointer[Index]
	cur.Store(Empty())
	done := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				ix := cur.Load()
				if s, ok := ix.LookupIP(netip.MustParseAddr("10.0.0.1")); ok {
					if g, ok := ix.Get(s.ID()); !ok || g != s {
						errs <- "LookupIP and Get disagree within one snapshot"
						return
					}
				}
				_ = ix.ByOrg("o")
				ix.All(func(Entry) bool { return true })
			}
		}()
	}
	for i := 0; i < 2000; i++ {
		id := fmt.Sprint(i % 7)
		cur.Store(cur.Load().Apply([]*session.Session{sess(id, "o", "u", "", "10.0.0.0/24")}, []string{fmt.Sprint((i + 3) % 7)}))
	}
	close(done)
	wg.Wait()
	select {
	case e := <-errs:
		t.Fatal(e)
	default:
	}
}

// TestSlot: an entry's slot is the same however it is found and from one
// snapshot to the next while its session lives (an update of it, of
// others), distinct between live sessions, and below their count.
func TestSlot(t *testing.T) {
	ix := Empty().Apply([]*session.Session{
		sess("a", "o", "ua", "", "10.0.0.1/32"),
		sess("b", "o", "ub", "", "10.0.0.2/32"),
		sess("c", "o", "uc", "", "10.0.0.3/32"),
	}, nil)
	slot := func(ix *Index, id, addr string) uint32 {
		t.Helper()
		g, ok1 := ix.Get(id)
		l, ok2 := ix.LookupIP(netip.MustParseAddr(addr))
		if !ok1 || !ok2 || g.Slot() != l.Slot() {
			t.Fatalf("%s: Get and LookupIP give slots %d (%v) and %d (%v)", id, g.Slot(), ok1, l.Slot(), ok2)
		}
		for _, e := range ix.ByUsername("u" + id) {
			if e.Slot() != g.Slot() {
				t.Fatalf("%s: ByUsername gives slot %d, Get %d", id, e.Slot(), g.Slot())
			}
		}
		return g.Slot()
	}
	a, b, c := slot(ix, "a", "10.0.0.1"), slot(ix, "b", "10.0.0.2"), slot(ix, "c", "10.0.0.3")
	if a == b || b == c || a == c || max(a, b, c) >= 3 {
		t.Fatalf("slots %d %d %d: want three distinct below 3", a, b, c)
	}
	seen := map[uint32]bool{}
	ix.All(func(e Entry) bool { seen[e.Slot()] = true; return true })
	if len(seen) != 3 || !seen[a] || !seen[b] || !seen[c] {
		t.Errorf("All gives slots %v, want %d %d %d", seen, a, b, c)
	}
	ix2 := ix.Apply([]*session.Session{sess("b", "o", "ub", "dev", "10.0.0.2/32"), sess("d", "o", "ud", "", "10.0.0.4/32")}, []string{"c"})
	if slot(ix2, "a", "10.0.0.1") != a || slot(ix2, "b", "10.0.0.2") != b {
		t.Errorf("slots changed by an update")
	}
	if slot(ix, "c", "10.0.0.3") != c {
		t.Errorf("the old snapshot's slot changed")
	}
}
