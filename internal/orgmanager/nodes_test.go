package orgmanager

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

type bucketNodes struct{ js jetstream.JetStream }

func (b bucketNodes) Nodes(ctx context.Context) ([]nodehealth.Node, error) {
	return nodehealth.List(ctx, b.js, time.Now())
}

// TestNodes: GET /nodes answers the bucket's beats to an admin, 403 to a
// scoped caller, 401 to none.
func TestNodes(t *testing.T) {
	bus := natstest.Start(t)
	a, err := nodehealth.NewAnnouncer(nodehealth.AnnouncerConfig{NATS: bus.NC, Name: "dns-1", Services: []string{"resolver"},
		Version: "v1", Interval: time.Hour, Snapshot: func() nodehealth.Snapshot {
			return nodehealth.Snapshot{NotReady: "feed threats not loaded yet", Feeds: []nodehealth.Feed{{Name: "threats"}}}
		}})
	if err != nil {
		t.Fatal(err)
	}
	natstest.Background(t, a.Run)
	natstest.Eventually(t, "the beat", func() (bool, string) {
		nodes, err := nodehealth.List(context.Background(), bus.JS, time.Now())
		return err == nil && len(nodes) == 1, ""
	})
	h := newHarnessConfig(t, deploy.Config{Store: storetest.Open(t, storetest.SQLite), Publisher: deploy.Discard{}},
		func(c *Config) { c.Nodes = bucketNodes{bus.JS} })
	c := makeCallers(t, h)
	resp := h.doAs(c["platform admin"], http.MethodGet, "/nodes", nil)
	var got struct{ Nodes []nodehealth.Node }
	if err := json.Unmarshal(resp.body, &got); resp.status != 200 || err != nil || len(got.Nodes) != 1 {
		t.Fatalf("admin: %d %s", resp.status, resp.body)
	}
	if n := got.Nodes[0]; n.Name != "dns-1" || n.Ready || n.NotReady != "feed threats not loaded yet" || n.Stale || n.Version != "v1" {
		t.Errorf("the node: %+v", n)
	}
	for _, who := range []string{"viewer of acme", "org-admin of acme"} {
		if resp := h.doAs(c[who], http.MethodGet, "/nodes", nil); resp.status != http.StatusForbidden {
			t.Errorf("%s: %d %s", who, resp.status, resp.body)
		}
	}
	if resp := h.doAs("", http.MethodGet, "/nodes", nil); resp.status != http.StatusUnauthorized {
		t.Errorf("no token: %d %s", resp.status, resp.body)
	}

}
