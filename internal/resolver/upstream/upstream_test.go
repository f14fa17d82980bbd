package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// generous is the only time bound the tests assert: a failing Exchange must
// return well before it, with the short timeouts the tests configure.
const generous = 5 * time.Second

// Timeouts for the tests. fast is for tests where every forwarder fails, so
// that they wait little; patient is for tests where a live forwarder must
// answer within one attempt, even on a loaded CI machine, for the counts
// to come out exact.
var (
	fast    = Config{Timeout: 100 * time.Millisecond, MaxTime: 400 * time.Millisecond}
	patient = Config{Timeout: time.Second, MaxTime: 4 * time.Second}
)

func TestExchangeAnswers(t *testing.T) {
	fwd := startFake(t, "127.0.0.1", answerWith(2))
	c, counters := newClient(t, Config{}, fwd.addr)

	q := question("ExAmPlE.CoM.", dns.TypeA)
	before := q.Copy()
	ans, err := c.Exchange(context.Background(), q)
	if err != nil {
		t.Fatalf("Exchange: %v", err)
	}
	if ans.Id != 4242 {
		t.Errorf("answer id %d, want the caller's 4242", ans.Id)
	}
	if got := ans.Question[0]; got != q.Question[0] {
		t.Errorf("answer question %v, want %v", got, q.Question[0])
	}
	if ans.Rcode != dns.RcodeSuccess || len(ans.Answer) != 2 {
		t.Errorf("answer rcode %s with %d records, want NOERROR with 2", dns.RcodeToString[ans.Rcode], len(ans.Answer))
	}
	if q.String() != before.String() {
		t.Errorf("Exchange modified the query:\n%v\nwas\n%v", q, before)
	}
	checkCounts(t, counters, map[string]uint64{"all-outqueries": 1})
	if n := answers(t, counters, "auth4"); n != 1 {
		t.Errorf("auth4 answers %d, want 1", n)
	}
}

// TestQueryShape checks what goes on the wire: the caller's question with
// its case, RD, the caller's CD and AD, our OPT with the caller's DO.
func TestQueryShape(t *testing.T) {
	fwd := startFake(t, "127.0.0.1", answerWith(1))
	c, _ := newClient(t, Config{}, fwd.addr)

	tests := []struct {
		name         string
		edns, do     bool
		cd, ad, noRD bool
	}{
		{name: "plain"},
		{name: "edns", edns: true},
		{name: "edns do", edns: true, do: true},
		{name: "cd ad", cd: true, ad: true},
		{name: "client without rd", noRD: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := new(dns.Msg)
			q.SetQuestion(fmt.Sprintf("Q%d.ExAmPlE.oRg.", i), dns.TypeAAAA)
			q.CheckingDisabled, q.AuthenticatedData, q.RecursionDesired = tt.cd, tt.ad, !tt.noRD
			if tt.edns {
				q.SetEdns0(4096, tt.do)
				opt := q.IsEdns0()
				opt.Option = append(opt.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
			}
			if _, err := c.Exchange(context.Background(), q); err != nil {
				t.Fatalf("Exchange: %v", err)
			}
			seen := fwd.seen()
			got := seen[len(seen)-1].msg
			if got.Question[0] != q.Question[0] {
				t.Errorf("sent question %v, want %v (case kept)", got.Question[0], q.Question[0])
			}
			if !got.RecursionDesired || got.CheckingDisabled != tt.cd || got.AuthenticatedData != tt.ad {
				t.Errorf("sent RD=%v CD=%v AD=%v, want RD=true CD=%v AD=%v",
					got.RecursionDesired, got.CheckingDisabled, got.AuthenticatedData, tt.cd, tt.ad)
			}
			opt := got.IsEdns0()
			if opt == nil || opt.UDPSize() != DefaultUDPSize || opt.Do() != tt.do || len(opt.Option) != 0 {
				t.Errorf("sent OPT %v, want UDP size %d, DO=%v, no options", opt, DefaultUDPSize, tt.do)
			}
		})
	}
}

