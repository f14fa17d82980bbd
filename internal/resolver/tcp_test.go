package resolver_test

import (
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

// TestTCPPipelined: queries written back to back on one connection are
// all answered on it.
func TestTCPPipelined(t *testing.T) {
	e := newEnv(t, nil)
	const n = 20
	before := e.stats("tcp-questions", "questions")
	c := e.tcpClient("")
	var msgs [][]byte
	for i := range n {
		m := query(fmt.Sprintf("p%d.test", i), dns.TypeA, 1232, false)
		m.Id = uint16(1000 + i)
		msgs = append(msgs, mustPack(t, m))
	}
	writeTCP(t, c, msgs...) // one write: the server reads them in turn
	seen := map[uint16]bool{}
	for range n {
		b, closed := readTCP(t, c)
		if closed {
			t.Fatalf("closed after %d answers", len(seen))
		}
		r := mustUnpack(t, b)
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Question[0].Name != fmt.Sprintf("p%d.test.", r.Id-1000) {
			t.Fatalf("answer %v", r)
		}
		seen[r.Id] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct answers, want %d", len(seen), n)
	}
	e.wantMoved("pipelined", before, map[string]uint64{"tcp-questions": n, "questions": n})
}

// TestTCPIdleTimeout: a connection idle for dns.tcp.idle_timeout is
// closed, whether it asked something first or never did; tcp-clients
// comes back to 0.
func TestTCPIdleTimeout(t *testing.T) {
	e := newEnv(t, func(c *resolver.Config) { c.TCPIdleTimeout = 300 * time.Millisecond })
	used, silent := e.tcpClient(""), e.tcpClient("")
	writeTCP(t, used, goodQuery(t))
	if _, closed := readTCP(t, used); closed {
		t.Fatal("closed before answering")
	}
	for name, c := range map[string]net.Conn{"after a query": used, "never used": silent} {
		if b, closed := readTCP(t, c); !closed {
			t.Fatalf("%s: got %x, want the connection closed", name, b)
		}
	}
	eventually(t, "tcp-clients back to 0", func() bool { return e.stat("tcp-clients") == 0 })
}

// TestTCPConnectionFlood: connections past dns.tcp.max_connections are
// closed at once and counted (tcp-client-overflow), while the held ones
// and UDP go on answering; a freed slot takes a new connection.
func TestTCPConnectionFlood(t *testing.T) {
	const held, flood = 4, 12
	e := newEnv(t, func(c *resolver.Config) {
		c.TCPMaxConnections = held
		c.TCPIdleTimeout = time.Minute // the held connections stay for the whole test
	})
	var conns []*net.TCPConn
	for range held {
		c := e.tcpClient("")
		writeTCP(t, c, goodQuery(t))
		if _, closed := readTCP(t, c); closed {
			t.Fatal("a connection within the limit was closed")
		}
		conns = append(conns, c)
	}
	if n := e.stat("tcp-clients"); n != held {
		t.Fatalf("tcp-clients %d, want %d", n, held)
	}
	before := e.stat("tcp-client-overflow")
	for i := range flood {
		c := e.tcpClient("")
		writeTCP(t, c, goodQuery(t))
		if b, closed := readTCP(t, c); !closed {
			t.Fatalf("connection %d past the limit answered %x", held+i+1, b)
		}
	}
	e.waitStat("tcp-client-overflow", before+flood)
	if n := e.stat("tcp-client-overflow") - before; n != flood {
		t.Errorf("tcp-client-overflow moved by %d, want %d", n, flood)
	}
	for i, c := range conns {
		writeTCP(t, c, goodQuery(t))
		if _, closed := readTCP(t, c); closed {
			t.Fatalf("held connection %d closed by the flood", i)
		}
	}
	if r := e.mustAsk("udp", "", query("during-flood.test", dns.TypeA, 1232, false)); r.Rcode != dns.RcodeSuccess {
		t.Fatalf("UDP during the flood: %v", r)
	}
	_ = conns[0].Close()
	eventually(t, "tcp-clients down by one", func() bool { return e.stat("tcp-clients") == held-1 })
	c := e.tcpClient("")
	writeTCP(t, c, goodQuery(t))
	if _, closed := readTCP(t, c); closed {
		t.Fatal("a connection into the freed slot was closed")
	}
}

// eventually waits up to bound for cond.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, bound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// dialNoRead opens a TCP connection to the resolver with a small receive
// buffer (set before connecting, so that the window is small from the
// start), for a client that never reads its answers.
func (e *testEnv) dialNoRead(from string) net.Conn {
	e.t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: bound,
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			}); err != nil {
				return err
			}
			return serr
		}}
	c, err := d.Dial("tcp", e.tcp)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = c.Close() })
	return c
}

// floodNoRead pipelines n queries for a name whose answer is about 26 KB
// on c and never reads: the answers fill the client's window and the
// server's send buffer, and the server's writes block.
func floodNoRead(t *testing.T, c net.Conn, n int) {
	t.Helper()
	var msgs [][]byte
	for i := range n {
		m := query(fmt.Sprintf("n%d.huge.test", i%4), dns.TypeTXT, 1232, false)
		m.Id = uint16(i)
		msgs = append(msgs, mustPack(t, m))
	}
	writeTCP(t, c, msgs...)
}

