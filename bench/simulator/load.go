package main

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// load is the fixed-rate (open-loop) latency run:
//
//	simulator load -addr HOST:PORT -paths FILE [-rate 10000] [-duration 30s] [-warmup 5s] [-conns 256] [-timeline FILE]
//
// wrk is a closed loop: each of its connections sends the next request when
// the previous answer arrives, so a slow answer also delays the requests
// that would have been sent meanwhile, and those never appear in the
// percentiles (coordinated omission); and at c connections its p50 is at
// least c ÷ throughput whatever the server does. Here requests are due at
// fixed times (rate per second, evenly spaced) whatever the answers do, and
// each latency is measured from the time the request was due, not from when
// a connection was free to send it: a request that waits for a connection,
// because the server is behind, counts its wait. -conns keep-alive
// connections carry the requests (enough that they are not the limit: at
// 10 000/s and a few ms each, a few dozen are busy).
//
// The client is plain TCP with the request bytes written once per path and
// the response read by hand (status line, Content-Length or chunked body),
// so that it costs the shared cores little. It prints one line:
//
//	RESULT offered=… sent=… seconds=… rps=… p50_ms=… p90_ms=… p99_ms=… p999_ms=… max_ms=… non2xx=… errors=… behind_ms=…
//
// behind_ms is how far the dispatcher itself ever fell behind the schedule
// (the client's own lag, which the latencies include). send_p99_ms is the
// 99th percentile of the time from a request's due time to the moment its
// connection's goroutine began writing it: the client's own queueing and
// scheduling, part of every latency.
//
// -timeline writes one line per measured request, "DUE_UNIX_NS LATENCY_US
// SEND_US" (SEND_US: due → write), for lining the latencies up with the
// server's GC cycles (simulator gcjoin).
func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	addr := fs.String("addr", "", "the simulator's HOST:PORT")
	pathsFile := fs.String("paths", "", "request paths, one a line (gen's paths-*.txt)")
	rate := fs.Int("rate", 10_000, "requests per second offered")
	duration := fs.Duration("duration", 30*time.Second, "measured time")
	warmup := fs.Duration("warmup", 5*time.Second, "time at the same rate before measuring (not recorded)")
	conns := fs.Int("conns", 256, "keep-alive connections")
	timeline := fs.String("timeline", "", "write each measured request's due time, latency and send delay to this file")
	_ = fs.Parse(args)
	if *addr == "" || *pathsFile == "" || *rate < 1 || *conns < 1 || *duration <= 0 {
		return errors.New("need -addr, -paths, -rate ≥ 1, -conns ≥ 1, -duration > 0")
	}
	reqs, err := requestBytes(*pathsFile, *addr)
	if err != nil {
		return err
	}
	interval := time.Second / time.Duration(*rate)
	warm := int(warmup.Seconds() * float64(*rate))
	total := warm + int(duration.Seconds()*float64(*rate))

	// due carries each request's due time; buffered for the whole run so
	// that the dispatcher never waits for the connections.
	due := make(chan time.Time, total)
	type result struct {
		lat    []time.Duration
		send   []time.Duration // due → write
		due    []time.Time
		non2xx int
		errs   int
	}
	results := make([]result, *conns)
	var wg sync.WaitGroup
	start := time.Now().Add(100 * time.Millisecond)
	measureFrom := start.Add(time.Duration(warm) * interval)
	for c := range *conns {
		wg.Add(1)
		go func(r *result) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(time.Now().UnixNano())))
			var cn *conn
			for d := range due {
				req := reqs[rng.IntN(len(reqs))]
				if cn == nil {
					c, err := dial(*addr)
					if err != nil {
						r.errs++
						continue
					}
					cn = c
				}
				sent := time.Since(d)
				status, err := cn.do(req)
				lat := time.Since(d)
				if err != nil {
					cn.close()
					cn = nil
				}
				if d.Before(measureFrom) {
					continue
				}
				switch {
				case err != nil:
					r.errs++
				case status < 200 || status > 299:
					r.non2xx++
				}
				r.lat = append(r.lat, lat)
				r.send = append(r.send, sent)
				if *timeline != "" {
					r.due = append(r.due, d)
				}
			}
			if cn != nil {
				cn.close()
			}
		}(&results[c])
	}
	var behind time.Duration
	for i := range total {
		d := start.Add(time.Duration(i) * interval)
		if wait := time.Until(d); wait > 0 {
			time.Sleep(wait)
		} else if -wait > behind {
			behind = -wait
		}
		due <- d
	}
	close(due)
	wg.Wait()
	elapsed := time.Since(measureFrom)

	var all, sends []time.Duration
	non2xx, errs := 0, 0
	for _, r := range results {
		all = append(all, r.lat...)
		sends = append(sends, r.send...)
		non2xx += r.non2xx
		errs += r.errs
	}
	if *timeline != "" {
		if err := writeTimeline(*timeline, results, func(r result) ([]time.Time, []time.Duration, []time.Duration) {
			return r.due, r.lat, r.send
		}); err != nil {
			return err
		}
	}
	slices.Sort(all)
	slices.Sort(sends)
	fmt.Printf("RESULT offered=%d sent=%d seconds=%.1f rps=%.0f p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f p999_ms=%.2f max_ms=%.2f non2xx=%d errors=%d behind_ms=%.1f send_p99_ms=%.2f\n",
		*rate, len(all), elapsed.Seconds(), float64(len(all))/elapsed.Seconds(),
		pct(all, 50), pct(all, 90), pct(all, 99), pct(all, 99.9), pct(all, 100), non2xx, errs,
		float64(behind)/float64(time.Millisecond), pct(sends, 99))
	return nil
}