func TestIDsAreRandomAndFresh(t *testing.T) {
	fwd := startFake(t, "127.0.0.1", answerWith(1))
	c, _ := newClient(t, Config{}, fwd.addr)
	const n = 300
	for i := range n {
		q := question(fmt.Sprintf("n%d.example.", i), dns.TypeA)
		q.Id = 1 // the same caller id every time: what goes out must not follow it
		ans, err := c.Exchange(context.Background(), q)
		if err != nil {
			t.Fatalf("Exchange %d: %v", i, err)
		}
		if ans.Id != 1 {
			t.Fatalf("answer id %d, want the caller's 1", ans.Id)
		}
	}
	ids := map[uint16]bool{}
	sequential := 0
	seen := fwd.seen()
	for i, s := range seen {
		ids[s.msg.Id] = true
		if i > 0 && s.msg.Id == seen[i-1].msg.Id+1 {
			sequential++
		}
	}
	// 300 draws from 65536 values collide a few times at most; a counter
	// or a constant would not.
	if len(ids) < n-10 || sequential > 5 {
		t.Errorf("%d distinct ids in %d queries, %d sequential: not random", len(ids), n, sequential)
	}
}

func TestSourcePorts(t *testing.T) {
	t.Run("new socket per query changes port", func(t *testing.T) {
		fwd := startFake(t, "127.0.0.1", answerWith(1))
		c, _ := newClient(t, Config{MaxUDPUses: 1}, fwd.addr)
		for i := range 30 {
			if _, err := c.Exchange(context.Background(), question(fmt.Sprintf("p%d.example.", i), dns.TypeA)); err != nil {
				t.Fatal(err)
			}
		}
		ports := map[uint16]bool{}
		for _, s := range fwd.seen() {
			ports[s.srcPort] = true
		}
		// The kernel picks each port at random from ~28000; 30 sockets
		// share one rarely, and never mostly.
		if len(ports) < 20 {
			t.Errorf("%d distinct source ports over 30 fresh sockets", len(ports))
		}
	})
	t.Run("pooled socket is reused until recycled", func(t *testing.T) {
		fwd := startFake(t, "127.0.0.1", answerWith(1))
		c, _ := newClient(t, Config{MaxUDPUses: 5}, fwd.addr)
		for i := range 10 {
			if _, err := c.Exchange(context.Background(), question(fmt.Sprintf("r%d.example.", i), dns.TypeA)); err != nil {
				t.Fatal(err)
			}
		}
		seen := fwd.seen()
		for i := 1; i < 5; i++ {
			if seen[i].srcPort != seen[0].srcPort {
				t.Errorf("query %d from port %d, want the pooled socket's %d", i, seen[i].srcPort, seen[0].srcPort)
			}
		}
		if seen[5].srcPort == seen[0].srcPort {
			t.Errorf("query 5 still from port %d after the socket's 5 uses", seen[5].srcPort)
		}
	})
}

func TestCaseOfQuestion(t *testing.T) {
	t.Run("echoed", func(t *testing.T) {
		fwd := startFake(t, "127.0.0.1", answerWith(1))
		c, counters := newClient(t, Config{}, fwd.addr)
		ans, err := c.Exchange(context.Background(), question("wWw.ExAmPlE.nEt.", dns.TypeA))
		if err != nil {
			t.Fatal(err)
		}
		if ans.Question[0].Name != "wWw.ExAmPlE.nEt." {
			t.Errorf("answer question %q", ans.Question[0].Name)
		}
		checkCounts(t, counters, map[string]uint64{"all-outqueries": 1})
	})
	t.Run("forwarder lowercases", func(t *testing.T) {
		fwd := startFake(t, "127.0.0.1", lowerCase())
		c, counters := newClient(t, Config{}, fwd.addr)
		ans, err := c.Exchange(context.Background(), question("wWw.ExAmPlE.nEt.", dns.TypeA))
		if err != nil {
			t.Fatal(err)
		}
		// Accepted (forwarders that fold case exist, and the name matches
		// case-insensitively), counted, and the client gets its own case.
		if ans.Question[0].Name != "wWw.ExAmPlE.nEt." {
			t.Errorf("answer question %q, want the client's case", ans.Question[0].Name)
		}
		checkCounts(t, counters, map[string]uint64{"all-outqueries": 1, "case-mismatches": 1})
	})
}

