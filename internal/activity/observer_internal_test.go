package activity

import (
	"context"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/policy"
	"github.com/svc-pf/svc-pf/internal/promtest"
	"github.com/svc-pf/svc-pf/internal/resolver"
)

// fakeClock is a clock the test moves.
type fakeClock struct{ ns atomic.Int64 }

func newClock(t time.Time) *fakeClock    { c := &fakeClock{}; c.ns.Store(t.UnixNano()); return c }
func (c *fakeClock) now() time.Time      { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) add(d time.Duration) { c.ns.Add(int64(d)) }

var t0 = time.Date(2026, 11, 28, 12, 0, 10, 0, time.UTC)

// newTestRecorder is a Recorder on a fake clock and its own registry, and
// a Publisher without NATS whose outbox the test reads (drain).
func newTestRecorder(t testing.TB, mod func(*Config)) (*Recorder, *Publisher, *fakeClock, *prometheus.Registry) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.SampleAllowed = 0
	if mod != nil {
		mod(&cfg)
	}
	clk := newClock(t0)
	reg := prometheus.NewRegistry()
	r, err := NewRecorder(RecorderConfig{Config: cfg, Node: "node-a", Clock: clk.now, Registerer: reg, Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	p := &Publisher{r: r}
	p.buf.init(cfg.BufferBytes, &r.pub)
	return r, p, clk, reg
}

// drain batches what the recorder holds (final: every interval's counts)
// and reads the batches back.
func drain(t testing.TB, p *Publisher, final bool) (evs []Event, counts []Count, batches []Batch) {
	t.Helper()
	p.collect(true, final)
	p.buf.mu.Lock()
	q := p.buf.q
	p.buf.q, p.buf.bytes = nil, 0
	p.buf.mu.Unlock()
	for _, ob := range q {
		b, err := ParseBatch(ob.data)
		if err != nil {
			t.Fatalf("batch %s does not read back: %v", ob.id, err)
		}
		if b.ID() != ob.id || b.Node != "node-a" {
			t.Fatalf("batch %s: id %s node %s", ob.id, b.ID(), b.Node)
		}
		evs, counts, batches = append(evs, b.Events...), append(counts, b.Counts...), append(batches, b)
	}
	return evs, counts, batches
}

// view is s as a string over a buffer the test overwrites after the call,
// as the resolver reuses its own.
func view(buf *[]byte, s string) string {
	*buf = append((*buf)[:0], s...)
	return unsafe.String(&(*buf)[0], len(*buf))
}

var (
	alice = resolver.Subscriber{Org: "acme", SessionID: "s1", Username: "alice", DeviceID: "d1", Location: "hq"}
	bob   = resolver.Subscriber{Org: "acme", SessionID: "s2", Username: "bob"}
)

func answered(client string, sub resolver.Subscriber, name string, v policy.Verdict, a policy.Action, reason policy.Reason, cats ...uint16) *resolver.Answered {
	return &resolver.Answered{Name: name, Type: 1, Subscriber: sub, Transport: policy.TransportUDP,
		Client:   netip.AddrPortFrom(netip.MustParseAddr(client), 40000),
		Decision: resolver.Summary{Verdict: v, Action: a, Reason: reason, Categories: cats}, Rcode: 0, Took: 1500 * time.Microsecond}
}

func plain(client string, sub resolver.Subscriber, name string, cats ...uint16) *resolver.Answered {
	return answered(client, sub, name, policy.VerdictAllow, policy.ActionAllow, policy.ReasonDefault, cats...)
}

// TestRecorderKeeps: blocks, redirects and allows by an allowlist or with
// filtering off are kept in full, every field copied (the resolver's
// buffers are overwritten after the call); a plain allow is not (sample
// 0); a query without a decision is not kept at all.
func TestRecorderKeeps(t *testing.T) {
	r, p, _, _ := newTestRecorder(t, nil)
	var nameBuf, ruleBuf, orgBuf, polBuf []byte
	a := answered("192.0.2.7", alice, "", policy.VerdictBlock, policy.ActionNXDomain, policy.ReasonCategory, 3, 9)
	a.Name = view(&nameBuf, "bad.test.")
	a.Subscriber.Org = view(&orgBuf, "acme")
	a.Decision.Rule = view(&ruleBuf, "category:3 feed=threats key=bad.test")
	a.Decision.Policy = view(&polBuf, "0123456789abcdef")
	a.Rcode, a.Cached, a.Transport = 3, resolver.CachedPacket, policy.TransportTCP
	r.Answered(a)
	for _, b := range [][]byte{nameBuf, ruleBuf, orgBuf, polBuf} {
		for i := range b {
			b[i] = 'X'
		}
	}
	a.Decision.Categories[0] = 77
	r.Answered(answered("192.0.2.8", bob, "redir.test.", policy.VerdictRedirect, policy.ActionRedirect, policy.ReasonSafeSearch))
	r.Answered(answered("192.0.2.8", bob, "ok.test.", policy.VerdictAllow, policy.ActionAllow, policy.ReasonAllowlist))
	r.Answered(answered("192.0.2.8", bob, "off.test.", policy.VerdictAllow, policy.ActionAllow, policy.ReasonFilteringOff))
	r.Answered(plain("192.0.2.8", bob, "plain.test."))
	r.Answered(&resolver.Answered{Name: "formerr.test.", Client: netip.MustParseAddrPort("192.0.2.8:1"), Rcode: 1})
	evs, _, _ := drain(t, p, false)
	if len(evs) != 4 {
		t.Fatalf("%d events, want 4 (block, redirect, allowlist, filtering off): %+v", len(evs), evs)
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].QName < evs[j].QName })
	want := Event{Time: t0, Node: "node-a", Org: "acme", SessionID: "s1", Username: "alice", DeviceID: "d1", Location: "hq",
		Client: "192.0.2.7", QName: "bad.test.", QType: 1, Transport: "tcp", Verdict: "block", Action: "nxdomain",
		Reason: "category", Rule: "category:3 feed=threats key=bad.test", Categories: []uint16{3, 9}, Rcode: 3,
		Cached: "packet", LatencyUS: 1500, Policy: "0123456789abcdef"}
	if !reflect.DeepEqual(evs[0], want) {
		t.Errorf("block event\n %+v\nwant\n %+v", evs[0], want)
	}
	for i, w := range []struct{ name, verdict, reason string }{
		{"off.test.", "allow", "filtering_off"}, {"ok.test.", "allow", "allowlist"}, {"redir.test.", "redirect", "safe_search"}} {
		e := evs[i+1]
		if e.QName != w.name || e.Verdict != w.verdict || e.Reason != w.reason || e.Username != "bob" || e.Sampled {
			t.Errorf("event %d: %+v, want %+v by bob, not sampled", i+1, e, w)
		}
	}
}

