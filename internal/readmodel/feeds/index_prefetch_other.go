//go:build !amd64 && !arm64

package feeds

// prefetchLines does nothing where no prefetch is written for the
// processor: the lookup then reads each probe's lines when it searches
// it (index_prefetch_asm.go).
func prefetchLines(lines *lineBatch, n int) {}
