package resolver

import (
	"net/netip"
	"testing"
)

// TestInFlight: a client gets perClient slots and no more, others theirs,
// all of them max at most; a client's counter is gone once its last slot
// is given back, so the limiter holds only clients with queries in flight.
func TestInFlight(t *testing.T) {
	l := newInFlight(5, 2)
	a := clientKey{addr: netip.MustParseAddr("192.0.2.1")}
	b := clientKey{addr: netip.MustParseAddr("2001:db8::1")}
	c := clientKey{addr: netip.MustParseAddr("192.0.2.3")}
	for i, step := range []struct {
		k    clientKey
		want bool
	}{{a, true}, {a, true}, {a, false}, {b, true}, {b, true}, {b, false}, {c, true}, {c, false}} {
		if got := l.acquire(step.k); got != step.want {
			t.Fatalf("step %d: acquire(%v) = %v, want %v", i, step.k.addr, got, step.want)
		}
	}
	if got := l.total.Load(); got != 5 {
		t.Fatalf("total %d, want 5", got)
	}
	for _, k := range []clientKey{a, a, b, b, c} {
		l.release(k)
	}
	if got, n := l.total.Load(), l.clientsHeld(); got != 0 || n != 0 {
		t.Fatalf("after every release: total %d, %d clients held, want 0 and 0", got, n)
	}
	if !l.acquire(a) {
		t.Fatal("a client whose slots came back is refused")
	}
}

// clientsHeld counts the clients with a counter.
func (l *inFlight) clientsHeld() int {
	n := 0
	for i := range l.shards {
		n += len(l.shards[i].n)
	}
	return n
}
