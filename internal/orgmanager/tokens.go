package orgmanager

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/httpapi"
)

// Who may call what on the orgmanager's listener (docs/access.md), and the
// token endpoints. The guard (access.Guard) runs Protected and Authorize
// before a request is routed, so a refusal never depends on whether the
// organisation, the path or the method exists.

// TokenService is what the token endpoints need; *access.Tokens is one.
type TokenService interface {
	Create(ctx context.Context, by access.Principal, nt access.NewToken) (access.Token, string, error)
	List(ctx context.Context, by access.Principal) ([]access.Token, error)
	Revoke(ctx context.Context, by access.Principal, id string) error
}

var _ TokenService = (*access.Tokens)(nil)

// protectedRoots are the first path segments that need a token. The
// console (/ui) signs in on its own pages; /, /health, /metrics and
// /openapi.yaml stay open.
var protectedRoots = []string{"org", "settings", "tokens", "audit", "nodes"}

// Protected reports whether a request to the orgmanager's listener needs a
// bearer token.
func Protected(r *http.Request) bool {
	root, _, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	for _, p := range protectedRoots {
		if root == p {
			return true
		}
	}
	return false
}

// Authorize is the orgmanager's route rule, by path and method only:
//
//   - /org/{org}/…: reading (GET, HEAD) needs Principal.Read(org), every
//     other method Principal.Write(org), so a scoped token gets 403 for
//     every other organisation, existing or not, whatever the method;
//   - /org (the listing): any token; the listing shows what it may read;
//   - /settings (the global layer): any token reads it — it shapes every
//     organisation's effective settings, which a scoped token reads anyway
//     through /org/{org}/settings/effective — and only an admin writes it;
//   - /audit and /nodes: admin only;
//   - /tokens: any token; the token service decides (an org-viewer
//     manages none, an org-admin its organisation's tokens).
func Authorize(r *http.Request, p access.Principal) error {
	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	switch segs[0] {
	case "org":
		if len(segs) == 1 {
			return nil
		}
		org, err := url.PathUnescape(segs[1])
		if err != nil {
			org = segs[1] // no scoped token has such an org: refused below
		}
		if read {
			return p.Read(org)
		}
		return p.Write(org)
	case "settings":
		if read {
			return nil
		}
		return p.Platform()
	case "audit", "nodes":
		return p.Platform()
	}
	return nil
}

// registerTokens mounts the token endpoints.
func (a *API) registerTokens(r *httpapi.Router) {
	r.Handle(http.MethodPost, "/tokens", a.createToken)
	r.Handle(http.MethodGet, "/tokens", a.listTokens)
	r.Handle(http.MethodDelete, "/tokens/{id}", a.revokeToken)
}

// principal returns the caller the guard verified, answering 401 itself
// when there is none (a listener mounted without the guard refuses
// rather than trusting everyone).
func principal(w http.ResponseWriter, r *http.Request) (access.Principal, bool) {
	p, ok := access.FromContext(r.Context())
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="svc-pf"`)
		httpapi.WriteError(w, http.StatusUnauthorized, access.ErrUnauthorized.Error())
	}
	return p, ok
}

type tokenBody struct {
	ID        string  `json:"id"`
	Name      string  `json:"name"`
	Role      string  `json:"role"`
	Org       string  `json:"org,omitempty"`
	CreatedAt string  `json:"created_at"`
	ExpiresAt *string `json:"expires_at"`
	RevokedAt *string `json:"revoked_at"`
}

type createdTokenBody struct {
	tokenBody
	Token string `json:"token"`
}

func toTokenBody(t access.Token) tokenBody {
	b := tokenBody{ID: t.ID, Name: t.Name, Role: string(t.Role), Org: t.Org, CreatedAt: timestamp(t.CreatedAt)}
	if !t.ExpiresAt.IsZero() {
		s := timestamp(t.ExpiresAt)
		b.ExpiresAt = &s
	}
	if !t.RevokedAt.IsZero() {
		s := timestamp(t.RevokedAt)
		b.RevokedAt = &s
	}
	return b
}

type newTokenInput struct {
	Role    string `json:"role"`
	Org     string `json:"org"`
	Name    string `json:"name"`
	Expires string `json:"expires"`
}

// maxTokenBody bounds POST /tokens' body: four short strings.
const maxTokenBody = 4 << 10

func (a *API) createToken(w http.ResponseWriter, r *http.Request) {
	p, ok := principal(w, r)
	if !ok {
		return
	}
	var in newTokenInput
	dec, err := httpapi.NewBodyDecoder(w, r, maxTokenBody)
	if err == nil {
		dec.DisallowUnknownFields()
		if err = dec.Decode(&in); err == nil {
			err = httpapi.ExpectEOF(dec)
		} else {
			err = httpapi.AsBodyError(err)
		}
	}
	var be *httpapi.BodyError
	if errors.As(err, &be) {
		httpapi.WriteError(w, be.Status, be.Msg)
		return
	}
	nt := access.NewToken{Role: access.Role(in.Role), Org: in.Org, Name: in.Name}
	if in.Expires != "" {
		d, err := time.ParseDuration(in.Expires)
		if err != nil || d <= 0 {
			httpapi.WriteError(w, http.StatusBadRequest, "expires must be a positive Go duration such as 720h, or left out for a token that does not expire")
			return
		}
		nt.Expires = d
	}
	t, secret, err := a.tokens.Create(r.Context(), p, nt)
	if err != nil {
		a.tokenFail(w, r, err)
		return
	}
	httpapi.WriteJSON(w, http.StatusCreated, createdTokenBody{tokenBody: toTokenBody(t), Token: secret})
}

func (a *API) listTokens(w http.ResponseWriter, r *http.Request) {
	p, ok := principal(w, r)
	if !ok {
		return
	}
	if _, err := specQuery(r.URL.RawQuery); err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	list, err := a.tokens.List(r.Context(), p)
	if err != nil {
		a.tokenFail(w, r, err)
		return
	}
	out := make([]tokenBody, len(list))
	for i, t := range list {
		out[i] = toTokenBody(t)
	}
	httpapi.WriteJSON(w, http.StatusOK, map[string][]tokenBody{"tokens": out})
}

func (a *API) revokeToken(w http.ResponseWriter, r *http.Request) {
	p, ok := principal(w, r)
	if !ok {
		return
	}
	if err := a.tokens.Revoke(r.Context(), p, r.PathValue("id")); err != nil {
		a.tokenFail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *API) tokenFail(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, access.ErrForbidden):
		httpapi.WriteError(w, http.StatusForbidden, err.Error())
	case errors.Is(err, access.ErrTokenNotFound):
		httpapi.WriteError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, access.ErrInvalid):
		httpapi.WriteError(w, http.StatusBadRequest, err.Error())
	default:
		httpapi.WriteInternal(w, r, a.log, err)
	}
}
