package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// TestOrgManagerAuditsWrites: the started orgmanager records the writes
// through its listener (not its reads, not the console's paths) and prunes
// past audit.retention.
func TestOrgManagerAuditsWrites(t *testing.T) {
	om := startOM(t, storetest.URL(t, storetest.SQLite), nil, func(c *OrgManagerConfig) { c.Audit.Retention = 48 * time.Hour }, 0)
	om.call("PUT", "/org/acme", "", 200)
	om.call("GET", "/org/acme", "", 200)
	om.call("PATCH", "/org/acme/prefixes", `{"add":["10.0.0.1/8"]}`, 400)
	// The console's paths are the console's to record (a form without a
	// session is sent back to sign in, and leaves no record here).
	om.call("POST", "/ui/orgs", "", 401)
	ctx := context.Background()
	recs, err := om.om.store.AuditRecords(ctx, access.AuditQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Method+" "+r.Path+" "+r.Org+" "+r.TokenID+" "+r.TokenName+" "+string(r.Role))
		if r.RequestID == "" {
			t.Errorf("%s %s: no request id", r.Method, r.Path)
		}
	}
	// The caller is the token the guard verified (the tests' requests
	// carry testAdminToken, which the orgmanager ensured as
	// SVCPF_ADMIN_TOKEN): the audit runs inside the guard.
	id, _, _ := access.ParseToken(testAdminToken)
	caller := id + " " + AdminTokenEnv + " admin"
	if want := "PATCH /org/acme/prefixes acme " + caller + ", PUT /org/acme acme " + caller; strings.Join(got, ", ") != want {
		t.Fatalf("audit: %q, want %q", strings.Join(got, ", "), want)
	}
	if recs[1].OrgVersion != 1 || recs[0].Status != 400 {
		t.Errorf("records %+v", recs)
	}

	if err := om.om.store.AppendAudit(ctx, access.AuditRecord{Time: time.Now().Add(-49 * time.Hour), Method: "PUT",
		Path: "/org/old", Status: 200}); err != nil {
		t.Fatal(err)
	}
	if n := om.om.auditor.Prune(ctx); n != 1 {
		t.Fatalf("pruned %d records past the retention, want 1", n)
	}
}

func TestOrgManagerAuditRetentionChecked(t *testing.T) {
	cfg := DefaultOrgManagerConfig()
	if cfg.Audit.Retention != 0 {
		t.Fatalf("default retention %v: the audit is kept for good unless bounded", cfg.Audit.Retention)
	}
	cfg.Audit.Retention = -time.Hour
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "audit.retention") {
		t.Fatalf("negative retention: %v", err)
	}
}
