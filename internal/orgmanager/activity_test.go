package orgmanager

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// recordingReader stands in for the activity store (another part's work,
// at the activity.Reader boundary): it answers empty pages and keeps the
// organisations it was asked about.
type recordingReader struct{ orgs chan string }

func (r recordingReader) Events(_ context.Context, q activity.EventQuery) (activity.EventPage, error) {
	r.orgs <- q.Org
	return activity.EventPage{}, nil
}

func (r recordingReader) Summary(_ context.Context, q activity.SummaryQuery) (activity.Summary, error) {
	r.orgs <- q.Org
	return activity.Summary{}, nil
}

// emptyActivity is an activity store holding nothing, at the
// activity.Reader boundary (the store is another part's work).
type emptyActivity struct{}

func (emptyActivity) Events(context.Context, activity.EventQuery) (activity.EventPage, error) {
	return activity.EventPage{}, nil
}

func (emptyActivity) Summary(context.Context, activity.SummaryQuery) (activity.Summary, error) {
	return activity.Summary{}, nil
}

// TestActivityAccess: the reports sit behind the orgmanager's guard with
// real tokens on a real listener: acme's viewer reads acme's activity and
// is refused beta's (403) before the store is asked; no token is 401.
func TestActivityAccess(t *testing.T) {
	rd := recordingReader{orgs: make(chan string, 16)}
	h := newHarnessConfig(t, deploy.Config{Store: storetest.Open(t, storetest.SQLite), Publisher: deploy.Discard{}},
		func(c *Config) { c.Activity = rd })
	admin := access.Principal{Role: access.RoleAdmin}
	_, viewer, err := h.tokens.Create(context.Background(), admin, access.NewToken{Role: access.RoleOrgViewer, Org: "acme", Name: "acme viewer"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		auth, path string
		want       int
	}{
		{"Bearer " + viewer, "/org/acme/activity", http.StatusOK},
		{"Bearer " + viewer, "/org/acme/activity/summary?by=category", http.StatusOK},
		{"Bearer " + viewer, "/org/beta/activity", http.StatusForbidden},
		{"Bearer " + viewer, "/org/beta/activity/summary?by=category", http.StatusForbidden},
		{"", "/org/acme/activity", http.StatusUnauthorized},
		{"", "/org/acme/activity/summary?by=domain", http.StatusUnauthorized},
		{"Bearer " + h.token, "/org/beta/activity", http.StatusOK},
	} {
		status, _, body := h.sendAs(tc.auth, http.MethodGet, tc.path, "")
		if status != tc.want {
			t.Errorf("%s as %.20q: %d %s, want %d", tc.path, tc.auth, status, body, tc.want)
		}
	}
	close(rd.orgs)
	var asked []string
	for o := range rd.orgs {
		asked = append(asked, o)
	}
	if strings.Join(asked, " ") != "acme acme beta" {
		t.Fatalf("the store was asked about %v, want acme acme beta (never for a refused caller)", asked)
	}
}

// TestActivityWithoutStore: an orgmanager without an activity store
// answers the reports 503, saying which key to set.
func TestActivityWithoutStore(t *testing.T) {
	h := newHarnessConfig(t, deploy.Config{Store: storetest.Open(t, storetest.SQLite), Publisher: deploy.Discard{}},
		func(c *Config) { c.Activity = nil })
	status, _, body := h.sendAs("Bearer "+h.token, http.MethodGet, "/org/acme/activity", "")
	if status != http.StatusServiceUnavailable || !strings.Contains(string(body), "activity.store.url") {
		t.Fatalf("%d %s", status, body)
	}
}
