package stats

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// pdnsNames is the statistics API's full listing: the 90 names PowerDNS
// Recursor 4.8 lists, written out here rather than read from the code under
// test.
const pdnsNames = `all-outqueries, answers-slow, answers0-1, answers1-10, answers10-100, answers100-1000, auth4-answers-slow, auth4-answers0-1, auth4-answers1-10, auth4-answers10-100, auth4-answers100-1000, auth6-answers-slow, auth6-answers0-1, auth6-answers1-10, auth6-answers10-100, auth6-answers100-1000, cache-entries, cache-hits, cache-misses, case-mismatches, chain-resends, client-parse-errors, concurrent-queries, dlg-only-drops, dnssec-queries, dnssec-result-bogus, dnssec-result-indeterminate, dnssec-result-insecure, dnssec-result-nta, dnssec-result-secure, dnssec-validations, dont-outqueries, edns-ping-matches, edns-ping-mismatches, failed-host-entries, fd-usage, ignored-packets, ipv6-outqueries, ipv6-questions, malloc-bytes, max-mthread-stack, negcache-entries, no-packet-error, noedns-outqueries, noerror-answers, noping-outqueries, nsset-invalidations, nsspeeds-entries, nxdomain-answers, outgoing-timeouts, outgoing4-timeouts, outgoing6-timeouts, over-capacity-drops, packetcache-entries, packetcache-hits, packetcache-misses, policy-drops, policy-result-custom, policy-result-drop, policy-result-noaction, policy-result-nodata, policy-result-nxdomain, policy-result-truncate, qa-latency, questions, real-memory-usage, resource-limits, security-status, server-parse-errors, servfail-answers, spoof-prevents, sys-msec, tcp-client-overflow, tcp-clients, tcp-outqueries, tcp-questions, throttle-entries, throttled-out, throttled-outqueries, too-old-drops, udp-in-errors, udp-noport-errors, udp-recvbuf-errors, udp-sndbuf-errors, unauthorized-tcp, unauthorized-udp, unexpected-packets, unreachables, uptime, user-msec`

func pdnsStatNames() []string {
	var out []string
	for _, n := range strings.Split(pdnsNames, ",") {
		out = append(out, strings.TrimSpace(n))
	}
	return out
}

