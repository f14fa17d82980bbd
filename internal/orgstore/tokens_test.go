package orgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/orgstore/storetest"
)

// TestTokenRows: the token rows on both dialects — what is stored reads
// back, listing filters by organisation, a revocation keeps its first
// time, and every insert and first revocation moves the change counter.
func TestTokenRows(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		s := open(t)
		ctx := context.Background()
		if has, err := s.HasTokens(ctx); err != nil || has {
			t.Fatalf("HasTokens on a new store: %v %v", has, err)
		}
		c0, err := s.TokenChanges(ctx)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
		rows := []access.StoredToken{
			{Token: access.Token{ID: "0000000000000001", Name: "ops", Role: access.RoleAdmin, CreatedAt: at}, Hash: access.HashSecret("a")},
			{Token: access.Token{ID: "0000000000000002", Name: "noc", Role: access.RoleOrgViewer, Org: "acme", CreatedAt: at.Add(time.Second),
				ExpiresAt: at.Add(time.Hour)}, Hash: access.HashSecret("b")},
			{Token: access.Token{ID: "0000000000000003", Role: access.RoleOrgAdmin, Org: "beta", CreatedAt: at.Add(2 * time.Second)}, Hash: access.HashSecret("c")},
		}
		for _, r := range rows {
			if err := s.InsertToken(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.InsertToken(ctx, rows[0]); err == nil {
			t.Fatal("a duplicate id was stored")
		}
		got, err := s.TokenByID(ctx, "0000000000000002")
		if err != nil || got != rows[1] {
			t.Fatalf("TokenByID = %+v, %v; want %+v", got, err, rows[1])
		}
		if _, err := s.TokenByID(ctx, "00000000000000ff"); !errors.Is(err, access.ErrTokenNotFound) {
			t.Fatalf("unknown id: %v", err)
		}
		all, err := s.ListTokens(ctx, "")
		if err != nil || len(all) != 3 || all[0].ID != rows[0].ID || all[2].ID != rows[2].ID {
			t.Fatalf("ListTokens(all) = %+v, %v", all, err)
		}
		acme, err := s.ListTokens(ctx, "acme")
		if err != nil || len(acme) != 1 || acme[0] != rows[1].Token {
			t.Fatalf("ListTokens(acme) = %+v, %v", acme, err)
		}
		if err := s.RevokeToken(ctx, rows[1].ID, at.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		if err := s.RevokeToken(ctx, rows[1].ID, at.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.TokenByID(ctx, rows[1].ID); !got.RevokedAt.Equal(at.Add(time.Minute)) {
			t.Fatalf("revoked at %v, want the first revocation", got.RevokedAt)
		}
		if err := s.RevokeToken(ctx, "00000000000000ff", at); !errors.Is(err, access.ErrTokenNotFound) {
			t.Fatalf("revoke unknown: %v", err)
		}
		if c, err := s.TokenChanges(ctx); err != nil || c != c0+4 {
			t.Fatalf("change counter %d (%v), want %d: three inserts and one revocation", c, err, c0+4)
		}
		if has, err := s.HasTokens(ctx); err != nil || !has {
			t.Fatalf("HasTokens: %v %v", has, err)
		}
		// The database refuses what the service never writes.
		bad := rows[0]
		bad.ID, bad.Org = "0000000000000009", "acme"
		if err := s.InsertToken(ctx, bad); err == nil {
			t.Fatal("an admin token with an org was stored")
		}
	})
}

// TestDeleteOrgRevokesItsTokens: deleting an organisation revokes its
// scoped tokens in the same transaction and moves the change counter, so
// that an organisation created again under the same id (another customer)
// is not reachable with the old tokens; other organisations' tokens and
// admin tokens stay.
func TestDeleteOrgRevokesItsTokens(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, open func(t *testing.T) *orgstore.Store) {
		s := open(t)
		ctx := context.Background()
		for _, org := range []string{"acme", "beta"} {
			if _, err := s.PutOrg(ctx, org); err != nil {
				t.Fatal(err)
			}
		}
		at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		rows := []access.StoredToken{
			{Token: access.Token{ID: "00000000000000a1", Role: access.RoleAdmin, CreatedAt: at}, Hash: access.HashSecret("a")},
			{Token: access.Token{ID: "00000000000000a2", Role: access.RoleOrgAdmin, Org: "acme", CreatedAt: at}, Hash: access.HashSecret("b")},
			{Token: access.Token{ID: "00000000000000a3", Role: access.RoleOrgViewer, Org: "acme", CreatedAt: at}, Hash: access.HashSecret("c")},
			{Token: access.Token{ID: "00000000000000b1", Role: access.RoleOrgAdmin, Org: "beta", CreatedAt: at}, Hash: access.HashSecret("d")},
		}
		for _, r := range rows {
			if err := s.InsertToken(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		c0, err := s.TokenChanges(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.DeleteOrg(ctx, "acme"); err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			got, err := s.TokenByID(ctx, r.ID)
			if err != nil {
				t.Fatal(err)
			}
			if want := r.Org == "acme"; got.RevokedAt.IsZero() == want {
				t.Errorf("token %s of %q: revoked at %v after deleting acme", r.ID, r.Org, got.RevokedAt)
			}
		}
		if c, err := s.TokenChanges(ctx); err != nil || c <= c0 {
			t.Fatalf("change counter %d (%v) after the delete, was %d", c, err, c0)
		}
	})
}
