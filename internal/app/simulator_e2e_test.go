package app

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

// TestReadmeSimulatorSession is the README's session on `svc-pf all`:
// an organisation, a prefix, an override for alice, settings for alice, a
// feed built from a real list (uBlock badware) — and the simulator says
// alice is blocked, with the reason, while her neighbour is not.
func TestReadmeSimulatorSession(t *testing.T) {
	dir := badwareFeed(t)
	cfg := testAllConfig(t)
	cfg.Feeds = []feeds.FeedConfig{{Name: "badware", URL: dir, PollInterval: 100 * time.Millisecond}}
	cfg.Region = "test-region"
	all := startAll(t, cfg)
	org := "http://" + all.OrgManager.Addr().String()
	sim := "http://" + all.Simulator.Addr().String()

	call := func(method, path string, body any, want int) {
		t.Helper()
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest(method, org+path, bytes.NewReader(b))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rb, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, rb, want)
		}
	}
	simulate := func(q url.Values) map[string]any {
		t.Helper()
		resp, err := http.Get(sim + "/api/v1/simulate?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != 200 {
			t.Fatalf("simulate %s: %d %v %v", q.Encode(), resp.StatusCode, m, err)
		}
		return m
	}

	call("PUT", "/org/acme", nil, 200)
	call("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"127.0.0.0/8"}}, 200)
	call("POST", "/org/acme/overrides", map[string]any{"cidr": "127.0.0.2/32", "username": "alice"}, 200)
	call("PUT", "/org/acme/settings?username=alice", map[string]any{"blocked_categories": []int{3}}, 200)

	// ||7zip.es^$doc is in the list: its subdomains carry code 3.
	alice := url.Values{"domain": {"download.7zip.es"}, "ip": {"127.0.0.2"}}
	deadline := time.Now().Add(30 * time.Second)
	var m map[string]any
	for {
		m = simulate(alice)
		if m["verdict"] == "block" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice never blocked: %v", m)
		}
		time.Sleep(50 * time.Millisecond)
	}
	id := m["identity"].(map[string]any)
	if m["reason"] != "category" || m["rule"] != "category:3 feed=badware key=7zip.es" || id["username"] != "alice" ||
		id["org"] != "acme" || id["by"] != "ip" {
		t.Fatalf("alice: %v", m)
	}
	if m := simulate(url.Values{"domain": {"download.7zip.es"}, "ip": {"127.0.0.3"}}); m["verdict"] != "allow" ||
		m["identity"].(map[string]any)["org"] != "acme" {
		t.Fatalf("127.0.0.3: %v", m)
	}
	if m := simulate(url.Values{"domain": {"download.7zip.es"}, "username": {"alice"}}); m["verdict"] != "block" {
		t.Fatalf("by username: %v", m)
	}
	// The info payload (refreshed every second) counts what the node holds.
	var info map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(sim + "/api/v1/info")
		if err != nil {
			t.Fatal(err)
		}
		info = nil
		_ = json.NewDecoder(resp.Body).Decode(&info)
		resp.Body.Close()
		if info["sessions"] == 2.0 && info["settings_documents"] == 1.0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("info %v", info)
		}
	}
	if info["region"] != "test-region" {
		t.Fatalf("info %v", info)
	}
}