// TestRecorderSampling: with sample_allowed 0 no plain allow is kept, with
// 1 every one, with N one in N; every one is counted in all three.
func TestRecorderSampling(t *testing.T) {
	const n = 300
	for _, tt := range []struct{ sample, want int }{{0, 0}, {1, n}, {50, n / 50}, {7, n / 7}} {
		r, p, clk, reg := newTestRecorder(t, func(c *Config) { c.SampleAllowed = tt.sample })
		for i := range n {
			r.Answered(plain("192.0.2.9", alice, "www.ok.test."))
			if i == n/2 {
				clk.add(time.Millisecond)
			}
		}
		evs, counts, _ := drain(t, p, true)
		if len(evs) != tt.want {
			t.Errorf("sample_allowed %d: %d events, want %d", tt.sample, len(evs), tt.want)
		}
		for _, e := range evs {
			if !e.Sampled || e.Verdict != "allow" || e.Reason != "default" {
				t.Errorf("sample_allowed %d: %+v, want a sampled plain allow", tt.sample, e)
				break
			}
		}
		var total uint64
		for _, c := range counts {
			total += c.N
		}
		if total != n || len(counts) != 1 {
			t.Errorf("sample_allowed %d: counts %+v, want one of %d", tt.sample, counts, n)
		}
		if got := promtest.Value(t, reg, "svcpf_activity_allows_counted_total"); got != n {
			t.Errorf("svcpf_activity_allows_counted_total %v, want %d", got, n)
		}
	}
}

