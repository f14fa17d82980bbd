package orgmanager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// The listings and the audit (docs/orgmanager.md, Listing and Audit):
// GET /org page by page, GET /org/{org}/settings?list=1, GET /audit and
// GET /org/{org}/audit. Unlike the organisation API's own endpoints, each
// asks the caller's Principal itself, as the authentication left it in the
// request's context: what a caller may see of a listing is decided here.

// ListingStore is what the listings and the audit read from the store.
type ListingStore interface {
	ListOrgs(ctx context.Context, after string, limit int) ([]orgstore.OrgSummary, string, error)
	ListSettingsEntries(ctx context.Context, org string) (int64, []orgstore.SettingsEntry, error)
	AuditRecords(ctx context.Context, q access.AuditQuery) ([]access.AuditRecord, error)
}

// Page sizes of the listings: the default, and the most one page holds.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

func (a *API) registerListing(r *httpapi.Router) {
	r.Handle(http.MethodGet, "/org", a.listOrgs)
	r.Handle(http.MethodGet, "/audit", a.platformAudit)
	r.Handle(http.MethodGet, "/org/{org}/audit", a.org(a.orgAudit))
}

// denied answers one of access's refusals with its status.
func denied(w http.ResponseWriter, err error) {
	status := http.StatusForbidden
	if errors.Is(err, access.ErrUnauthorized) {
		status = http.StatusUnauthorized
	}
	httpapi.WriteError(w, status, err.Error())
}

// orgsQuery is GET /org's query.
type orgsQuery struct {
	After string
	Limit int
}

// parseOrgsQuery reads limit (1..1000, default 100) and after (an
// organisation id, or empty for the first page). An empty value is an
// absent parameter.
func parseOrgsQuery(raw string) (orgsQuery, error) {
	q, err := strictQuery(raw, "after", "limit")
	if err != nil {
		return orgsQuery{}, err
	}
	out := orgsQuery{After: q["after"]}
	if out.Limit, err = parseLimit(q["limit"]); err != nil {
		return orgsQuery{}, err
	}
	if out.After != "" {
		if err := identity.ValidateOrg(out.After); err != nil {
			return orgsQuery{}, fmt.Errorf("after must be an organisation id (the next of the previous page): %w", err)
		}
	}
	return out, nil
}

func parseLimit(v string) (int, error) {
	if v == "" {
		return defaultPageSize, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxPageSize {
		return 0, fmt.Errorf("limit must be a whole number from 1 to %d", maxPageSize)
	}
	return n, nil
}

// orgsPage is GET /org's answer; Next is the after of the following page,
// "" on the last.
type orgsPage struct {
	Orgs []orgBody `json:"orgs"`
	Next string    `json:"next"`
}

func (a *API) listOrgs(w http.ResponseWriter, r *http.Request) {
	p, ok := principal(w, r)
	if !ok {
		return
	}
	q, err := parseOrgsQuery(r.URL.RawQuery)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	page := orgsPage{Orgs: []orgBody{}}
	switch {
	case p.Platform() == nil:
		orgs, next, err := a.ops.store.ListOrgs(r.Context(), q.After, q.Limit)
		if err != nil {
			a.fail(w, r, err)
			return
		}
		for _, o := range orgs {
			page.Orgs = append(page.Orgs, orgBody{OrgID: o.ID, Version: o.Version,
				CreatedAt: timestamp(o.CreatedAt), UpdatedAt: timestamp(o.UpdatedAt)})
		}
		page.Next = next
	case p.CanRead(p.Org):
		// A scoped caller sees its own organisation, once it exists, and
		// on the page its position in the id order puts it.
		if q.After != "" && p.Org <= q.After {
			break
		}
		o, err := a.ops.store.GetOrg(r.Context(), p.Org)
		if errors.Is(err, orgstore.ErrOrgNotFound) {
			break
		}
		if err != nil {
			a.fail(w, r, err)
			return
		}
		page.Orgs = append(page.Orgs, orgBody{OrgID: o.ID, Version: o.Version,
			CreatedAt: timestamp(o.CreatedAt), UpdatedAt: timestamp(o.UpdatedAt)})
	default:
		denied(w, access.ErrForbidden)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, page)
}

// auditQuery is the query of GET /audit and GET /org/{org}/audit.
type auditQuery struct {
	Since  time.Time
	Limit  int
	Before int64
}

// parseAuditQuery reads since (RFC 3339), limit (1..1000, default 100)
// and before (the next of the previous page). An empty value is an absent
// parameter.
func parseAuditQuery(raw string) (auditQuery, error) {
	q, err := strictQuery(raw, "since", "limit", "before")
	if err != nil {
		return auditQuery{}, err
	}
	var out auditQuery
	if out.Limit, err = parseLimit(q["limit"]); err != nil {
		return auditQuery{}, err
	}
	if v := q["since"]; v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return auditQuery{}, fmt.Errorf("since must be an RFC 3339 time such as 2026-01-02T15:04:05Z, not %.64q", v)
		}
		out.Since = t.UTC()
	}
	if v := q["before"]; v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			return auditQuery{}, fmt.Errorf("before must be a record id (the next of the previous page), not %.64q", v)
		}
		out.Before = n
	}
	return out, nil
}

