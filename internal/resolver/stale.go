package resolver

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/resolver/cache"
	"github.com/svc-pf/svc-pf/internal/resolver/dnswire"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// Keeping answers while the forwarders fail, and refreshing popular names
// before they expire.
//
// Serve-stale (RFC 8767): a record-cache miss whose entry expired less
// than record_cache.serve_stale ago still goes to the forwarders, but only
// for staleAnswerTimeout (RFC 8767's client response timer); when they
// fail or that time is up, the client gets the expired records with TTL
// cache.StaleTTL and, when it sent EDNS, Extended DNS Error 3 "Stale
// Answer". Such a reply is never stored in the packet cache, so that the
// next query asks again and fresh data replaces it as soon as the
// forwarders answer. A failure to refresh an entry, or no answer within
// the timer, is remembered for cache.StaleRecheck (RFC 8767's failure
// recheck timer): meanwhile its stale data is served at once, without
// waiting on the forwarders again. When the timer cut the forwarders
// short, the question is also asked again in the background with their
// full time; an answer there replaces the entry.
//
// Prefetch: a packet-cache or record-cache hit that the caches report as
// due (record_cache.prefetch hits in the last tenth of the entry's TTL)
// asks the forwarders again in the background and stores the answer in
// the record cache, so that the entry expiring in the packet cache is
// replaced from a fresh record, without a client waiting on the
// forwarders. One refresh per question at a time, at most maxRefreshes at
// once; others are skipped and counted.

// staleAnswerTimeout is RFC 8767's client response timer (its suggested
// 1.8 s): how long a query with stale data to fall back on waits for the
// forwarders. Below the usual stub timeout (2–5 s), so that the client
// gets the stale answer rather than timing out, and above the attempt
// timeout (1.5 s), so that a second forwarder still gets a moment when the
// first did not answer.
const staleAnswerTimeout = 1800 * time.Millisecond

// maxRefreshes bounds the background refreshes in flight (prefetches and
// refreshes after a stale answer): each holds one of the forwarder
// client's 2048 in-flight slots for up to its 4 s, and a burst of due
// names must not crowd out the clients' own misses.
const maxRefreshes = 64

// refreshTimeout bounds a background refresh (the forwarder client's
// whole-query bound).
const refreshTimeout = upstream.DefaultMaxTime

// Refresh reasons and results, the labels of svcpf_resolver_refreshes_total.
const (
	reasonPrefetch = iota
	reasonStale
	nReasons
)

const (
	resultAnswered = iota // the forwarders answered, the record cache has it
	resultFailed          // they did not
	resultSkipped         // not started: one in flight for the question, or maxRefreshes reached
	nResults
)

var (
	reasonNames = [nReasons]string{"prefetch", "stale"}
	resultNames = [nResults]string{"answered", "failed", "skipped"}
)

// refresher runs the background refreshes.
type refresher struct {
	mu       sync.Mutex
	inFlight map[cache.RecordKey]struct{}
	counts   [nReasons][nResults]atomic.Uint64
	stale    atomic.Uint64 // stale answers given
}

func newRefresher() *refresher {
	return &refresher{inFlight: make(map[cache.RecordKey]struct{})}
}

// refresh asks the forwarders for k in the background and stores their
// answer in the record cache; a failure marks k's stale entry failed. The
// query carries k's CD and AD bits, as the client's did.
func (r *Resolver) refresh(k cache.RecordKey, reason int) {
	rf := r.refresher
	k.Name = dns.CanonicalName(k.Name)
	rf.mu.Lock()
	_, dup := rf.inFlight[k]
	if dup || len(rf.inFlight) >= maxRefreshes {
		rf.mu.Unlock()
		rf.counts[reason][resultSkipped].Add(1)
		return
	}
	rf.inFlight[k] = struct{}{}
	rf.mu.Unlock()
	go func() {
		defer func() {
			rf.mu.Lock()
			delete(rf.inFlight, k)
			rf.mu.Unlock()
		}()
		req := new(dns.Msg)
		req.SetQuestion(k.Name, k.Type)
		req.Question[0].Qclass = k.Class
		req.CheckingDisabled, req.AuthenticatedData = k.CD, k.AD
		if k.DO {
			req.SetEdns0(ourUDPSize, true)
		}
		ctx := deadlineOnly{Context: context.Background(), deadline: time.Now().Add(refreshTimeout)}
		up, err := r.miss.Exchange(ctx, req)
		now := r.now()
		if err == nil {
			var chain [16]string
			if _, ok := r.accept(req.Question[0], up, chain[:0]); ok {
				if _, err := r.records.Put(k, up, now); err == nil {
					rf.counts[reason][resultAnswered].Add(1)
					return
				}
			}
		}
		r.records.MarkFailed(k, now)
		rf.counts[reason][resultFailed].Add(1)
	}()
}

