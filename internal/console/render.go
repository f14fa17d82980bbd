package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/orgmanager"
)

// page is what every template gets: the layout's parts and the page's own
// data.
type page struct {
	Title     string
	Principal access.Principal
	SignedIn  bool
	CSRF      string
	Org       string
	// Tab names the organisation page shown, for the tabs.
	Tab string
	// Flash is the outcome of the last write, Error a refusal of the page
	// as a whole, Fields the refusals by form field.
	Flash  string
	Error  string
	Fields map[string]string
	// Form holds the values sent, to fill the form again.
	Form url.Values
	// Again is where a refused form can be sent again from.
	Again string
	Next  string
	Data  any
}

// FieldError returns the message for a field ("" for none).
func (p *page) FieldError(name string) string { return p.Fields[name] }

// Value returns a sent value of the form, to fill it again.
func (p *page) Value(name string) string { return p.Form.Get(name) }

func (q *req) page(title, errMsg string) *page {
	return &page{Title: title, Principal: q.p, SignedIn: true, CSRF: q.si.csrf, Org: q.org, Error: errMsg,
		Fields: map[string]string{}, Form: url.Values{}, Flash: q.r.URL.Query().Get("done")}
}

var funcs = template.FuncMap{
	"orgpath": func(org string, rest ...string) string {
		return "/ui/orgs/" + url.PathEscape(org) + strings.Join(rest, "")
	},
	"query": func(kv ...string) string {
		v := url.Values{}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] != "" {
				v.Set(kv[i], kv[i+1])
			}
		}
		if len(v) == 0 {
			return ""
		}
		return "?" + v.Encode()
	},
}

// parseTemplates parses each page with the layout, so every page defines
// its own "content".
func parseTemplates() (map[string]*template.Template, error) {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/_*.html")
	if err != nil {
		return nil, fmt.Errorf("console: templates: %w", err)
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimSuffix(path.Base(n), ".html")
		if base == "layout" || strings.HasPrefix(base, "_") {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("console: template %s: %w", n, err)
		}
		out[base] = t
	}
	return out, nil
}

// render writes a whole page. It renders into a buffer first so that a
// template error is a 500, never half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	t, ok := c.pages[name]
	if !ok {
		c.internal(w, r, fmt.Errorf("console: no template %q", name))
		return
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", p); err != nil {
		c.internal(w, r, fmt.Errorf("console: render %s: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// internal answers an unexpected failure: the log has the error and the
// request id, the page only the id.
func (c *Console) internal(w http.ResponseWriter, r *http.Request, err error) {
	id := httpapi.RequestID(r.Context())
	c.log.Error("console request failed", "path", r.URL.Path, "request_id", id, "err", err)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(http.StatusInternalServerError)
	fmt.Fprintf(w, "<!doctype html><title>Error</title><p>Something went wrong on the server (request %s). The log says more.</p>", template.HTMLEscapeString(id))
}

// failed shows an operation's refusal: the form again (template name) with
// the message beside its field, at the operation's status; an unexpected
// error is a 500.
func (c *Console) failed(q *req, name string, p *page, err error) {
	status, msg := orgmanager.StatusOf(err)
	if status == http.StatusInternalServerError {
		c.internal(q.w, q.r, err)
		return
	}
	if f := orgmanager.FieldOf(err); f != "" {
		p.Fields[f] = msg
	} else {
		p.Error = msg
	}
	c.render(q.w, q.r, status, name, p)
}

// done ends a successful write: the audit record, then a redirect (a
// reload of the result page does not send the form again).
func (c *Console) done(q *req, to, flash string, version int64) {
	c.audit(q, http.StatusSeeOther, version)
	sep := "?"
	if strings.Contains(to, "?") {
		sep = "&"
	}
	http.Redirect(q.w, q.r, to+sep+"done="+url.QueryEscape(flash), http.StatusSeeOther)
}

// audit records a write through the console as the API records its own:
// the token (never its secret), the path, the organisation and its
// version after the write.
func (c *Console) audit(q *req, status int, version int64) {
	if c.cfg.Audit == nil {
		return
	}
	rec := access.AuditRecord{Time: c.cfg.Clock().UTC(), TokenID: q.p.TokenID, TokenName: q.p.Name, Role: q.p.Role,
		Method: q.r.Method, Path: q.r.URL.Path, Org: q.org, OrgVersion: version,
		RequestID: httpapi.RequestID(q.ctx()), Status: status}
	// A record that cannot be stored is logged and counted by the
	// auditor; the write it describes has happened and its answer stands.
	_ = c.cfg.Audit.Record(q.ctx(), rec)
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }
