package feeds

import (
	"syscall"
	"unsafe"
)

// adviseHuge asks Linux to back b, freshly allocated and not yet written,
// with transparent huge pages. Transparent huge pages are commonly enabled
// only for ranges that ask (enabled=madvise), and Go's runtime does not
// ask, so:
//
//   - MADV_HUGEPAGE on b rounded out to whole huge pages, so that a fault
//     anywhere in them maps a huge page. The rounding takes in the ends of
//     the neighbouring allocations, which is harmless to them: the advice
//     changes how memory is backed, never its contents. A Builder
//     allocates its shards one after another, so the neighbour is mostly
//     the next shard.
//   - MADV_DONTNEED on the huge pages wholly inside b: if Go reused memory
//     that is already mapped with 4 KB pages, those pages stay 4 KB pages
//     however the range is advised; dropped, the writes that follow fault
//     in huge pages. This is only done to b's own pages, before anything
//     is written to them: b is all zeros, and memory that is dropped reads
//     as zeros again.
//
// Errors are ignored: a kernel without transparent huge pages, or one
// that has none to spare, leaves b on 4 KB pages, which is slower to read
// and nothing else.
func adviseHuge(b []byte) {
	const mask = hugePageSize - 1
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	end := start + uintptr(len(b))
	madvise(start&^mask, (end+mask)&^mask, syscall.MADV_HUGEPAGE)
	madvise((start+mask)&^mask, end&^mask, syscall.MADV_DONTNEED)
}

// madvise gives advice on [lo, hi), page aligned, and ignores the result.
// It takes addresses, not a slice, because the huge-page ranges reach
// outside the allocation they are for.
func madvise(lo, hi uintptr, advice int) {
	if hi > lo {
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, uintptr(advice))
	}
}

// madvCollapse is MADV_COLLAPSE (Linux 6.1), which the syscall package
// does not name.
const madvCollapse = 25

// collapseEdges asks Linux to move the huge pages at either end of b, a
// blob written since adviseHuge, onto huge pages now. adviseHuge could
// only make sure of the huge pages wholly inside b; those it shares with
// its neighbours are on 4 KB pages when the neighbours had been written
// first, which is the case for most blobs a build writes into memory its
// staging used before. MADV_COLLAPSE copies them into a huge page (it
// never changes their contents, b's or its neighbours'), synchronously,
// which is why only builds ask for it. Errors are ignored, as in
// adviseHuge.
func collapseEdges(b string) {
	const mask = hugePageSize - 1
	start := uintptr(unsafe.Pointer(unsafe.StringData(b)))
	end := start + uintptr(len(b))
	if lo := start &^ mask; lo != start {
		madvise(lo, lo+hugePageSize, madvCollapse)
	}
	if hi := end &^ mask; hi != end && hi >= (start+mask)&^mask {
		madvise(hi, hi+hugePageSize, madvCollapse)
	}
}
