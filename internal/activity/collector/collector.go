// Package collector moves activity from the JetStream stream ACTIVITY into a
// store. Its place in the data flow:
//
//	nodes → stream ACTIVITY → collector (this package) → store → reports
//
// Collectors share one durable pull consumer, so several of them split the
// stream's messages between them. A message is acknowledged only once its
// batch is stored; a store that fails (a full disk, PostgreSQL away) stops
// the acknowledgements, so the stream keeps the messages and redelivers
// them, and the collector retries with backoff until the store takes
// writes again, with no restart. The store keeps each batch once, so a
// redelivery stores nothing twice. The collector also drops the days past
// retention.
package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/activity"
)

// Consumer is the durable consumer every collector shares.
const Consumer = "svcpf-activity-collector"

// Writer is what the collector needs of a store: activity.Writer, and
// optionally WriteBatches to store several messages in one transaction.
type Writer interface {
	activity.Writer
}

type batchWriter interface {
	WriteBatches(ctx context.Context, bs []*activity.Batch) (int, error)
}

// Config configures New.
type Config struct {
	JS       jetstream.JetStream
	Activity activity.Config
	Store    Writer
	// Now is the clock (retention); nil is time.Now.
	Now        func() time.Time
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Fetch is how many messages one transaction takes at most (default 64).
	Fetch int
	// RetryMin and RetryMax bound the backoff after a failed write
	// (defaults 250ms and 10s).
	RetryMin, RetryMax time.Duration
	// RetentionEvery is how often days past retention are dropped (default
	// and at most 1h).
	RetentionEvery time.Duration
}

// Collector is the stream's consumer. Run it.
type Collector struct {
	cfg Config
	log *slog.Logger

	stored, counts, batches, bad, errs, dropped prometheus.Counter
	pending                                     prometheus.Gauge

	mu     sync.Mutex
	health error
}

// New checks cfg and registers the metrics.
func New(cfg Config) (*Collector, error) {
	if cfg.JS == nil || cfg.Store == nil {
		return nil, errors.New("collector: JetStream and a store are required")
	}
	if err := cfg.Activity.Validate(); err != nil {
		return nil, fmt.Errorf("collector: %w", err)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	if cfg.Fetch <= 0 {
		cfg.Fetch = 64
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 250 * time.Millisecond
	}
	if cfg.RetryMax < cfg.RetryMin {
		cfg.RetryMax = max(10*time.Second, cfg.RetryMin)
	}
	if cfg.RetentionEvery <= 0 || cfg.RetentionEvery > time.Hour {
		cfg.RetentionEvery = time.Hour
	}
	c := &Collector{cfg: cfg, log: cfg.Logger, health: errors.New("collector starting")}
	counter := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	}
	c.stored = counter("svcpf_activity_stored_events_total", "Events the collector stored (a batch stored before is not counted again).")
	c.counts = counter("svcpf_activity_stored_counts_total", "Plain-allow count records the collector stored.")
	c.batches = counter("svcpf_activity_stored_batches_total", "Stream messages (batches) the collector stored and acknowledged.")
	c.bad = counter("svcpf_activity_bad_messages_total", "Stream messages that were not batches: logged and terminated.")
	c.errs = counter("svcpf_activity_store_errors_total", "Failed store writes (each retried until it succeeds).")
	c.dropped = counter("svcpf_activity_dropped_days_total", "Whole days dropped by retention.")
	c.pending = prometheus.NewGauge(prometheus.GaugeOpts{Name: "svcpf_activity_pending_messages",
		Help: "Stream messages not yet stored: waiting in the consumer plus delivered and not yet acknowledged."})
	for _, m := range []prometheus.Collector{c.stored, c.counts, c.batches, c.bad, c.errs, c.dropped, c.pending} {
		if err := cfg.Registerer.Register(m); err != nil {
			return nil, fmt.Errorf("collector: metrics: %w", err)
		}
	}
	return c, nil
}

// Health is nil while the collector stores, else why it does not: for
// /health.
func (c *Collector) Health() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.health
}

func (c *Collector) setHealth(err error) {
	c.mu.Lock()
	c.health = err
	c.mu.Unlock()
}

// ConsumerConfig is the durable consumer the collectors share: explicit
// acknowledgements, a bounded number in flight, and an AckWait long enough
// for a transaction of Fetch messages.
func ConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       Consumer,
		Description:   "svc-pf activity collectors: batches to store",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxAckPending: 1024,
		MaxDeliver:    -1,
	}
}

