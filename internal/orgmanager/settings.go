package orgmanager

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// The settings endpoints (docs/orgmanager.md, Settings): an organisation's
// documents, scoped by at most one query parameter; the effective policy of
// one subscriber; and the global layer, outside the /org tree.

// scopeParams are the scope parameters, least specific first.
var scopeParams = []string{"profile", "location", "username", "deviceid"}

func (a *API) registerSettings(r *httpapi.Router) {
	r.Handle(http.MethodGet, "/org/{org}/settings", a.org(a.getSettingsOrList))
	r.Handle(http.MethodPut, "/org/{org}/settings", a.org(a.putSettings))
	r.Handle(http.MethodDelete, "/org/{org}/settings", a.org(a.deleteSettings))
	r.Handle(http.MethodGet, "/org/{org}/settings/effective", a.org(a.effectiveSettings))
	r.Handle(http.MethodGet, "/settings", a.getGlobalSettings)
	r.Handle(http.MethodPut, "/settings", a.putGlobalSettings)
	r.Handle(http.MethodDelete, "/settings", a.deleteGlobalSettings)
}

// strictQuery parses a query string in which every name is one of allowed
// and appears once. Unlike URL.Query it refuses what it cannot parse, so a
// malformed parameter is never silently dropped (which would turn a write
// meant for a username into one of the org layer).
func strictQuery(raw string, allowed ...string) (map[string]string, error) {
	q, err := httpapi.ParseQuery(raw)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(q))
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(allowed, name) {
			if len(allowed) == 0 {
				return nil, fmt.Errorf("unknown parameter %.64q: this endpoint takes none", name)
			}
			return nil, fmt.Errorf("unknown parameter %.64q: the parameters are %s", name, strings.Join(allowed, ", "))
		}
		if len(q[name]) > 1 {
			return nil, fmt.Errorf("parameter %s given more than once", name)
		}
		out[name] = q[name][0]
	}
	return out, nil
}

// parseScope reads the scope of /org/{org}/settings: no parameter is the
// org layer, else exactly one of profile, location, username, deviceid with
// a value the store can hold.
func parseScope(raw string) (settings.Scope, error) {
	q, err := strictQuery(raw, scopeParams...)
	if err != nil {
		return settings.Scope{}, err
	}
	if len(q) > 1 {
		names := slices.Sorted(maps.Keys(q))
		return settings.Scope{}, fmt.Errorf("at most one scope parameter (profile, location, username or deviceid); got %s", strings.Join(names, " and "))
	}
	name, v := "", ""
	for n, val := range q {
		name, v = n, val
	}
	return scopeOf(name, v)
}

// scopeOf is one scope parameter's value as a scope ("" the org layer).
func scopeOf(name, v string) (settings.Scope, error) {
	sc := settings.Scope{Kind: settings.ScopeOrg}
	if name != "" && v == "" {
		return settings.Scope{}, fmt.Errorf("%s must not be empty", name)
	}
	switch name {
	case "":
	case "profile":
		n, err := settings.ParseProfile(v)
		if err != nil {
			return settings.Scope{}, err
		}
		sc = settings.Scope{Kind: settings.ScopeProfile, Profile: n}
	case "location":
		sc = settings.Scope{Kind: settings.ScopeLocation, Value: v}
	case "username":
		sc = settings.Scope{Kind: settings.ScopeUsername, Value: v}
	case "deviceid":
		sc = settings.Scope{Kind: settings.ScopeDeviceID, Value: v}
	default:
		return settings.Scope{}, fmt.Errorf("unknown scope %.64q: the scopes are %s", name, strings.Join(scopeParams, ", "))
	}
	if err := sc.Validate(); err != nil {
		return settings.Scope{}, err
	}
	return sc, nil
}