// TestIgnoredPackets: a packet that is not the answer is ignored and
// counted, and the real answer read after it is taken.
func TestIgnoredPackets(t *testing.T) {
	tests := []struct {
		name    string
		bad     func(q *dns.Msg, raw []byte) [][]byte
		counter string
	}{
		{"garbage", garbage, "server-parse-errors"},
		{"text", text, "unexpected-packets"},
		{"short", shortPacket, "server-parse-errors"},
		{"our id then garbage", sameIDGarbage, "server-parse-errors"},
		{"wrong id", wrongID(1), "unexpected-packets"},
		{"other name", otherName(), "unexpected-packets"},
		{"other type", otherType(), "unexpected-packets"},
		{"not a response", echoQuery, "unexpected-packets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fwd := startFake(t, "127.0.0.1", before(tt.bad))
			c, counters := newClient(t, Config{}, fwd.addr)
			q := question("Ignore.Example.", dns.TypeA)
			ans, err := c.Exchange(context.Background(), q)
			if err != nil {
				t.Fatalf("Exchange: %v", err)
			}
			if ans.Question[0] != q.Question[0] || len(ans.Answer) != 1 {
				t.Errorf("answer %v", ans)
			}
			checkCounts(t, counters, map[string]uint64{"all-outqueries": 1, tt.counter: 1})
			// The socket that read a stray packet is not reused.
			if _, err := c.Exchange(context.Background(), q); err != nil {
				t.Fatal(err)
			}
			if seen := fwd.seen(); seen[0].srcPort == seen[1].srcPort {
				t.Errorf("socket reused after a stray packet (port %d)", seen[0].srcPort)
			}
		})
	}
}

func TestSpoofNearMisses(t *testing.T) {
	t.Run("too many wrong ids: answer dropped, next forwarder", func(t *testing.T) {
		spoofed := startFake(t, "127.0.0.1", before(wrongID(2)))
		good := startFake(t, "127.0.0.1", answerWith(1))
		c, counters := newClient(t, Config{}, spoofed.addr, good.addr)
		if _, err := c.Exchange(context.Background(), question("spoof.example.", dns.TypeA)); err != nil {
			t.Fatalf("Exchange: %v", err)
		}
		if n := len(good.seen()); n != 1 {
			t.Errorf("second forwarder asked %d times, want 1", n)
		}
		checkCounts(t, counters, map[string]uint64{"all-outqueries": 2, "unexpected-packets": 2, "spoof-prevents": 1})
	})
	t.Run("check off", func(t *testing.T) {
		spoofed := startFake(t, "127.0.0.1", before(wrongID(2)))
		c, counters := newClient(t, Config{NearMissMax: -1}, spoofed.addr)
		if _, err := c.Exchange(context.Background(), question("spoof.example.", dns.TypeA)); err != nil {
			t.Fatalf("Exchange: %v", err)
		}
		checkCounts(t, counters, map[string]uint64{"all-outqueries": 1, "unexpected-packets": 2})
	})
}

