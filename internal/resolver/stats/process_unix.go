//go:build unix

package stats

import "syscall"

func readRusage() rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return rusage{}
	}
	return rusage{user: msec(ru.Utime.Nano()), sys: msec(ru.Stime.Nano())}
}

func msec(ns int64) uint64 {
	if ns < 0 {
		return 0
	}
	return uint64(ns / 1e6)
}
