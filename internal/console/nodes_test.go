package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/console"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
)

// bucketNodes reads the nodes' bucket, as internal/app wires it for the
// console and GET /nodes.
type bucketNodes struct{ js jetstream.JetStream }

func (b bucketNodes) Nodes(ctx context.Context) ([]nodehealth.Node, error) {
	return nodehealth.List(ctx, b.js, time.Now())
}

// TestNodesPage: two nodes beat into a real NATS bucket, one ready and
// one missing a feed; the admin's Nodes page shows both with their state,
// reason, version and feeds; a scoped token gets 403 and no link; a
// console without NATS says so.
func TestNodesPage(t *testing.T) {
	bus := natstest.Start(t)
	e := newEnv(t, openSQLite(t), func(c *console.Config) { c.Nodes = bucketNodes{bus.JS} })
	ctx := context.Background()
	for _, n := range []struct {
		name string
		s    nodehealth.Snapshot
	}{
		{"dns-a", nodehealth.Snapshot{Feeds: []nodehealth.Feed{{Name: "threats", Version: 41, LoadedAt: time.Now()}}}},
		{"dns-b", nodehealth.Snapshot{NotReady: "feed threats not loaded yet", Feeds: []nodehealth.Feed{{Name: "threats"}}}},
	} {
		a, err := nodehealth.NewAnnouncer(nodehealth.AnnouncerConfig{NATS: bus.NC, Name: n.name, Services: []string{"resolver"},
			Version: "v9", Interval: time.Hour, Snapshot: func() nodehealth.Snapshot { return n.s }})
		if err != nil {
			t.Fatal(err)
		}
		natstest.Background(t, a.Run)
	}
	natstest.Eventually(t, "both nodes in the bucket", func() (bool, string) {
		nodes, err := nodehealth.List(ctx, bus.JS, time.Now())
		return err == nil && len(nodes) == 2, ""
	})

	admin := e.browser()
	admin.signIn(adminSecret)
	a := admin.get("/ui/nodes")
	if a.status != http.StatusOK {
		t.Fatalf("nodes page: %d\n%s", a.status, a.body)
	}
	rowA, rowB := row(a.body, "dns-a"), row(a.body, "dns-b")
	for _, want := range []string{"<td>ready</td>", "<code>v9</code>", "threats <code>v41</code>", "resolver"} {
		if !strings.Contains(rowA, want) {
			t.Errorf("dns-a's row lacks %q: %s", want, rowA)
		}
	}
	for _, want := range []string{`<strong class="not-ready">not ready</strong>: feed threats not loaded yet`, "threats <code>v0</code>"} {
		if !strings.Contains(rowB, want) {
			t.Errorf("dns-b's row lacks %q: %s", want, rowB)
		}
	}
	if !strings.Contains(a.body, `<a href="/ui/nodes">Nodes</a>`) {
		t.Error("no Nodes link for an admin")
	}

	viewer := e.browser()
	viewer.signIn(viewerSecret)
	if a := viewer.get("/ui/nodes"); a.status != http.StatusForbidden || strings.Contains(a.body, "dns-a") {
		t.Errorf("nodes page for a viewer: %d\n%s", a.status, a.body)
	}
	if a := viewer.get("/ui/orgs/acme"); strings.Contains(a.body, `href="/ui/nodes"`) {
		t.Error("a Nodes link for a scoped token")
	}

	bare := newEnv(t, openSQLite(t)).browser()
	bare.signIn(adminSecret)
	if a := bare.get("/ui/nodes"); a.status != http.StatusOK || !strings.Contains(a.body, "announce themselves over NATS") {
		t.Errorf("nodes page without NATS: %d\n%s", a.status, a.body)
	}
}

// row is the table row of node name on a Nodes page.
func row(body, name string) string {
	i := strings.Index(body, `<tr data-node="`+name+`">`)
	if i < 0 {
		return ""
	}
	j := strings.Index(body[i:], "</tr>")
	if j < 0 {
		return body[i:]
	}
	return body[i : i+j]
}