// prefetchQuery starts the refresh of a packet-cache hit's question when
// the record cache holds it (a blocked name's answer, which the record
// cache does not hold, is not refreshed: the forwarders were never asked
// for it).
func (r *Resolver) prefetchQuery(q *dnswire.Query) {
	k := cache.RecordKey{Name: string(dnswire.AppendNameText(nil, q.Name())), Type: q.QType, Class: q.QClass,
		DO: q.EDNS.Present && q.EDNS.DO, CD: q.Flags.Has(dnswire.FlagCD), AD: q.Flags.Has(dnswire.FlagAD)}
	if !r.records.Holds(k, r.now()) {
		return
	}
	r.refresh(k, reasonPrefetch)
}

// staleReply is forward's answer from stale records: TTL cache.StaleTTL,
// EDE 3 when the client sent EDNS, never stored in the packet cache.
func (r *Resolver) staleReply(req *dns.Msg, q *query, ra cache.RecordAnswer, chain []string) (*dns.Msg, []string) {
	q.stale, q.fromRecords = true, true
	r.refresher.stale.Add(1)
	m := new(dns.Msg)
	m.SetReply(req)
	m.Rcode, m.AuthenticatedData = ra.Rcode, ra.AuthenticatedData
	m.Answer, m.Ns = ra.Answer, ra.Ns
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(ourUDPSize, opt.Do())
		m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeStaleAnswer}}
	}
	chain, _ = answerChain(req.Question[0].Name, m.Answer, chain)
	return m, chain
}