// TestRecorderCounts: plain allows are counted per subscriber, interval
// (aligned to the clock), reason and first category; an interval's counts
// are published once it is over, not before; subscribers counted from
// several addresses (shards) still make one count.
func TestRecorderCounts(t *testing.T) {
	r, p, clk, _ := newTestRecorder(t, func(c *Config) { c.CountInterval = time.Minute })
	for range 3 {
		r.Answered(plain("192.0.2.1", alice, "a.test.", 5, 7))
	}
	r.Answered(plain("192.0.2.1", alice, "b.test."))
	for i := range 40 { // bob from many addresses: several shards
		r.Answered(plain(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}).String(), bob, "c.test."))
	}
	r.Answered(answered("192.0.2.1", alice, "rpz.test.", policy.VerdictAllow, policy.ActionAllow, policy.ReasonRPZ))
	if _, counts, _ := drain(t, p, false); len(counts) != 0 {
		t.Fatalf("counts %+v published before their interval ended", counts)
	}
	clk.add(time.Minute) // 12:01:10: the 12:00 interval is over
	r.Answered(plain("192.0.2.1", alice, "a.test.", 5))
	_, counts, _ := drain(t, p, false)
	start := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	key := func(c Count) string { return c.Username + "/" + c.Reason + "/" + string(rune('0'+c.Category%10)) }
	got := map[string]Count{}
	for _, c := range counts {
		if _, dup := got[key(c)]; dup {
			t.Errorf("two counts for %s in one interval", key(c))
		}
		got[key(c)] = c
	}
	want := map[string]uint64{"alice/default/5": 3, "alice/default/0": 1, "bob/default/0": 40, "alice/rpz/0": 1}
	if len(got) != len(want) {
		t.Errorf("counts %+v, want %v", counts, want)
	}
	for k, n := range want {
		c := got[k]
		if c.N != n || !c.Start.Equal(start) || c.Seconds != 60 {
			t.Errorf("count %s: %+v, want %d in the interval %v of 60 s", k, c, n, start)
		}
	}
	if c := got["alice/default/5"]; c.Org != "acme" || c.SessionID != "s1" || c.DeviceID != "d1" || c.Location != "hq" {
		t.Errorf("alice's count %+v: want her whole subscriber", c)
	}
	// The second interval's: published at the end (final).
	_, counts, _ = drain(t, p, true)
	if len(counts) != 1 || counts[0].N != 1 || !counts[0].Start.Equal(start.Add(time.Minute)) || counts[0].Category != 5 {
		t.Errorf("second interval: %+v, want alice's one plain allow at 12:01", counts)
	}
}

// TestRecorderClientModes: full, truncate (/24, /48), hash (a keyed hash
// that is stable within a UTC day and changes with the day) and none.
func TestRecorderClientModes(t *testing.T) {
	block := func(client string) *resolver.Answered {
		return answered(client, alice, "bad.test.", policy.VerdictBlock, policy.ActionNXDomain, policy.ReasonBlocklist)
	}
	clients := []string{"192.0.2.7", "2001:db8:1:2::7", "::ffff:192.0.2.7"}
	for _, tt := range []struct {
		mode string
		want []string
	}{
		{ClientFull, []string{"192.0.2.7", "2001:db8:1:2::7", "192.0.2.7"}},
		{ClientTruncate, []string{"192.0.2.0/24", "2001:db8:1::/48", "192.0.2.0/24"}},
		{ClientNone, []string{"", "", ""}},
	} {
		r, p, _, _ := newTestRecorder(t, func(c *Config) { c.ClientIP = tt.mode })
		for _, c := range clients {
			r.Answered(block(c))
			evs, _, _ := drain(t, p, false)
			if len(evs) != 1 {
				t.Fatalf("%s: %d events", tt.mode, len(evs))
			}
			if i := slices.Index(clients, c); evs[0].Client != tt.want[i] {
				t.Errorf("client_ip %s: %s kept as %q, want %q", tt.mode, c, evs[0].Client, tt.want[i])
			}
		}
	}

	r, p, clk, _ := newTestRecorder(t, func(c *Config) { c.ClientIP = ClientHash })
	client := func(addr string) string {
		r.Answered(block(addr))
		evs, _, _ := drain(t, p, false)
		return evs[0].Client
	}
	h1 := client("192.0.2.7")
	if !regexp.MustCompile(`^h:[0-9a-f]{16}$`).MatchString(h1) {
		t.Fatalf("hash %q, want h: and 16 hex digits", h1)
	}
	if h := client("192.0.2.7"); h != h1 {
		t.Errorf("same client, same day: %q then %q", h1, h)
	}
	if h := client("192.0.2.8"); h == h1 {
		t.Errorf("another client hashes alike: %q", h)
	}
	clk.add(6 * time.Hour) // 18:00:10, the same UTC day
	if h := client("192.0.2.7"); h != h1 {
		t.Errorf("same day, later: %q, want %q", h, h1)
	}
	clk.add(12 * time.Hour) // the next UTC day: a new key
	h2 := client("192.0.2.7")
	if h2 == h1 || !regexp.MustCompile(`^h:[0-9a-f]{16}$`).MatchString(h2) {
		t.Errorf("next day: %q, want another hash than yesterday's %q", h2, h1)
	}
	// Another recorder (another process, or a restart) draws its own key.
	r2, p2, _, _ := newTestRecorder(t, func(c *Config) { c.ClientIP = ClientHash })
	r2.Answered(block("192.0.2.7"))
	if evs, _, _ := drain(t, p2, false); evs[0].Client == h1 {
		t.Errorf("two recorders share a key: %q", h1)
	}
}