// auditRecordBody is one record as the API answers it.
type auditRecordBody struct {
	ID         int64  `json:"id"`
	Time       string `json:"time"`
	TokenID    string `json:"token_id"`
	TokenName  string `json:"token_name"`
	Role       string `json:"role"`
	Method     string `json:"method"`
	Path       string `json:"path"`
	Org        string `json:"org"`
	OrgVersion int64  `json:"org_version"`
	RequestID  string `json:"request_id"`
	Status     int    `json:"status"`
}

// auditPage is the audit's answer: records newest first; Next, when the
// page is full, is the before of the following page ("" otherwise).
type auditPage struct {
	Records []auditRecordBody `json:"records"`
	Next    string            `json:"next"`
}

func (a *API) platformAudit(w http.ResponseWriter, r *http.Request) {
	p, ok := principal(w, r)
	if !ok {
		return
	}
	if err := p.Platform(); err != nil {
		denied(w, err)
		return
	}
	a.audit(w, r, "")
}

// orgAudit answers an organisation's records whether it exists or not: the
// audit outlives a deleted organisation, and telling the two apart is no
// business of a scoped caller's.
func (a *API) orgAudit(w http.ResponseWriter, r *http.Request, org string) {
	p, ok := principal(w, r)
	if !ok {
		return
	}
	if err := p.Read(org); err != nil {
		denied(w, err)
		return
	}
	a.audit(w, r, org)
}

func (a *API) audit(w http.ResponseWriter, r *http.Request, org string) {
	q, err := parseAuditQuery(r.URL.RawQuery)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	recs, err := a.ops.store.AuditRecords(r.Context(), access.AuditQuery{Org: org, Since: q.Since, Limit: q.Limit, Before: q.Before})
	if err != nil {
		a.fail(w, r, err)
		return
	}
	page := auditPage{Records: make([]auditRecordBody, len(recs))}
	for i, rec := range recs {
		page.Records[i] = auditRecordBody{ID: rec.ID, Time: timestamp(rec.Time), TokenID: rec.TokenID, TokenName: rec.TokenName,
			Role: string(rec.Role), Method: rec.Method, Path: rec.Path, Org: rec.Org, OrgVersion: rec.OrgVersion,
			RequestID: rec.RequestID, Status: rec.Status}
	}
	if len(recs) == q.Limit {
		page.Next = strconv.FormatInt(recs[len(recs)-1].ID, 10)
	}
	httpapi.WriteJSON(w, http.StatusOK, page)
}

// getSettingsOrList serves GET /org/{org}/settings: with list=1 the
// organisation's documents by scope, otherwise (and for a query string that
// does not parse, which getSettings refuses) one document as before.
func (a *API) getSettingsOrList(w http.ResponseWriter, r *http.Request, org string) {
	if q, err := httpapi.ParseQuery(r.URL.RawQuery); err != nil || !q.Has("list") {
		a.getSettings(w, r, org)
		return
	}
	a.listSettings(w, r, org)
}

// parseListQuery reads the query of GET /org/{org}/settings?list=1: list
// is 1 (or true) and comes alone.
func parseListQuery(raw string) error {
	q, err := strictQuery(raw, "list")
	if err != nil {
		return fmt.Errorf("%w (list=1 takes no scope: it lists every document)", err)
	}
	if v := q["list"]; v != "1" && v != "true" {
		return fmt.Errorf("list must be 1, not %.64q", v)
	}
	return nil
}

// settingsEntryBody is one document of the listing. Query is the query
// string that reads or writes it (GET /org/{org}/settings?<query>).
type settingsEntryBody struct {
	Scope          string `json:"scope"`
	Value          string `json:"value,omitempty"`
	Profile        *int   `json:"profile,omitempty"`
	Query          string `json:"query"`
	Size           int64  `json:"size"`
	SelectsProfile *int   `json:"selects_profile,omitempty"`
}

type settingsList struct {
	Documents []settingsEntryBody `json:"documents"`
}

func (a *API) listSettings(w http.ResponseWriter, r *http.Request, org string) {
	p, ok := principal(w, r)
	if !ok {
		return
	}
	if err := p.Read(org); err != nil {
		denied(w, err)
		return
	}
	if err := parseListQuery(r.URL.RawQuery); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	v, entries, err := a.ops.store.ListSettingsEntries(r.Context(), org)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	body := settingsList{Documents: make([]settingsEntryBody, len(entries))}
	for i, e := range entries {
		b := settingsEntryBody{Scope: e.Scope.Kind.String(), Value: e.Scope.Value, Query: scopeQuery(e.Scope), Size: e.Size}
		if e.Scope.Kind == settings.ScopeProfile {
			n := e.Scope.Profile
			b.Profile = &n
		}
		if e.HasProfile {
			n := e.SelectsProfile
			b.SelectsProfile = &n
		}
		body.Documents[i] = b
	}
	setVersion(w, v)
	httpapi.WriteJSON(w, http.StatusOK, body)
}

// scopeQuery is the query string that addresses sc's document: parseScope's
// inverse.
func scopeQuery(sc settings.Scope) string {
	switch sc.Kind {
	case settings.ScopeProfile:
		return "profile=" + strconv.Itoa(sc.Profile)
	case settings.ScopeLocation, settings.ScopeUsername, settings.ScopeDeviceID:
		return url.Values{sc.Kind.String(): {sc.Value}}.Encode()
	}
	return ""
}