// exchangeOrStale asks the forwarders for a record-cache miss. With stale
// data for it (ra), it waits at most staleAnswerTimeout, and on failure
// answers from ra (stale true).
func (r *Resolver) exchangeOrStale(ctx context.Context, req *dns.Msg, key cache.RecordKey, ra cache.RecordAnswer, haveStale bool) (*dns.Msg, error) {
	if !haveStale {
		return r.miss.Exchange(ctx, req)
	}
	deadline := time.Now().Add(staleAnswerTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	up, err := r.miss.Exchange(deadlineOnly{Context: ctx, deadline: deadline}, req)
	if err == nil {
		return up, nil
	}
	// Failed, or no answer within the client's timer: the entry is served
	// stale at once for the failure recheck time. After the timer the
	// forwarders also get their full time in the background; an answer
	// there replaces the entry, and the mark with it.
	r.records.MarkFailed(key, r.now())
	if errors.Is(err, context.DeadlineExceeded) {
		r.refresh(key, reasonStale)
	}
	return nil, err
}

// upstream is the forwarder client.
func (r *Resolver) upstream() *upstream.Client { return r.up }

// resilienceCollector exports the forwarders' health and the refresh and
// stale counts (svcpf_resolver_upstream_*, svcpf_resolver_refreshes_total,
// svcpf_resolver_stale_answers_total), read at scrape time: the forwarder
// set may change (SetForwarders).
type resilienceCollector struct {
	r                                             *Resolver
	up, answers, failures, timeouts, probes, srtt *prometheus.Desc
	strategy, refreshes, stale                    *prometheus.Desc
}

func newResilienceCollector(r *Resolver) *resilienceCollector {
	// zone is the forward zone whose server the forwarder is (forward
	// mode's forward_zones), "" for the default forwarders: one address
	// may serve both, and their health is kept apart.
	fw := []string{"forwarder", "zone"}
	return &resilienceCollector{r: r,
		up: prometheus.NewDesc("svcpf_resolver_upstream_up",
			"1 while the forwarder answers; 0 from a failed attempt (timeout, unreachable, failure rcode) until a background probe or a query gets an answer again. A down forwarder is asked only after the others.", fw, nil),
		answers: prometheus.NewDesc("svcpf_resolver_upstream_answers_total",
			"Client queries' attempts the forwarder answered (NOERROR, NXDOMAIN or YXDOMAIN).", fw, nil),
		failures: prometheus.NewDesc("svcpf_resolver_upstream_failures_total",
			"Client queries' attempts the forwarder failed other than by a timeout: a failure rcode (SERVFAIL, REFUSED, …) or the network refusing (ICMP unreachable, connection refused or reset).", fw, nil),
		timeouts: prometheus.NewDesc("svcpf_resolver_upstream_timeouts_total",
			"Client queries' attempts the forwarder did not answer in time.", fw, nil),
		probes: prometheus.NewDesc("svcpf_resolver_upstream_probes_total",
			"Background probes (. NS) sent to the forwarder while it was down.", fw, nil),
		srtt: prometheus.NewDesc("svcpf_resolver_upstream_srtt_seconds",
			"The forwarder's smoothed round-trip time, decayed while unused (halving every 10 s); a timeout counts as the attempt timeout.", fw, nil),
		strategy: prometheus.NewDesc("svcpf_resolver_upstream_strategy",
			"1 for the forwarder_strategy in force (fastest or ordered).", []string{"strategy"}, nil),
		refreshes: prometheus.NewDesc("svcpf_resolver_refreshes_total",
			"Background refreshes of cached questions by reason (prefetch: a popular entry near its expiry; stale: the client response timer cut the forwarders short) and result (answered, failed, skipped: one already in flight or the bound reached).",
			[]string{"reason", "result"}, nil),
		stale: prometheus.NewDesc("svcpf_resolver_stale_answers_total",
			"Answers served from expired records (serve-stale, RFC 8767) because the forwarders failed or did not answer within 1.8 s.", nil, nil),
	}
}

func (c *resilienceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.answers, c.failures, c.timeouts, c.probes, c.srtt, c.strategy, c.refreshes, c.stale} {
		ch <- d
	}
}

// collectForwarders sends the metrics of one set of forwarders: the
// default ones (zone "") or a forward zone's.
func (c *resilienceCollector) collectForwarders(ch chan<- prometheus.Metric, st []upstream.ForwarderStatus, zone string) {
	for _, f := range st {
		a := f.Addr.String()
		up := 0.0
		if f.Up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up, a, zone)
		ch <- prometheus.MustNewConstMetric(c.answers, prometheus.CounterValue, float64(f.Answers), a, zone)
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(f.Failures), a, zone)
		ch <- prometheus.MustNewConstMetric(c.timeouts, prometheus.CounterValue, float64(f.Timeouts), a, zone)
		ch <- prometheus.MustNewConstMetric(c.probes, prometheus.CounterValue, float64(f.Probes), a, zone)
		ch <- prometheus.MustNewConstMetric(c.srtt, prometheus.GaugeValue, f.SRTT.Seconds(), a, zone)
	}
}

func (c *resilienceCollector) Collect(ch chan<- prometheus.Metric) {
	var st []upstream.ForwarderStatus
	var s upstream.Strategy
	if up := c.r.upstream(); up != nil { // nil in recursive mode: no forwarders
		st, s = up.Status()
	}
	c.collectForwarders(ch, st, "")
	for _, z := range c.r.ForwardZones() {
		c.collectForwarders(ch, z.Forwarders, z.Zone)
	}
	for _, name := range []upstream.Strategy{upstream.StrategyFastest, upstream.StrategyOrdered} {
		v := 0.0
		if name == s {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.strategy, prometheus.GaugeValue, v, name.String())
	}
	rf := c.r.refresher
	for reason := range nReasons {
		for result := range nResults {
			ch <- prometheus.MustNewConstMetric(c.refreshes, prometheus.CounterValue,
				float64(rf.counts[reason][result].Load()), reasonNames[reason], resultNames[result])
		}
	}
	ch <- prometheus.MustNewConstMetric(c.stale, prometheus.CounterValue, float64(rf.stale.Load()))
}
