package resolver_test

import (
	"fmt"
	"net"
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
