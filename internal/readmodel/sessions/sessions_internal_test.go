package sessions

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/session"
)

func mk(id, user, prefix string) *session.Session {
	return &session.Session{ID: id, Org: "acme", Attributes: identity.Attributes{Username: user},
		Allocations: []netip.Prefix{netip.MustParsePrefix(prefix)}}
}

// TestIndexModel drives the readmodel.Model side of a Model without NATS:
// Load publishes only when fill succeeds, Apply swaps in one burst, Keys
// lists what the snapshot holds, and readers see each state whole.
func TestIndexModel(t *testing.T) {
	m := &Model{}
	x := (*indexModel)(m)
	m.snap.Store(nil)
	if _, err := x.Load(func(put func(*session.Session), del func(string)) error {
		put(mk("a", "alice", "10.0.0.0/24"))
		return errors.New("watcher closed")
	}); err == nil || m.Snapshot() != nil {
		t.Fatal("a failed load published a snapshot")
	}
	n, err := x.Load(func(put func(*session.Session), del func(string)) error {
		put(mk("a", "alice", "10.0.0.0/24"))
		put(mk("b", "bob", "10.0.1.0/24"))
		put(mk("gone", "", "10.0.2.0/24"))
		del("gone") // a later entry for a key wins
		return nil
	})
	if err != nil || n != 2 {
		t.Fatalf("Load = %d, %v", n, err)
	}
	before := m.Snapshot()
	if e, ok := m.Snapshot().LookupIP(netip.MustParseAddr("10.0.1.9")); !ok || e.Username() != "bob" {
		t.Fatalf("LookupIP after load: %v %v", e, ok)
	}
	if n := x.Apply([]*session.Session{mk("c", "carol", "10.0.3.0/24")}, []string{"a"}); n != 2 {
		t.Fatalf("Apply = %d, want 2", n)
	}
	if _, ok := m.Snapshot().Get("a"); ok {
		t.Error("a deleted session still answers")
	}
	if got := m.Snapshot().ByUsername("carol"); len(got) != 1 || got[0].ID() != "c" {
		t.Errorf("ByUsername(carol) = %v", got)
	}
	if _, ok := before.Get("a"); !ok {
		t.Error("Apply changed the snapshot a reader held")
	}
	var keys []string
	for k := range x.Keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"b", "c"}) {
		t.Errorf("Keys = %v", keys)
	}
}