// TestRecorderQueueFull: past Config.Queue events the observer drops, and
// counts each in svcpf_activity_dropped_total{stage="queue"}; events_total
// counts them all.
func TestRecorderQueueFull(t *testing.T) {
	r, p, _, reg := newTestRecorder(t, func(c *Config) { c.Queue = 10 })
	for range 15 {
		r.Answered(answered("192.0.2.7", alice, "bad.test.", policy.VerdictBlock, policy.ActionNXDomain, policy.ReasonBlocklist))
	}
	if got := promtest.Value(t, reg, "svcpf_activity_dropped_total", "stage", "queue"); got != 5 {
		t.Errorf("dropped{stage=queue} %v, want 5", got)
	}
	if got := promtest.Value(t, reg, "svcpf_activity_events_total"); got != 15 {
		t.Errorf("events_total %v, want 15", got)
	}
	if got := promtest.Value(t, reg, "svcpf_activity_queue_events"); got != 10 {
		t.Errorf("queue_events %v, want 10", got)
	}
	evs, _, _ := drain(t, p, false)
	if len(evs) != 10 {
		t.Errorf("%d events batched, want the queue's 10", len(evs))
	}
	// Taken by the publisher: room again.
	r.Answered(answered("192.0.2.7", alice, "bad.test.", policy.VerdictBlock, policy.ActionNXDomain, policy.ReasonBlocklist))
	if evs, _, _ := drain(t, p, false); len(evs) != 1 {
		t.Errorf("after the queue was taken: %d events, want 1", len(evs))
	}
}

// stuckJS is a JetStream whose Publish never returns until released: a
// NATS server that takes messages and never acknowledges them.
type stuckJS struct {
	jetstream.JetStream
	release chan struct{}
	calls   atomic.Int64
}

func (s *stuckJS) CreateOrUpdateStream(ctx context.Context, _ jetstream.StreamConfig) (jetstream.Stream, error) {
	return nil, nil
}

func (s *stuckJS) Publish(ctx context.Context, _ string, _ []byte, _ ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	s.calls.Add(1)
	<-s.release
	return nil, context.Canceled
}

// TestAnsweredNeverWaitsForThePublisher: with the publisher stuck in a
// publish, many goroutines' Answered calls all return; what does not fit
// is dropped and counted (events in the queue or the buffer, the rest
// published later), never waited for.
func TestAnsweredNeverWaitsForThePublisher(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Queue, cfg.BufferBytes, cfg.SampleAllowed = 1000, 64<<10, 1
	reg := prometheus.NewRegistry()
	r, err := NewRecorder(RecorderConfig{Config: cfg, Node: "node-a", Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	js := &stuckJS{release: make(chan struct{})}
	p, err := NewPublisher(PublisherConfig{Recorder: r, JetStream: js, Tick: 10 * time.Millisecond, FlushEvery: 10 * time.Millisecond,
		PublishTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.Run(ctx) }()
	defer func() { cancel(); close(js.release); <-done }()

	const goroutines, each = 8, 20000
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				a := plain(netip.AddrFrom4([4]byte{10, 0, byte(g), byte(i)}).String(), alice, "www.ok.test.")
				if i%3 == 0 {
					a.Decision.Verdict, a.Decision.Reason = policy.VerdictBlock, policy.ReasonBlocklist
				}
				r.Answered(a)
			}
		}()
	}
	wg.Wait() // the test's own timeout is the bound: Answered returned every time
	if js.calls.Load() == 0 {
		t.Fatal("the publisher never tried to publish: the test did not hold it stuck")
	}
	dropped := promtest.Value(t, reg, "svcpf_activity_dropped_total", "stage", "queue") +
		promtest.Value(t, reg, "svcpf_activity_dropped_total", "stage", "buffer")
	if dropped == 0 {
		t.Errorf("%d events with the publisher stuck and nothing dropped", goroutines*each)
	}
	if got := promtest.Value(t, reg, "svcpf_activity_events_total"); got != goroutines*each {
		t.Errorf("events_total %v, want %d (sample_allowed 1)", got, goroutines*each)
	}
}

