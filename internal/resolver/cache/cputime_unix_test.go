//go:build unix

package cache_test

import (
	"syscall"
	"testing"
	"time"
)

// cpuPerOp reports the process's CPU time per operation beside the wall
// time: on a machine shared with other work (CI, a busy laptop) wall time
// per op mostly measures the scheduler, CPU time far less so. Call it after
// setup; its function reports at the end.
func cpuPerOp(b *testing.B) func() {
	start := cpuTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
