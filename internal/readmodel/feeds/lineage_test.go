package feeds

import (
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// counter is the value of a counter series of the node's registry with
// label feed=g; 0 when it does not exist.
func counter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "feed" && l.GetValue() == "g" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestManifestWithoutLineage: a manifest written before content_sha256 and
// base_sha256 existed still works, safely: the node cannot prove that a
// delta builds on what it holds, so it loads the snapshot and the deltas
// after it for every new version (and says so once), and keeps a version
// the manifest lists as its latest with the same file checksum. Once the
// manifest names the lineage, one more snapshot load gives the node a
// content checksum, and deltas apply again.
func TestManifestWithoutLineage(t *testing.T) {
	e := newClientEnv(t, "http", nil)
	e.d.noLineage = true
	e.d.snapshot(putLine("a.example", 1))
	e.c.mustPoll()
	e.requests()
	expectRequests := func(what string, want ...string) {
		t.Helper()
		if got := e.requests(); !slices.Equal(got, want) {
			t.Fatalf("%s: requests %v, want %v", what, got, want)
		}
	}
	e.d.delta(putLine("b.example", 2))
	e.c.mustPoll()
	expectRequests("a delta without lineage", "feed.json OK", "feed-codes.json Not Modified", "snapshot_1.gz OK", "delta_2.gz OK")
	e.c.mustPoll()
	expectRequests("an unchanged poll", "feed.json Not Modified", "feed-codes.json Not Modified")
	e.d.delta(delLine("a.example"), putLine("c.example", 3))
	e.c.mustPoll()
	expectRequests("a second delta", "feed.json OK", "feed-codes.json Not Modified", "snapshot_1.gz OK", "delta_2.gz OK", "delta_3.gz OK")
	expectCodes(t, e.c, "a.example")
	expectCodes(t, e.c, "b.example", "ads:2")
	expectCodes(t, e.c, "c.example", "ads:3")
	if n := e.c.logs.count("does not prove that its deltas build on the version held"); n != 1 {
		t.Fatalf("the warning was logged %d times, want once", n)
	}
	if n := counter(t, e.c.reg, "svcpf_feed_lineage_resets_total"); n != 0 {
		t.Fatalf("svcpf_feed_lineage_resets_total = %v for a manifest that proves nothing", n)
	}

	// feed build upgraded: the manifest names the lineage.
	e.d.noLineage = false
	e.d.delta(putLine("d.example", 4))
	e.c.mustPoll()
	expectRequests("the first delta with lineage", "feed.json OK", "feed-codes.json Not Modified", "snapshot_1.gz OK", "delta_2.gz OK", "delta_3.gz OK", "delta_4.gz OK")
	e.d.delta(putLine("e.example", 1))
	e.c.mustPoll()
	expectRequests("the next delta", "feed.json OK", "feed-codes.json Not Modified", "delta_5.gz OK")
	expectCodes(t, e.c, "d.example", "ads:4")
	expectCodes(t, e.c, "e.example", "ads:1")
}
