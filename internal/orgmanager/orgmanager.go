// Package orgmanager is the organisation API (docs/orgmanager.md):
// organisations, their IP prefixes, per-CIDR overrides and effective ranges;
// and beside them the subscriber settings layers. It validates requests,
// writes through the store (the source of truth), tells the deployer which
// organisation changed, and reads effective ranges back from the deploy
// cache, or from the store with force_latest=1.
package orgmanager

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/reports"
	"github.com/svc-pf/svc-pf/internal/cidr"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/ranges"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// Store is what the API needs from the source of truth.
type Store interface {
	PutOrg(ctx context.Context, id string) (int64, error)
	GetOrg(ctx context.Context, id string) (orgstore.Org, error)
	DeleteOrg(ctx context.Context, id string) error
	UpdatePrefixes(ctx context.Context, org string, add, remove []netip.Prefix) (int64, error)
	Prefixes(ctx context.Context, org string) (int64, []netip.Prefix, error)
	PutOverride(ctx context.Context, org string, o orgstore.Override) (int64, error)
	DeleteOverride(ctx context.Context, org string, cidr netip.Prefix) (int64, error)
	ApplyBatch(ctx context.Context, org string, ops []orgstore.BatchOp) (int64, error)
	ReadOverrides(ctx context.Context, org string, d orgstore.Detail) (orgstore.View, error)
	ReadOverride(ctx context.Context, org string, cidr netip.Prefix) (orgstore.View, error)
	OverridesPage(ctx context.Context, org string, after netip.Prefix, limit int) (orgstore.OverridePage, error)

	GetSettings(ctx context.Context, org string, sc settings.Scope) (json.RawMessage, int64, error)
	PutSettings(ctx context.Context, org string, sc settings.Scope, doc *settings.Document) (int64, error)
	DeleteSettings(ctx context.Context, org string, sc settings.Scope) (int64, error)
	ListSettings(ctx context.Context, org string) (int64, []orgstore.ScopedSettings, error)
	ReadSettingsLayers(ctx context.Context, org string, q orgstore.LayerQuery) (orgstore.SettingsLayers, error)
	GlobalSettings(ctx context.Context) (orgstore.GlobalSettings, error)
	PutGlobalSettings(ctx context.Context, doc *settings.Document) (int64, error)
	DeleteGlobalSettings(ctx context.Context) (int64, error)

	ListingStore
}

// Deployer is what the API needs from the deploy pipeline.
type Deployer interface {
	Notify(org string)
	// NotifyGlobal is Notify for the global settings layer, which has no
	// organisation.
	NotifyGlobal()
	Redeploy(org string)
	Status(org string) deploy.Status
}

// The implementations app wires in; asserted here so that a change to either
// side fails this package's build rather than app's.
var (
	_ Store    = (*orgstore.Store)(nil)
	_ Deployer = (*deploy.Deployer)(nil)
)

// Config configures the API.
type Config struct {
	Store    Store
	Deployer Deployer
	// Tokens serves /tokens; nil leaves those endpoints out. Access to
	// every endpoint is checked before routing, by the guard the caller
	// puts on the router with Protected and Authorize.
	Tokens TokenService
	// Nodes serves GET /nodes; nil answers it 503 (no NATS).
	Nodes NodeLister
	// Activity answers the activity reports (GET /org/{org}/activity…);
	// nil answers them 503, saying how to configure the store.
	Activity activity.Reader
	Logger   *slog.Logger
}

// API serves the organisation API and its settings endpoints: each
// handler decodes its request, calls one of the Ops and writes the answer.
type API struct {
	ops     *Ops
	tokens  TokenService
	nodes   NodeLister
	reports *reports.Reports
	log     *slog.Logger
}

