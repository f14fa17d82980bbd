// Package console is the web console: server-rendered pages under /ui/ on
// the orgmanager's listener, for the operator (every organisation) and the
// customer (a scoped token sees its own organisation) alike.
//
// It sits beside the REST handlers of internal/orgmanager and calls the
// very same operations (orgmanager.Ops: input checks, store call, deployer
// notice); it parses forms instead of JSON bodies and renders HTML instead
// of JSON, nothing more. Who may do what is the caller's access.Principal's
// to say (Read, Write, Platform), as in the API. A person signs in with a
// token; the console keeps a server-side session bound to that token and
// asks the authenticator again on every request, so revoking the token ends
// its sessions.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/activity/reports"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/orgmanager"
	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/session"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// Ops are the organisation operations the console calls:
// *orgmanager.Ops, the ones the REST handlers call.
type Ops interface {
	PutOrg(ctx context.Context, org string) (int64, error)
	GetOrg(ctx context.Context, org string) (orgstore.Org, error)
	DeleteOrg(ctx context.Context, org string) error
	Prefixes(ctx context.Context, org string) (int64, []netip.Prefix, error)
	PatchPrefixes(ctx context.Context, org string, add, remove []string) (int64, error)
	Override(ctx context.Context, org, cidrText string) (orgstore.View, error)
	OverridesPage(ctx context.Context, org string, after netip.Prefix, limit int) (orgstore.OverridePage, error)
	PutOverride(ctx context.Context, org string, in orgmanager.OverrideInput) (orgstore.Override, int64, error)
	DeleteOverride(ctx context.Context, org, cidrText string) (int64, error)
	ApplyBatch(ctx context.Context, org string, ops []orgstore.BatchOp, errs []orgmanager.BatchError) (orgmanager.BatchResult, int64, error)
	Settings(ctx context.Context, org string, sc settings.Scope) (json.RawMessage, int64, error)
	ListSettings(ctx context.Context, org string) (int64, []orgstore.ScopedSettings, error)
	PutSettings(ctx context.Context, org string, sc settings.Scope, d *settings.Document) (int64, error)
	DeleteSettings(ctx context.Context, org string, sc settings.Scope) (int64, error)
	Effective(ctx context.Context, org string, lq orgstore.LayerQuery) (orgmanager.Effective, error)
	GlobalSettings(ctx context.Context) (orgstore.GlobalSettings, error)
	PutGlobalSettings(ctx context.Context, d *settings.Document) (int64, error)
	DeleteGlobalSettings(ctx context.Context) (int64, error)
}

var _ Ops = (*orgmanager.Ops)(nil)

// Authenticator turns a token's secret into the caller it stands for:
// access.ErrUnauthorized for a secret that is unknown, expired or revoked.
type Authenticator interface {
	Authenticate(ctx context.Context, secret string) (access.Principal, error)
}

// OrgSummary is one organisation in the list.
type OrgSummary struct {
	ID        string
	Version   int64
	UpdatedAt time.Time
}

// OrgLister pages through every organisation in identifier order: at most
// limit after the identifier after, and the identifier to continue after
// ("" on the last page).
type OrgLister interface {
	ListOrgs(ctx context.Context, after string, limit int) ([]OrgSummary, string, error)
}

// Tokens manages tokens on behalf of a caller, who may only see and touch
// what its role reaches (access.ErrForbidden otherwise).
type Tokens interface {
	Create(ctx context.Context, by access.Principal, t access.NewToken) (access.Token, string, error)
	List(ctx context.Context, by access.Principal) ([]access.Token, error)
	Revoke(ctx context.Context, by access.Principal, id string) error
}

// Auditor keeps the console's writes in the audit; Record logs and counts
// a record it cannot store itself (access.Auditor does).
type Auditor interface {
	Record(ctx context.Context, r access.AuditRecord) error
}

// AuditReader reads audit records, newest first.
type AuditReader interface {
	Audit(ctx context.Context, q access.AuditQuery) ([]access.AuditRecord, error)
}

// Simulator answers what the filter would do (the simulator's simulate
// call) and which feeds it has (its info payload), as JSON bodies.
type Simulator interface {
	Simulate(ctx context.Context, params url.Values) ([]byte, error)
	Info(ctx context.Context) ([]byte, error)
}

// Sessions reads the IP Mapper's sessions: *mapperclient.Client.
type Sessions interface {
	GetSessions(ctx context.Context, q mapperclient.Query) ([]session.Session, error)
}

var _ Sessions = (*mapperclient.Client)(nil)

// Nodes reads the filter nodes' last heartbeats: the lister GET /nodes
// answers from (orgmanager.NodeLister), so the page and the API agree.
type Nodes = orgmanager.NodeLister

// Config configures the console. Ops and Auth are required; a page whose
// dependency is nil says that it is not available here.
type Config struct {
	Ops  Ops
	Auth Authenticator
	// Orgs lists organisations for an admin's organisation list.
	Orgs      OrgLister
	Tokens    Tokens
	Audit     Auditor
	AuditLog  AuditReader
	Simulator Simulator
	Sessions  Sessions
	// Nodes lights up the Nodes page (admin only).
	Nodes Nodes
	// Activity is the activity store the Activity page reads, through
	// the REST reports' parser; nil shows how to configure one.
	Activity activity.Reader
	// SignInGuard, when set, wraps the sign-in POST: the access layer's
	// limit on repeated failures from one address (a bad token is
	// answered 401, as by the API's middleware).
	SignInGuard func(http.HandlerFunc) http.HandlerFunc
	// SessionTTL is how long a sign-in lasts (default 12h).
	SessionTTL time.Duration
	// MaxSessions bounds the signed-in sessions kept (default 10 000); the
	// oldest goes first.
	MaxSessions int
	Logger      *slog.Logger
	// Clock is time.Now unless a test sets it.
	Clock func() time.Time
}