// TestFailover: a forwarder that is down, silent or failing costs one
// attempt, and the next forwarder answers.
func TestFailover(t *testing.T) {
	tests := []struct {
		name  string
		first func(t *testing.T) netip.AddrPort
		want  map[string]uint64
	}{
		{"closed port", func(t *testing.T) netip.AddrPort { return closedPort(t) }, map[string]uint64{"all-outqueries": 2, "unreachables": 1}},
		{"silent", func(t *testing.T) netip.AddrPort { return startFake(t, "127.0.0.1", silent).addr },
			map[string]uint64{"all-outqueries": 2, "outgoing-timeouts": 1, "outgoing4-timeouts": 1}},
		{"slow", func(t *testing.T) netip.AddrPort {
			return startFake(t, "127.0.0.1", delayed(patient.Timeout+500*time.Millisecond, answerWith(1))).addr
		}, map[string]uint64{"all-outqueries": 2, "outgoing-timeouts": 1, "outgoing4-timeouts": 1}},
		{"servfail", func(t *testing.T) netip.AddrPort {
			return startFake(t, "127.0.0.1", rcodeOnly(dns.RcodeServerFailure)).addr
		}, map[string]uint64{"all-outqueries": 2}},
		{"badvers", func(t *testing.T) netip.AddrPort {
			return startFake(t, "127.0.0.1", extendedRcode(dns.RcodeBadVers)).addr
		}, map[string]uint64{"all-outqueries": 2}},
		{"badcookie", func(t *testing.T) netip.AddrPort {
			return startFake(t, "127.0.0.1", extendedRcode(dns.RcodeBadCookie)).addr
		}, map[string]uint64{"all-outqueries": 2}},
		{"refused without question", func(t *testing.T) netip.AddrPort {
			return startFake(t, "127.0.0.1", func(q *dns.Msg, _ []byte) [][]byte {
				r := new(dns.Msg)
				r.SetRcode(q, dns.RcodeRefused)
				r.Question = nil
				return [][]byte{wire(r)}
			}).addr
		}, map[string]uint64{"all-outqueries": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := tt.first(t)
			good := startFake(t, "127.0.0.1", answerWith(1))
			c, counters := newClient(t, patient, first, good.addr)
			ans, err := c.Exchange(context.Background(), question("fail.Over.", dns.TypeA))
			if err != nil {
				t.Fatalf("Exchange: %v", err)
			}
			if ans.Rcode != dns.RcodeSuccess || len(ans.Answer) != 1 {
				t.Errorf("answer %v", ans)
			}
			checkCounts(t, counters, tt.want)
		})
	}
}

// extendedRcode answers with rcode, which needs an OPT record to carry its
// upper bits (BADVERS, BADCOOKIE).
func extendedRcode(rcode int) func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, _ []byte) [][]byte {
		r := new(dns.Msg)
		r.SetReply(q)
		r.SetEdns0(1232, false)
		r.Rcode = rcode
		return [][]byte{wire(r)}
	}
}

// TestFailingForwarderTriedLast: after a failure the forwarder rests, and
// the next queries go to the other one first.
func TestFailingForwarderTriedLast(t *testing.T) {
	tests := []struct {
		name    string
		failing func(t *testing.T) netip.AddrPort
		counter string
	}{
		{"closed port", func(t *testing.T) netip.AddrPort { return closedPort(t) }, "unreachables"},
		{"refusing", func(t *testing.T) netip.AddrPort {
			return startFake(t, "127.0.0.1", rcodeOnly(dns.RcodeRefused)).addr
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			good := startFake(t, "127.0.0.1", answerWith(1))
			c, counters := newClient(t, patient, tt.failing(t), good.addr)
			for i := range 5 {
				if _, err := c.Exchange(context.Background(), question(fmt.Sprintf("q%d.example.", i), dns.TypeA)); err != nil {
					t.Fatalf("Exchange %d: %v", i, err)
				}
			}
			// One attempt at the failing forwarder (in configured order,
			// before any measure), then every query straight to the good one.
			want := map[string]uint64{"all-outqueries": 6}
			if tt.counter != "" {
				want[tt.counter] = 1
			}
			checkCounts(t, counters, want)
			if n := len(good.seen()); n != 5 {
				t.Errorf("good forwarder asked %d times, want 5", n)
			}
		})
	}
}

