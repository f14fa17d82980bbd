package feeds

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// TestClientReplacesWholesaleChange: a feed that changed wholesale (a new
// snapshot, and a catch-up delta that removes most keys and sets new ones,
// more lines than half the snapshot) is loaded from the snapshot, which
// replaces the held index shard group by shard group, each step published:
// readers of the node's Set during the poll always find the keys both
// versions have, with their old or new codes; afterwards the node serves
// the new version exactly.
func TestClientReplacesWholesaleChange(t *testing.T) {
	e := newClientEnv(t, "http", nil)
	const keys = 6000
	var v1, v2, cu []feed.Line
	for i := range keys {
		v1 = append(v1, putLine(fmt.Sprintf("k%d.example", i), 1))
		switch {
		case i%3 == 0: // kept
			v2 = append(v2, putLine(fmt.Sprintf("k%d.example", i), 1))
		case i%3 == 1: // re-coded
			v2 = append(v2, putLine(fmt.Sprintf("k%d.example", i), 2))
			cu = append(cu, putLine(fmt.Sprintf("k%d.example", i), 2))
		default: // removed, and a new name
			cu = append(cu, delLine(fmt.Sprintf("k%d.example", i)), putLine(fmt.Sprintf("n%d.example/p", i), 3))
			v2 = append(v2, putLine(fmt.Sprintf("n%d.example/p", i), 3))
		}
	}
	e.d.snapshot(v1...)
	e.c.mustPoll()
	e.requests()

	var stop atomic.Bool
	var checks atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			var buf []feed.Category
			for !stop.Load() {
				set := e.c.Set()
				for i := 0; i < keys; i += 3 { // kept and re-coded: in both versions
					for _, k := range []int{i, i + 1} {
						buf = set.Lookup(fmt.Sprintf("k%d.example", k), "", buf[:0])
						if len(buf) != 1 || buf[0].Code != 1 && !(k%3 == 1 && buf[0].Code == 2) {
							t.Errorf("k%d.example: %v during the replacement", k, buf)
							return
						}
					}
				}
				checks.Add(1)
			}
		})
	}
	e.d.catchUp = []feed.Version{e.d.catchUpDelta(cu...)}
	e.d.snapshot(v2...)
	e.c.mustPoll()
	stop.Store(true)
	wg.Wait()
	if checks.Load() == 0 {
		t.Fatal("the readers checked nothing")
	}
	if got, want := e.requests(), []string{"feed.json OK", "feed-codes.json Not Modified", "snapshot_2.gz OK"}; !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v (the snapshot, not the larger catch-up delta)", got, want)
	}
	if n := e.c.logs.count("replaced the index shard group by shard group"); n != 1 {
		t.Fatalf("the replacement was logged %d times, want once", n)
	}
	if v := e.c.version("ads"); v != 2 {
		t.Fatalf("version %d, want 2", v)
	}
	if n := e.c.Set().Feeds()[0].Entries; n != keys {
		t.Fatalf("entries %d, want %d", n, keys)
	}
	expectCodes(t, e.c, "k0.example", "ads:1")
	expectCodes(t, e.c, "k1.example", "ads:2")
	expectCodes(t, e.c, "k2.example")
	expectCodes(t, e.c, "n2.example/p/q", "ads:3")
	expectCodes(t, e.c, "n2.example")

	// A small change after it is a delta, applied as ever.
	e.d.delta(putLine("k2.example", 4))
	e.c.mustPoll()
	if got, want := e.requests(), []string{"feed.json OK", "feed-codes.json Not Modified", "delta_3.gz OK"}; !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
	expectCodes(t, e.c, "k2.example", "ads:4")
}