// parseEffectiveQuery reads the subscriber of /org/{org}/settings/effective:
// any of location, username, deviceid (an empty value is an absent
// attribute, as in an override) and profile.
func parseEffectiveQuery(raw string) (orgstore.LayerQuery, error) {
	q, err := strictQuery(raw, scopeParams...)
	if err != nil {
		return orgstore.LayerQuery{}, err
	}
	return Subscriber{Location: q["location"], Username: q["username"], DeviceID: q["deviceid"], Profile: q["profile"]}.LayerQuery()
}

// readDocument reads and validates a settings document body; it answers
// the 4xx itself when it cannot. A refused field is named in the message.
func readDocument(w http.ResponseWriter, r *http.Request) (*settings.Document, bool) {
	var raw json.RawMessage
	if !decode(w, r, maxBody, &raw) {
		return nil, false
	}
	d, err := ParseDocument(raw)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return nil, false
	}
	return d, true
}

// writeDocument answers a stored document as it is: its canonical JSON.
func writeDocument(w http.ResponseWriter, doc json.RawMessage) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(doc[:len(doc):len(doc)], '\n'))
}

func (a *API) getSettings(w http.ResponseWriter, r *http.Request, org string) {
	sc, err := parseScope(r.URL.RawQuery)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	doc, v, err := a.ops.Settings(r.Context(), org, sc)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	setVersion(w, v)
	writeDocument(w, doc)
}

func (a *API) putSettings(w http.ResponseWriter, r *http.Request, org string) {
	sc, err := parseScope(r.URL.RawQuery)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	d, ok := readDocument(w, r)
	if !ok {
		return
	}
	v, err := a.ops.PutSettings(r.Context(), org, sc, d)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	written(w, v, http.StatusOK, successBody{true})
}

func (a *API) deleteSettings(w http.ResponseWriter, r *http.Request, org string) {
	sc, err := parseScope(r.URL.RawQuery)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	v, err := a.ops.DeleteSettings(r.Context(), org, sc)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	written(w, v, http.StatusNoContent, nil)
}

func (a *API) effectiveSettings(w http.ResponseWriter, r *http.Request, org string) {
	lq, err := parseEffectiveQuery(r.URL.RawQuery)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	e, err := a.ops.Effective(r.Context(), org, lq)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	setVersion(w, e.Version)
	httpapi.WriteJSON(w, http.StatusOK, e)
}

// setSettingsVersion sets X-Settings-Version, the global layer's version
// (it has no org_version).
func setSettingsVersion(w http.ResponseWriter, v int64) {
	w.Header().Set("X-Settings-Version", strconv.FormatInt(v, 10))
}

func (a *API) getGlobalSettings(w http.ResponseWriter, r *http.Request) {
	if _, err := strictQuery(r.URL.RawQuery); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	g, err := a.ops.GlobalSettings(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if g.Doc == nil {
		a.fail(w, r, orgstore.ErrSettingsNotFound)
		return
	}
	setSettingsVersion(w, g.Version)
	writeDocument(w, g.Doc)
}

func (a *API) putGlobalSettings(w http.ResponseWriter, r *http.Request) {
	if _, err := strictQuery(r.URL.RawQuery); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	d, ok := readDocument(w, r)
	if !ok {
		return
	}
	v, err := a.ops.PutGlobalSettings(r.Context(), d)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writtenGlobal(w, v, http.StatusOK, successBody{true})
}

func (a *API) deleteGlobalSettings(w http.ResponseWriter, r *http.Request) {
	if _, err := strictQuery(r.URL.RawQuery); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	v, err := a.ops.DeleteGlobalSettings(r.Context())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writtenGlobal(w, v, http.StatusNoContent, nil)
}

// writtenGlobal answers a successful write of the global layer as written
// does an organisation's (Ops told the deployer already).
func writtenGlobal(w http.ResponseWriter, version int64, status int, body any) {
	setSettingsVersion(w, version)
	if body == nil {
		w.WriteHeader(status)
		return
	}
	httpapi.WriteJSON(w, status, body)
}
