package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/cidr"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/nodehealth"
	"github.com/svc-pf/svc-pf/internal/orgmanager"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/ranges"
)

// Page lengths: a page renders in a few milliseconds whatever the size of
// the organisation.
const (
	orgsPerPage      = 50
	overridesPerPage = 100
	settingsPerPage  = 100
	sessionsPerPage  = 100
	auditPerPage     = 100
)

// --- organisations ---

type orgListData struct {
	Orgs []OrgSummary
	Next string
	// Own is a scoped token's organisation (its list is that one).
	Own string
}

func (c *Console) orgList(q *req) {
	pg := q.page("Organisations", "")
	c.renderOrgList(q, pg, http.StatusOK)
}

func (c *Console) renderOrgList(q *req, pg *page, status int) {
	var d orgListData
	if q.p.Role.Scoped() {
		d.Own = q.p.Org
	} else if c.cfg.Orgs != nil {
		orgs, next, err := c.cfg.Orgs.ListOrgs(q.ctx(), q.r.URL.Query().Get("after"), orgsPerPage)
		if err != nil {
			c.internal(q.w, q.r, err)
			return
		}
		d.Orgs, d.Next = orgs, next
	}
	pg.Data = d
	c.render(q.w, q.r, status, "orgs", pg)
}

func (c *Console) orgCreate(q *req) {
	org := strings.TrimSpace(q.r.PostForm.Get("org"))
	pg := q.page("Organisations", "")
	pg.Form = q.r.PostForm
	if org == "" {
		pg.Fields["org"] = "enter an organisation identifier"
		c.renderOrgList(q, pg, http.StatusBadRequest)
		return
	}
	if err := orgmanager.ValidOrg(org); err != nil {
		pg.Fields["org"] = err.Error()
		c.renderOrgList(q, pg, http.StatusBadRequest)
		return
	}
	q.org = org
	if err := q.p.Write(org); err != nil {
		c.forbidden(q)
		return
	}
	v, err := c.cfg.Ops.PutOrg(q.ctx(), org)
	if err != nil {
		status, msg := orgmanager.StatusOf(err)
		if status == http.StatusInternalServerError {
			c.internal(q.w, q.r, err)
			return
		}
		pg.Fields["org"] = msg
		c.renderOrgList(q, pg, status)
		return
	}
	c.done(q, "/ui/orgs/"+url.PathEscape(org), "organisation "+org+" saved", v)
}

type overviewData struct {
	Info     orgstore.Org
	Prefixes []string
}

func (c *Console) orgOverview(q *req) {
	pg := q.page("Organisation "+q.org, "")
	pg.Tab = "overview"
	c.renderOverview(q, pg, http.StatusOK)
}

func (c *Console) renderOverview(q *req, pg *page, status int) {
	info, err := c.cfg.Ops.GetOrg(q.ctx(), q.org)
	if err != nil {
		c.orgFailure(q, err)
		return
	}
	_, ps, err := c.cfg.Ops.Prefixes(q.ctx(), q.org)
	if err != nil {
		c.orgFailure(q, err)
		return
	}
	d := overviewData{Info: info}
	for _, p := range ps {
		d.Prefixes = append(d.Prefixes, p.String())
	}
	pg.Data = d
	c.render(q.w, q.r, status, "org", pg)
}

// orgFailure answers a read that failed: 404 page, or 500.
func (c *Console) orgFailure(q *req, err error) {
	status, msg := orgmanager.StatusOf(err)
	if status == http.StatusInternalServerError {
		c.internal(q.w, q.r, err)
		return
	}
	c.render(q.w, q.r, status, "error", q.page("Organisation "+q.org, msg))
}

func (c *Console) prefixesPost(q *req) {
	pg := q.page("Organisation "+q.org, "")
	pg.Tab, pg.Form = "overview", q.r.PostForm
	add, remove, errs := parsePrefixForm(q.r.PostForm)
	if errs != nil {
		pg.Fields = errs
		c.renderOverview(q, pg, http.StatusBadRequest)
		return
	}
	v, err := c.cfg.Ops.PatchPrefixes(q.ctx(), q.org, add, remove)
	if err != nil {
		status, msg := orgmanager.StatusOf(err)
		if status == http.StatusInternalServerError || status == http.StatusNotFound {
			c.orgFailure(q, err)
			return
		}
		field := "add"
		if orgmanager.FieldOf(err) == "remove" {
			field = "remove"
		}
		pg.Fields[field] = msg
		c.renderOverview(q, pg, status)
		return
	}
	c.done(q, "/ui/orgs/"+url.PathEscape(q.org), "prefixes saved", v)
}

