package feeds

// hugePageSize is the size of a transparent huge page on the platforms
// that have them (x86-64 and arm64 with 4 KB base pages).
const hugePageSize = 2 << 20

// allocBlob returns size zero bytes for a shard or the overlay, which is
// then written once and read as a string. A lookup of a cold name reads
// a random place of a heap of hundreds of megabytes: with 4 KB pages that
// read also misses the TLB, and the page walk is a second wait for memory
// (measured: a random read at 560 MB, 184 ns on huge pages against 390 ns
// on 4 KB pages, docs/feed-index.md). So a blob of a huge page or more
// asks for huge pages before it is written (adviseHuge, Linux only).
func allocBlob(size int) []byte {
	b := make([]byte, size)
	if size >= hugePageSize {
		adviseHuge(b)
	}
	return b
}
