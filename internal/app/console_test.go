package app

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/console"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

// oneToken authenticates one admin secret: the token store of package
// access joins this branch later; until then the test stands in for it
// with the smallest real authenticator.
type oneToken struct{ secret string }

func (o oneToken) Authenticate(_ context.Context, secret string) (access.Principal, error) {
	if secret != o.secret {
		return access.Principal{}, access.ErrUnauthorized
	}
	return access.Principal{TokenID: "t1", Name: "test", Role: access.RoleAdmin}, nil
}

// TestAllConsole: under svc-pf all the console is on the orgmanager's
// listener, and its "why", sessions and feeds pages reach the simulator
// and the IP Mapper of the same process over NATS: a username blocked a
// category through the REST API is "block … category" on the why page.
func TestAllConsole(t *testing.T) {
	dir := badwareFeed(t)
	cfg := testAllConfig(t)
	cfg.Feeds = []feeds.FeedConfig{{Name: "badware", URL: dir, PollInterval: 100 * time.Millisecond}}
	cfg.Simulator.APIKeys = []string{"sim-key"}
	cfg.OrgManager.Console.Auth = oneToken{"console-secret"}
	all := startAll(t, cfg)
	p := &platformNode{t: t, org: "http://" + all.OrgManager.Addr().String()}
	p.rest("PUT", "/org/acme", nil, 200)
	p.rest("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"127.0.0.0/8"}}, 200)
	p.rest("POST", "/org/acme/overrides", map[string]any{"cidr": "127.0.0.2/32", "username": "alice"}, 200)
	p.rest("PUT", "/org/acme/settings?username=alice", map[string]any{"blocked_categories": []int{3}}, 200)

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar}
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
	resp, err := c.PostForm(p.org+"/ui/signin", url.Values{"csrf": {m[1]}, "token": {"console-secret"}})
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
