// Package promtest reads metrics back in tests: the value of one series of
// a registry, as the tests of every package that counts something ask it.
// It is used by tests only.
package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Value is the value of the first series of the family name in g whose
// labels include labels (name, value pairs): a counter's or a gauge's. A
// family or series that is not there fails the test.
func Value(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}