// New returns the API; Register mounts it.
func New(cfg Config) (*API, error) {
	if cfg.Store == nil || cfg.Deployer == nil {
		return nil, errors.New("orgmanager: Store and Deployer are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rp, err := reports.New(reports.Config{Reader: cfg.Activity, Logger: log})
	if err != nil {
		return nil, err
	}
	return &API{ops: &Ops{store: cfg.Store, deploy: cfg.Deployer}, tokens: cfg.Tokens, nodes: cfg.Nodes, reports: rp, log: log}, nil
}

// Ops returns the operations the handlers call, for the console.
func (a *API) Ops() *Ops { return a.ops }

// Register mounts every endpoint of the organisation API, the settings
// endpoints included, on r.
func (a *API) Register(r *httpapi.Router) {
	r.Handle(http.MethodPut, "/org/{org}", a.org(a.putOrg))
	r.Handle(http.MethodPatch, "/org/{org}", a.org(a.putOrg))
	r.Handle(http.MethodGet, "/org/{org}", a.org(a.getOrg))
	r.Handle(http.MethodDelete, "/org/{org}", a.org(a.deleteOrg))
	r.Handle(http.MethodPost, "/org/{org}/redeploy", a.org(a.redeploy))
	r.Handle(http.MethodGet, "/org/{org}/prefixes", a.org(a.getPrefixes))
	r.Handle(http.MethodPatch, "/org/{org}/prefixes", a.org(a.patchPrefixes))
	r.Handle(http.MethodGet, "/org/{org}/overrides", a.org(a.getOverrides))
	r.Handle(http.MethodPost, "/org/{org}/overrides", a.org(a.postOverride))
	r.Handle(http.MethodDelete, "/org/{org}/overrides", a.org(a.deleteOverride))
	r.Handle(http.MethodPost, "/org/{org}/overrides/batch", a.org(a.postBatch))
	r.Handle(http.MethodGet, "/org/{org}/effective-ranges", a.org(a.effectiveRanges))
	a.registerSettings(r)
	a.registerListing(r)
	a.reports.Register(r)
	r.Handle(http.MethodGet, "/nodes", a.listNodes)
	if a.tokens != nil {
		a.registerTokens(r)
	}
}

type orgHandler func(w http.ResponseWriter, r *http.Request, org string)

// org validates the {org} path segment before the handler runs.
func (a *API) org(h orgHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		org := r.PathValue("org")
		if err := identity.ValidateOrg(org); err != nil {
			httpapi.WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
		h(w, r, org)
	}
}

// fail answers an operation's error with its status (StatusOf); anything
// unexpected is a 500 that names the request.
func (a *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, msg := StatusOf(err)
	if status == http.StatusInternalServerError {
		httpapi.WriteInternal(w, r, a.log, err)
		return
	}
	httpapi.WriteError(w, status, msg)
}

func setVersion(w http.ResponseWriter, v int64) {
	w.Header().Set("X-Org-Version", strconv.FormatInt(v, 10))
}

// written answers a successful write (Ops told the deployer already).
func written(w http.ResponseWriter, version int64, status int, body any) {
	setVersion(w, version)
	if body == nil {
		w.WriteHeader(status)
		return
	}
	httpapi.WriteJSON(w, status, body)
}

type successBody struct {
	Success bool `json:"success"`
}

func (a *API) putOrg(w http.ResponseWriter, r *http.Request, org string) {
	v, err := a.ops.PutOrg(r.Context(), org)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	written(w, v, http.StatusOK, successBody{true})
}

type orgBody struct {
	OrgID     string `json:"org_id"`
	Version   int64  `json:"version"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
}

func (a *API) getOrg(w http.ResponseWriter, r *http.Request, org string) {
	o, err := a.ops.GetOrg(r.Context(), org)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	setVersion(w, o.Version)
	httpapi.WriteJSON(w, http.StatusOK, orgBody{OrgID: o.ID, Version: o.Version,
		CreatedAt: timestamp(o.CreatedAt), UpdatedAt: timestamp(o.UpdatedAt)})
}

func (a *API) deleteOrg(w http.ResponseWriter, r *http.Request, org string) {
	q, err := specQuery(r.URL.RawQuery, "confirm")
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if q.Get("confirm") != "true" {
		httpapi.WriteError(w, http.StatusBadRequest, "deleting an organisation requires ?confirm=true")
		return
	}
	if err := a.ops.DeleteOrg(r.Context(), org); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) redeploy(w http.ResponseWriter, r *http.Request, org string) {
	if err := a.ops.Redeploy(r.Context(), org); err != nil {
		a.fail(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusOK, successBody{true})
}

type prefixesBody struct {
	Prefixes []string `json:"prefixes"`
}

func (a *API) getPrefixes(w http.ResponseWriter, r *http.Request, org string) {
	v, prefixes, err := a.ops.Prefixes(r.Context(), org)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	body := prefixesBody{Prefixes: make([]string, len(prefixes))}
	for i, p := range prefixes {
		body.Prefixes[i] = p.String()
	}
	setVersion(w, v)
	httpapi.WriteJSON(w, http.StatusOK, body)
}

func (a *API) patchPrefixes(w http.ResponseWriter, r *http.Request, org string) {
	var body prefixPatch
	if !decode(w, r, maxBody, &body) {
		return
	}
	v, err := a.ops.PatchPrefixes(r.Context(), org, body.Add, body.Remove)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	written(w, v, http.StatusOK, successBody{true})
}

// decode reads a JSON body of at most limit bytes, answering the 4xx itself
// when it cannot.
func decode(w http.ResponseWriter, r *http.Request, limit int64, dst any) bool {
	err := httpapi.DecodeJSON(w, r, limit, dst)
	if err == nil {
		return true
	}
	var be *httpapi.BodyError
	if errors.As(err, &be) {
		httpapi.WriteError(w, be.Status, be.Msg)
	} else {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
	}
	return false
}

// overrideBody is an override as the API returns it.
type overrideBody struct {
	CIDR     string          `json:"cidr"`
	Username string          `json:"username,omitempty"`
	DeviceID string          `json:"deviceid,omitempty"`
	Location string          `json:"location,omitempty"`
	Meta     json.RawMessage `json:"meta,omitempty"`
	Status   string          `json:"_status"`
	MTime    string          `json:"_mtime"`
	CTime    string          `json:"_ctime"`
}

func toBody(o orgstore.Override, cov *ranges.Coverage) overrideBody {
	return overrideBody{CIDR: o.CIDR.String(), Username: o.Username, DeviceID: o.DeviceID, Location: o.Location,
		Meta: o.Meta, Status: Status(cov, o.CIDR), MTime: timestamp(o.MTime), CTime: timestamp(o.CTime)}
}

func (a *API) getOverrides(w http.ResponseWriter, r *http.Request, org string) {
	q, err := specQuery(r.URL.RawQuery, "cidr", "fields")
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if q.Has("cidr") {
		a.getOverride(w, r, org, q.Get("cidr"))
		return
	}
	detail := orgstore.CIDROnly
	switch q.Get("fields") {
	case "", "cidr":
	case "full":
		detail = orgstore.Full
	default:
		httpapi.WriteError(w, http.StatusBadRequest, "fields must be cidr or full")
		return
	}
	view, err := a.ops.Overrides(r.Context(), org, detail)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	setVersion(w, view.Version)
	if detail == orgstore.CIDROnly {
		cidrs := make([]string, len(view.Overrides))
		for i, o := range view.Overrides {
			cidrs[i] = o.CIDR.String()
		}
		httpapi.WriteJSON(w, http.StatusOK, map[string][]string{"cidrs": cidrs})
		return
	}
	cov := ranges.NewCoverage(view.Prefixes)
	list := make([]overrideBody, len(view.Overrides))
	for i, o := range view.Overrides {
		list[i] = toBody(o, cov)
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string][]overrideBody{"overrides": list})
}

func (a *API) getOverride(w http.ResponseWriter, r *http.Request, org, raw string) {
	view, err := a.ops.Override(r.Context(), org, raw)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	setVersion(w, view.Version)
	httpapi.WriteJSON(w, http.StatusOK, toBody(view.Overrides[0], ranges.NewCoverage(view.Prefixes)))
}

type postOverrideBody struct {
	Success bool   `json:"success"`
	CIDR    string `json:"cidr"`
}

func (a *API) postOverride(w http.ResponseWriter, r *http.Request, org string) {
	var in OverrideInput
	if !decode(w, r, maxBody, &in) {
		return
	}
	o, v, err := a.ops.PutOverride(r.Context(), org, in)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	written(w, v, http.StatusOK, postOverrideBody{Success: true, CIDR: o.CIDR.String()})
}

func (a *API) deleteOverride(w http.ResponseWriter, r *http.Request, org string) {
	q, err := specQuery(r.URL.RawQuery, "cidr")
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !q.Has("cidr") {
		httpapi.WriteError(w, http.StatusBadRequest, "missing required parameter: cidr")
		return
	}
	v, err := a.ops.DeleteOverride(r.Context(), org, q.Get("cidr"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	written(w, v, http.StatusNoContent, nil)
}

func (a *API) postBatch(w http.ResponseWriter, r *http.Request, org string) {
	ops, errs, berr := readBatch(w, r)
	if berr != nil {
		httpapi.WriteError(w, berr.Status, berr.Msg)
		return
	}
	res, v, err := a.ops.ApplyBatch(r.Context(), org, ops, errs)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	written(w, v, http.StatusOK, res)
}

// batchOp turns one batch item into an upsert, or a delete when it says
// delete: true.
func batchOp(raw json.RawMessage) (orgstore.BatchOp, error) {
	in, err := decodeItem(raw)
	if err != nil {
		return orgstore.BatchOp{}, err
	}
	return in.batchOp()
}

func (in *OverrideInput) batchOp() (orgstore.BatchOp, error) {
	if in.Delete != nil && *in.Delete {
		if in.CIDR == nil {
			return orgstore.BatchOp{}, &inputError{err: errMissingCIDR}
		}
		p, err := cidr.Parse(*in.CIDR)
		if err != nil {
			return orgstore.BatchOp{}, &inputError{cidr: *in.CIDR, err: err}
		}
		return orgstore.BatchOp{Delete: true, Override: orgstore.Override{CIDR: p}}, nil
	}
	o, err := in.toOverride()
	if err != nil {
		return orgstore.BatchOp{}, err
	}
	return orgstore.BatchOp{Override: o}, nil
}

func (a *API) effectiveRanges(w http.ResponseWriter, r *http.Request, org string) {
	q, err := specQuery(r.URL.RawQuery, "force_latest")
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	var latest bool
	switch q.Get("force_latest") {
	case "", "0", "false":
	case "1", "true":
		latest = true
	default:
		httpapi.WriteError(w, http.StatusBadRequest, "force_latest must be 1 or 0")
		return
	}
	e, err := a.ops.EffectiveRanges(r.Context(), org, latest)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	setVersion(w, e.OrgVersion)
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(appendRangesBody(nil, e.Version, e.Dirty, e.DirtySince, e.Ranges))
}

func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
