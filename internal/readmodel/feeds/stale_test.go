package feeds

import (
	"strings"
	"testing"
	"time"
)

// TestStaleAfter: a loaded feed whose polls fail is Stale only once no poll
// has succeeded for longer than its stale_after (default StalePolls poll
// intervals), keeps serving its version meanwhile, and is not Stale again
// after the next successful poll.
func TestStaleAfter(t *testing.T) {
	for _, tt := range []struct {
		name       string
		staleAfter time.Duration
		want       time.Duration // the bound in force
	}{
		{"configured", 30 * time.Second, 30 * time.Second},
		{"default", 0, StalePolls * 2 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			d := newFeedDir(t, "ads")
			d.now = clock.Now
			c := newTestClient(t, []FeedConfig{{Name: "ads", URL: d.dir, PollInterval: 2 * time.Second, StaleAfter: tt.staleAfter}},
				func(c *Config) { c.Clock = clock.Now })
			d.snapshot(putLine("a.example", 1))
			c.mustPoll()
			good := d.manifest()
			d.write("feed.json", []byte("{not json"))
			clock.Advance(tt.want)
			if err := c.pollAll(); err == nil {
				t.Fatal("a corrupt manifest polled fine")
			}
			if st := c.Status()[0]; st.Stale || st.LastError == "" {
				t.Fatalf("stale at exactly stale_after: %+v", st)
			}
			clock.Advance(time.Millisecond)
			st := c.Status()[0]
			if !st.Stale || st.Version != 1 || !strings.Contains(st.LastError, "feed.json") {
				t.Fatalf("not stale past stale_after: %+v", st)
			}
			expectCodes(t, c, "a.example", "ads:1")
			d.writeManifest(good)
			c.mustPoll()
			if st := c.Status()[0]; st.Stale || st.LastError != "" {
				t.Fatalf("still stale after a good poll: %+v", st)
			}
		})
	}
	if _, err := New(Config{Feeds: []FeedConfig{{Name: "ads", URL: t.TempDir(), StaleAfter: -time.Second}}}); err == nil ||
		!strings.Contains(err.Error(), "stale_after") {
		t.Fatalf("a negative stale_after: %v", err)
	}
}
