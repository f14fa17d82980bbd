package upstream

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// asked counts the client queries a fake saw (probes, ". NS", aside).
func asked(f *fakeForwarder) int {
	n := 0
	for _, q := range f.seen() {
		if q.msg.Question[0].Name != "." {
			n++
		}
	}
	return n
}

// TestStrategies: fastest moves to the quicker forwarder once it has
// measured both; ordered stays on the first as long as it answers.
func TestStrategies(t *testing.T) {
	for _, tt := range []struct {
		s                  Strategy
		wantSlow, wantFast int
	}{
		{StrategyFastest, 1, 9}, // the first query in configured order, then the measured fastest
		{StrategyOrdered, 10, 0},
	} {
		t.Run(tt.s.String(), func(t *testing.T) {
			slow := startFake(t, "127.0.0.1", delayed(30*time.Millisecond, answerWith(1)))
			quick := startFake(t, "127.0.0.1", answerWith(1))
			cfg := patient
			cfg.Strategy = tt.s
			c, _ := newClient(t, cfg, slow.addr, quick.addr)
			for i := range 10 {
				if _, err := c.Exchange(context.Background(), question(fmt.Sprintf("s%d.example.", i), dns.TypeA)); err != nil {
					t.Fatalf("Exchange %d: %v", i, err)
				}
			}
			if s, q := asked(slow), asked(quick); s != tt.wantSlow || q != tt.wantFast {
				t.Errorf("slow asked %d, quick %d; want %d, %d", s, q, tt.wantSlow, tt.wantFast)
			}
			if _, s := c.Status(); s != tt.s {
				t.Errorf("Status strategy %v", s)
			}
		})
	}
}

