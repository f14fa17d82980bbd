//go:build amd64 || arm64

package feeds

// prefetchLines asks the processor for the cache lines at the first n
// addresses of lines (PREFETCHT0 on amd64, PRFM PLDL1KEEP on arm64) and
// returns without waiting for them. A lookup computes the slots of the
// name and of all its parents first, then asks for their lines at once
// (docs/feed-index.md): a prefetch, unlike a load, leaves the processor's
// window as soon as it is issued, so the lines of every probe are in
// flight together and a lookup of a cold name waits for memory about
// once. Go has no prefetch of its own outside the runtime. A prefetch
// never faults, and the addresses are inside the Index's blobs.
//
//go:noescape
func prefetchLines(lines *lineBatch, n int)
