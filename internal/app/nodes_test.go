package app

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/node"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

// nodesAnswer is GET /nodes' body, as far as these tests read it.
type nodesAnswer struct {
	Nodes []struct {
		Name     string   `json:"name"`
		Services []string `json:"services"`
		Version  string   `json:"version"`
		Ready    bool     `json:"ready"`
		NotReady string   `json:"not_ready"`
		Stale    bool     `json:"stale"`
		Feeds    []struct {
			Name    string `json:"name"`
			Version int64  `json:"version"`
		} `json:"feeds"`
	} `json:"nodes"`
}

// getNodes calls GET /nodes with the admin token.
func getNodes(t *testing.T, base string) nodesAnswer {
	t.Helper()
	code, body := send(t, "GET", base+"/nodes", "Bearer "+testAdminToken, "")
	var a nodesAnswer
	if err := json.Unmarshal([]byte(body), &a); code != http.StatusOK || err != nil {
		t.Fatalf("GET /nodes: %d %s", code, body)
	}
	return a
}

// consoleGet signs in to the console at base with token and returns a
// getter of its pages, as a browser would (the session cookie only).
func consoleGet(t *testing.T, base, token string) func(path string) (int, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	transport := http.DefaultTransport
	if b, ok := transport.(bearerTransport); ok {
		transport = b.base
	}
	c := &http.Client{Jar: jar, Transport: transport}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	_, body := get("/ui/signin")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no sign-in form:\n%s", body)
	}
	resp, err := c.PostForm(base+"/ui/signin", url.Values{"csrf": {m[1]}, "token": {token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Request.URL.Path, "/ui/orgs") {
		t.Fatalf("sign-in ended at %d %s", resp.StatusCode, resp.Request.URL)
	}
	return get
}

// TestNodesHeartbeat: nodes announce themselves in the svcpf_nodes bucket
// of a real NATS server; a standalone orgmanager on that server lists
// them on GET /nodes (admin only: a scoped token gets 403) and on the
// console's Nodes page (likewise), each with its state: ready, not ready
// with the reason (a feed that never loaded), stale (a last beat older
// than three intervals). A node that stops leaves the list once the
// bucket's age limit has passed.
func TestNodesHeartbeat(t *testing.T) {
	bus := natstest.Start(t)
	om := startOM(t, storetest.URL(t, storetest.SQLite), bus.NC, nil, 0)
	log := natstest.Logger(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const beat = 200 * time.Millisecond

	// dns-a: no feeds, no NATS of its own: ready. dns-b: a feed whose
	// directory does not exist never loads: not ready, saying so.
	ready, err := node.New(node.Config{})
	if err != nil {
		t.Fatal(err)
	}
	missing, err := node.New(node.Config{Feeds: []feeds.FeedConfig{{Name: "badware",
		URL: filepath.Join(t.TempDir(), "absent"), PollInterval: time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	annA, err := newAnnouncer(AnnounceConfig{Name: "dns-a", Heartbeat: beat}, "resolver", []string{"resolver"}, ready, nil, bus.NC, "v-test", log)
	if err != nil {
		t.Fatal(err)
	}
	annB, err := newAnnouncer(AnnounceConfig{Name: "dns-b", Heartbeat: beat}, "simulator", []string{"simulator"}, missing, nil, bus.NC, "v-test", log)
	if err != nil {
		t.Fatal(err)
	}
	// dns-c beats with a clock a minute behind: its last beat is always
	// older than three intervals, so it is shown stale (and the bucket,
	// which ages by the server's clock, keeps it).
	annC, err := nodehealth.NewAnnouncer(nodehealth.AnnouncerConfig{NATS: bus.NC, Name: "dns-c", Services: []string{"resolver"},
		Version: "v-old", Interval: beat, Snapshot: nodeSnapshot(ready, nil), Logger: log,
		Clock: func() time.Time { return time.Now().Add(-time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	ctxA, stopA := context.WithCancel(ctx)
	waitA := runAnnouncer(ctxA, annA)
	defer runAnnouncer(ctx, annB)()
	defer runAnnouncer(ctx, annC)()
	defer cancel()

	var got nodesAnswer
	natstest.Eventually(t, "three nodes on GET /nodes", func() (bool, string) {
		got = getNodes(t, om.base)
		return len(got.Nodes) == 3, ""
	})
	a, b, c := got.Nodes[0], got.Nodes[1], got.Nodes[2]
	if a.Name != "dns-a" || !a.Ready || a.NotReady != "" || a.Stale || a.Version != "v-test" || len(a.Services) != 1 || a.Services[0] != "resolver" {
		t.Errorf("dns-a: %+v, want ready, not stale", a)
	}
	if b.Name != "dns-b" || b.Ready || !strings.Contains(b.NotReady, "feed badware not loaded yet") || b.Stale ||
		len(b.Feeds) != 1 || b.Feeds[0].Name != "badware" || b.Feeds[0].Version != 0 {
		t.Errorf("dns-b: %+v, want not ready: feed badware not loaded yet", b)
	}
	if c.Name != "dns-c" || !c.Stale {
		t.Errorf("dns-c: %+v, want stale", c)
	}

	// A scoped token: 403 on the API and on the page; no token: 401.
	send(t, "PUT", om.base+"/org/acme", "Bearer "+testAdminToken, "")
	code, created := send(t, "POST", om.base+"/tokens", "Bearer "+testAdminToken, `{"role":"org-admin","org":"acme","name":"acme ops"}`)
	var scoped struct{ Token string }
	if err := json.Unmarshal([]byte(created), &scoped); code != http.StatusCreated || err != nil {
		t.Fatalf("POST /tokens: %d %s", code, created)
	}
	if code, body := send(t, "GET", om.base+"/nodes", "Bearer "+scoped.Token, ""); code != http.StatusForbidden || !strings.Contains(body, `"error"`) {
		t.Errorf("GET /nodes with a scoped token: %d %s, want 403", code, body)
	}
	if code, _ := send(t, "GET", om.base+"/nodes", "", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /nodes without a token: %d, want 401", code)
	}
	if code, body := consoleGet(t, om.base, scoped.Token)("/ui/nodes"); code != http.StatusForbidden {
		t.Errorf("the Nodes page for a scoped token: %d\n%s", code, body)
	}

	// The console's page shows what the API answers.
	status, page := consoleGet(t, om.base, testAdminToken)("/ui/nodes")
	if status != http.StatusOK {
		t.Fatalf("the Nodes page: %d\n%s", status, page)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile(`(?s)<tr data-node="([^"]+)">(.*?)</tr>`).FindAllStringSubmatch(page, -1) {
		rows[m[1]] = m[2]
	}
	if r := rows["dns-a"]; !strings.Contains(r, "<td>ready</td>") || !strings.Contains(r, "v-test") {
		t.Errorf("dns-a's row: %q", r)
	}
	if r := rows["dns-b"]; !strings.Contains(r, `<strong class="not-ready">not ready</strong>: feed badware not loaded yet`) ||
		!strings.Contains(r, "badware <code>v0</code>") {
		t.Errorf("dns-b's row: %q", r)
	}
	if r := rows["dns-c"]; !strings.Contains(r, `<strong class="stale">stale</strong>`) {
		t.Errorf("dns-c's row: %q", r)
	}

	// dns-a stops beating (as a killed node would: nothing deletes its
	// key): the bucket's age limit removes it; the others stay.
	stopA()
	waitA()
	natstest.Eventually(t, "dns-a gone from GET /nodes", func() (bool, string) {
		got = getNodes(t, om.base)
		var names []string
		for _, n := range got.Nodes {
			names = append(names, n.Name)
		}
		return strings.Join(names, ",") == "dns-b,dns-c", strings.Join(names, ",")
	})
}

// TestAnnounceConfig: a bad node name or heartbeat is refused at start,
// by key.
func TestAnnounceConfig(t *testing.T) {
	for _, c := range []struct {
		cfg  AnnounceConfig
		want string
	}{
		{AnnounceConfig{Name: "dns 1"}, "node.name"},
		{AnnounceConfig{Name: ".dns"}, "node.name"},
		{AnnounceConfig{Heartbeat: -time.Second}, "node.heartbeat"},
		{AnnounceConfig{Heartbeat: time.Millisecond}, "node.heartbeat"},
	} {
		if err := c.cfg.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
	if err := (AnnounceConfig{Name: "dns1.fra-resolver", Heartbeat: 5 * time.Second}).validate(); err != nil {
		t.Errorf("a good config refused: %v", err)
	}
	cfg := DefaultResolverConfig()
	cfg.Forwarders = []string{"127.0.0.1:53"}
	cfg.Node.Name = "bad/name"
	if _, err := cfg.parse(); err == nil || !strings.Contains(err.Error(), "node.name") {
		t.Errorf("resolver config with node.name bad/name: %v", err)
	}
	all := DefaultAllConfig()
	all.DataDir = t.TempDir()
	all.Resolver.Node.Name = "x"
	if err := all.Validate(); err == nil || !strings.Contains(err.Error(), "resolver.node") {
		t.Errorf("svc-pf all with resolver.node set: %v", err)
	}
}
