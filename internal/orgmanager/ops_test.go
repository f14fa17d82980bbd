package orgmanager

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// TestOpsRefusals: an operation's refusal carries the status the API
// answers, the API's words and the input it is about (for the console),
// and writes nothing.
func TestOpsRefusals(t *testing.T) {
	store := storetest.Open(t, orgstore.DialectSQLite)
	d, err := deploy.New(deploy.Config{Store: store, Publisher: deploy.Discard{}})
	if err != nil {
		t.Fatal(err)
	}
	api, err := New(Config{Store: store, Deployer: d})
	if err != nil {
		t.Fatal(err)
	}
	ops := api.Ops()
	ctx := context.Background()
	if _, err := ops.PutOrg(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	str := func(s string) *string { return &s }
	for _, c := range []struct {
		name   string
		err    error
		status int
		field  string
		msg    string
	}{
		{"bad org", func() error { _, err := ops.PutOrg(ctx, "a/b"); return err }(), 400, "org", "must not contain '/'"},
		{"host bits", func() error {
			_, _, err := ops.PutOverride(ctx, "acme", OverrideInput{CIDR: str("10.0.0.1/8")})
			return err
		}(), 400, "cidr", "host bits"},
		{"no cidr", func() error { _, _, err := ops.PutOverride(ctx, "acme", OverrideInput{}); return err }(), 400, "cidr", "missing required field: cidr"},
		{"long username", func() error {
			_, _, err := ops.PutOverride(ctx, "acme", OverrideInput{CIDR: str("10.0.0.0/8"), Username: str(strings.Repeat("u", 2000))})
			return err
		}(), 400, "username", "username longer"},
		{"bad meta", func() error {
			_, _, err := ops.PutOverride(ctx, "acme", OverrideInput{CIDR: str("10.0.0.0/8"), Meta: []byte(`[]`)})
			return err
		}(), 400, "meta", "meta must be a JSON object"},
		{"remove", func() error {
			_, err := ops.PatchPrefixes(ctx, "acme", []string{"10.0.0.0/8"}, []string{"x"})
			return err
		}(), 400, "remove", "remove: "},
		{"no org", func() error { _, err := ops.PatchPrefixes(ctx, "nobody", []string{"10.0.0.0/8"}, nil); return err }(), 404, "", "organisation not found"},
		{"scope", func() error { _, err := ScopeOf("username", ""); return err }(), 400, "scope", "username must not be empty"},
		{"document", func() error { _, err := ParseDocument([]byte(`{"filtering":1}`)); return err }(), 400, "document", "filtering"},
		{"batch size", func() error {
			_, _, err := ops.ApplyBatch(ctx, "acme", make([]orgstore.BatchOp, MaxBatchItems+1), nil)
			return err
		}(), 400, "", "more than 10000 items"},
	} {
		status, msg := StatusOf(c.err)
		if status != c.status || !strings.Contains(msg, c.msg) || FieldOf(c.err) != c.field {
			t.Errorf("%s: %d %q field %q; want %d %q field %q", c.name, status, msg, FieldOf(c.err), c.status, c.msg, c.field)
		}
	}
	if _, ps, _ := store.Prefixes(ctx, "acme"); len(ps) != 0 {
		t.Errorf("a refused patch wrote %v", ps)
	}
	if v, _ := store.ReadOverrides(ctx, "acme", orgstore.CIDROnly); len(v.Overrides) != 0 {
		t.Errorf("a refused override was written")
	}
	if status, _ := StatusOf(context.Canceled); status != http.StatusInternalServerError {
		t.Errorf("an unexpected error is %d", status)
	}
}
