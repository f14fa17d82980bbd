package feeds

import (
	"testing"
	"time"
)

// This file lends the package's test node to its external tests
// (lineage_build_test.go), which run feed build: feedbuild reads feed
// directories through this package, so only an external test can import it.

// LineageNode is a node following one feed, with the package tests'
// registry and captured log.
type LineageNode struct{ c *testClient }

// NewLineageNode follows feed name at url, on clock.
func NewLineageNode(t *testing.T, name, url string, clock func() time.Time) *LineageNode {
	return &LineageNode{newTestClient(t, []FeedConfig{{Name: name, URL: url}}, func(c *Config) { c.Clock = clock })}
}

func (n *LineageNode) MustPoll()                  { n.c.mustPoll() }
func (n *LineageNode) PollAll() error             { return n.c.pollAll() }
func (n *LineageNode) LogCount(substr string) int { return n.c.logs.count(substr) }

// Counter is a counter of the feed's metrics (0 when it does not exist).
func (n *LineageNode) Counter(name string) float64 {
	return counter(n.c.t, n.c.reg, name)
}

// Held is the node's index of its feed as a map, and its version.
func (n *LineageNode) Held() (map[string][]uint16, int64) {
	lf := n.c.Set().feeds[0]
	if lf == nil {
		return nil, 0
	}
	out := map[string][]uint16{}
	for m := range lf.index.All() {
		out[m.Key()] = m.Codes
	}
	return out, lf.from.Version
}

// IsBackwards reports a poll that failed on a manifest older than the
// version held.
func IsBackwards(err error) bool { return reasonOf(err) == reasonBackwards }

// DefaultRollbackAfter is Config.RollbackAfter's default.
const DefaultRollbackAfter = defaultRollbackAfter

type FakeClock = fakeClock

func NewFakeClock() *FakeClock { return newFakeClock() }

func ForModes(t *testing.T, fn func(t *testing.T, mode string)) { forModes(t, fn) }

// SourceMode is one of the modes ForModes runs, by i.
func SourceMode(i int) string { return sourceModes[i%len(sourceModes)] }
