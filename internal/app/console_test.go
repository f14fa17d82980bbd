package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/svc-pf/svc-pf/internal/console"
	"github.com/svc-pf/svc-pf/internal/natsbus/natstest"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

// TestAllConsole: under svc-pf all the console is on the orgmanager's
// listener, and its "why", sessions and feeds pages reach the simulator
// and the IP Mapper of the same process over NATS: a username blocked a
// category through the REST API is "block … category" on the why page.
// The console signs in with a token of the orgmanager's own (made through
// POST /tokens), and its form writes are audited under that token: GET
// /org/{org}/audit through the REST API shows them.
func TestAllConsole(t *testing.T) {
	dir := badwareFeed(t)
	cfg := testAllConfig(t)
	cfg.Feeds = []feeds.FeedConfig{{Name: "badware", URL: dir, PollInterval: 100 * time.Millisecond}}
	cfg.Simulator.APIKeys = []string{"sim-key"}
	cfg.Node.Name, cfg.Node.Heartbeat = "all-node", 100*time.Millisecond
	all := startAll(t, cfg)
	p := &platformNode{t: t, org: "http://" + all.OrgManager.Addr().String()}
	// The console's operator: an admin token of its own, so that the
	// audit below tells its records from the REST API's (which carry
	// testAdminToken).
	code, created := send(t, "POST", p.org+"/tokens", "Bearer "+testAdminToken, `{"role":"admin","name":"console operator"}`)
	var operator struct{ ID, Token string }
	if err := json.Unmarshal([]byte(created), &operator); code != http.StatusCreated || err != nil || operator.Token == "" {
		t.Fatalf("POST /tokens: %d %s", code, created)
	}
	p.rest("PUT", "/org/acme", nil, 200)
	p.rest("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"127.0.0.0/8"}}, 200)
	p.rest("POST", "/org/acme/overrides", map[string]any{"cidr": "127.0.0.2/32", "username": "alice"}, 200)
	p.rest("PUT", "/org/acme/settings?username=alice", map[string]any{"blocked_categories": []int{3}}, 200)

	jar, _ := cookiejar.New(nil)
	// A browser: the session cookie only, no Authorization header (the
	// transport under the tests' bearerTransport).
	transport := http.DefaultTransport
	if b, ok := transport.(bearerTransport); ok {
		transport = b.base
	}
	c := &http.Client{Jar: jar, Transport: transport}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := c.Get(p.org + path)
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
	resp, err := c.PostForm(p.org+"/ui/signin", url.Values{"csrf": {m[1]}, "token": {operator.Token}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/orgs" {
		t.Fatalf("sign-in ended at %d %s", resp.StatusCode, resp.Request.URL)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		status, body := get("/ui/orgs/acme/why?domain=download.7zip.es&username=alice")
		if status == http.StatusOK && strings.Contains(body, "<strong>block</strong>") && strings.Contains(body, "username:alice") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("why never said block: %d\n%s", status, body)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		status, body := get("/ui/orgs/acme/sessions")
		if status == http.StatusOK && strings.Contains(body, "127.0.0.2/32") && strings.Contains(body, "alice") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sessions page: %d\n%s", status, body)
		}
	}
	if status, body := get("/ui/feeds"); status != http.StatusOK || !strings.Contains(body, "<td>badware</td>") {
		t.Fatalf("feeds page: %d\n%s", status, body)
	}
	// The process's own node announces itself: GET /nodes and the Nodes
	// page show it, ready once its feed has loaded, serving both services.
	natstest.Eventually(t, "svc-pf all's node ready on GET /nodes", func() (bool, string) {
		got := getNodes(t, p.org)
		if len(got.Nodes) != 1 {
			return false, fmt.Sprintf("%+v", got)
		}
		n := got.Nodes[0]
		return n.Name == "all-node" && n.Ready && !n.Stale && strings.Join(n.Services, ",") == "resolver,simulator" &&
			len(n.Feeds) == 1 && n.Feeds[0].Name == "badware" && n.Feeds[0].Version > 0, fmt.Sprintf("%+v", n)
	})
	if status, body := get("/ui/nodes"); status != http.StatusOK || !strings.Contains(body, `<tr data-node="all-node">`) ||
		!strings.Contains(body, "<td>ready</td>") {
		t.Fatalf("nodes page: %d\n%s", status, body)
	}

	// A form write through the console, then the organisation's audit
	// through the REST API with the admin token: the record names the
	// console's path and the token the console signed in with.
	_, body = get("/ui/orgs/acme/overrides")
	m = regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no form on the overrides page:\n%s", body)
	}
	resp, err = c.PostForm(p.org+"/ui/orgs/acme/overrides", url.Values{"csrf": {m[1]}, "cidr": {"127.0.0.3/32"}, "username": {"bob"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/orgs/acme/overrides" {
		t.Fatalf("override form ended at %d %s", resp.StatusCode, resp.Request.URL)
	}
	code, body = send(t, "GET", p.org+"/org/acme/audit?limit=1", "Bearer "+testAdminToken, "")
	var audit struct {
		Records []struct {
			TokenID   string `json:"token_id"`
			TokenName string `json:"token_name"`
			Role      string `json:"role"`
			Method    string `json:"method"`
			Path      string `json:"path"`
			Org       string `json:"org"`
			Status    int    `json:"status"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(body), &audit); code != http.StatusOK || err != nil || len(audit.Records) != 1 {
		t.Fatalf("GET /org/acme/audit: %d %s", code, body)
	}
	if r := audit.Records[0]; r.TokenID != operator.ID || r.TokenName != "console operator" || r.Role != "admin" ||
		r.Method != "POST" || r.Path != "/ui/orgs/acme/overrides" || r.Org != "acme" || r.Status != http.StatusSeeOther {
		t.Fatalf("the console's write is audited as %+v, want POST /ui/orgs/acme/overrides by token %s (console operator)", r, operator.ID)
	}

	// The standalone orgmanager's way to the simulator: its NATS API,
	// with the API key, a 400 as the form's message.
	nc, err := nats.Connect(all.NATS.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx := context.Background()
	sim := natsSimulator{nc: nc, key: "sim-key", timeout: 5 * time.Second}
	b, err := sim.Simulate(ctx, url.Values{"domain": {"download.7zip.es"}, "username": {"alice"}})
	if err != nil || !strings.Contains(string(b), `"verdict":"block"`) {
		t.Fatalf("over NATS: %v %s", err, b)
	}
	var bad *console.BadInput
	if _, err := sim.Simulate(ctx, url.Values{"domain": {"bad..name"}}); !errors.As(err, &bad) {
		t.Fatalf("a bad domain over NATS: %v", err)
	}
	if _, err := (natsSimulator{nc: nc, key: "wrong", timeout: 5 * time.Second}).Simulate(ctx, url.Values{"domain": {"x.example"}}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a wrong key over NATS: %v", err)
	}
	if b, err := sim.Info(ctx); err != nil || !strings.Contains(string(b), "badware") {
		t.Fatalf("info over NATS: %v %s", err, b)
	}
}
