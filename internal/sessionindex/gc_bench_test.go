package sessionindex

import (
	"runtime"
	"runtime/metrics"
	"testing"
)

// BenchmarkGC1M is the cost of one forced GC cycle with a 1M-session index
// live: the mark work the index adds to every cycle of a process that holds
// it (the simulator's and the resolver's latency tails). gc-cpu-ms is the
// GC CPU of the cycle (/cpu/classes/gc/total), heap-scan-MB the heap bytes
// the cycle scanned (/gc/scan/heap): pointer-free (noscan) memory is marked
// without being scanned and does not count.
func BenchmarkGC1M(b *testing.B) {
	ix := func() *Index { // the sessions and the builder die with this frame
		ss := benchSessions(1_000_000, realistic, false)
		bl := NewBuilder(len(ss))
		for _, s := range ss {
			bl.Put(s)
		}
		return bl.Index()
	}()
	runtime.GC()
	sample := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}, {Name: "/gc/scan/heap:bytes"}}
	var cpu, scan float64
	for b.Loop() {
		metrics.Read(sample)
		c0 := sample[0].Value.Float64()
		runtime.GC()
		metrics.Read(sample)
		cpu += sample[0].Value.Float64() - c0
		// /gc/scan/heap is the heap scanned by the last completed cycle.
		scan += float64(sample[1].Value.Uint64())
	}
	runtime.KeepAlive(ix)
	b.ReportMetric(cpu*1e3/float64(b.N), "gc-cpu-ms")
	b.ReportMetric(scan/float64(b.N)/(1<<20), "heap-scan-MB")
}