// TestClientReplaceRefusesBadSnapshot: a replacement checks the whole
// snapshot before it replaces a shard, so a snapshot with a bad line near
// its end leaves the node serving its version, every key as it was.
func TestClientReplaceRefusesBadSnapshot(t *testing.T) {
	e := newClientEnv(t, "local", nil)
	var v1 []feed.Line
	var raw []byte
	for i := range 5000 {
		v1 = append(v1, putLine(fmt.Sprintf("k%d.example", i), 1))
		raw = feed.AppendLine(raw, putLine(fmt.Sprintf("k%d.example", i), 2))
	}
	e.d.snapshot(v1...)
	e.c.mustPoll()
	raw = append(raw, "Bad.example\t1\n"...)
	e.d.versions = nil // a new snapshot, as snapshot() lists it
	e.d.addRaw(feed.TypeSnapshot, gzBytes(raw), 5001)
	if err := e.c.pollAll(); err == nil || reasonOf(err) != reasonDecode {
		t.Fatalf("poll: %v, want a decode failure", err)
	}
	if v := e.c.version("ads"); v != 1 {
		t.Fatalf("version %d, want 1", v)
	}
	for i := range 5000 {
		expectCodes(t, e.c, fmt.Sprintf("k%d.example", i), "ads:1")
	}
}

// TestClientAppliesLargeDeltaStepwise: a delta of more lines than a
// thirty-second of the served index (here a tenth of the keys removed,
// re-coded or added) is applied shard group by shard group, each step
// published: readers during the poll always find the keys both versions
// have, with their old or new codes; afterwards the node serves the new
// version with its exact count, and a small delta is applied at once.
func TestClientAppliesLargeDeltaStepwise(t *testing.T) {
	e := newClientEnv(t, "local", nil)
	const keys = 8000
	var v1, delta []feed.Line
	for i := range keys {
		v1 = append(v1, putLine(fmt.Sprintf("k%d.example", i), 1))
		switch i % 20 {
		case 0:
			delta = append(delta, delLine(fmt.Sprintf("k%d.example", i)), putLine(fmt.Sprintf("n%d.example", i), 3))
		case 1:
			delta = append(delta, putLine(fmt.Sprintf("k%d.example", i), 2))
		}
	}
	e.d.snapshot(v1...)
	e.c.mustPoll()
	// A few deltas first, so that the served index has an overlay.
	for i := range 3 {
		e.d.delta(putLine(fmt.Sprintf("k%d.example", 5+20*i), 4), delLine(fmt.Sprintf("k%d.example", 6+20*i)))
		e.c.mustPoll()
	}
	var stop atomic.Bool
	var checks atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		var buf []feed.Category
		for !stop.Load() {
			set := e.c.Set()
			for i := 20; i < keys; i += 20 { // i%20 == 1 and 2: in both versions
				for _, k := range []int{i + 1, i + 2} {
					buf = set.Lookup(fmt.Sprintf("k%d.example", k), "", buf[:0])
					if len(buf) != 1 || buf[0].Code != 1 && !(k%20 == 1 && buf[0].Code == 2) {
						t.Errorf("k%d.example: %v during the stepwise delta", k, buf)
						return
					}
				}
			}
			checks.Add(1)
		}
	})
	e.d.delta(delta...)
	e.c.mustPoll()
	stop.Store(true)
	wg.Wait()
	if checks.Load() == 0 {
		t.Fatal("the reader checked nothing")
	}
	if n := e.c.logs.count("feed deltas applied shard group by shard group"); n != 1 {
		t.Fatalf("the stepwise apply was logged %d times, want once", n)
	}
	if v := e.c.version("ads"); v != 5 {
		t.Fatalf("version %d, want 5", v)
	}
	if n, want := e.c.Set().Feeds()[0].Entries, keys-3; n != want {
		t.Fatalf("entries %d, want %d", n, want)
	}
	expectCodes(t, e.c, "k0.example")
	expectCodes(t, e.c, "n0.example", "ads:3")
	expectCodes(t, e.c, "k1.example", "ads:2")
	expectCodes(t, e.c, "k2.example", "ads:1")
	expectCodes(t, e.c, "k25.example", "ads:4")
	expectCodes(t, e.c, "k26.example")
	e.d.delta(putLine("k3.example", 4))
	e.c.mustPoll()
	expectCodes(t, e.c, "k3.example", "ads:4")
	if n := e.c.logs.count("feed deltas applied shard group by shard group"); n != 1 {
		t.Fatalf("a one-line delta was applied stepwise")
	}
}
