// Command idletls is the idle-connection half of bench/encrypted.sh (not
// part of svc-pf): it opens N DNS-over-TLS connections to a resolver, each
// from its own source address, completes each one's handshake, asks one
// query on each, then keeps them all open and idle and reports the
// resolver process's resident memory (VmRSS of /proc/PID/status) before,
// after the connections and after a settling pause.
//
//	idletls -addr 127.53.0.5:8534 -pid PID -n 10000 -src 127.18.0.0 -q h0.bench.test
//
// Each connection's source is src + i (so that a per-client bound of the
// server does not apply: one connection per client, as 10 000 phones would
// hold). Certificates are not verified (the bench's are self-signed). It
// prints one line of key=value pairs and exits non-zero if a connection
// failed or was closed by the server before the end.
package main

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

func main() {
	addr := flag.String("addr", "", "the resolver's DoT ip:port")
	pid := flag.Int("pid", 0, "the resolver's process id (its VmRSS is read)")
	n := flag.Int("n", 10000, "connections")
	src := flag.String("src", "127.18.0.0", "first source address; connection i comes from src + i")
	name := flag.String("q", "h0.bench.test", "the query each connection asks once")
	par := flag.Int("parallel", 64, "handshakes under way at once")
	settle := flag.Duration("settle", 5*time.Second, "idle time before the last reading")
	hold := flag.Duration("hold", 0, "keep the connections this much longer after the report (0: close at once)")
	flag.Parse()
	if err := run(*addr, *pid, *n, *src, *name, *par, *settle, *hold); err != nil {
		fmt.Fprintln(os.Stderr, "idletls:", err)
		os.Exit(1)
	}
}

func run(addr string, pid, n int, src, name string, par int, settle, hold time.Duration) error {
	first, err := netip.ParseAddr(src)
	if err != nil || !first.Is4() {
		return fmt.Errorf("-src %q: want an IPv4 address", src)
	}
	if pid <= 0 || addr == "" {
		return errors.New("-addr and -pid are required")
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	wire, err := q.Pack()
	if err != nil {
		return err
	}
	msg := binary.BigEndian.AppendUint16(nil, uint16(len(wire)))
	msg = append(msg, wire...)

	before, err := rss(pid)
	if err != nil {
		return err
	}
	conns := make([]*tls.Conn, n)
	var failed atomic.Int64
	var firstErr sync.Once
	var ferr error
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	t0 := time.Now()
	a := first
	for i := range n {
		from := a
		a = a.Next()
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := open(addr, from, msg)
			if err != nil {
				failed.Add(1)
				firstErr.Do(func() { ferr = fmt.Errorf("connection %d from %s: %w", i, from, err) })
				return
			}
			conns[i] = c
		})
	}
	wg.Wait()
	openTime := time.Since(t0)
	after, err := rss(pid)
	if err != nil {
		return err
	}
	time.Sleep(settle)
	settled, err := rss(pid)
	if err != nil {
		return err
	}
	// Still open? A read that times out at once means the server kept
	// the connection; EOF means it closed it.
	var closed int
	for _, c := range conns {
		if c == nil {
			continue
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
		var b [1]byte
		if _, err := c.Read(b[:]); err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
			closed++
		}
	}
	ok := n - int(failed.Load())
	perConn := 0.0
	if ok > 0 {
		perConn = float64(settled-before) / float64(ok)
	}
	fmt.Printf("connections=%d failed=%d closed_by_server=%d open_seconds=%.1f rss_before_mb=%.1f rss_open_mb=%.1f rss_settled_mb=%.1f per_conn_kb=%.1f\n",
		ok, failed.Load(), closed, openTime.Seconds(), mb(before), mb(after), mb(settled), perConn/1024)
	time.Sleep(hold)
	for _, c := range conns {
		if c != nil {
			_ = c.Close()
		}
	}
	if ferr != nil {
		return ferr
	}
	if closed > 0 {
		return fmt.Errorf("%d connections closed by the server while idle", closed)
	}
	return nil
}

// open dials from src, completes the handshake and asks the one query.
func open(addr string, src netip.Addr, msg []byte) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second, LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
	c, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"dot"}}) //nolint:gosec // self-signed bench certificate
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(msg); err != nil {
		_ = c.Close()
		return nil, err
	}
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("reading the answer: %w", err)
	}
	if _, err := io.CopyN(io.Discard, c, int64(binary.BigEndian.Uint16(l[:]))); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// rss is VmRSS of the process, in bytes.
func rss(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