// Console serves the pages.
type Console struct {
	cfg      Config
	log      *slog.Logger
	sessions *sessionStore
	pages    map[string]*template.Template
	static   fs.FS
	reports  *reports.Reports
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/htmx.min.js static/console.css
var staticFS embed.FS

// New validates cfg and parses the templates.
func New(cfg Config) (*Console, error) {
	if cfg.Ops == nil || cfg.Auth == nil {
		return nil, errors.New("console: Ops and Auth are required")
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = 12 * time.Hour
	}
	if cfg.SessionTTL < time.Minute {
		return nil, errors.New("console: SessionTTL must be at least a minute")
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = 10_000
	}
	if cfg.MaxSessions < 1 {
		return nil, errors.New("console: MaxSessions must be positive")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFS, "static")
	rp, err := reports.New(reports.Config{Reader: cfg.Activity, Logger: log, Clock: cfg.Clock})
	if err != nil {
		return nil, err
	}
	return &Console{cfg: cfg, log: log, sessions: newSessionStore(cfg.SessionTTL, cfg.MaxSessions, cfg.Clock),
		pages: pages, static: static, reports: rp}, nil
}

// Prefix is where the console is mounted.
const Prefix = "/ui/"

// Register mounts the console's routes on r.
func (c *Console) Register(r *httpapi.Router) {
	get, post := http.MethodGet, http.MethodPost
	r.Handle(get, "/ui", c.redirectHome)
	r.Handle(get, "/ui/{$}", c.redirectHome)
	r.Handle(get, "/ui/static/{file}", c.serveStatic)
	r.Handle(get, "/ui/signin", c.signinForm)
	signin := c.signin
	if c.cfg.SignInGuard != nil {
		signin = c.cfg.SignInGuard(signin)
	}
	r.Handle(post, "/ui/signin", signin)
	r.Handle(post, "/ui/signout", c.signed(c.signout))
	r.Handle(get, "/ui/orgs", c.signed(c.orgList))
	r.Handle(post, "/ui/orgs", c.signed(c.orgCreate))
	r.Handle(get, "/ui/orgs/{org}", c.orgPage(c.orgOverview))
	r.Handle(get, "/ui/orgs/{org}/delete", c.orgPage(c.orgDeleteForm))
	r.Handle(post, "/ui/orgs/{org}/delete", c.orgPage(c.orgDelete))
	r.Handle(post, "/ui/orgs/{org}/prefixes", c.orgPage(c.prefixesPost))
	r.Handle(get, "/ui/orgs/{org}/overrides", c.orgPage(c.overridesPage))
	r.Handle(post, "/ui/orgs/{org}/overrides", c.orgPage(c.overridePost))
	r.Handle(get, "/ui/orgs/{org}/overrides/edit", c.orgPage(c.overrideEdit))
	r.Handle(post, "/ui/orgs/{org}/overrides/delete", c.orgPage(c.overrideDelete))
	r.Handle(post, "/ui/orgs/{org}/overrides/import", c.orgPage(c.overridesImport))
	r.Handle(get, "/ui/orgs/{org}/settings", c.orgPage(c.settingsPage))
	r.Handle(post, "/ui/orgs/{org}/settings", c.orgPage(c.settingsPost))
	r.Handle(post, "/ui/orgs/{org}/settings/delete", c.orgPage(c.settingsDelete))
	r.Handle(get, "/ui/orgs/{org}/effective", c.orgPage(c.effectivePage))
	r.Handle(get, "/ui/orgs/{org}/why", c.orgPage(c.whyPage))
	r.Handle(get, "/ui/orgs/{org}/sessions", c.orgPage(c.sessionsPage))
	r.Handle(get, "/ui/orgs/{org}/audit", c.orgPage(c.orgAuditPage))
	r.Handle(get, "/ui/orgs/{org}/activity", c.orgPage(c.activityPage))
	r.Handle(get, "/ui/tokens", c.signed(c.tokensPage))
	r.Handle(post, "/ui/tokens", c.signed(c.tokenCreate))
	r.Handle(post, "/ui/tokens/revoke", c.signed(c.tokenRevoke))
	r.Handle(get, "/ui/audit", c.signed(c.auditPage))
	r.Handle(get, "/ui/settings", c.signed(c.globalPage))
	r.Handle(post, "/ui/settings", c.signed(c.globalPost))
	r.Handle(post, "/ui/settings/delete", c.signed(c.globalDelete))
	r.Handle(get, "/ui/feeds", c.signed(c.feedsPage))
	r.Handle(get, "/ui/nodes", c.signed(c.nodesPage))
}

func (c *Console) redirectHome(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, "/ui/orgs", http.StatusSeeOther)
}

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := fs.ReadFile(c.static, name)
	if err != nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	switch {
	case len(name) > 3 && name[len(name)-3:] == ".js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	default:
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(b)
}