func newCounters(t testing.TB, cfg Config) *Counters {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// values maps every statistic to its value in one snapshot.
func values(c *Counters) map[string]string {
	m := map[string]string{}
	for _, it := range c.Snapshot() {
		m[it.Name] = it.Value
	}
	return m
}

// TestEveryNameOnceInOrder: the snapshot holds PowerDNS's names, each once,
// in PowerDNS's order, which is byte order.
func TestEveryNameOnceInOrder(t *testing.T) {
	want := pdnsStatNames()
	if len(want) != 90 {
		t.Fatalf("the PowerDNS list has %d names", len(want))
	}
	if !slices.IsSorted(want) {
		t.Fatal("the PowerDNS list is not in byte order")
	}
	snap := newCounters(t, Config{}).Snapshot()
	if len(snap) != len(want) {
		t.Fatalf("snapshot has %d items, want %d", len(snap), len(want))
	}
	for i, it := range snap {
		if it.Name != want[i] {
			t.Fatalf("item %d is %q, want %q", i, it.Name, want[i])
		}
		if _, err := strconv.ParseUint(it.Value, 10, 64); err != nil {
			t.Errorf("%s = %q is not a decimal number", it.Name, it.Value)
		}
	}
	// Every counter is behind exactly one name.
	seen := map[Counter]string{}
	for _, d := range defs {
		if d.kind != kindCounter && d.kind != kindUpDown {
			continue
		}
		if other, dup := seen[d.counter]; dup {
			t.Errorf("%s and %s share a counter", d.name, other)
		}
		seen[d.counter] = d.name
	}
	if len(seen) != int(numCounters) {
		t.Errorf("%d counters have a name, %d exist", len(seen), numCounters)
	}
}

// TestShardLayout: a shard's counters start a padding's width after the
// previous shard's end, whatever the slice's alignment, so two shards
// never share a cache line (nor an adjacent-line prefetch pair).
func TestShardLayout(t *testing.T) {
	var s Shard
	if off := unsafe.Offsetof(s.v); off < cacheLine {
		t.Errorf("counters at offset %d", off)
	}
	if size := unsafe.Sizeof(s); size%cacheLine != 0 {
		t.Errorf("shard size %d is not a multiple of %d", size, cacheLine)
	}
}

func TestLookup(t *testing.T) {
	c := newCounters(t, Config{})
	c.Shard(0).Inc(Questions)
	for _, name := range pdnsStatNames() {
		it, ok := c.Lookup(name)
		if !ok || it.Name != name {
			t.Errorf("Lookup(%q) = %+v, %v", name, it, ok)
		}
	}
	if it, _ := c.Lookup("questions"); it.Value != "1" {
		t.Errorf("questions = %q", it.Value)
	}
	for _, name := range []string{"", "uptimeAAAA", "Uptime", "uptime ", "pdns_recursor_uptime", "zzz", "a", "answers"} {
		if it, ok := c.Lookup(name); ok {
			t.Errorf("Lookup(%q) found %+v", name, it)
		}
	}
}

// TestEachCounterMovesItsName: a counter moves its own statistic and no
// other.
func TestEachCounterMovesItsName(t *testing.T) {
	for _, d := range defs {
		if d.kind != kindCounter && d.kind != kindUpDown {
			continue
		}
		c := newCounters(t, Config{Shards: 4})
		c.Shard(3).Add(d.counter, 2)
		c.Shard(1).Inc(d.counter)
		vals := values(c)
		if vals[d.name] != "3" {
			t.Errorf("%s = %s after adding 3", d.name, vals[d.name])
		}
		for _, o := range defs {
			if o.name != d.name && (o.kind == kindCounter || o.kind == kindUpDown) && vals[o.name] != "0" {
				t.Errorf("adding to %s moved %s to %s", d.name, o.name, vals[o.name])
			}
		}
	}
}

func TestEventsCountAsPowerDNS(t *testing.T) {
	type want map[string]string
	for _, tt := range []struct {
		name string
		do   func(s *Shard)
		want want
	}{
		{"udp v4 question", func(s *Shard) { s.Question(policy.TransportUDP, false) }, want{"questions": "1", "tcp-questions": "0", "ipv6-questions": "0"}},
		{"udp v6 question", func(s *Shard) { s.Question(policy.TransportUDP, true) }, want{"questions": "1", "ipv6-questions": "1"}},
		{"tcp v6 question", func(s *Shard) { s.Question(policy.TransportTCP, true) }, want{"questions": "1", "tcp-questions": "1", "ipv6-questions": "0"}},
		{"reply 0", func(s *Shard) { s.Replied(0, 0) }, want{"answers0-1": "1", "noerror-answers": "1"}},
		{"reply 1ms", func(s *Shard) { s.Replied(3, time.Millisecond) }, want{"answers0-1": "1", "nxdomain-answers": "1"}},
		{"reply 1ms+1µs", func(s *Shard) { s.Replied(2, time.Millisecond+time.Microsecond) }, want{"answers1-10": "1", "servfail-answers": "1"}},
		{"reply 10ms", func(s *Shard) { s.Replied(5, 10*time.Millisecond) }, want{"answers1-10": "1", "noerror-answers": "0", "servfail-answers": "0"}},
		{"reply 100ms", func(s *Shard) { s.Replied(0, 100*time.Millisecond) }, want{"answers10-100": "1"}},
		{"reply 1s", func(s *Shard) { s.Replied(0, time.Second) }, want{"answers100-1000": "1"}},
		{"reply 1s+1µs", func(s *Shard) { s.Replied(0, time.Second+time.Microsecond) }, want{"answers-slow": "1"}},
		{"reply negative", func(s *Shard) { s.Replied(0, -time.Second) }, want{"answers0-1": "1"}},
		{"packet cache hit", func(s *Shard) { s.PacketCacheHit(3) }, want{"packetcache-hits": "1", "nxdomain-answers": "1", "answers0-1": "0"}},
		{"udp v4 outquery", func(s *Shard) { s.OutQuery(false, false) }, want{"all-outqueries": "1", "ipv6-outqueries": "0", "tcp-outqueries": "0"}},
		{"udp v6 outquery", func(s *Shard) { s.OutQuery(true, false) }, want{"all-outqueries": "1", "ipv6-outqueries": "1"}},
		{"tcp v6 outquery", func(s *Shard) { s.OutQuery(true, true) }, want{"all-outqueries": "1", "ipv6-outqueries": "0", "tcp-outqueries": "1"}},
		{"upstream v4 5ms", func(s *Shard) { s.Answer(false, 5*time.Millisecond) }, want{"auth4-answers1-10": "1", "auth6-answers1-10": "0"}},
		{"upstream v6 2s", func(s *Shard) { s.Answer(true, 2*time.Second) }, want{"auth6-answers-slow": "1", "auth4-answers-slow": "0"}},
		{"upstream v6 500µs", func(s *Shard) { s.Answer(true, 500*time.Microsecond) }, want{"auth6-answers0-1": "1"}},
		{"timeout v4", func(s *Shard) { s.Timeout(false) }, want{"outgoing-timeouts": "1", "outgoing4-timeouts": "1", "outgoing6-timeouts": "0"}},
		{"timeout v6", func(s *Shard) { s.Timeout(true) }, want{"outgoing-timeouts": "1", "outgoing6-timeouts": "1"}},
		{"unreachable", (*Shard).Unreachable, want{"unreachables": "1"}},
		{"resource limit", (*Shard).ResourceLimit, want{"resource-limits": "1"}},
		{"unexpected", (*Shard).UnexpectedPacket, want{"unexpected-packets": "1"}},
		{"server parse", (*Shard).ServerParseError, want{"server-parse-errors": "1"}},
		{"spoof", (*Shard).SpoofPrevent, want{"spoof-prevents": "1"}},
		{"case", (*Shard).CaseMismatch, want{"case-mismatches": "1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newCounters(t, Config{Shards: 2})
			tt.do(c.Shard(1))
			vals := values(c)
			for k, v := range tt.want {
				if vals[k] != v {
					t.Errorf("%s = %s, want %s", k, vals[k], v)
				}
			}
		})
	}
}

// TestPowerDNSIdentity: questions = answers* + packetcache-hits +
// over-capacity-drops + policy-drops, when the pipeline counts as the
// methods' documentation says.
func TestPowerDNSIdentity(t *testing.T) {
	c := newCounters(t, Config{Shards: 4})
	for i := range 1000 {
		s := c.Shard(uint(i))
		s.Question(policy.Transport(min(i%7, 1)), i%3 == 0)
		switch i % 5 {
		case 0:
			s.PacketCacheHit(0)
		case 1:
			s.Inc(OverCapacityDrops)
		case 2:
			s.Inc(PolicyDrops)
		default:
			s.Replied(i%4, time.Duration(i)*time.Millisecond*3)
		}
	}
	v := values(c)
	sum := 0
	for _, n := range []string{"answers0-1", "answers1-10", "answers10-100", "answers100-1000", "answers-slow", "packetcache-hits", "over-capacity-drops", "policy-drops"} {
		x, _ := strconv.Atoi(v[n])
		sum += x
	}
	if v["questions"] != "1000" || sum != 1000 {
		t.Fatalf("questions %s, parts add up to %d", v["questions"], sum)
	}
}

func TestUpDownCounters(t *testing.T) {
	c := newCounters(t, Config{Shards: 2})
	c.Shard(0).Inc(ConcurrentQueries)
	c.Shard(0).Inc(ConcurrentQueries)
	c.Shard(1).Dec(ConcurrentQueries)
	c.Shard(1).Dec(TCPClients) // its Inc not seen yet
	v := values(c)
	if v["concurrent-queries"] != "1" || v["tcp-clients"] != "0" {
		t.Fatalf("concurrent-queries %s, tcp-clients %s", v["concurrent-queries"], v["tcp-clients"])
	}
	c.Shard(0).Inc(TCPClients)
	c.Shard(1).Inc(TCPClients)
	if got := c.Sum(TCPClients); got != 1 {
		t.Fatalf("tcp-clients %d", got)
	}
}

// TestZeroStatistics: the statistics a forwarder cannot move stay 0
// whatever is counted, each has a reason, and the README lists each.
func TestZeroStatistics(t *testing.T) {
	c := newCounters(t, Config{Shards: 2})
	for ctr := range numCounters {
		c.Shard(uint(ctr)).Add(ctr, 5)
	}
	vals := values(c)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range defs {
		if d.kind != kindZero {
			continue
		}
		n++
		if vals[d.name] != "0" {
			t.Errorf("%s = %s", d.name, vals[d.name])
		}
		if d.zero == "" {
			t.Errorf("%s has no reason", d.name)
		}
		if !strings.Contains(string(readme), "`"+d.name+"`") {
			t.Errorf("README does not list %s", d.name)
		}
	}
	if n == 0 {
		t.Fatal("no zero statistics")
	}
}

// TestQALatency: each shard keeps PowerDNS's exponentially weighted
// average; a read weights the shards by the answers each took since the
// previous read.
func TestQALatency(t *testing.T) {
	c := newCounters(t, Config{Shards: 2, LatencyStatisticSize: 2, NetworkTimeout: 100 * time.Millisecond})
	qa := func() string { it, _ := c.Lookup("qa-latency"); return it.Value }
	if got := qa(); got != "0" {
		t.Fatalf("qa-latency before any answer: %s", got)
	}
	s0, s1 := c.Shard(0), c.Shard(1)
	s0.Replied(0, 1000*time.Microsecond) // 0 → 500
	if got := qa(); got != "500" {
		t.Fatalf("after one answer: %s", got)
	}
	s0.PacketCacheHit(0) // 500 → 250: a packet cache hit is a 0 µs sample
	if got := qa(); got != "250" {
		t.Fatalf("after a packet cache hit: %s", got)
	}
	if got := qa(); got != "250" {
		t.Fatalf("a read with no new answer: %s", got)
	}
	s1.Replied(0, time.Hour)                     // capped at 100 ms: 0 → 50000
	s1.Replied(0, 100*time.Millisecond)          // 50000 → 75000
	s1.Replied(0, 100*time.Millisecond)          // 75000 → 87500
	s0.Replied(0, 250*time.Microsecond)          // 250 → 250
	if got, want := qa(), "65688"; got != want { // (3·87500 + 1·250) / 4, rounded
		t.Fatalf("two shards: %s, want %s", got, want)
	}
	s0.Replied(0, 250*time.Microsecond) // only shard 0 answered since
	if got := qa(); got != "250" {
		t.Fatalf("only shard 0 answering: %s", got)
	}
}

// TestProcessGauges: the statistics read from the process and the clock.
func TestProcessGauges(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	c := newCounters(t, Config{
		Now:                clock,
		CacheEntries:       func() uint64 { return 7 },
		NegCacheEntries:    func() uint64 { return 8 },
		PacketCacheEntries: func() uint64 { return 9 },
	})
	now = now.Add(90*time.Second + 900*time.Millisecond)
	v := values(c)
	for k, want := range map[string]string{"uptime": "90", "cache-entries": "7", "negcache-entries": "8", "packetcache-entries": "9", "security-status": "0"} {
		if v[k] != want {
			t.Errorf("%s = %s, want %s", k, v[k], want)
		}
	}
	for _, k := range []string{"real-memory-usage", "fd-usage", "malloc-bytes"} {
		if v[k] == "0" {
			t.Errorf("%s is 0", k)
		}
	}
	// CPU time moves in whole milliseconds: work until it shows.
	var sink uint64
	for i := 0; i < 1<<30 && (readRusage().user == 0 || readRusage().sys == 0); i++ {
		sink += uint64(i) * uint64(i)
		if i%1024 == 0 {
			syscall.Getppid() // a real system call, for sys-msec
		}
	}
	_ = sink
	v = values(c)
	for _, k := range []string{"user-msec", "sys-msec"} {
		if v[k] == "0" {
			t.Errorf("%s is 0", k)
		}
	}
}

func TestParseProcFiles(t *testing.T) {
	snmp := `Ip: Forwarding DefaultTTL
Ip: 1 64
Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
Udp: 1000 11 12 900 13 14 0 0 0
UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors
UdpLite: 0 99 99 0 99 99 0 0 0
`
	if got, want := parseSNMP([]byte(snmp)), (udpErrors{inErrors: 12, noPorts: 11, rcvbufErrors: 13, sndbufErrors: 14}); got != want {
		t.Errorf("parseSNMP = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "Udp: InErrors\n", "Udp: InErrors NoPorts\nUdp: x\n", "garbage"} {
		if got := parseSNMP([]byte(bad)); got != (udpErrors{}) {
			t.Errorf("parseSNMP(%q) = %+v", bad, got)
		}
	}
	if got := parseStatm([]byte("5000 1200 300 10 0 800 0\n"), 4096); got != 1200*4096 {
		t.Errorf("parseStatm = %d", got)
	}
	for _, bad := range []string{"", "12", "1 x"} {
		if got := parseStatm([]byte(bad), 4096); got != 0 {
			t.Errorf("parseStatm(%q) = %d", bad, got)
		}
	}
}

// TestConcurrentCounting runs with -race: workers on their own shards,
// workers sharing one, and readers at the same time; nothing is lost.
func TestConcurrentCounting(t *testing.T) {
	c := newCounters(t, Config{Shards: 4})
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
					c.Snapshot()
					c.Lookup("qa-latency")
				}
			}
		}()
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := c.Shard(uint(w)) // workers 0 and 4 share a shard, and so on
			for i := range each {
				s.Question(policy.TransportUDP, false)
				s.Inc(ConcurrentQueries)
				s.Replied(0, time.Duration(i)*time.Microsecond)
				c.Shard(uint(i)).Dec(ConcurrentQueries)
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()
	v := values(c)
	if v["questions"] != strconv.Itoa(workers*each) || v["noerror-answers"] != strconv.Itoa(workers*each) || v["concurrent-queries"] != "0" {
		t.Fatalf("questions %s, noerror %s, concurrent %s", v["questions"], v["noerror-answers"], v["concurrent-queries"])
	}
}