// Run consumes until ctx ends: it declares the stream and the consumer
// (retrying while NATS is away), stores and acknowledges, and drops old
// days.
func (c *Collector) Run(ctx context.Context) error {
	var cons jetstream.Consumer
	delay := c.cfg.RetryMin
	for {
		var err error
		cons, err = c.consumer(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil // stopped while declaring: not an outage to report
		}
		c.setHealth(fmt.Errorf("cannot reach the stream %s: %w", activity.Stream, err))
		c.log.Warn("activity collector: stream not reachable; retrying", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, c.cfg.RetryMax)
	}
	c.setHealth(nil)
	c.log.Info("activity collector consuming", "stream", activity.Stream, "consumer", Consumer)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.retentionLoop(ctx)
	}()
	defer wg.Wait()
	for ctx.Err() == nil {
		batch, err := cons.Fetch(c.cfg.Fetch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			c.fetchFailed(ctx, err)
			continue
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) && len(msgs) == 0 {
			c.fetchFailed(ctx, err)
			continue
		}
		if len(msgs) > 0 {
			c.store(ctx, msgs)
		}
		if info, err := cons.Info(ctx); err == nil {
			c.pending.Set(float64(info.NumPending) + float64(info.NumAckPending))
		}
	}
	return nil
}

func (c *Collector) consumer(ctx context.Context) (jetstream.Consumer, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := activity.EnsureStream(cctx, c.cfg.JS, c.cfg.Activity.Stream)
	if err != nil {
		return nil, err
	}
	return s.CreateOrUpdateConsumer(cctx, ConsumerConfig())
}

func (c *Collector) fetchFailed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	c.log.Debug("activity collector: fetch failed", "err", err)
	select {
	case <-ctx.Done():
	case <-time.After(c.cfg.RetryMin):
	}
}

// store parses the messages, writes their batches (retrying until the
// store takes them or ctx ends) and only then acknowledges them. A message
// that is not a batch is terminated: it can never be stored and must not
// hold up the stream.
func (c *Collector) store(ctx context.Context, msgs []jetstream.Msg) {
	var good []jetstream.Msg
	var batches []*activity.Batch
	events, counts := 0, 0
	for _, m := range msgs {
		b, err := activity.ParseBatch(m.Data())
		if err != nil {
			c.bad.Inc()
			meta, _ := m.Metadata()
			var seq uint64
			if meta != nil {
				seq = meta.Sequence.Stream
			}
			c.log.Warn("activity collector: a message of the stream is not a batch; terminated", "stream_seq", seq,
				"subject", m.Subject(), "bytes", len(m.Data()), "err", err)
			_ = m.Term()
			continue
		}
		good = append(good, m)
		batches = append(batches, &b)
		events += len(b.Events)
		counts += len(b.Counts)
	}
	if len(batches) == 0 {
		return
	}
	delay := c.cfg.RetryMin
	for {
		n, err := c.write(ctx, batches)
		if err == nil {
			c.stored.Add(float64(n))
			c.counts.Add(float64(counts))
			c.batches.Add(float64(len(batches)))
			for _, m := range good {
				// An acknowledgement lost here only means a redelivery, which
				// the store skips.
				_ = m.Ack()
			}
			if c.Health() != nil {
				c.log.Info("activity collector: storing again")
			}
			c.setHealth(nil)
			return
		}
		if ctx.Err() != nil {
			return // not acknowledged: redelivered to whoever runs next
		}
		c.errs.Inc()
		c.setHealth(fmt.Errorf("activity store failing writes, nothing acknowledged (the stream keeps the events; free disk space or bring the database back): %w", err))
		c.log.Error("activity collector: store write failed; retrying", "err", err, "retry_in", delay, "batches", len(batches),
			"events", events)
		for _, m := range good {
			// Keeps the messages ours while we retry, rather than have them
			// redelivered to us on top.
			_ = m.InProgress()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, c.cfg.RetryMax)
	}
}

func (c *Collector) write(ctx context.Context, bs []*activity.Batch) (int, error) {
	if w, ok := c.cfg.Store.(batchWriter); ok {
		return w.WriteBatches(ctx, bs)
	}
	n := 0
	for _, b := range bs {
		if err := c.cfg.Store.Write(ctx, b); err != nil {
			return n, err
		}
		n += len(b.Events)
	}
	return n, nil
}

// RetentionCutoff is the time before which whole days are dropped at now:
// now − retention. Days are dropped at most RetentionEvery (≤ 1h) late, and
// the store's reader answers nothing older than now − retention meanwhile.
func RetentionCutoff(now time.Time, retention time.Duration) time.Time {
	return now.Add(-retention)
}

func (c *Collector) retentionLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.RetentionEvery)
	defer t.Stop()
	for {
		cut := RetentionCutoff(c.cfg.Now(), c.cfg.Activity.Retention)
		n, err := c.cfg.Store.DropBefore(ctx, cut)
		switch {
		case err != nil && ctx.Err() == nil:
			c.log.Error("activity collector: dropping days past retention failed; retrying at the next round", "err", err)
		case n > 0:
			c.dropped.Add(float64(n))
			c.log.Info("activity collector: dropped days past retention", "days", n, "before", cut.UTC().Format(time.DateOnly))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