func (c *Console) orgDeleteForm(q *req) {
	pg := q.page("Delete organisation "+q.org, "")
	if err := q.p.Write(q.org); err != nil {
		c.forbidden(q)
		return
	}
	if _, err := c.cfg.Ops.GetOrg(q.ctx(), q.org); err != nil {
		c.orgFailure(q, err)
		return
	}
	c.render(q.w, q.r, http.StatusOK, "delete", pg)
}

func (c *Console) orgDelete(q *req) {
	if q.r.PostForm.Get("confirm") != q.org {
		pg := q.page("Delete organisation "+q.org, "")
		pg.Fields["confirm"] = "type the organisation's identifier to confirm"
		c.render(q.w, q.r, http.StatusBadRequest, "delete", pg)
		return
	}
	if err := c.cfg.Ops.DeleteOrg(q.ctx(), q.org); err != nil {
		c.orgFailure(q, err)
		return
	}
	c.done(q, "/ui/orgs", "organisation "+q.org+" deleted", 0)
}

// --- overrides ---

type overrideRow struct {
	CIDR, Username, DeviceID, Location, Meta, Status, MTime string
}

type overridesData struct {
	Rows      []overrideRow
	Total     int
	Next      string
	First     bool
	Edit      bool
	RowErrors []rowError
	CSV       string
}

func (c *Console) overridesPage(q *req) {
	pg := q.page("Overrides of "+q.org, "")
	pg.Tab = "overrides"
	c.renderOverrides(q, pg, http.StatusOK, nil)
}

func (c *Console) renderOverrides(q *req, pg *page, status int, extra *overridesData) {
	var after netip.Prefix
	if a := q.r.URL.Query().Get("after"); a != "" {
		p, err := cidr.Parse(a)
		if err != nil {
			c.render(q.w, q.r, http.StatusBadRequest, "error", q.page("Overrides of "+q.org, "after: "+err.Error()))
			return
		}
		after = p
	}
	view, err := c.cfg.Ops.OverridesPage(q.ctx(), q.org, after, overridesPerPage)
	if err != nil {
		c.orgFailure(q, err)
		return
	}
	d := overridesData{Total: view.Total, First: !after.IsValid()}
	if extra != nil {
		d.RowErrors, d.CSV = extra.RowErrors, extra.CSV
	}
	cov := ranges.NewCoverage(view.Prefixes)
	for _, o := range view.Overrides {
		d.Rows = append(d.Rows, overrideRow{CIDR: o.CIDR.String(), Username: o.Username, DeviceID: o.DeviceID,
			Location: o.Location, Meta: string(o.Meta), Status: orgmanager.Status(cov, o.CIDR),
			MTime: o.MTime.UTC().Format(time.DateTime)})
	}
	if view.More {
		d.Next = view.Overrides[len(view.Overrides)-1].CIDR.String()
	}
	pg.Data = d
	c.render(q.w, q.r, status, "overrides", pg)
}

func (c *Console) overrideEdit(q *req) {
	pg := q.page("Edit override", "")
	pg.Tab = "overrides"
	view, err := c.cfg.Ops.Override(q.ctx(), q.org, q.r.URL.Query().Get("cidr"))
	if err != nil {
		c.orgFailure(q, err)
		return
	}
	o := view.Overrides[0]
	pg.Form = url.Values{"cidr": {o.CIDR.String()}, "username": {o.Username}, "deviceid": {o.DeviceID},
		"location": {o.Location}, "meta": {string(o.Meta)}}
	pg.Data = overridesData{Edit: true}
	c.render(q.w, q.r, http.StatusOK, "override", pg)
}

