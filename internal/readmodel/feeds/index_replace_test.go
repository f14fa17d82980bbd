package feeds

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// replaceCase is an index (built, then changed by deltas so that it has an
// overlay) and a new snapshot: keys kept, re-coded, removed, added.
type replaceCase struct {
	ix       *Index
	old, new indexRef
	snapshot []feed.Line
}

func newReplaceCase(t *testing.T, rnd *rand.Rand, keys int, changed float64) replaceCase {
	t.Helper()
	old := indexRef{}
	b := NewBuilder(keys)
	for i := range keys {
		l := feed.Line{Name: fmt.Sprintf("k%d.%s", i, indexPropName(rnd)), Codes: []uint16{uint16(rnd.IntN(5))}}
		if i%5 == 0 {
			l.Path = indexPropPaths[1+rnd.IntN(len(indexPropPaths)-1)]
		}
		old.set(l)
		b.Set(l)
	}
	ix := b.Index()
	// Deltas: the held index has an overlay, tombstones included, which a
	// replacement must drop shard by shard.
	for range 3 {
		var delta []feed.Line
		for range keys / 50 {
			l := indexPropLine(rnd, old, true)
			old.set(l)
			delta = append(delta, l)
		}
		ix = ix.Apply(delta)
	}
	if ix.overNames == 0 {
		t.Fatal("the held index has no overlay: the case does not test dropping it")
	}
	checkIndexEqual(t, ix, old, rnd, "held")
	nw := indexRef{}
	for k, codes := range old {
		switch x := rnd.Float64(); {
		case x < changed/3: // removed
		case x < 2*changed/3: // re-coded
			nw[k] = []uint16{uint16(5 + rnd.IntN(40))}
		default:
			nw[k] = codes
		}
	}
	for i := 0; len(nw) < len(old); i++ { // added, some under kept names
		name := fmt.Sprintf("new%d.%s", i, indexPropName(rnd))
		if i%7 == 0 {
			for k := range old {
				name = "sub." + k.name
				break
			}
		}
		nw[indexRefKey{name, ""}] = []uint16{uint16(rnd.IntN(60))}
	}
	var snap []feed.Line
	for k, codes := range nw {
		snap = append(snap, feed.Line{Name: k.name, Path: k.path, Codes: codes})
	}
	rnd.Shuffle(len(snap), func(i, j int) { snap[i], snap[j] = snap[j], snap[i] })
	return replaceCase{ix: ix, old: old, new: nw, snapshot: snap}
}

// checkEitherVersion fails unless every key of both versions is found, in
// ix, with its old or its new codes, and every key of a shard before done
// (those the replacement has written) answers as the new version: found
// with its new codes, or, removed, not found as itself.
func checkEitherVersion(c *replaceCase, ix *Index, done int) error {
	shardOf := func(name string) int { return int(ix.key.name(name) >> ix.shift) }
	for k, oc := range c.old {
		nc, inNew := c.new[k]
		m, found := ix.Lookup(k.name, k.path)
		hit := found && m.Name == k.name && m.Path == k.path
		switch {
		case shardOf(k.name) < done && inNew && (!hit || !slices.Equal(m.Codes, nc)):
			return fmt.Errorf("Lookup(%q, %q) = %v, %v in a replaced shard; want the key with %v", k.name, k.path, m, found, nc)
		case shardOf(k.name) < done && !inNew && hit:
			return fmt.Errorf("Lookup(%q, %q) = %v in a replaced shard; the new version removed it", k.name, k.path, m)
		case inNew && (!hit || !slices.Equal(m.Codes, oc) && !slices.Equal(m.Codes, nc)):
			return fmt.Errorf("Lookup(%q, %q) = %v, %v during the replacement; want the key with %v or %v", k.name, k.path, m, found, oc, nc)
		}
	}
	for k, nc := range c.new {
		if shardOf(k.name) >= done {
			continue
		}
		if m, found := ix.Lookup(k.name, k.path); !found || m.Name != k.name || m.Path != k.path || !slices.Equal(m.Codes, nc) {
			return fmt.Errorf("Lookup(%q, %q) = %v, %v in a replaced shard; want the key with %v", k.name, k.path, m, found, nc)
		}
	}
	return nil
}

