package activity

import (
	"github.com/prometheus/client_golang/prometheus"
)

// register defines the node side's metrics (Recorder and Publisher) on
// reg. Every value lives in the shards or the publisher's atomics and is
// read on scrape: the query path never touches a shared metric.
func (r *Recorder) register(reg prometheus.Registerer) error {
	sum := func(f func(s *recShard) uint64) func() float64 {
		return func() float64 {
			var n uint64
			for i := range r.shards {
				n += f(&r.shards[i])
			}
			return float64(n)
		}
	}
	load := func(v interface{ Load() uint64 }) func() float64 { return func() float64 { return float64(v.Load()) } }
	stage := func(s string) prometheus.Labels { return prometheus.Labels{"stage": s} }
	const (
		droppedHelp   = "Activity events lost on this node, by where: stage=\"queue\" the observer's queue was full (activity.queue), stage=\"buffer\" the oldest batches were evicted from the publish buffer while NATS could not take them (activity.buffer_bytes)."
		uncountedHelp = "Plain allows whose count was lost on this node, by where: stage=\"buffer\" evicted from the publish buffer, stage=\"limit\" a new subscriber/reason/category key past the node's bound on keys per interval, stage=\"late\" counted after its interval was published."
	)
	cs := []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "svcpf_activity_events_total",
			Help: "Activity events the node's observer kept (every decision but a plain allow, and the sampled plain allows), before its queue."},
			sum(func(s *recShard) uint64 { return s.kept.Load() + s.queueDropped.Load() })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "svcpf_activity_allows_counted_total",
			Help: "Plain allows the node's observer counted into activity counts."},
			sum(func(s *recShard) uint64 { return s.counted.Load() })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "svcpf_activity_dropped_total", Help: droppedHelp,
			ConstLabels: stage("queue")}, sum(func(s *recShard) uint64 { return s.queueDropped.Load() })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "svcpf_activity_dropped_total", Help: droppedHelp,
			ConstLabels: stage("buffer")}, load(&r.pub.bufferDropped)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "svcpf_activity_uncounted_total", Help: uncountedHelp,
			ConstLabels: stage("buffer")}, load(&r.pub.bufferUncounted)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "svcpf_activity_uncounted_total", Help: uncountedHelp,
			ConstLabels: stage("limit")}, sum(func(s *recShard) uint64 { return s.limitUncounted.Load() })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "svcpf_activity_uncounted_total", Help: uncountedHelp,
			ConstLabels: stage("late")}, sum(func(s *recShard) uint64 { return s.lateUncounted.Load() })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "svcpf_activity_queue_events",
			Help: "Activity events in the node's queue, not yet in a batch (at most activity.queue)."},
			func() float64 { return float64(r.queued.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "svcpf_activity_buffer_bytes",
			Help: "Encoded activity batches the node holds until NATS takes them (at most activity.buffer_bytes)."},
			func() float64 { return float64(r.pub.bufferBytes.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "svcpf_activity_buffer_batches",
			Help: "Activity batches the node holds until NATS takes them."},
			func() float64 { return float64(r.pub.bufferBatches.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "svcpf_activity_batches_published_total",
			Help: "Activity batches the node published to the ACTIVITY stream (acknowledged)."}, load(&r.pub.batches)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "svcpf_activity_events_published_total",
			Help: "Activity events in the batches the node published."}, load(&r.pub.publishedEvents)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "svcpf_activity_allows_published_total",
			Help: "Plain allows in the counts of the batches the node published."}, load(&r.pub.publishedCounts)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "svcpf_activity_publish_errors_total",
			Help: "Failed attempts to publish an activity batch (NATS away, the stream missing, no acknowledgement in time); each is retried."},
			load(&r.pub.publishErrors)),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