// TestAllFail: when no forwarder gives an answer, Exchange returns
// ErrAllFailed within its bound, and each fault is counted.
func TestAllFail(t *testing.T) {
	fake := func(respond func(q *dns.Msg, raw []byte) [][]byte) func(t *testing.T) netip.AddrPort {
		return func(t *testing.T) netip.AddrPort { return startFake(t, "127.0.0.1", respond).addr }
	}
	tests := []struct {
		name    string
		fwd     func(t *testing.T) netip.AddrPort
		counter string // must be non-zero
		maxOut  uint64 // all-outqueries bound: 2 forwarders × 2 rounds
		cfg     Config
	}{
		{"closed ports", func(t *testing.T) netip.AddrPort { return closedPort(t) }, "unreachables", 4, fast},
		{"silent", fake(silent), "outgoing4-timeouts", 4, fast},
		{"garbage only", fake(garbage), "server-parse-errors", 4, fast},
		{"wrong ids only", fake(wrongID(1)), "unexpected-packets", 4, fast},
		{"other question only", fake(otherName()), "unexpected-packets", 4, fast},
		// A failure rcode is asked once per forwarder, not again next round
		// (patient: a reply late for its attempt would be a timeout, asked again).
		{"servfail", fake(rcodeOnly(dns.RcodeServerFailure)), "all-outqueries", 2, patient},
		{"refused", fake(rcodeOnly(dns.RcodeRefused)), "all-outqueries", 2, patient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, counters := newClient(t, tt.cfg, tt.fwd(t), tt.fwd(t))
			start := time.Now()
			ans, err := c.Exchange(context.Background(), question("all.fail.", dns.TypeA))
			elapsed := time.Since(start)
			if !errors.Is(err, ErrAllFailed) || ans != nil {
				t.Fatalf("Exchange = %v, %v; want ErrAllFailed", ans, err)
			}
			if elapsed > generous {
				t.Errorf("returned after %v", elapsed)
			}
			snap := counters.snapshot(t)
			if snap[tt.counter] == 0 {
				t.Errorf("%s not counted: %v", tt.counter, snap)
			}
			if snap["all-outqueries"] > tt.maxOut || snap["all-outqueries"] == 0 {
				t.Errorf("all-outqueries %d, want 1..%d", snap["all-outqueries"], tt.maxOut)
			}
		})
	}
}

func TestTruncatedAnswerOverTCP(t *testing.T) {
	fwd := startFake(t, "127.0.0.1", truncated())
	fwd.serveTCP(answerWith(60), false)
	c, counters := newClient(t, Config{}, fwd.addr)

	for i := range 3 {
		q := question(fmt.Sprintf("Big%d.Example.", i), dns.TypeA)
		ans, err := c.Exchange(context.Background(), q)
		if err != nil {
			t.Fatalf("Exchange %d: %v", i, err)
		}
		if len(ans.Answer) != 60 || ans.Truncated || ans.Question[0] != q.Question[0] || ans.Id != q.Id {
			t.Fatalf("answer: %d records, TC=%v, question %v, id %d", len(ans.Answer), ans.Truncated, ans.Question[0], ans.Id)
		}
		if wire := pack(t, ans); len(wire) <= 512 {
			t.Fatalf("answer of %d bytes, the test wants one over 512", len(wire))
		}
	}
	// Every query tried UDP first (the forwarder is not known to truncate
	// everything) and then TCP, on one kept connection.
	checkCounts(t, counters, map[string]uint64{"all-outqueries": 6, "tcp-outqueries": 3})
	if n := fwd.connsAccepted(); n != 1 {
		t.Errorf("%d TCP connections for 3 queries, want 1 reused", n)
	}
}

// TestTCPConnectionClosedByForwarder: a kept connection the forwarder has
// closed meanwhile is detected and the query sent again on a new one.
func TestTCPConnectionClosedByForwarder(t *testing.T) {
	fwd := startFake(t, "127.0.0.1", truncated())
	fwd.serveTCP(answerWith(60), true)
	c, _ := newClient(t, Config{}, fwd.addr)
	for i := range 3 {
		if _, err := c.Exchange(context.Background(), question(fmt.Sprintf("big%d.example.", i), dns.TypeA)); err != nil {
			t.Fatalf("Exchange %d: %v", i, err)
		}
	}
	if n := fwd.connsAccepted(); n != 3 {
		t.Errorf("%d TCP connections, want 3 (each closed by the forwarder)", n)
	}
}

