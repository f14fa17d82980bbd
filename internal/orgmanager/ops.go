package orgmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/svc-pf/svc-pf/internal/cidr"
	"github.com/svc-pf/svc-pf/internal/deploy"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/ranges"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// Ops are the organisation API's operations without their transport: the
// input checks, the store call and the deployer's notice, in that order.
// The REST handlers decode a request and call them; the web console parses
// a form and calls the same ones, so a rule (what a CIDR may be, which
// scope a settings document may have, when the deployer hears of a write)
// is written once. Ops do not ask who is calling: the caller has checked
// the principal's reach before.
type Ops struct {
	store  Store
	deploy Deployer
}

// Error is an operation refused for its input or the state it met: the
// status the REST API answers and the message of its {"error": …} body.
// Field, when set, names the input at fault (the console shows the message
// beside it).
type Error struct {
	Status int
	Field  string
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

func refused(status int, field string, err error) *Error {
	return &Error{Status: status, Field: field, Msg: err.Error()}
}

// StatusOf maps an operation's error to the status and message the REST
// API answers; 500 (with err's own text) for anything unexpected, which
// callers log and never show as it is.
func StatusOf(err error) (int, string) {
	var (
		e       *Error
		overlap *orgstore.OverlapError
	)
	switch {
	case errors.As(err, &e):
		return e.Status, e.Msg
	case errors.As(err, new(*inputError)):
		return http.StatusBadRequest, err.Error()
	case errors.Is(err, orgstore.ErrOrgNotFound):
		return http.StatusNotFound, "organisation not found"
	case errors.Is(err, orgstore.ErrOverrideNotFound):
		return http.StatusNotFound, "override not found"
	case errors.Is(err, orgstore.ErrSettingsNotFound):
		return http.StatusNotFound, "settings not found"
	case errors.As(err, &overlap):
		return http.StatusUnprocessableEntity, err.Error()
	case errors.Is(err, orgstore.ErrInvalidInput):
		// Text the database cannot hold, such as a NUL character. The input
		// checks refuse it first; this is the store's own guard.
		return http.StatusBadRequest, err.Error()
	}
	return http.StatusInternalServerError, err.Error()
}

// FieldOf names the input an operation's refusal is about, "" when it is
// not one input's: the console shows the message beside that field.
func FieldOf(err error) string {
	var (
		e  *Error
		ie *inputError
	)
	switch {
	case errors.As(err, &e):
		return e.Field
	case errors.As(err, &ie):
		return ie.field()
	}
	return ""
}

// ValidOrg checks an organisation identifier as every operation does.
func ValidOrg(org string) error {
	if err := identity.ValidateOrg(org); err != nil {
		return refused(http.StatusBadRequest, "org", err)
	}
	return nil
}

// written tells the deployer of a write before the caller answers, so a
// read after the answer already sees dirty=true.
func (o *Ops) written(org string, v int64, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	o.deploy.Notify(org)
	return v, nil
}

// PutOrg creates the organisation or bumps its version.
func (o *Ops) PutOrg(ctx context.Context, org string) (int64, error) {
	if err := ValidOrg(org); err != nil {
		return 0, err
	}
	v, err := o.store.PutOrg(ctx, org)
	return o.written(org, v, err)
}

// GetOrg reads the organisation's row.
func (o *Ops) GetOrg(ctx context.Context, org string) (orgstore.Org, error) {
	return o.store.GetOrg(ctx, org)
}

// DeleteOrg deletes the organisation, its prefixes, overrides and settings;
// the deploy that follows finds it gone and cleans all its sessions. The
// confirmation is the caller's to ask (the API's ?confirm=true, the
// console's confirmation page).
func (o *Ops) DeleteOrg(ctx context.Context, org string) error {
	if err := o.store.DeleteOrg(ctx, org); err != nil {
		return err
	}
	o.deploy.Notify(org)
	return nil
}

// Redeploy republishes the organisation's sessions.
func (o *Ops) Redeploy(ctx context.Context, org string) error {
	if _, err := o.store.GetOrg(ctx, org); err != nil {
		return err
	}
	o.deploy.Redeploy(org)
	return nil
}

// Prefixes returns the organisation's version and prefixes.
func (o *Ops) Prefixes(ctx context.Context, org string) (int64, []netip.Prefix, error) {
	return o.store.Prefixes(ctx, org)
}

// PatchPrefixes adds and removes prefixes, given as text: a malformed CIDR
// in either list is a 400 naming the list, before anything is written.
func (o *Ops) PatchPrefixes(ctx context.Context, org string, add, remove []string) (int64, error) {
	a, r, err := (&prefixPatch{Add: add, Remove: remove}).parse()
	if err != nil {
		return 0, err
	}
	v, err := o.store.UpdatePrefixes(ctx, org, a, r)
	return o.written(org, v, err)
}

// ParseCIDR reads a CIDR as every operation does: syntax, length, then the
// canonical form; a refusal is a 400.
func ParseCIDR(s string) (netip.Prefix, error) {
	p, err := cidr.Parse(s)
	if err != nil {
		return p, refused(http.StatusBadRequest, "cidr", err)
	}
	return p, nil
}

// Overrides reads every override of the organisation (the REST list).
func (o *Ops) Overrides(ctx context.Context, org string, d orgstore.Detail) (orgstore.View, error) {
	return o.store.ReadOverrides(ctx, org, d)
}

// Override reads one override, all its fields, by its CIDR text.
func (o *Ops) Override(ctx context.Context, org, cidrText string) (orgstore.View, error) {
	p, err := ParseCIDR(cidrText)
	if err != nil {
		return orgstore.View{}, err
	}
	return o.store.ReadOverride(ctx, org, p)
}

// OverridesPage reads at most limit overrides after the CIDR after (the
// zero Prefix: from the first), in the store's order, with the count of
// all of them: what a person pages through, at any size.
func (o *Ops) OverridesPage(ctx context.Context, org string, after netip.Prefix, limit int) (orgstore.OverridePage, error) {
	return o.store.OverridesPage(ctx, org, after, limit)
}

// Status is an override's computed status: active when its CIDR is inside
// the union of the organisation's prefixes.
func Status(cov *ranges.Coverage, p netip.Prefix) string {
	if cov.Covers(p) {
		return "active"
	}
	return "outside-prefixes"
}

// PutOverride validates in and stores it, replacing an override of the
// same CIDR whole.
func (o *Ops) PutOverride(ctx context.Context, org string, in OverrideInput) (orgstore.Override, int64, error) {
	ov, err := in.toOverride()
	if err != nil {
		return ov, 0, err
	}
	v, err := o.store.PutOverride(ctx, org, ov)
	v, err = o.written(org, v, err)
	return ov, v, err
}

// DeleteOverride deletes the override of a CIDR given as text; deleting
// one that does not exist is no error.
func (o *Ops) DeleteOverride(ctx context.Context, org, cidrText string) (int64, error) {
	p, err := ParseCIDR(cidrText)
	if err != nil {
		return 0, err
	}
	v, err := o.store.DeleteOverride(ctx, org, p)
	return o.written(org, v, err)
}

// MaxBatchItems is the limit on one batch.
const MaxBatchItems = maxBatchItems

// BatchError is one refused batch item.
type BatchError struct {
	Index int     `json:"index"`
	CIDR  *string `json:"cidr,omitempty"`
	Error string  `json:"error"`
}

// BatchResult is the outcome of a batch, the REST body as it is.
type BatchResult struct {
	Success   bool         `json:"success"`
	Processed int          `json:"processed"`
	Skipped   int          `json:"skipped"`
	Errors    []BatchError `json:"errors"`
}

// BatchItem turns one item (an upsert, or a delete when in.Delete says so)
// into an operation, or the item's error as the batch reports it.
func BatchItem(index int, in OverrideInput) (orgstore.BatchOp, *BatchError) {
	op, err := in.batchOp()
	if err == nil {
		return op, nil
	}
	be := &BatchError{Index: index, Error: err.Error()}
	var ie *inputError
	if errors.As(err, &ie) && ie.cidr != "" {
		be.CIDR = &ie.cidr
	}
	return orgstore.BatchOp{}, be
}

// ApplyBatch applies the items that parsed (BatchItem) in one transaction;
// errs are the refused ones, reported and not applied.
func (o *Ops) ApplyBatch(ctx context.Context, org string, ops []orgstore.BatchOp, errs []BatchError) (BatchResult, int64, error) {
	if len(ops)+len(errs) > maxBatchItems {
		return BatchResult{}, 0, &Error{Status: http.StatusBadRequest,
			Msg: fmt.Sprintf("batch has more than %d items; the limit is %d", maxBatchItems, maxBatchItems)}
	}
	if errs == nil {
		errs = []BatchError{}
	}
	v, err := o.store.ApplyBatch(ctx, org, ops)
	if v, err = o.written(org, v, err); err != nil {
		return BatchResult{}, 0, err
	}
	return BatchResult{Success: len(errs) == 0, Processed: len(ops), Skipped: len(errs), Errors: errs}, v, nil
}

// EffectiveRanges is the body of GET effective-ranges.
type EffectiveRanges struct {
	// Version is the deployed snapshot's (the database's with latest).
	Version int64
	Dirty   bool
	// DirtySince is RFC 3339, "" when not dirty.
	DirtySince string
	Ranges     []ranges.Range
	// OrgVersion is the organisation's version, for X-Org-Version.
	OrgVersion int64
}

// EffectiveRanges returns the ranges the IP Mapper sees (from the deploy
// cache), or with latest those the next deploy will publish.
func (o *Ops) EffectiveRanges(ctx context.Context, org string, latest bool) (EffectiveRanges, error) {
	row, err := o.store.GetOrg(ctx, org)
	if err != nil {
		return EffectiveRanges{}, err
	}
	st := o.deploy.Status(org)
	version, rs := st.Version, st.Ranges
	if latest {
		view, err := o.store.ReadOverrides(ctx, org, orgstore.Identity)
		if err != nil {
			return EffectiveRanges{}, err
		}
		row.Version = view.Version
		version, rs = view.Version, deploy.EffectiveRanges(view)
	}
	dirty, since := st.Dirty, st.DirtySince
	if !dirty && (!st.Deployed || st.Version < row.Version) {
		// A version the deployer has not been told about yet (written by
		// another instance, or before a restart): dirty since that write,
		// or since the deployer started when the write is older, as the
		// deployer itself dates it once its scan finds the version.
		dirty, since = true, deploy.DirtySince(row.UpdatedAt, st.Started, time.Now())
	}
	out := EffectiveRanges{Version: version, Dirty: dirty, Ranges: rs, OrgVersion: row.Version}
	if dirty {
		out.DirtySince = timestamp(since)
	}
	return out, nil
}

// ScopeOf reads one settings scope as the settings endpoints take it: name
// is "" (the org layer) or one of profile, location, username, deviceid,
// with a value the store can hold.
func ScopeOf(name, value string) (settings.Scope, error) {
	sc, err := scopeOf(name, value)
	if err != nil {
		return sc, refused(http.StatusBadRequest, "scope", err)
	}
	return sc, nil
}

// ParseDocument reads and validates a settings document; a refused field is
// named in the message.
func ParseDocument(raw []byte) (*settings.Document, error) {
	d, err := settings.Parse(raw)
	if err != nil {
		return nil, refused(http.StatusBadRequest, "document", err)
	}
	return d, nil
}

// Settings returns the organisation's document of one scope, canonical
// JSON, and the organisation's version.
func (o *Ops) Settings(ctx context.Context, org string, sc settings.Scope) (json.RawMessage, int64, error) {
	return o.store.GetSettings(ctx, org, sc)
}

// ListSettings returns every settings document of the organisation in
// layer order.
func (o *Ops) ListSettings(ctx context.Context, org string) (int64, []orgstore.ScopedSettings, error) {
	return o.store.ListSettings(ctx, org)
}

// PutSettings stores the document of one scope (ParseDocument made it).
func (o *Ops) PutSettings(ctx context.Context, org string, sc settings.Scope, d *settings.Document) (int64, error) {
	v, err := o.store.PutSettings(ctx, org, sc, d)
	return o.written(org, v, err)
}

// DeleteSettings deletes the document of one scope.
func (o *Ops) DeleteSettings(ctx context.Context, org string, sc settings.Scope) (int64, error) {
	v, err := o.store.DeleteSettings(ctx, org, sc)
	return o.written(org, v, err)
}

// GlobalSettings returns the global layer (Doc nil when there is none).
func (o *Ops) GlobalSettings(ctx context.Context) (orgstore.GlobalSettings, error) {
	return o.store.GlobalSettings(ctx)
}

// PutGlobalSettings stores the global document.
func (o *Ops) PutGlobalSettings(ctx context.Context, d *settings.Document) (int64, error) {
	v, err := o.store.PutGlobalSettings(ctx, d)
	if err != nil {
		return 0, err
	}
	o.deploy.NotifyGlobal()
	return v, nil
}

// DeleteGlobalSettings deletes the global document.
func (o *Ops) DeleteGlobalSettings(ctx context.Context) (int64, error) {
	v, err := o.store.DeleteGlobalSettings(ctx)
	if err != nil {
		return 0, err
	}
	o.deploy.NotifyGlobal()
	return v, nil
}

// Subscriber names the subscriber whose effective settings are asked for.
type Subscriber struct {
	Location, Username, DeviceID string
	// Profile is "" (derived from the layers) or a profile number.
	Profile string
}

// LayerQuery validates a subscriber as the effective endpoint does.
func (s Subscriber) LayerQuery() (orgstore.LayerQuery, error) {
	var lq orgstore.LayerQuery
	lq.Location, lq.Username, lq.DeviceID = s.Location, s.Username, s.DeviceID
	if err := lq.Attributes.Validate(); err != nil {
		return orgstore.LayerQuery{}, refused(http.StatusBadRequest, "subscriber", err)
	}
	if s.Profile != "" {
		n, err := settings.ParseProfile(s.Profile)
		if err != nil {
			return orgstore.LayerQuery{}, refused(http.StatusBadRequest, "profile", err)
		}
		lq.Profile, lq.HasProfile = n, true
	}
	return lq, nil
}

// Effective is the effective policy of one subscriber, the body of GET
// /org/{org}/settings/effective.
type Effective struct {
	// Settings is the merged document: every field set.
	Settings *settings.Document `json:"settings"`
	// Origin maps each field to the layer it came from ("default" when no
	// layer sets it).
	Origin map[string]string `json:"origin"`
	// Layers are the merged layers that exist, least specific first.
	Layers      []string `json:"layers"`
	Fingerprint string   `json:"fingerprint"`
	// Profile is the number of the profile layer merged (present or not):
	// the profile parameter, else the profile the most specific layer
	// sets; absent when neither names one.
	Profile *int `json:"profile,omitempty"`
	// Version is the organisation's, for X-Org-Version.
	Version int64 `json:"-"`
}

// Effective merges the layers of one subscriber with the one layer rule
// (settings.Stack), as the nodes apply it.
func (o *Ops) Effective(ctx context.Context, org string, lq orgstore.LayerQuery) (Effective, error) {
	stored, err := o.store.ReadSettingsLayers(ctx, org, lq)
	if err != nil {
		return Effective{}, err
	}
	// A stored document that does not parse is the store's fault, not the
	// client's: a 500 (a *FieldError is no ErrInvalidInput).
	parse := func(layer string, raw json.RawMessage) (*settings.Document, error) {
		if raw == nil {
			return nil, nil
		}
		d, err := settings.Parse(raw)
		if err != nil {
			return nil, fmt.Errorf("stored settings of layer %s: %w", layer, err)
		}
		return d, nil
	}
	global, err := parse(settings.LayerGlobal, stored.Global)
	if err != nil {
		return Effective{}, err
	}
	stack := settings.Stack{
		Global:   settings.Layer{Name: settings.LayerGlobal, Doc: global},
		Org:      settings.Layer{Name: settings.Scope{Kind: settings.ScopeOrg}.Layer(org)},
		Profiles: map[int]settings.Layer{},
		Location: settings.Layer{Name: settings.Scope{Kind: settings.ScopeLocation, Value: lq.Location}.Layer(org)},
		Username: settings.Layer{Name: settings.Scope{Kind: settings.ScopeUsername, Value: lq.Username}.Layer(org)},
		DeviceID: settings.Layer{Name: settings.Scope{Kind: settings.ScopeDeviceID, Value: lq.DeviceID}.Layer(org)},
	}
	for _, sd := range stored.Docs {
		d, err := parse(sd.Scope.Layer(org), sd.Doc)
		if err != nil {
			return Effective{}, err
		}
		switch sd.Scope.Kind {
		case settings.ScopeOrg:
			stack.Org.Doc = d
		case settings.ScopeProfile:
			stack.Profiles[sd.Scope.Profile] = settings.Layer{Name: sd.Scope.Layer(org), Doc: d}
		case settings.ScopeLocation:
			stack.Location.Doc = d
		case settings.ScopeUsername:
			stack.Username.Doc = d
		case settings.ScopeDeviceID:
			stack.DeviceID.Doc = d
		}
	}
	out := Effective{Layers: []string{}, Version: stored.Version}
	if n, ok := stack.Profile(lq.Profile, lq.HasProfile); ok {
		out.Profile = &n
	}
	layers := stack.AppendLayers(make([]settings.Layer, 0, settings.MaxLayers), lq.Profile, lq.HasProfile)
	e := settings.Merge(layers...)
	for _, l := range layers {
		out.Layers = append(out.Layers, l.Name)
	}
	out.Settings, out.Origin, out.Fingerprint = &e.Document, e.Origin, e.Fingerprint
	return out, nil
}