func TestParseStrategy(t *testing.T) {
	for in, want := range map[string]Strategy{"": StrategyFastest, "fastest": StrategyFastest, "ordered": StrategyOrdered} {
		if got, err := ParseStrategy(in); err != nil || got != want {
			t.Errorf("ParseStrategy(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseStrategy("random"); err == nil {
		t.Error("ParseStrategy accepted random")
	}
	if _, err := New(Config{Forwarders: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53")}, Strategy: 9}); err == nil {
		t.Error("New accepted strategy 9")
	}
}

// switchable answers while on is true and is a black hole (reads, never
// answers) otherwise.
func switchable(on *atomic.Bool) func(q *dns.Msg, raw []byte) [][]byte {
	return func(q *dns.Msg, raw []byte) [][]byte {
		if !on.Load() {
			return nil
		}
		return answerWith(1)(q, raw)
	}
}

// TestBlackholedForwarderSkippedAndProbedBack: the first forwarder of an
// ordered set goes black. One client query pays its timeout; the next go
// straight to the second; its status and counters say so; when it answers
// again a background probe (not a client query) brings it back first.
func TestBlackholedForwarderSkippedAndProbedBack(t *testing.T) {
	var on atomic.Bool
	first := startFake(t, "127.0.0.1", switchable(&on))
	second := startFake(t, "127.0.0.1", answerWith(1))
	cfg := Config{Timeout: 300 * time.Millisecond, MaxTime: 2 * time.Second, Strategy: StrategyOrdered}
	c, counters := newClient(t, cfg, first.addr, second.addr)
	// 20 queries over 2.5 s: past its first rests (1 s, then 2 s), when
	// probes go out, but no client query is handed to it.
	for i := range 20 {
		if _, err := c.Exchange(context.Background(), question(fmt.Sprintf("b%d.example.", i), dns.TypeA)); err != nil {
			t.Fatalf("Exchange %d: %v", i, err)
		}
		time.Sleep(125 * time.Millisecond)
	}
	if n := asked(first); n != 1 {
		t.Errorf("black-holed forwarder asked %d client queries, want 1 (then skipped, probed in the background)", n)
	}
	if st, _ := c.Status(); st[0].Probes == 0 {
		t.Errorf("no background probe while it was down: %+v", st[0])
	}
	if n := counters.get(t, "outgoing-timeouts"); n != 1 {
		t.Errorf("outgoing-timeouts %d, want 1", n)
	}
	st, _ := c.Status()
	if st[0].Up || st[0].Timeouts != 1 || st[0].Answers != 0 || !st[1].Up || st[1].Answers != 20 {
		t.Errorf("status %+v", st)
	}
	on.Store(true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ = c.Status()
		if st[0].Up {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not probed back within 10 s: %+v", st[0])
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st[0].Probes == 0 {
		t.Errorf("up again without a probe: %+v", st[0])
	}
	if _, err := c.Exchange(context.Background(), question("back.example.", dns.TypeA)); err != nil {
		t.Fatal(err)
	}
	if n := asked(first); n != 2 {
		t.Errorf("first forwarder asked %d client queries after coming back, want 2", n)
	}
	if n := counters.get(t, "all-outqueries"); n != 22 {
		t.Errorf("all-outqueries %d, want 22 (probes are not client out-queries)", n)
	}
}

// TestSetForwardersUnderLoad swaps the set while queries run (go test
// -race): no query fails, a bad set changes nothing, and after the last
// swap the queries go to the new set only.
func TestSetForwardersUnderLoad(t *testing.T) {
	a := startFake(t, "127.0.0.1", answerWith(1))
	b := startFake(t, "127.0.0.1", answerWith(1))
	d := startFake(t, "127.0.0.1", delayed(5*time.Millisecond, answerWith(1)))
	c, _ := newClient(t, patient, a.addr, b.addr)

	var failures atomic.Int64
	var done atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := c.Exchange(context.Background(), question(fmt.Sprintf("w%d-%d.example.", w, i), dns.TypeA)); err != nil {
					failures.Add(1)
					t.Errorf("Exchange: %v", err)
				}
				done.Add(1)
			}
		})
	}
	sets := []struct {
		fw []netip.AddrPort
		s  Strategy
	}{
		{[]netip.AddrPort{d.addr}, StrategyOrdered},
		{[]netip.AddrPort{b.addr, d.addr}, StrategyFastest},
		{[]netip.AddrPort{a.addr, d.addr, b.addr}, StrategyOrdered},
		{[]netip.AddrPort{d.addr, a.addr}, StrategyFastest},
	}
	for round := range 5 {
		for _, s := range sets {
			time.Sleep(10 * time.Millisecond)
			if err := c.SetForwarders(s.fw, s.s); err != nil {
				t.Fatalf("round %d: SetForwarders(%v): %v", round, s.fw, err)
			}
		}
	}
	before, _ := c.Status()
	for _, bad := range []struct {
		fw []netip.AddrPort
		s  Strategy
	}{
		{nil, StrategyFastest},
		{[]netip.AddrPort{a.addr, a.addr}, StrategyFastest},
		{[]netip.AddrPort{netip.MustParseAddrPort("0.0.0.0:53")}, StrategyOrdered},
		{[]netip.AddrPort{a.addr}, Strategy(7)},
	} {
		if err := c.SetForwarders(bad.fw, bad.s); err == nil {
			t.Errorf("SetForwarders(%v, %v) accepted", bad.fw, bad.s)
		}
	}
	after, s := c.Status()
	if len(after) != len(before) || after[0].Addr != before[0].Addr || s != StrategyFastest {
		t.Errorf("a refused set changed the client: %v %v -> %v %v", before, StrategyFastest, after, s)
	}
	if err := c.SetForwarders([]netip.AddrPort{b.addr}, StrategyOrdered); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the queries started before the swap end within an attempt
	na, nd := asked(a), asked(d)
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if asked(a) != na || asked(d) != nd {
		t.Errorf("forwarders left out were still asked: a %d→%d, d %d→%d", na, asked(a), nd, asked(d))
	}
	if failures.Load() != 0 || done.Load() < 100 {
		t.Errorf("%d of %d queries failed", failures.Load(), done.Load())
	}
	t.Logf("%d queries over %d swaps", done.Load(), 5*len(sets)+1)
}

// FuzzParseStrategy: any string is either refused or read as a strategy
// whose name reads back as the same strategy.
func FuzzParseStrategy(f *testing.F) {
	for _, s := range []string{"", "fastest", "ordered", "Ordered", "fastest ", "random", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := ParseStrategy(in)
		if err != nil {
			if !strings.Contains(err.Error(), "fastest or ordered") {
				t.Errorf("ParseStrategy(%q): error %q does not say what to write", in, err)
			}
			return
		}
		if in != "" && in != s.String() {
			t.Errorf("ParseStrategy(%q) = %v", in, s)
		}
		if back, err := ParseStrategy(s.String()); err != nil || back != s {
			t.Errorf("%v does not read back: %v, %v", s, back, err)
		}
	})
}
