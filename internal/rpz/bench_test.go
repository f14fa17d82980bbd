package rpz

import (
	"fmt"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// benchZoneText is a zone of n triggers: four in five exact names, one in
// five wildcards, with every action kind represented.
func benchZoneText(n int) string {
	var sb strings.Builder
	sb.WriteString(head)
	actions := []string{"CNAME .", "CNAME *.", "CNAME rpz-drop.", "CNAME rpz-tcp-only.", "A 192.0.2.1", "CNAME garden.example."}
	for i := range n {
		if i%5 == 4 {
			fmt.Fprintf(&sb, "*.wild%d.example %s\n", i, actions[i%len(actions)])
		} else {
			fmt.Fprintf(&sb, "host%d.domain%d.example %s\n", i, i%1000, actions[i%len(actions)])
		}
	}
	return sb.String()
}

var checkCases = []struct{ name, domain string }{
	{"exact-hit", "host4242.domain242.example"},
	{"wildcard-hit", "a.b.c.wild4994.example"},
	{"miss", "nothing.here.example.org"},
	{"miss-deep", "a.b.c.d.e.f.host1.domain1.example"},
}

// TestCheckDoesNotAllocate: Check runs for every DNS query.
func TestCheckDoesNotAllocate(t *testing.T) {
	z := mustParse(t, "bench", benchZoneText(10_000))
	s := newSnapshot(z)
	var d policy.Decision
	for _, c := range checkCases {
		in := policy.Input{Domain: c.domain}
		if n := testing.AllocsPerRun(100, func() { d.Reset(); s.Check(&in, &d) }); n != 0 {
			t.Errorf("Check(%q) allocates %v times", c.domain, n)
		}
	}
	d.Reset()
	if !s.Check(&policy.Input{Domain: "a.b.c.wild4994.example"}, &d) || d.Rule() != "rpz:bench trigger=*.wild4994.example action=drop" {
		t.Fatalf("wildcard hit: %q", d.Rule())
	}
}

// BenchmarkCheck: one zone of 100,000 triggers (80,000 exact, 20,000
// wildcards).
func BenchmarkCheck(b *testing.B) {
	z := mustParse(b, "bench", benchZoneText(100_000))
	if z.Stats().Triggers != 100_000 {
		b.Fatalf("%d triggers", z.Stats().Triggers)
	}
	s := &Set{}
	s.cur.Store(newSnapshot(z))
	var d policy.Decision
	for _, c := range checkCases {
		in := policy.Input{Domain: c.domain}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d.Reset()
				s.Check(&in, &d)
			}
		})
	}
}

// BenchmarkParse: the cost of (re)loading a 100,000-trigger zone.
func BenchmarkParse(b *testing.B) {
	text := benchZoneText(100_000)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(strings.NewReader(text), ParseOptions{Name: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
}