func TestNewValidates(t *testing.T) {
	for _, cfg := range []Config{{Shards: -1}, {Shards: MaxShards + 1}, {LatencyStatisticSize: -1}, {NetworkTimeout: -time.Second}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	for in, want := range map[int]int{1: 1, 2: 2, 3: 4, 5: 8, MaxShards: MaxShards} {
		if got := newCounters(t, Config{Shards: in}).Shards(); got != want {
			t.Errorf("Shards %d → %d, want %d", in, got, want)
		}
	}
	if n := newCounters(t, Config{}).Shards(); n < 1 || n&(n-1) != 0 {
		t.Errorf("default shards %d", n)
	}
	reg := prometheus.NewRegistry()
	newCounters(t, Config{Registerer: reg})
	if _, err := New(Config{Registerer: reg}); err == nil {
		t.Error("a second collector on one registry was accepted")
	}
}

// TestPrometheus: every statistic under PowerDNS's /metrics name with its
// value and type, and pdns_recursor_info with the version.
func TestPrometheus(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := newCounters(t, Config{Registerer: reg, Version: "v1.2.3", CacheEntries: func() uint64 { return 42 }})
	c.Shard(0).Add(AllOutqueries, 7)
	c.Shard(0).Inc(TCPClients)
	c.Shard(1).Decided(2, 7) // block, category
	c.Shard(0).Decided(2, 7)
	c.Shard(0).Decided(0, 7) // no verdict: not counted
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}
	if len(byName) != len(defs)+2 {
		t.Errorf("%d families, want %d (the statistics, pdns_recursor_info, svcpf_resolver_decisions_total)", len(byName), len(defs)+2)
	}
	if mf := byName["svcpf_resolver_decisions_total"]; mf == nil || len(mf.GetMetric()) != 27 {
		t.Errorf("svcpf_resolver_decisions_total: %v, want 27 series (3 verdicts × 9 reasons)", mf)
	} else {
		for _, m := range mf.GetMetric() {
			want := 0.0
			if l := m.GetLabel(); l[0].GetValue() == "category" && l[1].GetValue() == "block" {
				want = 2
			}
			if m.GetCounter().GetValue() != want {
				t.Errorf("svcpf_resolver_decisions_total%v = %v, want %v", m.GetLabel(), m.GetCounter().GetValue(), want)
			}
		}
	}
	if n := c.Decisions("block", "category"); n != 2 {
		t.Errorf("Decisions(block, category) = %d, want 2", n)
	}
	for _, d := range defs {
		mf := byName[PrometheusName(d.name)]
		if mf == nil {
			t.Errorf("%s: no %s", d.name, PrometheusName(d.name))
			continue
		}
		wantType := dto.MetricType_COUNTER
		if d.prom == promGauge {
			wantType = dto.MetricType_GAUGE
		}
		if mf.GetType() != wantType || mf.GetHelp() == "" {
			t.Errorf("%s: type %v help %q", mf.GetName(), mf.GetType(), mf.GetHelp())
		}
	}
	for name, want := range map[string]float64{
		"pdns_recursor_all_outqueries": 7, "pdns_recursor_tcp_clients": 1, "pdns_recursor_cache_entries": 42,
		"pdns_recursor_answers0_1": 0, "pdns_recursor_auth4_answers_slow": 0,
	} {
		m := byName[name].GetMetric()[0]
		got := m.GetCounter().GetValue() + m.GetGauge().GetValue()
		if got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if byName["pdns_recursor_uptime"] == nil {
		t.Error("pdns_recursor_uptime is missing") // PowerDNS's test_read_metrics
	}
	info := byName["pdns_recursor_info"].GetMetric()[0]
	if info.GetGauge().GetValue() != 1 || info.GetLabel()[0].GetValue() != "v1.2.3" {
		t.Errorf("info %v", info)
	}
	pedantic := prometheus.NewPedanticRegistry()
	if err := pedantic.Register(newCollector(c, "x")); err != nil {
		t.Errorf("pedantic registry: %v", err)
	}
	if _, err := pedantic.Gather(); err != nil {
		t.Errorf("pedantic gather: %v", err)
	}
}

func TestPrometheusName(t *testing.T) {
	for in, want := range map[string]string{
		"answers0-1": "pdns_recursor_answers0_1", "uptime": "pdns_recursor_uptime",
		"auth4-answers100-1000": "pdns_recursor_auth4_answers100_1000", "a.b é": "pdns_recursor_a_b___",
	} {
		if got := PrometheusName(in); got != want {
			t.Errorf("PrometheusName(%q) = %q, want %q", in, got, want)
		}
	}
}
