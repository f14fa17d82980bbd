package feeds

import (
	"fmt"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// lookupBenchSet is a Set of two feeds of n names each, some with paths, as the
// Client publishes it.
func lookupBenchSet(b testing.TB, n int) *Set {
	s := &Set{}
	for fi, name := range []string{"ads", "security"} {
		bl := NewBuilder(n)
		for i := range n {
			bl.Set(putLine(fmt.Sprintf("host%d.domain%d.example", i, i%1000), uint16(i%50+fi)))
			if i%10 == 0 {
				bl.Set(putLine(fmt.Sprintf("domain%d.example/path/%d", i%1000, i), 7))
			}
		}
		codes := &feed.Codes{V: 1}
		for c := range 60 {
			codes.Codes = append(codes.Codes, feed.Code{Code: uint16(c), Title: fmt.Sprint("title ", c)})
		}
		s.feeds = append(s.feeds, &loadedFeed{name: name, index: bl.Index(), codes: newCodeTable(codes)})
	}
	return s
}

var setLookupCases = []struct{ name, path string }{
	{"host42.domain42.example", ""},           // exact name in both feeds
	{"a.b.c.host42.domain42.example", "/x"},   // a parent matches
	{"www.domain10.example", "/path/10/more"}, // a path entry
	{"nothing.here.example.org", ""},          // no match
}

// TestLookupDoesNotAllocate: the resolver calls Lookup for every query.
func TestLookupDoesNotAllocate(t *testing.T) {
	s := lookupBenchSet(t, 10_000)
	dst := make([]feed.Category, 0, 16)
	for _, c := range setLookupCases {
		if n := testing.AllocsPerRun(100, func() { dst = s.Lookup(c.name, c.path, dst[:0]) }); n != 0 {
			t.Errorf("Lookup(%q, %q) allocates %v times", c.name, c.path, n)
		}
	}
	if got := s.Lookup("host42.domain42.example", "", dst[:0]); len(got) != 2 || got[0].Feed != "ads" || got[1].Feed != "security" {
		t.Fatalf("lookup %+v", got)
	}
}

func BenchmarkLookup(b *testing.B) {
	s := lookupBenchSet(b, 100_000)
	dst := make([]feed.Category, 0, 16)
	for _, c := range setLookupCases {
		b.Run(c.name+c.path, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				dst = s.Lookup(c.name, c.path, dst[:0])
			}
		})
	}
}

// BenchmarkLoadSnapshot measures the poller's cost of a snapshot: verify,
// decompress, parse, build (100,000 entries).
func BenchmarkLoadSnapshot(b *testing.B) {
	d := newFeedDir(b, "ads")
	var lines []feed.Line
	for i := range 100_000 {
		lines = append(lines, putLine(fmt.Sprintf("host%d.domain%d.example", i, i%1000), uint16(i%50)))
	}
	v := d.snapshot(lines...)
	c := newTestClient(b, []FeedConfig{{Name: "ads", URL: d.dir}}, nil)
	b.ReportAllocs()
	for b.Loop() {
		ix, err := c.loadSnapshot(b.Context(), c.feeds[0], v)
		if err != nil || ix.Len() != len(lines) {
			b.Fatal(err)
		}
	}
}