// TestRecorderUsesAnsweredTime: an event's time and a count's interval
// are the resolver's reading of the clock (Answered.At), not another
// reading of the Recorder's; its Clock stands in for an event without one.
func TestRecorderUsesAnsweredTime(t *testing.T) {
	r, p, _, _ := newTestRecorder(t, func(c *Config) { c.CountInterval = time.Minute })
	at := t0.Add(5 * time.Minute) // 12:05:10, the fake clock says 12:00:10
	blk := answered("192.0.2.1", alice, "bad.test.", policy.VerdictBlock, policy.ActionNXDomain, policy.ReasonBlocklist)
	blk.At = at
	r.Answered(blk)
	pa := plain("192.0.2.1", alice, "a.test.")
	pa.At = at
	r.Answered(pa)
	r.Answered(plain("192.0.2.1", alice, "a.test.")) // no At: the Recorder's clock
	evs, counts, _ := drain(t, p, true)
	if len(evs) != 1 || !evs[0].Time.Equal(at) {
		t.Errorf("events %+v, want one at the event's time %v", evs, at)
	}
	starts := map[time.Time]uint64{}
	for _, c := range counts {
		starts[c.Start.UTC()] += c.N
	}
	want := map[time.Time]uint64{time.Date(2026, 11, 28, 12, 5, 0, 0, time.UTC): 1, time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC): 1}
	if !reflect.DeepEqual(starts, want) {
		t.Errorf("counts by interval %v, want %v", starts, want)
	}
}

// TestRecorderCountTable: thousands of keys in one interval (the count
// table grows several times under them) keep each its own count, and past
// the keys' bound a key seen before is still counted while a new one is
// not (svcpf_activity_uncounted_total{stage="limit"}).
func TestRecorderCountTable(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SampleAllowed = 0
	clk := newClock(t0)
	r, err := NewRecorder(RecorderConfig{Config: cfg, Node: "node-a", Clock: clk.now, Shards: 1})
	if err != nil {
		t.Fatal(err)
	}
	p := &Publisher{r: r}
	p.buf.init(cfg.BufferBytes, &r.pub)
	const keys, bound = 5000, 4000
	r.maxKeys = bound
	sub := func(i int) resolver.Subscriber {
		return resolver.Subscriber{Org: "acme", SessionID: "s" + strconv.Itoa(i), Username: "u" + strconv.Itoa(i)}
	}
	for round := range 3 {
		for i := range keys {
			if round == 2 && i%2 == 1 {
				continue
			}
			r.Answered(plain("192.0.2.1", sub(i), "a.test.", uint16(i%3)))
		}
	}
	_, counts, _ := drain(t, p, true)
	got := map[string]Count{}
	for _, c := range counts {
		if _, dup := got[c.SessionID]; dup {
			t.Fatalf("two counts for %s", c.SessionID)
		}
		got[c.SessionID] = c
	}
	if len(got) != bound {
		t.Errorf("%d keys counted, want the first %d", len(got), bound)
	}
	for i := range bound {
		c, want := got["s"+strconv.Itoa(i)], uint64(3-i%2)
		if c.N != want || c.Username != "u"+strconv.Itoa(i) || c.Category != uint16(i%3) {
			t.Fatalf("key %d: %+v, want %d plain allows of u%d, category %d", i, c, want, i, i%3)
		}
	}
	var limit uint64
	for i := range r.shards {
		limit += r.shards[i].limitUncounted.Load()
	}
	if want := uint64(keys-bound) * 5 / 2; limit != want {
		t.Errorf("uncounted for the limit %d, want %d", limit, want)
	}
}

