package activity

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The node's side, second half: the Publisher takes what the Recorder
// queued into batches — the events every second (sooner once a thousand
// wait), an interval's counts once the interval is over — encodes them and
// publishes them, in order, on the ACTIVITY stream with the batch's ID as
// Nats-Msg-Id. While NATS cannot take them the encoded batches wait in a
// buffer bounded by Config.BufferBytes (the oldest dropped beyond, and
// counted), and the publish is retried with backoff until it succeeds: the
// nats.Conn reconnects by itself, so the publisher heals when NATS comes
// back. None of this is on the query path: a full queue or buffer drops,
// it never makes a query wait.

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Recorder is what it publishes from; required.
	Recorder *Recorder
	// JetStream publishes; required.
	JetStream jetstream.JetStream
	Logger    *slog.Logger
	// Tick is how often it looks at the queue and the intervals (default
	// 100ms); FlushEvery how often queued events are batched (default 1s).
	Tick, FlushEvery time.Duration
	// PublishTimeout bounds one publish (default 5s); Backoff is the first
	// wait after a failure, doubled up to MaxBackoff (defaults 250ms, 2s: a
	// publish while NATS is away fails at once, so trying often is cheap,
	// and the buffer empties soon after NATS is back).
	PublishTimeout, Backoff, MaxBackoff time.Duration
}

// Batch sizes: a batch holds at most this many events, counts and bytes
// of events (NATS refuses a message over its max_payload, 1 MiB by
// default).
const (
	batchEvents     = flushEvents
	batchCounts     = 4096
	batchEventBytes = 512 << 10
)

// Publisher publishes a Recorder's events and counts.
type Publisher struct {
	cfg PublisherConfig
	r   *Recorder
	js  jetstream.JetStream
	log *slog.Logger
	seq uint64
	buf outbox

	// Reused between collections.
	t      taken
	counts []Count
}

// NewPublisher checks cfg.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Recorder == nil || cfg.JetStream == nil {
		return nil, errors.New("activity: the publisher needs a Recorder and a JetStream")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Tick, 100*time.Millisecond)
	def(&cfg.FlushEvery, time.Second)
	def(&cfg.PublishTimeout, 5*time.Second)
	def(&cfg.Backoff, 250*time.Millisecond)
	def(&cfg.MaxBackoff, 2*time.Second)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Publisher{cfg: cfg, r: cfg.Recorder, js: cfg.JetStream, log: cfg.Logger}
	p.buf.init(cfg.Recorder.cfg.BufferBytes, &cfg.Recorder.pub)
	return p, nil
}

// Run batches and publishes until ctx ends; then it batches what is left
// and tries, for a few seconds, to publish it.
func (p *Publisher) Run(ctx context.Context) error {
	sendCtx, stopSend := context.WithCancel(context.WithoutCancel(ctx))
	defer stopSend()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		p.send(sendCtx)
	}()
	tick := time.NewTicker(p.cfg.Tick)
	defer tick.Stop()
	lastFlush := time.Now()
	for {
		select {
		case <-ctx.Done():
			p.collect(true, true)
			// The rest gets a few seconds to leave, then is lost with the
			// process.
			p.buf.closeWhenEmpty()
			select {
			case <-sent:
			case <-time.After(3 * time.Second):
			}
			stopSend()
			<-sent
			return nil
		case <-p.r.wake:
			p.collect(true, false)
			lastFlush = time.Now()
		case <-tick.C:
			events := time.Since(lastFlush) >= p.cfg.FlushEvery
			if events {
				lastFlush = time.Now()
			}
			p.collect(events, false)
		}
	}
}

// collect takes events (when events is set) and the counts of the
// intervals that ended a grace ago (all of them when final) and adds them
// to the outbox as batches.
func (p *Publisher) collect(events, final bool) {
	r := p.r
	grace := min(r.iv/4, int64(2*time.Second))
	until := r.now().UnixNano() - grace
	p.t.counts = p.t.counts[:0]
	r.takeCounts(&p.t, until, final)
	defer r.giveBack(p.t.counts) // the counts below are views of their arenas: encoded first
	if events {
		r.takeEvents(&p.t)
	} else {
		p.t.events, p.t.ends = p.t.events[:0], p.t.ends[:0]
	}
	// Events first, in batches; counts fill the last batch's room, then
	// batches of their own. A key is counted in one shard only, so each
	// map's counts go out as they are.
	ends, from := p.t.ends, uint32(0)
	maps, next := p.t.counts, 0 // the map and entry counts are read from
	for len(ends) > 0 || len(maps) > 0 {
		n := 0
		for n < len(ends) && n < batchEvents && (n == 0 || ends[n]-from <= batchEventBytes) {
			n++
		}
		var evs []byte
		if n > 0 {
			evs = p.t.events[from:ends[n-1]]
			from = ends[n-1]
			ends = ends[n:]
		}
		cs := p.counts[:0]
		if len(ends) == 0 {
			for len(maps) > 0 && len(cs) < batchCounts {
				m := maps[0]
				if next == len(m.ents) {
					maps, next = maps[1:], 0
					continue
				}
				e := &m.ents[next]
				next++
				f := m.strs(e)
				cs = append(cs, Count{Start: time.Unix(0, m.start).UTC(), Seconds: uint32(r.iv / int64(time.Second)),
					Org: f[0], SessionID: f[1], Username: f[2], DeviceID: f[3], Location: f[4], Reason: f[5],
					Category: e.cat, N: m.n(e)})
			}
		}
		p.counts = cs
		if n > 0 || len(cs) > 0 {
			p.seal(n, evs, cs)
		}
	}
}

