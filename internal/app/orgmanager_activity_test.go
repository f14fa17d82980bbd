package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
)

// activityFake stands in for the activity store at the activity.Reader
// boundary (the store is another part's work): one event of acme's, and
// the organisations it was asked about.
type activityFake struct {
	mu    sync.Mutex
	asked []string
}

func (f *activityFake) Events(_ context.Context, q activity.EventQuery) (activity.EventPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, q.Org)
	return activity.EventPage{Events: []activity.StoredEvent{{ID: 1, Event: activity.Event{Time: q.To.Add(-time.Minute),
		Org: q.Org, QName: "ads.example.", QType: 28, Verdict: "block", Action: "nxdomain", Reason: "category"}}}}, nil
}

func (f *activityFake) Summary(_ context.Context, q activity.SummaryQuery) (activity.Summary, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, q.Org)
	return activity.Summary{Total: 1}, nil
}

// TestOrgManagerActivity: OrgManagerConfig.Activity reaches the reports
// of a started orgmanager, behind its access rules with real tokens: an
// org-viewer of acme reads acme's activity, gets 403 for beta's, and no
// token is 401; without a store the reports are 503.
func TestOrgManagerActivity(t *testing.T) {
	fake := &activityFake{}
	start := func(rd activity.Reader) string {
		cfg := DefaultOrgManagerConfig()
		cfg.HTTP.Address = "127.0.0.1:0"
		cfg.Database.URL = "sqlite:" + filepath.Join(t.TempDir(), "orgmanager.db")
		withTestToken(t, &cfg)
		cfg.Activity = rd
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
	base := start(fake)
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
	if code != 200 || !strings.Contains(body, `"qtype":"AAAA"`) || !strings.Contains(body, `"qname":"ads.example."`) {
		t.Fatalf("acme's viewer on acme: %d %s", code, body)
	}
	if code, body = get(t, base+"/org/acme/activity/summary?by=reason", viewer); code != 200 {
		t.Fatalf("summary: %d %s", code, body)
	}
	if code, body = get(t, base+"/org/beta/activity", viewer); code != 403 {
		t.Fatalf("acme's viewer on beta: %d %s", code, body)
	}
	if code, body = get(t, base+"/org/acme/activity", ""); code != 401 {
		t.Fatalf("no token: %d %s", code, body)
	}
	fake.mu.Lock()
	asked := strings.Join(fake.asked, " ")
	fake.mu.Unlock()
	if asked != "acme acme" {
		t.Fatalf("the store was asked about %q", asked)
	}

	bare := start(nil)
	if code, body = get(t, bare+"/org/acme/activity", admin); code != 503 || !strings.Contains(body, "activity.store.url") {
		t.Fatalf("without a store: %d %s", code, body)
	}
}