func (c *Console) overridePost(q *req) {
	pg := q.page("Overrides of "+q.org, "")
	pg.Tab, pg.Form = "overrides", q.r.PostForm
	in, errs := parseOverrideForm(q.r.PostForm)
	if errs != nil {
		pg.Fields = errs
		c.render(q.w, q.r, http.StatusBadRequest, "override", pg)
		return
	}
	o, v, err := c.cfg.Ops.PutOverride(q.ctx(), q.org, in)
	if err != nil {
		c.failed(q, "override", pg, err)
		return
	}
	c.done(q, "/ui/orgs/"+url.PathEscape(q.org)+"/overrides", "override "+o.CIDR.String()+" saved", v)
}

func (c *Console) overrideDelete(q *req) {
	v, err := c.cfg.Ops.DeleteOverride(q.ctx(), q.org, q.r.PostForm.Get("cidr"))
	if err != nil {
		c.orgFailure(q, err)
		return
	}
	c.done(q, "/ui/orgs/"+url.PathEscape(q.org)+"/overrides", "override "+q.r.PostForm.Get("cidr")+" deleted", v)
}

// overridesImport applies a CSV through the batch operation. Unlike the
// API's batch, which applies the good items and reports the others, the
// console writes nothing when a row is refused: a person fixes the file
// and sends it again, and nothing is half imported.
func (c *Console) overridesImport(q *req) {
	pg := q.page("Overrides of "+q.org, "")
	pg.Tab, pg.Form = "overrides", q.r.PostForm
	text := q.r.PostForm.Get("csv")
	ops, rowErrs, err := parseCSV(text)
	if err != nil || len(rowErrs) > 0 {
		if err != nil {
			pg.Fields["csv"] = err.Error()
		} else {
			pg.Fields["csv"] = fmt.Sprintf("%d rows refused; nothing was imported", len(rowErrs))
		}
		if len(rowErrs) > 50 {
			rowErrs = rowErrs[:50]
		}
		c.renderOverrides(q, pg, http.StatusBadRequest, &overridesData{RowErrors: rowErrs, CSV: text})
		return
	}
	res, v, err := c.cfg.Ops.ApplyBatch(q.ctx(), q.org, ops, nil)
	if err != nil {
		c.orgFailure(q, err)
		return
	}
	c.done(q, "/ui/orgs/"+url.PathEscape(q.org)+"/overrides", fmt.Sprintf("%d rows imported", res.Processed), v)
}

// --- settings ---

type settingsRow struct {
	Layer, Kind, Value, Doc string
}

type settingsData struct {
	Rows  []settingsRow
	Kinds []string
	Total int
	Next  int
	Prev  int
	Start int
}

func (c *Console) settingsPage(q *req) {
	pg := q.page("Settings of "+q.org, "")
	pg.Tab = "settings"
	qs := q.r.URL.Query()
	if qs.Has("scope") {
		// Edit: the form filled with the stored document of that scope.
		sc, errs := parseScopeForm(qs)
		if errs == nil {
			doc, _, err := c.cfg.Ops.Settings(q.ctx(), q.org, sc)
			switch {
			case err == nil:
				kind, value := scopeForm(sc)
				pg.Form = url.Values{"scope": {kind}, "value": {value}, "document": {indent(doc)}}
			case errors.Is(err, orgstore.ErrSettingsNotFound):
				pg.Form = qs
			default:
				c.orgFailure(q, err)
				return
			}
		} else {
			pg.Form, pg.Fields = qs, errs
		}
	}
	c.renderSettings(q, pg, http.StatusOK)
}

