//go:build !unix

package stats

// readRusage has no getrusage to call here; user-msec and sys-msec read 0.
func readRusage() rusage { return rusage{} }