// pct is the p-th percentile of sorted durations, in ms.
func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p / 100 * float64(len(sorted)))
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return float64(sorted[i]) / float64(time.Millisecond)
}

// writeTimeline writes every measured request as "DUE_UNIX_NS LATENCY_US
// SEND_US", in due order.
func writeTimeline[R any](file string, results []R, parts func(R) ([]time.Time, []time.Duration, []time.Duration)) error {
	type row struct {
		due       int64
		lat, send time.Duration
	}
	var rows []row
	for _, r := range results {
		due, lat, send := parts(r)
		for i := range due {
			rows = append(rows, row{due[i].UnixNano(), lat[i], send[i]})
		}
	}
	slices.SortFunc(rows, func(a, b row) int { return cmp.Compare(a.due, b.due) })
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for _, r := range rows {
		fmt.Fprintf(w, "%d %d %d\n", r.due, r.lat.Microseconds(), r.send.Microseconds())
	}
	return errors.Join(w.Flush(), f.Close())
}

// requestBytes reads the paths and formats each as a whole GET request.
func requestBytes(file, addr string) ([][]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var reqs [][]byte
	for line := range strings.SplitSeq(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			reqs = append(reqs, fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\nX-API-Key: %s\r\n\r\n", line, addr, APIKey))
		}
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("%s: no paths", file)
	}
	return reqs, nil
}

// conn is one keep-alive connection.
type conn struct {
	c net.Conn
	r *bufio.Reader
}

func dial(addr string) (*conn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, r: bufio.NewReaderSize(c, 64<<10)}, nil
}

func (c *conn) close() { _ = c.c.Close() }

// do sends req and reads the whole response; it returns the status.
func (c *conn) do(req []byte) (int, error) {
	if err := c.c.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		return 0, err
	}
	if _, err := c.c.Write(req); err != nil {
		return 0, err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	f := bytes.Fields(line)
	if len(f) < 2 {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(string(f[1]))
	if err != nil {
		return 0, fmt.Errorf("bad status line %q", line)
	}
	length, chunked := -1, false
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		k, v, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(v)); err != nil {
				return 0, err
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		}
	}
	switch {
	case chunked:
		for {
			sz, err := c.r.ReadSlice('\n')
			if err != nil {
				return 0, err
			}
			n, err := strconv.ParseInt(string(bytes.TrimSpace(sz)), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("bad chunk size %q", sz)
			}
			if _, err := c.r.Discard(int(n) + 2); err != nil { // data and CRLF
				return 0, err
			}
			if n == 0 {
				return status, nil
			}
		}
	case length >= 0:
		_, err = c.r.Discard(length)
		return status, err
	case status == 204 || status == 304:
		return status, nil
	}
	_, err = io.Copy(io.Discard, c.r) // no length: the body runs to the close
	return status, errors.Join(err, errors.New("response without a length"))
}
