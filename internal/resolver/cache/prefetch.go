package cache

import "sync/atomic"

// Prefetch accounting, shared by both caches. An entry counts its hits only
// in the last tenth of its life: that is where a refresh helps, and a hit
// before it writes nothing (the packet cache's readers write no shared
// memory on a hit; a counter bumped on every hit of a popular entry would
// bounce its cache line between the cores). The hit that brings the count
// to the configured threshold is told to refresh, once per entry: the
// counter's top bit then records that the refresh was handed out.

// refreshOut is warm's bit for "the refresh was handed out".
const refreshOut = 1 << 31

// inLastTenth reports whether age falls in the last tenth of life (both in
// the same unit, age < life).
func inLastTenth(age, life int64) bool { return age >= life-life/10 }

// warmHit counts a hit in the last tenth of an entry's life and reports
// whether it is the one that reaches n and should start the refresh. Kept
// out of line: it runs only in the last tenth of an entry's life, and
// inlined, its loop grew the packet cache's lookup, which every hit runs.
//
//go:noinline
func warmHit(w *atomic.Uint32, n uint32) bool {
	for {
		v := w.Load()
		if v&refreshOut != 0 {
			return false
		}
		hits, next := v+1, v+1
		if hits >= n {
			next = refreshOut
		}
		if w.CompareAndSwap(v, next) {
			return hits >= n
		}
	}
}
