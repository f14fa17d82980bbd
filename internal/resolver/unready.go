package resolver

import (
	"fmt"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// UnreadyMode is what the resolver answers while its node's policy data
// (the sessions and settings buckets, the feeds) has not loaded yet
// (Config.Unready, resolver.unready).
type UnreadyMode string

// The modes.
const (
	// UnreadyOpen (the default) answers from what has loaded: the RPZ
	// zones and whichever parts are there, which for a subscriber whose
	// session or settings are missing means unfiltered. Each such answer
	// is counted in svcpf_resolver_unfiltered_total{reason}.
	UnreadyOpen UnreadyMode = "open"
	// UnreadyClosed answers SERVFAIL, with the extended error 14 "Not
	// Ready" when the client sent EDNS, counted in
	// svcpf_resolver_unready_servfail_total{reason}.
	UnreadyClosed UnreadyMode = "closed"
)

// ParseUnreadyMode reads resolver.unready; "" is UnreadyOpen.
func ParseUnreadyMode(s string) (UnreadyMode, error) {
	switch UnreadyMode(s) {
	case "", UnreadyOpen:
		return UnreadyOpen, nil
	case UnreadyClosed:
		return UnreadyClosed, nil
	}
	return "", fmt.Errorf("unready: %q is neither open nor closed", s)
}

// ReasonUnready is Answered.Decision.Reason for an answer made while the
// policy data had not loaded: with resolver.unready open an allowed
// answer carries it instead of the plain default (its verdict stays
// allow), with closed the SERVFAIL carries it (with no verdict: nothing
// was decided).
const ReasonUnready policy.Reason = "unready"

// unreadyReasons are the label values of the unready counters: the parts
// Config.Waiting names (node.PartSessions, …), and "other" for anything
// else it says.
var unreadyReasons = [...]string{"sessions", "settings", "feeds", "other"}

// unreadyGate is the resolver's readiness: a latch that is set the first
// time Config.Waiting says nothing is missing and never cleared, so that
// once ready the query path reads one atomic bool and nothing else (the
// read models keep their last data when NATS goes away later: an answer
// is never unfiltered again for that).
type unreadyGate struct {
	waiting func() string // nil: always ready
	closed  bool
	// unfiltered and servfail are by unreadyReasons' index.
	unfiltered, servfail [len(unreadyReasons)]prometheus.Counter
}

// initUnready sets up r's gate from cfg; ready at once without
// cfg.Waiting.
func (r *Resolver) initUnready(cfg Config) error {
	mode, err := ParseUnreadyMode(string(cfg.Unready))
	if err != nil {
		return err
	}
	g := &r.unready
	g.waiting, g.closed = cfg.Waiting, mode == UnreadyClosed
	unfiltered := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svcpf_resolver_unfiltered_total",
		Help: "Queries answered while the node's policy data had not loaded (resolver.unready: open), " +
			"by the first part still missing: sessions, settings or feeds."}, []string{"reason"})
	servfail := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svcpf_resolver_unready_servfail_total",
		Help: "Queries answered SERVFAIL (EDE 14 Not Ready) while the node's policy data had not loaded " +
			"(resolver.unready: closed), by the first part still missing: sessions, settings or feeds."}, []string{"reason"})
	for i, reason := range unreadyReasons {
		g.unfiltered[i], g.servfail[i] = unfiltered.WithLabelValues(reason), servfail.WithLabelValues(reason)
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{unfiltered, servfail} {
			if err := cfg.Registerer.Register(c); err != nil {
				return err
			}
		}
	}
	if g.waiting == nil {
		r.ready.Store(true)
	}
	return nil
}

// Waiting is what the resolver waits for before it answers filtered: ""
// once its node's policy data has loaded (and from then on), else the
// first part still missing (Config.Waiting). A caller's /health says so.
func (r *Resolver) Waiting() string {
	if r.ready.Load() {
		return ""
	}
	w := r.unready.waiting()
	if w == "" && r.ready.CompareAndSwap(false, true) {
		r.log.Info("policy data loaded: answering filtered")
	}
	return w
}

// UnreadyMode is the resolver's resolver.unready.
func (r *Resolver) UnreadyMode() UnreadyMode {
	if r.unready.closed {
		return UnreadyClosed
	}
	return UnreadyOpen
}

// count counts one answer made while waiting for why.
func (g *unreadyGate) count(why string) {
	i := len(unreadyReasons) - 1
	for j, reason := range unreadyReasons[:i] {
		if reason == why {
			i = j
			break
		}
	}
	if g.closed {
		g.servfail[i].Inc()
		return
	}
	g.unfiltered[i].Inc()
}

// notReadyReply is the SERVFAIL of resolver.unready closed, with the
// extended error 14 "Not Ready" (RFC 8914) when the client sent EDNS;
// finish keeps the EDE and writes the OPT as the client spoke it.
func notReadyReply(req *dns.Msg, why string) *dns.Msg {
	m := errorReply(req, dns.RcodeServerFailure)
	if opt := req.IsEdns0(); opt != nil {
		m.SetEdns0(ourUDPSize, opt.Do())
		m.IsEdns0().Option = append(m.IsEdns0().Option,
			&dns.EDNS0_EDE{InfoCode: dns.ExtendedErrorCodeNotReady, ExtraText: "policy data not loaded yet: " + why})
	}
	return m
}

// markUnready makes an allowed answer's summary say it was made while the
// policy data had not loaded (ReasonUnready); deferred by resolve before
// query.decided, so that it runs after it.
func (q *query) markUnready() {
	if q.sum != nil && (q.sum.Verdict == policy.VerdictAllow || q.sum.Verdict == "") {
		q.sum.Reason = ReasonUnready
	}
}