// TestTruncatedThenTCPFails: TCP refused at the truncating forwarder; the
// next forwarder is asked over TCP directly.
func TestTruncatedThenTCPFails(t *testing.T) {
	tc := startFake(t, "127.0.0.1", truncated()) // no TCP listener: connection refused
	good := startFake(t, "127.0.0.1", answerWith(1))
	good.serveTCP(answerWith(60), false)
	c, counters := newClient(t, patient, tc.addr, good.addr)
	ans, err := c.Exchange(context.Background(), question("big.example.", dns.TypeA))
	if err != nil {
		t.Fatalf("Exchange: %v", err)
	}
	if len(ans.Answer) != 60 {
		t.Errorf("answer with %d records, want the TCP one's 60", len(ans.Answer))
	}
	checkCounts(t, counters, map[string]uint64{"all-outqueries": 3, "tcp-outqueries": 2, "unreachables": 1})
}

func TestConcurrentQueries(t *testing.T) {
	a := startFake(t, "127.0.0.1", answerWith(1))
	b := startFake(t, "127.0.0.1", delayed(time.Millisecond, answerWith(1)))
	c, counters := newClient(t, Config{MaxUDPUses: 7}, a.addr, b.addr)

	const workers, each = 32, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				q := question(fmt.Sprintf("W%d-Q%d.Example.", w, i), dns.TypeA)
				q.Id = uint16(w*each + i)
				ans, err := c.Exchange(context.Background(), q)
				switch {
				case err != nil:
					errs <- err
				case ans.Id != q.Id || ans.Question[0] != q.Question[0] ||
					len(ans.Answer) != 1 || !strings.EqualFold(ans.Answer[0].Header().Name, q.Question[0].Name):
					errs <- fmt.Errorf("query %v got answer %v", q.Question[0], ans)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	snap := counters.snapshot(t)
	if snap["all-outqueries"] != workers*each || snap["unexpected-packets"] != 0 {
		t.Errorf("counters %v, want %d out-queries and no unexpected packets", snap, workers*each)
	}
	if len(a.seen())+len(b.seen()) != workers*each {
		t.Errorf("forwarders saw %d+%d queries", len(a.seen()), len(b.seen()))
	}
}

func TestIPv6Forwarder(t *testing.T) {
	// A machine without IPv6 on loopback cannot run this test; every
	// machine we test on has ::1, so a skip here says so loudly.
	if c, err := net.ListenPacket("udp", "[::1]:0"); err != nil {
		t.Skipf("skipped: no IPv6 loopback (::1) on this machine: %v", err)
	} else {
		c.Close()
	}
	good := startFake(t, "::1", answerWith(1))
	silentV6 := startFake(t, "::1", silent)
	c, counters := newClient(t, patient, silentV6.addr, good.addr)
	if _, err := c.Exchange(context.Background(), question("v6.example.", dns.TypeAAAA)); err != nil {
		t.Fatalf("Exchange: %v", err)
	}
	checkCounts(t, counters, map[string]uint64{
		"all-outqueries": 2, "ipv6-outqueries": 2, "outgoing-timeouts": 1, "outgoing6-timeouts": 1,
	})
	if answers(t, counters, "auth6") != 1 || answers(t, counters, "auth4") != 0 {
		t.Errorf("answers by family: %v", counters.snapshot(t))
	}
}

func TestContext(t *testing.T) {
	t.Run("cancelled", func(t *testing.T) {
		fwd := startFake(t, "127.0.0.1", silent)
		c, counters := newClient(t, Config{Timeout: 2 * time.Second, MaxTime: 4 * time.Second}, fwd.addr)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		_, err := c.Exchange(ctx, question("cancel.example.", dns.TypeA))
		if !errorsIsAll(err, ErrAllFailed, context.Canceled) {
			t.Fatalf("err = %v, want ErrAllFailed and context.Canceled", err)
		}
		if elapsed := time.Since(start); elapsed > generous {
			t.Errorf("returned after %v", elapsed)
		}
		// Cancellation is the caller's doing, not a timeout of the forwarder.
		checkCounts(t, counters, map[string]uint64{"all-outqueries": 1})
	})
	t.Run("deadline sooner than MaxTime", func(t *testing.T) {
		fwd := startFake(t, "127.0.0.1", silent)
		c, _ := newClient(t, Config{Timeout: 2 * time.Second, MaxTime: 4 * time.Second}, fwd.addr)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := c.Exchange(ctx, question("deadline.example.", dns.TypeA))
		if !errorsIsAll(err, ErrAllFailed, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ErrAllFailed and context.DeadlineExceeded", err)
		}
		if elapsed := time.Since(start); elapsed > generous {
			t.Errorf("returned after %v", elapsed)
		}
	})
}

func TestMaxInFlight(t *testing.T) {
	fwd := startFake(t, "127.0.0.1", silent)
	c, counters := newClient(t, Config{Timeout: time.Second, MaxTime: time.Second, MaxInFlight: 1}, fwd.addr)
	done := make(chan error, 1)
	go func() {
		_, err := c.Exchange(context.Background(), question("holder.example.", dns.TypeA))
		done <- err
	}()
	for len(fwd.seen()) == 0 { // the first query holds the only slot once it is on the wire
		time.Sleep(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Exchange(ctx, question("waiter.example.", dns.TypeA))
	if !errors.Is(err, ErrAllFailed) {
		t.Fatalf("err = %v, want ErrAllFailed", err)
	}
	if n := counters.snapshot(t)["resource-limits"]; n != 1 {
		t.Errorf("resource-limits %d, want 1", n)
	}
	if len(fwd.seen()) != 1 {
		t.Errorf("the waiting query went out")
	}
	if err := <-done; !errors.Is(err, ErrAllFailed) {
		t.Errorf("holder: %v", err)
	}
}

func TestBadQueries(t *testing.T) {
	fwd := startFake(t, "127.0.0.1", answerWith(1))
	c, counters := newClient(t, Config{}, fwd.addr)
	two := question("a.example.", dns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	resp := question("a.example.", dns.TypeA)
	resp.Response = true
	notify := question("a.example.", dns.TypeSOA)
	notify.Opcode = dns.OpcodeNotify
	longLabel := question(strings.Repeat("a", 64)+".example.", dns.TypeA)
	for name, q := range map[string]*dns.Msg{
		"nil": nil, "no question": new(dns.Msg), "two questions": two, "response": resp,
		"notify": notify, "label over 63": longLabel,
	} {
		if _, err := c.Exchange(context.Background(), q); !errors.Is(err, ErrBadQuery) {
			t.Errorf("%s: err = %v, want ErrBadQuery", name, err)
		}
	}
	checkCounts(t, counters, nil)
}

func TestClosed(t *testing.T) {
	fwd := startFake(t, "127.0.0.1", answerWith(1))
	c, _ := newClient(t, Config{}, fwd.addr)
	if _, err := c.Exchange(context.Background(), question("a.example.", dns.TypeA)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if _, err := c.Exchange(context.Background(), question("a.example.", dns.TypeA)); !errors.Is(err, ErrClosed) {
		t.Errorf("err = %v, want ErrClosed", err)
	}
}

func TestNewValidates(t *testing.T) {
	ok := netip.MustParseAddrPort("192.0.2.53:53")
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{Forwarders: []netip.AddrPort{ok}}, true},
		{"ipv6 and mapped", Config{Forwarders: []netip.AddrPort{
			netip.MustParseAddrPort("[2001:db8::53]:53"), netip.MustParseAddrPort("[::ffff:192.0.2.1]:53")}}, true},
		{"no forwarders", Config{}, false},
		{"zero port", Config{Forwarders: []netip.AddrPort{netip.MustParseAddrPort("192.0.2.1:0")}}, false},
		{"invalid", Config{Forwarders: []netip.AddrPort{{}}}, false},
		{"unspecified", Config{Forwarders: []netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:53")}}, false},
		{"multicast", Config{Forwarders: []netip.AddrPort{netip.MustParseAddrPort("224.0.0.251:5353")}}, false},
		{"zone", Config{Forwarders: []netip.AddrPort{netip.MustParseAddrPort("[fe80::1%eth0]:53")}}, false},
		{"duplicate", Config{Forwarders: []netip.AddrPort{ok, ok}}, false},
		{"duplicate mapped", Config{Forwarders: []netip.AddrPort{ok, netip.MustParseAddrPort("[::ffff:192.0.2.53]:53")}}, false},
		{"negative timeout", Config{Forwarders: []netip.AddrPort{ok}, Timeout: -1}, false},
		{"timeout over max time", Config{Forwarders: []netip.AddrPort{ok}, Timeout: 5 * time.Second}, false},
		{"udp size under 512", Config{Forwarders: []netip.AddrPort{ok}, UDPSize: 511}, false},
		{"negative rounds", Config{Forwarders: []netip.AddrPort{ok}, Rounds: -1}, false},
		{"negative in-flight", Config{Forwarders: []netip.AddrPort{ok}, MaxInFlight: -1}, false},
		{"near miss off", Config{Forwarders: []netip.AddrPort{ok}, NearMissMax: -1}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(tt.cfg)
			if (err == nil) != tt.ok {
				t.Fatalf("New: %v, want ok=%v", err, tt.ok)
			}
			if c != nil {
				c.Close()
			}
		})
	}
	many := Config{}
	for i := range MaxForwarders + 1 {
		many.Forwarders = append(many.Forwarders, netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), uint16(1000+i)))
	}
	if _, err := New(many); err == nil {
		t.Errorf("New accepted %d forwarders", len(many.Forwarders))
	}
}

func TestOrder(t *testing.T) {
	now := time.Now()
	mk := func(index int, srtt time.Duration, fails int, restUntil time.Time) *forwarder {
		return &forwarder{addr: netip.AddrPortFrom(netip.MustParseAddr("192.0.2.1"), uint16(index+1)), srtt: srtt,
			updated: now, fails: fails, restUntil: restUntil}
	}
	names := func(fs []*forwarder) []int {
		var out []int
		for _, f := range fs {
			out = append(out, int(f.addr.Port())-1)
		}
		return out
	}
	tests := []struct {
		name    string
		fwds    []*forwarder
		fastest []int
		ordered []int
	}{
		{"unmeasured: configured order", []*forwarder{mk(0, 0, 0, time.Time{}), mk(1, 0, 0, time.Time{})}, []int{0, 1}, []int{0, 1}},
		{"fastest first", []*forwarder{mk(0, 30*time.Millisecond, 0, time.Time{}), mk(1, 5*time.Millisecond, 0, time.Time{}),
			mk(2, 10*time.Millisecond, 0, time.Time{})}, []int{1, 2, 0}, []int{0, 1, 2}},
		{"resting last, soonest back first", []*forwarder{mk(0, time.Millisecond, 1, now.Add(5*time.Second)),
			mk(1, time.Second, 0, time.Time{}), mk(2, time.Millisecond, 2, now.Add(time.Second))}, []int{1, 2, 0}, []int{1, 2, 0}},
		// Rest over, but no probe has answered yet: still after the healthy
		// ones, whatever its estimate, so that no client query pays for
		// finding out.
		{"rest over, not probed back", []*forwarder{mk(0, 50*time.Millisecond, 0, time.Time{}),
			mk(1, 5*time.Millisecond, 3, now.Add(-time.Second))}, []int{0, 1}, []int{0, 1}},
		{"ordered: a slow first forwarder stays first", []*forwarder{mk(0, 300*time.Millisecond, 0, time.Time{}),
			mk(1, time.Millisecond, 0, time.Time{})}, []int{1, 0}, []int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := names(order(now, tt.fwds, StrategyFastest, nil)); fmt.Sprint(got) != fmt.Sprint(tt.fastest) {
				t.Errorf("fastest: order %v, want %v", got, tt.fastest)
			}
			if got := names(order(now, tt.fwds, StrategyOrdered, nil)); fmt.Sprint(got) != fmt.Sprint(tt.ordered) {
				t.Errorf("ordered: order %v, want %v", got, tt.ordered)
			}
		})
	}
	t.Run("estimates decay", func(t *testing.T) {
		f := mk(0, 80*time.Millisecond, 0, time.Time{})
		f.updated = now.Add(-3 * srttHalfLife)
		if got := f.decayedSRTT(now); got < 9*time.Millisecond || got > 11*time.Millisecond {
			t.Errorf("80ms after 3 half-lives = %v, want 10ms", got)
		}
	})
}