// TestTCPClientThatNeverReads: clients that pipeline queries and never
// read their answers hold every connection slot, until a reply that
// cannot be written within dns.tcp.idle_timeout closes each; then
// tcp-clients is back to 0 and a new client is answered.
func TestTCPClientThatNeverReads(t *testing.T) {
	const slots = 3
	e := newEnv(t, func(c *resolver.Config) {
		c.TCPMaxConnections = slots
		c.TCPIdleTimeout = 500 * time.Millisecond
	})
	for range slots {
		floodNoRead(t, e.dialNoRead("127.0.0.1"), 400) // ~10 MB of answers each
	}
	e.waitStat("tcp-clients", slots)
	eventually(t, "connections that never read closed", func() bool { return e.stat("tcp-clients") == 0 })
	c := e.tcpClient("")
	writeTCP(t, c, goodQuery(t))
	if b, closed := readTCP(t, c); closed || mustUnpack(t, b).Rcode != dns.RcodeSuccess {
		t.Fatal("a new client after them: no answer")
	}
}

// TestCloseWithClientsThatNeverRead: the resolver's Run returns within a
// bound after its context ends even while clients that never read hold
// connections whose replies cannot be written (the idle timeout, far
// longer, does not come into it).
func TestCloseWithClientsThatNeverRead(t *testing.T) {
	e := newEnv(t, func(c *resolver.Config) { c.TCPIdleTimeout = time.Minute })
	for range 2 {
		floodNoRead(t, e.dialNoRead("127.0.0.1"), 400)
	}
	// Until the server stops reading them: the answers fill the windows
	// and their writes block (the server reads on while it can write).
	e.waitSettled("tcp-questions")
	e.cancel()
	select {
	case <-e.runDone:
	case <-time.After(bound):
		t.Fatalf("Run did not return within %v of its context's end", bound)
	}
	if e.runErr != nil {
		t.Fatal(e.runErr)
	}
}

// waitSettled waits until a statistic is above 0 and has not moved for
// half a second, within bound.
func (e *testEnv) waitSettled(name string) {
	e.t.Helper()
	last, same := e.stat(name), 0
	for deadline := time.Now().Add(bound); same < 10; {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s still moving after %v", name, bound)
		}
		time.Sleep(50 * time.Millisecond)
		v := e.stat(name)
		if v == last && v > 0 {
			same++
		} else {
			last, same = v, 0
		}
	}
}

// holdQuery is a query the fake forwarder answers only once released.
func holdQuery(t testing.TB, name string, id uint16) []byte {
	m := query(name+".hold.test", dns.TypeA, 1232, false)
	m.Id = id
	return mustPack(t, m)
}

// TestTCPPipelinedAnsweredConcurrently: on one connection, a query whose
// forwarder holds its answer, then one answered at once: the second's
// reply comes first (RFC 7766 §6.2.1.1), then, once released, the first's.
func TestTCPPipelinedAnsweredConcurrently(t *testing.T) {
	e := newEnv(t, func(c *resolver.Config) { c.Upstream.Timeout = 4 * time.Second })
	c := e.tcpClient("")
	fast := query("fast.test", dns.TypeA, 1232, false)
	fast.Id = 2
	writeTCP(t, c, holdQuery(t, "slow", 1), mustPack(t, fast))
	b, closed := readTCP(t, c)
	if closed {
		t.Fatal("closed")
	}
	if r := mustUnpack(t, b); r.Id != 2 || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("first reply %v, want the fast query's (id 2) answer", r)
	}
	e.up.release()
	b, closed = readTCP(t, c)
	if closed {
		t.Fatal("closed before the held query's answer")
	}
	if r := mustUnpack(t, b); r.Id != 1 || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("second reply %v, want the held query's (id 1) answer", r)
	}
}

// TestTCPQueriesPerConnection: with dns.tcp.max_queries_per_connection 2,
// two held queries stop the connection's reading: a malformed packet
// after them is answered (FORMERR) only once one of them is, after their
// release; with room for a third, it is answered at once.
func TestTCPQueriesPerConnection(t *testing.T) {
	for _, perConn := range []int{2, 3} {
		t.Run(fmt.Sprint(perConn), func(t *testing.T) {
			e := newEnv(t, func(c *resolver.Config) {
				c.TCPMaxQueriesPerConnection = perConn
				c.Upstream.Timeout = 4 * time.Second
			})
			c := e.tcpClient("")
			twoQD := query("x.test", dns.TypeA, 0, false)
			twoQD.Question = append(twoQD.Question, twoQD.Question[0])
			twoQD.Id = badID
			writeTCP(t, c, holdQuery(t, "a", 1), holdQuery(t, "b", 2), mustPack(t, twoQD))
			eventually(t, "both queries held", func() bool { return e.up.held.Load() == 2 })
			if perConn == 2 {
				e.up.release() // else the FORMERR would never come
			}
			seen := map[uint16]bool{}
			for i := range 3 {
				b, closed := readTCP(t, c)
				if closed {
					t.Fatalf("closed after %v", seen)
				}
				id := mustUnpack(t, b).Id
				if i == 0 && (id == badID) != (perConn > 2) {
					t.Fatalf("first reply id %#x with %d queries per connection", id, perConn)
				}
				seen[id] = true
				e.up.release()
			}
			if !seen[1] || !seen[2] || !seen[badID] {
				t.Fatalf("replies %v, want ids 1, 2 and %#x", seen, badID)
			}
		})
	}
}