// TestRecorderCountsByHandle: with the resolver's handles, a subscriber's
// first key of the interval is counted in the dense array and its other
// keys (another reason, another category) in the table; a handle reused by
// another session within the interval counts that session apart; a
// session seen at two handles (deleted and put again) is counted under
// both (a store adds them up); handles far apart grow the array, and one
// past its bound is counted in the table; the published counts are the
// same as without handles.
func TestRecorderCountsByHandle(t *testing.T) {
	r, p, clk, _ := newTestRecorder(t, func(c *Config) { c.CountInterval = time.Minute })
	r.maxDense = 2048 // per shard: handles up to 4 × 2048
	aliceH, bobH := alice, bob
	aliceH.Handle, bobH.Handle = 5, 6
	carol := resolver.Subscriber{Org: "acme", SessionID: "s3", Username: "carol", Handle: 5}     // alice's slot, reused
	dave := resolver.Subscriber{Org: "beta", SessionID: "s4", Username: "dave", Handle: 100_000} // past the bound
	erin := resolver.Subscriber{Org: "beta", SessionID: "s5", Username: "erin", Handle: 8000}
	aliceMoved := aliceH
	aliceMoved.Handle = 9
	for range 3 {
		r.Answered(plain("192.0.2.1", aliceH, "a.test.", 5, 7))
	}
	r.Answered(plain("192.0.2.1", aliceH, "b.test."))
	r.Answered(answered("192.0.2.1", aliceH, "rpz.test.", policy.VerdictAllow, policy.ActionAllow, policy.ReasonRPZ))
	for range 2 {
		r.Answered(plain("192.0.2.3", carol, "c.test."))
	}
	for i := range 40 {
		r.Answered(plain(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}).String(), bobH, "c.test."))
	}
	r.Answered(plain("192.0.2.4", dave, "d.test.", 2))
	r.Answered(plain("192.0.2.4", dave, "d.test.", 2))
	r.Answered(plain("192.0.2.5", erin, "e.test."))
	sh := &r.shards[(erin.Handle-1)&r.mask]
	if n := max(len(sh.slots[0].dense), len(sh.slots[1].dense)); n < 2000 {
		t.Errorf("erin's handle: dense array of %d", n)
	}
	r.Answered(plain("192.0.2.1", aliceMoved, "b.test."))
	r.Answered(plain("192.0.2.1", aliceH, "a.test.", 5)) // still alice's dense key
	clk.add(time.Minute)
	_, counts, _ := drain(t, p, false)
	key := func(c Count) string {
		return c.Org + "/" + c.SessionID + "/" + c.Username + "/" + c.DeviceID + "/" + c.Location + "/" + c.Reason + "/" + strconv.Itoa(int(c.Category))
	}
	got, n := map[string]uint64{}, map[string]int{}
	for _, c := range counts {
		got[key(c)] += c.N
		n[key(c)]++
	}
	want := map[string]uint64{
		"acme/s1/alice/d1/hq/default/5": 4, "acme/s1/alice/d1/hq/default/0": 2, "acme/s1/alice/d1/hq/rpz/0": 1,
		"acme/s3/carol///default/0": 2, "acme/s2/bob///default/0": 40, "beta/s4/dave///default/2": 2, "beta/s5/erin///default/0": 1,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("counts %v, want %v", got, want)
	}
	for k, c := range n {
		if c > 1 && k != "acme/s1/alice/d1/hq/default/0" {
			t.Errorf("%d counts for %s", c, k)
		}
	}
	// The maps given back are empty for the next interval: the same
	// handles count from 0.
	r.Answered(plain("192.0.2.1", aliceH, "a.test.", 5))
	clk.add(time.Minute)
	if _, counts, _ = drain(t, p, false); len(counts) != 1 || counts[0].N != 1 || counts[0].Category != 5 {
		t.Errorf("next interval: %+v, want alice's one plain allow", counts)
	}
}

// TestRecorderCountLimitByHandle: the bound on keys holds for the keys
// counted by handle as for the table's.
func TestRecorderCountLimitByHandle(t *testing.T) {
	r, p, _, _ := newTestRecorder(t, nil)
	const keys, bound = 3000, 2000
	r.maxKeys = bound / len(r.shards)
	for round := range 2 {
		for i := range keys {
			sub := resolver.Subscriber{Org: "acme", SessionID: "s" + strconv.Itoa(i), Handle: uint32(i + 1)}
			r.Answered(plain("192.0.2.1", sub, "a.test.", uint16(round))) // round 1: a second key each
		}
	}
	_, counts, _ := drain(t, p, true)
	var total, limit uint64
	for _, c := range counts {
		total += c.N
	}
	for i := range r.shards {
		limit += r.shards[i].limitUncounted.Load()
	}
	if len(counts) != bound || total != bound || total+limit != 2*keys {
		t.Errorf("%d keys, %d counted, %d uncounted; want %d keys counted once, the rest of %d uncounted",
			len(counts), total, limit, bound, 2*keys)
	}
}