// replaceSteps replaces c.ix by c.snapshot in groups of budget staged
// bytes, calling each step's Index to check, and returns the last.
func replaceSteps(t *testing.T, c *replaceCase, budget int, each func(ix *Index, done int)) (*Index, int) {
	t.Helper()
	if !canReplace(c.ix, len(c.snapshot)) {
		t.Fatalf("canReplace is false for an index of %d shards and %d keys", len(c.ix.shards), len(c.snapshot))
	}
	scan := func(fn func(feed.Line) error) error {
		for _, l := range c.snapshot {
			// As feed.ScanLines gives them: buffers the next line reuses.
			l.Codes = slices.Clone(l.Codes)
			if err := fn(l); err != nil {
				return err
			}
			clear(l.Codes)
		}
		return nil
	}
	r := newReplacer(c.ix)
	for _, l := range c.snapshot {
		r.count(l)
	}
	ends := r.groups(budget)
	var ix *Index
	for _, end := range ends {
		var err error
		if ix, err = r.step(end, scan); err != nil {
			t.Fatal(err)
		}
		each(ix, r.next)
	}
	return ix, len(ends)
}

// TestIndexReplace: a snapshot replaces a held index shard group by shard
// group. Every step answers each key of both versions with one of its two
// entries and reports the held Len; the last is the new version exactly;
// the held index is unchanged throughout.
func TestIndexReplace(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 24))
			c := newReplaceCase(t, rnd, 4000+int(seed)*1500, []float64{0.1, 0.5, 1, 0.3}[seed])
			oldRef := maps.Clone(c.old)
			steps := 0
			last, groups := replaceSteps(t, &c, []int{1, 4 << 10, 20 << 10, 1 << 30}[seed], func(ix *Index, done int) {
				steps++
				if err := checkEitherVersion(&c, ix, done); err != nil {
					t.Fatalf("step %d: %v", steps, err)
				}
			})
			if seed < 3 && groups < 4 {
				t.Fatalf("%d groups: the budget should have split the shards", groups)
			}
			checkIndexEqual(t, last, c.new, rnd, "replaced")
			if last.overNames != 0 {
				t.Fatalf("the replaced index has %d overlay names", last.overNames)
			}
			checkIndexEqual(t, c.ix, oldRef, rnd, "the held index after the replacement")
			// The replaced index takes deltas like any other.
			ref := maps.Clone(c.new)
			ix := last
			for range 5 {
				var delta []feed.Line
				for range 200 {
					l := indexPropLine(rnd, ref, true)
					ref.set(l)
					delta = append(delta, l)
				}
				ix = ix.Apply(delta)
			}
			checkIndexEqual(t, ix, ref, rnd, "deltas after the replacement")
		})
	}
}

// TestIndexReplaceDuringLookups: readers of the published Index while a
// replacement publishes its steps (run under -race) never miss a key that
// both versions have, nor see its codes other than the old or the new.
func TestIndexReplaceDuringLookups(t *testing.T) {
	rnd := rand.New(rand.NewPCG(5, 5))
	c := newReplaceCase(t, rnd, 6000, 0.6)
	type step struct {
		ix   *Index
		done int
	}
	var cur atomic.Pointer[step]
	cur.Store(&step{c.ix, 0})
	var stop atomic.Bool
	var lookups atomic.Int64
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			for !stop.Load() {
				st := cur.Load()
				if err := checkEitherVersion(&c, st.ix, st.done); err != nil {
					t.Error(err)
					return
				}
				lookups.Add(1)
			}
		})
	}
	last, groups := replaceSteps(t, &c, 2<<10, func(ix *Index, done int) {
		cur.Store(&step{ix, done})
		// Let the readers see this step.
		for n := lookups.Load(); lookups.Load() < n+3 && !t.Failed(); {
		}
	})
	stop.Store(true)
	wg.Wait()
	if groups < 8 {
		t.Fatalf("%d groups, want several steps to read between", groups)
	}
	checkIndexEqual(t, last, c.new, rnd, "replaced")
}

