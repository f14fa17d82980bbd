package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/store"
)

// writeActivity stores, in day files under dir, two events of acme's (a
// block and a sampled allow) and one of beta's, as the collector would.
func writeActivity(t *testing.T, dir string) {
	t.Helper()
	w, err := store.Open(context.Background(), store.Config{URL: "dir:" + dir})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	now := time.Now().UTC()
	b := activity.Batch{Node: "n1", Boot: 1, Seq: 1, Events: []activity.Event{
		{Time: now.Add(-2 * time.Minute), Node: "n1", Org: "acme", Username: "alice", QName: "ads.example.", QType: 28,
			Verdict: "block", Action: "nxdomain", Reason: "category", Categories: []uint16{3}, Rule: "category:3", Rcode: 3},
		{Time: now.Add(-time.Minute), Node: "n1", Org: "acme", Username: "alice", QName: "ok.example.", QType: 1,
			Verdict: "allow", Action: "allow", Reason: "default", Sampled: true},
		{Time: now.Add(-time.Minute), Node: "n1", Org: "beta", QName: "beta-secret.example.", QType: 1,
			Verdict: "block", Action: "nxdomain", Reason: "blocklist", Rcode: 3},
	}}
	if err := w.Write(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
}

// TestOrgManagerActivity: the standalone orgmanager's activity.store.url,
// opened read only beside the collector's day files, reaches the reports
// of a started orgmanager, behind its access rules with real tokens: an
// org-viewer of acme reads acme's activity (and none of beta's), gets 403
// for beta's, and no token is 401; without a store the reports are 503.
func TestOrgManagerActivity(t *testing.T) {
	dir := t.TempDir()
	writeActivity(t, dir)
	rd, err := openActivityReader(context.Background(), OrgActivityConfig{Store: activity.StoreConfig{URL: "dir:" + dir},
		Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rd.Close() })
	start := func(rd activity.Reader) string {
		cfg := DefaultOrgManagerConfig()
		cfg.HTTP.Address = "127.0.0.1:0"
		cfg.Database.URL = "sqlite:" + filepath.Join(t.TempDir(), "orgmanager.db")
		withTestToken(t, &cfg)
		cfg.ActivityReader = rd
		ctx, cancel := context.WithCancel(context.Background())
		om, err := StartOrgManager(ctx, cfg, nil, "test", slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- om.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		return "http://" + om.Addr().String()
	}
	base := start(rd)
	admin := "Bearer " + testAdminToken
	code, body := send(t, "POST", base+"/tokens", admin, `{"role":"org-viewer","org":"acme","name":"acme viewer"}`)
	if code != 201 && code != 200 {
		t.Fatalf("POST /tokens: %d %s", code, body)
	}
	var tok struct{ Token string }
	if err := json.Unmarshal([]byte(body), &tok); err != nil || tok.Token == "" {
		t.Fatalf("token: %s", body)
	}
	viewer := "Bearer " + tok.Token

	code, body = get(t, base+"/org/acme/activity?verdict=block", viewer)
	var page struct {
		Events []struct{ QName, Username, QType string } `json:"events"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &page) != nil || len(page.Events) != 1 || page.Events[0].QName != "ads.example." ||
		page.Events[0].Username != "alice" || page.Events[0].QType != "AAAA" {
		t.Fatalf("acme's viewer on acme's blocks: %d %s", code, body)
	}
	if code, body = get(t, base+"/org/acme/activity", viewer); code != 200 || strings.Contains(body, "beta-secret") ||
		!strings.Contains(body, "ok.example.") {
		t.Fatalf("acme's viewer on all acme's activity: %d %s", code, body)
	}
	code, body = get(t, base+"/org/acme/activity/summary?by=reason", viewer)
	var sum activity.Summary
	if code != 200 || json.Unmarshal([]byte(body), &sum) != nil || sum.Blocked != 1 {
		t.Fatalf("summary: %d %s", code, body)
	}
	if code, body = get(t, base+"/org/beta/activity", viewer); code != 403 {
		t.Fatalf("acme's viewer on beta: %d %s", code, body)
	}
	if code, body = get(t, base+"/org/acme/activity", ""); code != 401 {
		t.Fatalf("no token: %d %s", code, body)
	}
	if code, body = get(t, base+"/org/beta/activity", admin); code != 200 || !strings.Contains(body, "beta-secret") {
		t.Fatalf("the admin on beta: %d %s", code, body)
	}

	bare := start(nil)
	if code, body = get(t, bare+"/org/acme/activity", admin); code != 503 || !strings.Contains(body, "activity.store.url") {
		t.Fatalf("without a store: %d %s", code, body)
	}
}
