package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// gcjoin lines a fixed-rate run's latencies up with the server's GC cycles:
//
//	simulator gcjoin -timeline FILE -serve-log FILE -start UNIX_NS [-slow 5ms] [-after 20ms]
//
// -timeline is `simulator load -timeline`'s file, -serve-log the server's
// stderr with GODEBUG=gctrace=1 (one "gc N @S.SSSs …: A+B+C ms clock, …"
// line per cycle, S seconds after the process started), -start the server's
// start time (serve prints "START <unix ns>" first). A cycle's window is
// from its start to the end of mark termination, stretched by -after: the
// queue that built up during the mark drains after it. It prints how many
// cycles fell in the run and how long they marked, the latency percentiles
// of the requests due inside and outside the windows, the share of the slow
// requests (≥ -slow) due inside, and the ten worst 100 ms intervals with
// the GC's state during each.
func gcjoin(args []string) error {
	fs := flag.NewFlagSet("gcjoin", flag.ExitOnError)
	timeline := fs.String("timeline", "", "simulator load -timeline's file")
	serveLog := fs.String("serve-log", "", "the server's stderr, with GODEBUG=gctrace=1")
	start := fs.Int64("start", 0, "the server's start, unix ns (serve's START line)")
	slow := fs.Duration("slow", 5*time.Millisecond, "what counts as a slow request")
	after := fs.Duration("after", 20*time.Millisecond, "how long after a cycle's end its queue is counted as its")
	_ = fs.Parse(args)
	if *timeline == "" || *serveLog == "" || *start == 0 {
		return errors.New("need -timeline, -serve-log and -start")
	}
	type window struct{ from, to int64 }
	var gcs []window
	var markMS []float64
	re := regexp.MustCompile(`^gc \d+ @([0-9.]+)s [0-9]+%: ([0-9.]+)\+([0-9.]+)\+([0-9.]+) ms clock`)
	lf, err := os.Open(*serveLog)
	if err != nil {
		return err
	}
	defer lf.Close()
	sc := bufio.NewScanner(lf)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := re.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		at, _ := strconv.ParseFloat(m[1], 64)
		var ms float64
		for _, p := range m[2:5] {
			v, _ := strconv.ParseFloat(p, 64)
			ms += v
		}
		from := *start + int64(at*1e9)
		gcs = append(gcs, window{from, from + int64(ms*1e6)})
		markMS = append(markMS, ms)
	}
	if err := sc.Err(); err != nil {
		return err
	}

	type req struct {
		due       int64
		lat, send time.Duration
	}
	var reqs []req
	tf, err := os.Open(*timeline)
	if err != nil {
		return err
	}
	defer tf.Close()
	sc = bufio.NewScanner(tf)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			continue
		}
		d, _ := strconv.ParseInt(f[0], 10, 64)
		l, _ := strconv.ParseInt(f[1], 10, 64)
		s, _ := strconv.ParseInt(f[2], 10, 64)
		reqs = append(reqs, req{d, time.Duration(l) * time.Microsecond, time.Duration(s) * time.Microsecond})
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(reqs) == 0 {
		return errors.New("empty timeline")
	}
	first, last := reqs[0].due, reqs[len(reqs)-1].due
	// state: 0 outside, 1 marking, 2 draining (within -after of a cycle's end).
	state := func(t int64) int {
		for _, g := range gcs {
			switch {
			case t >= g.from && t < g.to:
				return 1
			case t >= g.to && t < g.to+int64(*after):
				return 2
			}
		}
		return 0
	}
	var cycles int
	var marked float64
	for i, g := range gcs {
		if g.to > first && g.from < last {
			cycles++
			marked += markMS[i]
		}
	}
	var in, out []time.Duration
	slowIn, slowAll := 0, 0
	for _, r := range reqs {
		s := state(r.due)
		if s > 0 {
			in = append(in, r.lat)
		} else {
			out = append(out, r.lat)
		}
		if r.lat >= *slow {
			slowAll++
			if s > 0 {
				slowIn++
			}
		}
	}
	slices.Sort(in)
	slices.Sort(out)
	span := float64(last-first) / 1e9
	fmt.Printf("GCJOIN cycles=%d mark_ms_total=%.0f run_s=%.1f in_gc_time=%.1f%% (mark + %v)\n",
		cycles, marked, span, 100*float64(len(in))/float64(len(reqs)), *after)
	fmt.Printf("GCJOIN due during a cycle: n=%d p50_ms=%.2f p99_ms=%.2f max_ms=%.2f; outside: n=%d p50_ms=%.2f p99_ms=%.2f max_ms=%.2f\n",
		len(in), pct(in, 50), pct(in, 99), pct(in, 100), len(out), pct(out, 50), pct(out, 99), pct(out, 100))
	fmt.Printf("GCJOIN slow (≥ %v): %d, of them due during a cycle: %d (%.0f%%)\n", *slow, slowAll, slowIn,
		100*float64(slowIn)/float64(max(1, slowAll)))

	// The worst 100 ms intervals by their slowest request.
	type bucket struct {
		at        int64
		n         int
		max, send time.Duration
	}
	const width = int64(100 * time.Millisecond)
	var bs []bucket
	for _, r := range reqs {
		k := (r.due - first) / width
		for int64(len(bs)) <= k {
			bs = append(bs, bucket{at: first + int64(len(bs))*width})
		}
		b := &bs[k]
		b.n++
		b.max = max(b.max, r.lat)
		b.send = max(b.send, r.send)
	}
	slices.SortFunc(bs, func(a, b bucket) int { return int(b.max - a.max) })
	names := []string{"no GC", "GC marking", "GC just ended"}
	for _, b := range bs[:min(10, len(bs))] {
		s := max(state(b.at), state(b.at+width/2), state(b.at+width-1))
		fmt.Printf("GCJOIN worst 100ms at +%.1fs: max_ms=%.1f max_send_ms=%.1f n=%d %s\n",
			float64(b.at-first)/1e9, float64(b.max)/1e6, float64(b.send)/1e6, b.n, names[s])
	}
	return nil
}