// TestIndexCanReplace: a replacement needs the shard count a build of the
// snapshot would have.
func TestIndexCanReplace(t *testing.T) {
	b := NewBuilder(5000)
	for i := range 5000 {
		b.Set(feed.Line{Name: fmt.Sprintf("n%d.example", i), Codes: []uint16{1}})
	}
	ix := b.Index()
	if !canReplace(ix, 5000) || !canReplace(ix, 1_000_000) {
		t.Fatal("an index of 128 shards cannot be replaced by a snapshot that would have as many")
	}
	if canReplace(ix, 100) || canReplace(nil, 5000) || canReplace(Empty(), 5000) {
		t.Fatal("a snapshot that a build would give fewer shards (or no index) can be replaced")
	}
}

// TestIndexApplyShards: a large delta applied shard group by shard group
// (applyShards over each group's lines, in order): every step answers each
// key of both versions with its old or new codes, and the keys of the
// groups done as the new version, with exact counts; the last step is the
// new version, with an empty overlay (every shard with overlay names was
// rewritten); the held index is unchanged.
func TestIndexApplyShards(t *testing.T) {
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 32))
			c := newReplaceCase(t, rnd, 5000+int(seed)*2000, []float64{0.1, 0.4, 1}[seed])
			oldRef := maps.Clone(c.old)
			// The delta from old to new: removals, then sets of a wrong
			// code for some keys, then every new key's set (the last line
			// of a key wins), each part shuffled (one line a key in each).
			var delta []feed.Line
			for k := range c.old {
				if _, ok := c.new[k]; !ok {
					delta = append(delta, feed.Line{Name: k.name, Path: k.path, Remove: true})
				}
			}
			var wrong, sets []feed.Line
			for k, codes := range c.new {
				if rnd.IntN(10) == 0 {
					wrong = append(wrong, feed.Line{Name: k.name, Path: k.path, Codes: []uint16{999}})
				}
				sets = append(sets, feed.Line{Name: k.name, Path: k.path, Codes: codes})
			}
			for _, part := range [][]feed.Line{delta, wrong, sets} {
				rnd.Shuffle(len(part), func(i, j int) { part[i], part[j] = part[j], part[i] })
			}
			delta = append(append(delta, wrong...), sets...)
			ix := c.ix
			per := []int{1, 8, 40}[seed]
			shardOf := func(name string) int { return int(ix.key.name(name) >> ix.shift) }
			for lo := 0; lo < len(ix.shards); lo += per {
				hi := min(lo+per, len(ix.shards))
				var lines []feed.Line
				for _, l := range delta {
					if s := shardOf(l.Name); s >= lo && s < hi {
						lines = append(lines, l)
					}
				}
				ix = ix.applyShards(lines, lo, hi)
				if err := checkEitherVersion(&c, ix, hi); err != nil {
					t.Fatalf("after shards [%d, %d): %v", lo, hi, err)
				}
				want := 0
				for k := range c.new {
					if shardOf(k.name) < hi {
						want++
					}
				}
				for k := range c.old {
					if shardOf(k.name) >= hi {
						want++
					}
				}
				if ix.Len() != want {
					t.Fatalf("after shards [%d, %d): Len %d, want %d", lo, hi, ix.Len(), want)
				}
			}
			checkIndexEqual(t, ix, c.new, rnd, "after every group")
			if ix.overNames != 0 {
				t.Fatalf("%d names left in the overlay", ix.overNames)
			}
			checkIndexEqual(t, c.ix, oldRef, rnd, "the held index")
		})
	}
}
