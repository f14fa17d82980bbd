package policy

import (
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// BenchmarkDecide is one decision of the DNS path: a cached compiled
// policy, a reused Decision, a feed hit whose category is blocked.
func BenchmarkDecide(b *testing.B) {
	p := compile(b, `{"blocked_categories":[3,7,9],"blocklist":["ads.example","tracker.example"],
		"allowlist":["good.example"],"blocked_networks":["10.0.0.0/8"],"safe_search":true,
		"schedules":[{"days":["fri"],"from":"22:00","to":"06:00","tz":"Europe/Amsterdam","paused":true}]}`)
	c := NewCache(1024)
	k := Key{&settings.Document{}}
	c.Put(&k, p)
	d := &Decision{Trace: make([]TraceEntry, 0, TraceCap), Categories: make([]feed.Category, 0, 8)}
	in := Input{Domain: "a.b.www.bad.example", Time: noon}
	b.ReportAllocs()
	for b.Loop() {
		p, _ := c.Get(&k)
		DecideInto(d, &in, p, testCats)
	}
	if d.Reason != ReasonCategory {
		b.Fatal(d.Reason)
	}
}
