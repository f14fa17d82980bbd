package stats

import (
	"bufio"
	"bytes"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
)

// The process statistics read what PowerDNS reads, from the same places;
// where a file is missing (not Linux) they read 0, as PowerDNS's do.

// rusage is the process's CPU time in milliseconds (getrusage RUSAGE_SELF).
type rusage struct {
	user, sys uint64
}

// openFDs counts the numeric entries of /proc/self/fd, the one open to
// read the directory included, as PowerDNS's fd-usage does.
func openFDs() uint64 {
	f, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return 0
	}
	var n uint64
	for _, name := range names {
		if _, err := strconv.ParseUint(name, 10, 32); err == nil {
			n++
		}
	}
	return n
}

// residentBytes is the resident set size: /proc/self/statm's second field
// in pages, times the page size.
func residentBytes() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	return parseStatm(b, uint64(os.Getpagesize()))
}

func parseStatm(b []byte, pageSize uint64) uint64 {
	fields := bytes.Fields(b)
	if len(fields) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(string(fields[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * pageSize
}

// heapBytes is the Go heap's live and not yet swept objects: what a C
// program's malloc statistics would call allocated bytes. runtime/metrics
// reads it without stopping the world, unlike runtime.ReadMemStats.
func heapBytes() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// udpErrors are the host's UDP error counters from /proc/net/snmp. They
// count every socket of the network namespace, not only the resolver's,
// as in PowerDNS.
type udpErrors struct {
	inErrors, noPorts, rcvbufErrors, sndbufErrors uint64
}

func readUDPErrors() udpErrors {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return udpErrors{}
	}
	return parseSNMP(b)
}

// parseSNMP finds the two "Udp:" lines (names, then values) and picks the
// columns by name, so a kernel that adds columns does not shift them.
// PowerDNS 4.8 picks them by position and, through a misspelt key, always
// reports udp-recvbuf-errors as 0; this reads RcvbufErrors.
func parseSNMP(b []byte) udpErrors {
	var header []string
	var u udpErrors
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "Udp:")
		if !ok {
			continue
		}
		fields := strings.Fields(line)
		if header == nil {
			header = fields
			continue
		}
		for i, name := range header {
			if i >= len(fields) {
				break
			}
			v, err := strconv.ParseUint(fields[i], 10, 64)
			if err != nil {
				continue
			}
			switch name {
			case "InErrors":
				u.inErrors = v
			case "NoPorts":
				u.noPorts = v
			case "RcvbufErrors":
				u.rcvbufErrors = v
			case "SndbufErrors":
				u.sndbufErrors = v
			}
		}
		break
	}
	return u
}