// seal encodes one batch and queues it in the outbox.
func (p *Publisher) seal(n int, events []byte, counts []Count) {
	p.seq++
	b := Batch{Node: p.r.node, Boot: p.r.boot, Seq: p.seq, Counts: counts}
	var allows uint64
	for i := range counts {
		allows += counts[i].N
	}
	data := AppendBatchEncoded(make([]byte, 0, len(events)+64*len(counts)+64), &b, n, events)
	p.buf.push(&outBatch{id: b.ID(), data: data, events: n, allows: allows})
}

// send publishes the outbox's batches in order until ctx ends.
func (p *Publisher) send(ctx context.Context) {
	r, pub := p.r, &p.r.pub
	ensured, failing := false, false
	backoff := p.cfg.Backoff
	fail := func(what string, err error) {
		pub.publishErrors.Add(1)
		if !failing {
			p.log.Warn("activity: cannot publish to NATS; holding batches (up to activity.buffer_bytes, then dropping the oldest) and retrying until it answers",
				"what", what, "err", err)
			failing = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, p.cfg.MaxBackoff)
	}
	for ctx.Err() == nil {
		b := p.buf.next(ctx)
		if b == nil {
			return
		}
		if !ensured {
			c, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
			_, err := EnsureStream(c, p.js, r.cfg.Stream)
			cancel()
			if err != nil {
				p.buf.release(b)
				fail("declare the stream", err)
				continue
			}
			ensured = true
		}
		c, cancel := context.WithTimeout(ctx, p.cfg.PublishTimeout)
		_, err := p.js.Publish(c, Subject, b.data, jetstream.WithMsgID(b.id))
		cancel()
		if err != nil {
			p.buf.release(b)
			if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, jetstream.ErrStreamNotFound) {
				ensured = false // deleted, or a server that lost its store: declare it again
			}
			fail("publish", err)
			continue
		}
		p.buf.done(b)
		pub.batches.Add(1)
		pub.publishedEvents.Add(uint64(b.events))
		pub.publishedCounts.Add(b.allows)
		backoff = p.cfg.Backoff
		if failing {
			failing = false
			p.log.Info("activity: publishing to NATS again", "batches_waiting", pub.bufferBatches.Load())
		}
	}
}

// outBatch is one encoded batch waiting to be published.
type outBatch struct {
	id       string
	data     []byte
	events   int
	allows   uint64
	inFlight bool
}

// outbox is the buffer of encoded batches, oldest first, bounded in bytes:
// pushing past the bound drops the oldest batches that are not being
// published (the newest is always kept).
type outbox struct {
	mu      sync.Mutex
	q       []*outBatch
	bytes   int64
	limit   int64
	closing bool
	ready   chan struct{}
	pub     *pubCounters
}

func (o *outbox) init(limit int64, pub *pubCounters) {
	o.limit, o.pub, o.ready = limit, pub, make(chan struct{}, 1)
}

func (o *outbox) push(b *outBatch) {
	o.mu.Lock()
	o.q = append(o.q, b)
	o.bytes += int64(len(b.data))
	for i := 0; o.bytes > o.limit && i < len(o.q)-1; {
		old := o.q[i]
		if old.inFlight {
			i++
			continue
		}
		o.q = append(o.q[:i], o.q[i+1:]...)
		o.bytes -= int64(len(old.data))
		o.pub.bufferDropped.Add(uint64(old.events))
		o.pub.bufferUncounted.Add(old.allows)
	}
	o.gauges()
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

func (o *outbox) gauges() {
	o.pub.bufferBytes.Store(o.bytes)
	o.pub.bufferBatches.Store(int64(len(o.q)))
}

// next is the oldest batch, marked in flight; nil once ctx ends, or once
// the outbox is closing and empty.
func (o *outbox) next(ctx context.Context) *outBatch {
	for {
		o.mu.Lock()
		if len(o.q) > 0 {
			b := o.q[0]
			b.inFlight = true
			o.mu.Unlock()
			return b
		}
		closing := o.closing
		o.mu.Unlock()
		if closing {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-o.ready:
		}
	}
}

// release: b was not published; it stays first.
func (o *outbox) release(b *outBatch) {
	o.mu.Lock()
	b.inFlight = false
	o.mu.Unlock()
}

// done: b was published.
func (o *outbox) done(b *outBatch) {
	o.mu.Lock()
	for i, x := range o.q {
		if x == b {
			o.q = append(o.q[:i], o.q[i+1:]...)
			o.bytes -= int64(len(b.data))
			break
		}
	}
	o.gauges()
	o.mu.Unlock()
}

// closeWhenEmpty makes next return nil once the outbox is empty.
func (o *outbox) closeWhenEmpty() {
	o.mu.Lock()
	o.closing = true
	o.mu.Unlock()
	select {
	case o.ready <- struct{}{}:
	default:
	}
}