func indent(doc []byte) string {
	var v any
	if json.Unmarshal(doc, &v) != nil {
		return string(doc)
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func (c *Console) renderSettings(q *req, pg *page, status int) {
	_, list, err := c.cfg.Ops.ListSettings(q.ctx(), q.org)
	if err != nil {
		c.orgFailure(q, err)
		return
	}
	start, _ := strconv.Atoi(q.r.URL.Query().Get("start"))
	start = max(0, min(start, len(list)))
	end := min(start+settingsPerPage, len(list))
	d := settingsData{Kinds: scopeKinds, Total: len(list), Start: start, Prev: -1, Next: -1}
	if start > 0 {
		d.Prev = max(0, start-settingsPerPage)
	}
	if end < len(list) {
		d.Next = end
	}
	for _, s := range list[start:end] {
		kind, value := scopeForm(s.Scope)
		d.Rows = append(d.Rows, settingsRow{Layer: s.Scope.Layer(q.org), Kind: kind, Value: value, Doc: string(s.Doc)})
	}
	pg.Data = d
	c.render(q.w, q.r, status, "settings", pg)
}

func (c *Console) settingsPost(q *req) {
	pg := q.page("Settings of "+q.org, "")
	pg.Tab, pg.Form = "settings", q.r.PostForm
	sc, doc, errs := parseSettingsForm(q.r.PostForm)
	if errs != nil {
		pg.Fields = errs
		c.renderSettings(q, pg, http.StatusBadRequest)
		return
	}
	v, err := c.cfg.Ops.PutSettings(q.ctx(), q.org, sc, doc)
	if err != nil {
		status, msg := orgmanager.StatusOf(err)
		if status == http.StatusNotFound || status == http.StatusInternalServerError {
			c.orgFailure(q, err)
			return
		}
		pg.Fields["document"] = msg
		c.renderSettings(q, pg, status)
		return
	}
	c.done(q, "/ui/orgs/"+url.PathEscape(q.org)+"/settings", "settings of "+sc.Layer(q.org)+" saved", v)
}

func (c *Console) settingsDelete(q *req) {
	sc, errs := parseScopeForm(q.r.PostForm)
	if errs != nil {
		pg := q.page("Settings of "+q.org, errs["value"])
		pg.Tab = "settings"
		c.renderSettings(q, pg, http.StatusBadRequest)
		return
	}
	v, err := c.cfg.Ops.DeleteSettings(q.ctx(), q.org, sc)
	if err != nil {
		c.orgFailure(q, err)
		return
	}
	c.done(q, "/ui/orgs/"+url.PathEscape(q.org)+"/settings", "settings of "+sc.Layer(q.org)+" deleted", v)
}

type effectiveRow struct {
	Field, Value, Origin string
}

type effectiveData struct {
	Asked       bool
	Rows        []effectiveRow
	Layers      []string
	Fingerprint string
	Profile     string
}

func (c *Console) effectivePage(q *req) {
	pg := q.page("Effective settings in "+q.org, "")
	pg.Tab = "effective"
	qs := q.r.URL.Query()
	pg.Form = qs
	var d effectiveData
	if len(qs) > 0 {
		lq, err := parseSubscriber(qs).LayerQuery()
		if err != nil {
			c.failed(q, "effective", pg, err)
			return
		}
		e, err := c.cfg.Ops.Effective(q.ctx(), q.org, lq)
		if err != nil {
			c.orgFailure(q, err)
			return
		}
		d = effectiveData{Asked: true, Layers: e.Layers, Fingerprint: e.Fingerprint}
		if e.Profile != nil {
			d.Profile = strconv.Itoa(*e.Profile)
		}
		b, _ := json.Marshal(e.Settings)
		var fields map[string]json.RawMessage
		_ = json.Unmarshal(b, &fields)
		names := make([]string, 0, len(e.Origin))
		for k := range e.Origin {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			v := string(fields[k])
			if v == "" {
				v = "—"
			}
			d.Rows = append(d.Rows, effectiveRow{Field: k, Value: v, Origin: e.Origin[k]})
		}
	}
	pg.Data = d
	c.render(q.w, q.r, http.StatusOK, "effective", pg)
}

// --- why ---

type whyData struct {
	Asked    bool
	Verdict  string
	Action   string
	Reason   string
	Rule     string
	Identity map[string]any
	Layers   []string
	Trace    []map[string]any
	Log      []string
	Raw      string
}

func (c *Console) whyPage(q *req) {
	pg := q.page("Why — "+q.org, "")
	pg.Tab = "why"
	qs := q.r.URL.Query()
	pg.Form = qs
	var d whyData
	if c.cfg.Simulator == nil {
		pg.Error = "The simulator is not reachable from this orgmanager (it needs NATS and a running simulator)."
		pg.Data = d
		c.render(q.w, q.r, http.StatusOK, "why", pg)
		return
	}
	if qs.Get("domain") != "" || qs.Has("ip") {
		params, errs := parseWhyForm(qs)
		if errs != nil {
			pg.Fields = errs
			pg.Data = d
			c.render(q.w, q.r, http.StatusBadRequest, "why", pg)
			return
		}
		body, err := c.cfg.Simulator.Simulate(q.ctx(), params)
		if err != nil {
			var bad *BadInput
			if errors.As(err, &bad) {
				pg.Error = bad.Msg
				pg.Data = d
				c.render(q.w, q.r, http.StatusBadRequest, "why", pg)
				return
			}
			c.internal(q.w, q.r, err)
			return
		}
		var res struct {
			Verdict  string           `json:"verdict"`
			Action   string           `json:"action"`
			Reason   string           `json:"reason"`
			Rule     string           `json:"rule"`
			Identity map[string]any   `json:"identity"`
			Layers   []string         `json:"layers"`
			Trace    []map[string]any `json:"trace"`
			Log      []string         `json:"log"`
		}
		if err := json.Unmarshal(body, &res); err != nil {
			c.internal(q.w, q.r, fmt.Errorf("simulate answer: %w", err))
			return
		}
		// The simulator finds subscribers across every organisation: a
		// subscriber it found in another one is not this page's to show.
		if org, _ := res.Identity["org"].(string); org != "" && org != q.org {
			pg.Error = "No subscriber of this organisation matches; the answer is not shown."
			pg.Data = d
			c.render(q.w, q.r, http.StatusOK, "why", pg)
			return
		}
		d = whyData{Asked: true, Verdict: res.Verdict, Action: res.Action, Reason: res.Reason, Rule: res.Rule,
			Identity: res.Identity, Layers: res.Layers, Trace: res.Trace, Log: res.Log}
	}
	pg.Data = d
	c.render(q.w, q.r, http.StatusOK, "why", pg)
}

// BadInput is a request the simulator refused (its 400): the form shows
// the message.
type BadInput struct{ Msg string }

func (e *BadInput) Error() string { return e.Msg }

// --- sessions (IP Mapper) ---

type sessionsData struct {
	Available bool
	Rows      []sessionRow
	Total     int
	Next      int
}

type sessionRow struct {
	ID, Allocations, Username, DeviceID, Location, Updated string
}

func (c *Console) sessionsPage(q *req) {
	pg := q.page("Sessions of "+q.org, "")
	pg.Tab = "sessions"
	d := sessionsData{Next: -1}
	if c.cfg.Sessions != nil {
		d.Available = true
		list, err := c.cfg.Sessions.GetSessions(q.ctx(), mapperclient.Query{Org: q.org})
		if err != nil {
			pg.Error = "The IP Mapper did not answer: " + err.Error()
		}
		start, _ := strconv.Atoi(q.r.URL.Query().Get("start"))
		start = max(0, min(start, len(list)))
		end := min(start+sessionsPerPage, len(list))
		d.Total = len(list)
		if end < len(list) {
			d.Next = end
		}
		for _, s := range list[start:end] {
			var al []string
			for _, a := range s.Allocations {
				al = append(al, a.String())
			}
			d.Rows = append(d.Rows, sessionRow{ID: s.ID, Allocations: strings.Join(al, " "), Username: s.Username,
				DeviceID: s.DeviceID, Location: s.Location, Updated: s.UpdatedAt.UTC().Format(time.DateTime)})
		}
	}
	pg.Data = d
	c.render(q.w, q.r, http.StatusOK, "sessions", pg)
}

// --- tokens ---

type tokensData struct {
	Available bool
	Tokens    []access.Token
	// Secret is a new token's, shown once.
	Secret string
	Roles  []string
}

func (c *Console) tokensPage(q *req) {
	pg := q.page("Tokens", "")
	c.renderTokens(q, pg, http.StatusOK, "")
}

func (c *Console) renderTokens(q *req, pg *page, status int, secret string) {
	d := tokensData{Available: c.cfg.Tokens != nil, Secret: secret,
		Roles: []string{string(access.RoleOrgViewer), string(access.RoleOrgAdmin), string(access.RoleAdmin)}}
	if d.Available {
		list, err := c.cfg.Tokens.List(q.ctx(), q.p)
		if err != nil && !errors.Is(err, access.ErrForbidden) {
			c.internal(q.w, q.r, err)
			return
		}
		d.Tokens = list
	}
	pg.Data = d
	c.render(q.w, q.r, status, "tokens", pg)
}

func (c *Console) tokenCreate(q *req) {
	pg := q.page("Tokens", "")
	pg.Form = q.r.PostForm
	if c.cfg.Tokens == nil {
		c.renderTokens(q, pg, http.StatusNotFound, "")
		return
	}
	nt, errs := parseTokenForm(q.r.PostForm)
	if errs != nil {
		pg.Fields = errs
		c.renderTokens(q, pg, http.StatusBadRequest, "")
		return
	}
	q.org = nt.Org
	t, secret, err := c.cfg.Tokens.Create(q.ctx(), q.p, nt)
	if err != nil {
		if errors.Is(err, access.ErrForbidden) {
			c.forbidden(q)
			return
		}
		if errors.Is(err, access.ErrUnauthorized) {
			c.internal(q.w, q.r, err)
			return
		}
		// The token store's refusal of the input (an unknown
		// organisation, a name too long): its words beside the form.
		pg.Error = err.Error()
		c.renderTokens(q, pg, http.StatusBadRequest, "")
		return
	}
	c.audit(q, http.StatusOK, 0)
	// Shown once, on this answer only (not after a redirect, which would
	// put it in a URL).
	pg.Flash = "token " + t.ID + " created: copy it now, it is not shown again"
	pg.Form = nil
	c.renderTokens(q, pg, http.StatusOK, secret)
}

func (c *Console) tokenRevoke(q *req) {
	if c.cfg.Tokens == nil {
		c.renderTokens(q, q.page("Tokens", ""), http.StatusNotFound, "")
		return
	}
	id := q.r.PostForm.Get("id")
	if err := c.cfg.Tokens.Revoke(q.ctx(), q.p, id); err != nil {
		if errors.Is(err, access.ErrForbidden) {
			c.forbidden(q)
			return
		}
		pg := q.page("Tokens", err.Error())
		c.renderTokens(q, pg, http.StatusBadRequest, "")
		return
	}
	// Its console sessions end now, not at their next request.
	c.sessions.endToken(id)
	c.done(q, "/ui/tokens", "token "+id+" revoked", 0)
}

// --- audit ---

type auditData struct {
	Available bool
	Records   []access.AuditRecord
	Since     string
}

func (c *Console) auditPage(q *req) {
	if err := q.p.Platform(); err != nil {
		c.forbidden(q)
		return
	}
	c.renderAudit(q, "")
}

func (c *Console) orgAuditPage(q *req) {
	c.renderAudit(q, q.org)
}

func (c *Console) renderAudit(q *req, org string) {
	pg := q.page("Audit", "")
	pg.Tab = "audit"
	d := auditData{Available: c.cfg.AuditLog != nil}
	if d.Available {
		aq := access.AuditQuery{Org: org, Limit: auditPerPage}
		if s := q.r.URL.Query().Get("since"); s != "" {
			t, err := time.Parse(time.RFC3339, s)
			if err != nil {
				pg.Fields["since"] = "since is an RFC 3339 time such as 2026-11-28T18:00:00Z"
				pg.Data = d
				c.render(q.w, q.r, http.StatusBadRequest, "audit", pg)
				return
			}
			aq.Since, d.Since = t, s
		}
		recs, err := c.cfg.AuditLog.Audit(q.ctx(), aq)
		if err != nil {
			c.internal(q.w, q.r, err)
			return
		}
		d.Records = recs
	}
	pg.Data = d
	c.render(q.w, q.r, http.StatusOK, "audit", pg)
}

// --- feeds ---

type feedsData struct {
	Available bool
	Info      map[string]any
	Feeds     []map[string]any
}

func (c *Console) feedsPage(q *req) {
	pg := q.page("Feeds", "")
	d := feedsData{Available: c.cfg.Simulator != nil}
	if d.Available {
		b, err := c.cfg.Simulator.Info(q.ctx())
		if err != nil {
			pg.Error = "The simulator did not answer: " + err.Error()
		} else if err := json.Unmarshal(b, &d.Info); err == nil {
			if fs, ok := d.Info["feeds"].([]any); ok {
				for _, f := range fs {
					if m, ok := f.(map[string]any); ok {
						d.Feeds = append(d.Feeds, m)
					}
				}
			}
		}
	}
	pg.Data = d
	c.render(q.w, q.r, http.StatusOK, "feeds", pg)
}

// --- the global settings layer (admin) ---

type globalData struct {
	Exists  bool
	Version int64
}

func (c *Console) globalPage(q *req) {
	if err := q.p.Platform(); err != nil {
		c.forbidden(q)
		return
	}
	pg := q.page("Global settings", "")
	c.renderGlobal(q, pg, http.StatusOK, true)
}

// renderGlobal shows the global layer; fill puts the stored document in
// the form (not when the form comes back refused).
func (c *Console) renderGlobal(q *req, pg *page, status int, fill bool) {
	g, err := c.cfg.Ops.GlobalSettings(q.ctx())
	if err != nil {
		c.internal(q.w, q.r, err)
		return
	}
	if fill && g.Doc != nil {
		pg.Form = url.Values{"document": {indent(g.Doc)}}
	}
	pg.Data = globalData{Exists: g.Doc != nil, Version: g.Version}
	c.render(q.w, q.r, status, "global", pg)
}

func (c *Console) globalPost(q *req) {
	if err := q.p.Platform(); err != nil {
		c.forbidden(q)
		return
	}
	pg := q.page("Global settings", "")
	pg.Form = q.r.PostForm
	doc := strings.TrimSpace(q.r.PostForm.Get("document"))
	if doc == "" {
		pg.Fields["document"] = "enter a settings document (JSON), {} for an empty one"
		c.renderGlobal(q, pg, http.StatusBadRequest, false)
		return
	}
	d, err := orgmanager.ParseDocument([]byte(doc))
	if err != nil {
		_, msg := orgmanager.StatusOf(err)
		pg.Fields["document"] = msg
		c.renderGlobal(q, pg, http.StatusBadRequest, false)
		return
	}
	v, err := c.cfg.Ops.PutGlobalSettings(q.ctx(), d)
	if err != nil {
		c.internal(q.w, q.r, err)
		return
	}
	c.done(q, "/ui/settings", "global settings saved", v)
}

func (c *Console) globalDelete(q *req) {
	if err := q.p.Platform(); err != nil {
		c.forbidden(q)
		return
	}
	v, err := c.cfg.Ops.DeleteGlobalSettings(q.ctx())
	if err != nil {
		status, msg := orgmanager.StatusOf(err)
		if status == http.StatusInternalServerError {
			c.internal(q.w, q.r, err)
			return
		}
		c.renderGlobal(q, q.page("Global settings", msg), status, true)
		return
	}
	c.done(q, "/ui/settings", "global settings deleted", v)
}

// --- the nodes' health (admin) ---

type nodesData struct {
	Available bool
	Nodes     []nodeRow
}

// nodeRow is one node as the page shows it.
type nodeRow struct {
	nodehealth.Node
	Feeds []feedRow
}

type feedRow struct {
	nodehealth.Feed
	// Age is how long ago its version was loaded; 0 when never.
	Age time.Duration
}

func (c *Console) nodesPage(q *req) {
	if err := q.p.Platform(); err != nil {
		c.forbidden(q)
		return
	}
	pg := q.page("Nodes", "")
	d := nodesData{Available: c.cfg.Nodes != nil}
	if d.Available {
		nodes, err := c.cfg.Nodes.Nodes(q.ctx())
		if err != nil {
			pg.Error = "The nodes' bucket cannot be read: " + err.Error()
		}
		now := c.cfg.Clock()
		for _, n := range nodes {
			row := nodeRow{Node: n}
			for _, f := range n.Beat.Feeds {
				row.Feeds = append(row.Feeds, feedRow{Feed: f, Age: nodehealth.FeedAge(f, now)})
			}
			d.Nodes = append(d.Nodes, row)
		}
	}
	pg.Data = d
	c.render(q.w, q.r, http.StatusOK, "nodes", pg)
}
