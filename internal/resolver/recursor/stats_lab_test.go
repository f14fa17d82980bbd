package recursor_test

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/dnslab"
	"github.com/svc-pf/svc-pf/internal/promtest"
	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
)

// TestLabFailureStatistics moves the statistics of failing servers on the
// lab: the only server of dead.test. never answers, so the resolution fails
// (ErrAllFailed), the server is counted failed and throttled
// (failed-host-entries, throttle-entries) and the zone's NS set is dropped
// (nsset-invalidations), and again for another name (the NS set asked of
// the parent again); a name in halfdead.test., whose servers are that
// silent one and a good one, is answered by the good one; one in
// lamedead.test., whose other server is lame, fails without the throttled
// server being asked (throttled-out).
func TestLabFailureStatistics(t *testing.T) {
	t.Parallel() // each lab has a /24 of its own
	lab := dnslab.Start(t, dnslab.WithSilentServer(dnslab.Standard()))
	reg := prometheus.NewRegistry()
	// A failed server stays throttled for the whole test, however slowly a
	// loaded machine runs it.
	r := newLabRecursor(t, lab.Hints, func(c *recursor.Config) { c.Registerer = reg; c.ThrottleBase = time.Minute })
	ctx := context.Background()
	if st, c := r.Stats(), r.Counters(); st.Failed != 0 || st.Throttled != 0 || c != (recursor.Counters{}) {
		t.Fatalf("a fresh recursor: %+v %+v", st, c)
	}
	if m, err := r.Exchange(ctx, question("www.dead.test.", dns.TypeA)); err == nil {
		t.Fatalf("www.dead.test.: answered %v", m)
	}
	if st, c := r.Stats(), r.Counters(); st.Failed != 1 || st.Throttled != 1 || c.NSSetInvalidations != 1 || c.ThrottledOut != 0 {
		t.Errorf("after dead.test.: %+v %+v; want 1 failed and throttled server, 1 NS set dropped, nothing throttled out", st, c)
	}
	// The dropped NS set is asked of the parent again, and fails again.
	if _, err := r.Exchange(ctx, question("mail.dead.test.", dns.TypeA)); err == nil {
		t.Error("mail.dead.test. answered")
	}
	if c := r.Counters(); c.NSSetInvalidations != 2 || c.ThrottledOut != 0 {
		t.Errorf("after dead.test. again: %+v; want a second NS set dropped", c)
	}
	m, err := r.Exchange(ctx, question("www.halfdead.test.", dns.TypeA))
	if err != nil || len(m.Answer) != 1 {
		t.Fatalf("www.halfdead.test.: %v %v", m, err)
	}
	if c := r.Counters(); c.ThrottledOut != 0 || c.NSSetInvalidations != 2 {
		t.Errorf("after halfdead.test.: %+v; want nothing more counted", c)
	}
	if m, err := r.Exchange(ctx, question("www.lamedead.test.", dns.TypeA)); err == nil {
		t.Fatalf("www.lamedead.test.: answered %v", m)
	}
	c := r.Counters()
	if c.ThrottledOut != 1 || c.NSSetInvalidations != 3 {
		t.Errorf("after lamedead.test.: %+v; want the silent server's query throttled out, a third NS set dropped", c)
	}
	// A delegation to a private address: barred by the default
	// dont_query, not sent, counted once.
	if m, err := r.Exchange(ctx, question("www.private.test.", dns.TypeA)); err == nil {
		t.Fatalf("www.private.test.: answered %v", m)
	}
	if c := r.Counters(); c.DontOutqueries != 1 {
		t.Errorf("after private.test.: dont-outqueries %d, want 1", c.DontOutqueries)
	}
	for name, want := range map[string]float64{
		"svcpf_recursor_dont_query_total":          1,
		"svcpf_recursor_failed_host_entries":       1,
		"svcpf_recursor_throttled_queries_total":   float64(c.ThrottledOut),
		"svcpf_recursor_nsset_invalidations_total": 3,
	} {
		if v := promtest.Value(t, reg, name); v != want {
			t.Errorf("%s = %v, want %v", name, v, want)
		}
	}
}
