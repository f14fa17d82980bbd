package sessionindex

import (
	"reflect"
	"testing"

	"github.com/svc-pf/svc-pf/internal/session"
)

// TestInOrderRebuildsTheSameIndex: sessions with several allocations from
// a small pool (many prefixes held by several sessions, each session in
// several such stacks) are put and deleted at random; an index built by
// putting InOrder's sessions into a Builder then holds the same sessions
// and answers every address alike as the answering sessions are removed
// one by one, so every prefix's holders are in the same order. Putting
// them in All's order instead does not (checked, so the test can fail).
func TestInOrderRebuildsTheSameIndex(t *testing.T) {
	differs := 0
	for seed := range uint64(30) {
		g := newRandGen(seed)
		ix := Empty()
		for range 40 {
			var puts []*session.Session
			var dels []string
			for n := g.r.IntN(6) + 1; n > 0; n-- {
				if g.r.IntN(4) == 0 {
					dels = append(dels, g.session().ID)
				} else {
					puts = append(puts, g.session())
				}
			}
			ix = ix.Apply(puts, dels)
		}
		b := NewBuilder(0)
		if !ix.InOrder(func(e Entry) bool { b.Put(e.Session()); return true }) {
			t.Fatalf("seed %d: InOrder found no order", seed)
		}
		if !sameAnswers(t, g, ix, b.Index()) {
			t.Fatalf("seed %d: the index rebuilt in InOrder's order answers differently", seed)
		}
		ab := NewBuilder(0)
		for e := range ix.All {
			ab.Put(e.Session())
		}
		if !sameAnswers(t, g, ix, ab.Index()) {
			differs++
		}
	}
	if differs == 0 {
		t.Fatal("rebuilding in All's order never differed: the test does not exercise the holders' order")
	}
}

// sameAnswers reports whether a and b hold the same sessions and answer
// every address of g alike as answering sessions are removed in turn.
func sameAnswers(t *testing.T, g *randGen, a, b *Index) bool {
	t.Helper()
	if a.Len() != b.Len() {
		return false
	}
	for e := range a.All {
		o, ok := b.Get(e.ID())
		if !ok || !reflect.DeepEqual(e.Session(), o.Session()) {
			return false
		}
	}
	for _, addr := range g.addrs {
		xa, xb := a, b
		for {
			ea, oka := xa.LookupIP(addr)
			eb, okb := xb.LookupIP(addr)
			if oka != okb || ea.ID() != eb.ID() {
				return false
			}
			if !oka {
				break
			}
			xa, xb = xa.Apply(nil, []string{ea.ID()}), xb.Apply(nil, []string{eb.ID()})
		}
	}
	return true
}
