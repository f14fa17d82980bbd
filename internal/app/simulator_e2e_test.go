package app

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestAllWiring: what `svc-pf all` passes from its config to the services
// beyond the README's session (which TestReadme runs on the real binary):
// dns.debug's CHAOS trace for the asking client, the simulator's lookup by
// username over the shared read models, and its info payload counting what
// the node holds, with the top-level region.
func TestAllWiring(t *testing.T) {
	p := startPlatformNode(t, "")
	p.rest("PUT", "/org/acme", nil, 200)
	p.rest("PATCH", "/org/acme/prefixes", map[string]any{"add": []string{"127.0.0.0/8"}}, 200)
	p.rest("POST", "/org/acme/overrides", map[string]any{"cidr": "127.0.0.2/32", "username": "alice"}, 200)
	p.rest("PUT", "/org/acme/settings?username=alice", map[string]any{"blocked_categories": []int{3}}, 200)

	// ||7zip.es^$doc is in the list: its subdomains carry code 3.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if m := dnsFrom(t, "127.0.0.2", p.dns, "download.7zip.es", dns.TypeA, dns.ClassINET); m != nil && m.Rcode == dns.RcodeNameError {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("alice's query never NXDOMAIN")
		}
	}
	m := dnsFrom(t, "127.0.0.2", p.dns, "download.7zip.es", dns.TypeTXT, dns.ClassCHAOS)
	if m == nil || len(m.Answer) != 1 || !strings.Contains(strings.Join(m.Answer[0].(*dns.TXT).Txt, "\n"), "reason category") {
		t.Fatalf("debug trace: %v", m)
	}
	if s := p.simulate(url.Values{"domain": {"download.7zip.es"}, "username": {"alice"}}); s["verdict"] != "block" ||
		s["identity"].(map[string]any)["by"] != "username" {
		t.Fatalf("by username: %v", s)
	}
	// The info payload (refreshed every second) counts what the node holds.
	var info map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(p.sim + "/api/v1/info")
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
