package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/httpapi"
	"github.com/svc-pf/svc-pf/internal/orgmanager"
	"github.com/svc-pf/svc-pf/internal/orgstore"
)

// The auth modes (docs/access.md).
const (
	AuthTokens = "tokens"
	AuthNone   = "none"
)

// AdminTokenEnv names the environment variable whose token is ensured to
// exist as an admin token at start.
const AdminTokenEnv = "SVCPF_ADMIN_TOKEN"

// AuthConfig is the orgmanager's `auth` section (under `svc-pf all` it
// covers the IP Mapper's GET /sessions too).
type AuthConfig struct {
	// Mode is tokens (the default: a bearer token on every API path) or
	// none (everything allowed as admin: a lab behind other protection).
	Mode string `yaml:"mode"`
	// BootstrapTokenFile receives the admin token created when the token
	// table is empty at start (mode 0600). Default data/admin.token;
	// <data_dir>/admin.token under `svc-pf all`.
	BootstrapTokenFile string `yaml:"bootstrap_token_file"`
	// AdminToken is SVCPF_ADMIN_TOKEN (not a file key: a secret belongs in
	// the environment or a secrets manager, not in a config file).
	AdminToken string `yaml:"-"`
}

// IPMapperAuthConfig is the standalone IP Mapper's `auth` section.
type IPMapperAuthConfig struct {
	// Mode is tokens or none, as the orgmanager's.
	Mode string `yaml:"mode"`
	// DatabaseURL is the orgmanager's database.url: the IP Mapper reads
	// the tokens there to verify GET /sessions' callers, and writes
	// nothing of them. Required with mode tokens, standalone.
	DatabaseURL string `yaml:"database_url"`
	// Verifier, when set, verifies instead of a database of its own: under
	// `svc-pf all` the orgmanager's (not a file key).
	Verifier access.Verifier `yaml:"-"`
}

func validMode(mode string) error {
	if mode != AuthTokens && mode != AuthNone {
		return fmt.Errorf("auth.mode %q: want tokens or none", mode)
	}
	return nil
}

// warnOpen is logged at every start with auth.mode none.
func warnOpen(log *slog.Logger) {
	log.Warn("auth.mode is none: every API request is served as admin without a token; use it only behind other protection (docs/access.md)")
}

// orgManagerAuth builds the orgmanager's token service and guard: it
// ensures SVCPF_ADMIN_TOKEN, and creates the first admin token into
// BootstrapTokenFile when no token exists.
func orgManagerAuth(ctx context.Context, cfg AuthConfig, store *orgstore.Store, auditor *access.Auditor, log *slog.Logger) (*access.Tokens, *access.Guard, error) {
	tokens, err := access.New(access.Config{Store: store, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	if cfg.AdminToken != "" {
		if err := tokens.Ensure(ctx, cfg.AdminToken, AdminTokenEnv); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", AdminTokenEnv, err)
		}
	}
	// With auth.mode none nobody needs a token: none is created, and no
	// secret lands on disk unasked. The first start with tokens creates it.
	var tok string
	if cfg.Mode != AuthNone {
		if tok, err = tokens.Bootstrap(ctx); err != nil {
			return nil, nil, err
		}
	}
	if tok != "" {
		if err := writeTokenFile(cfg.BootstrapTokenFile, tok); err != nil {
			return nil, nil, fmt.Errorf("auth.bootstrap_token_file: %w", err)
		}
		log.Info("no API token existed: created an admin token; read it from the file", "file", cfg.BootstrapTokenFile)
	}
	if cfg.Mode == AuthNone {
		warnOpen(log)
	}
	guard, err := access.NewGuard(access.GuardConfig{Verifier: tokens, Open: cfg.Mode == AuthNone,
		Protected: orgmanager.Protected, Authorize: orgmanager.Authorize, Refused: auditor.Refused, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	return tokens, guard, nil
}

// writeTokenFile writes tok to path, mode 0600, through a temporary file
// renamed into place, so a reader never sees half a token.
func writeTokenFile(path, tok string) error {
	if path == "" {
		return errors.New("no file named to write the first admin token to")
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".admin.token-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename, nothing to remove
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// ipMapperAuth builds the IP Mapper's guard over GET /sessions. It
// returns a close func for a database it opened itself.
func ipMapperAuth(ctx context.Context, cfg IPMapperAuthConfig, log *slog.Logger) (httpapi.Guard, func(), error) {
	noop := func() {}
	protected := func(r *http.Request) bool { return r.URL.Path == "/sessions" }
	if cfg.Mode == AuthNone {
		warnOpen(log)
		g, err := access.NewGuard(access.GuardConfig{Open: true, Protected: protected})
		if err != nil {
			return nil, nil, err
		}
		return g.Check, noop, nil
	}
	verifier, closeFn := cfg.Verifier, noop
	if verifier == nil {
		if cfg.DatabaseURL == "" {
			return nil, nil, errors.New("auth.database_url is required: the orgmanager's database.url, where the IP Mapper verifies the tokens of GET /sessions (or auth.mode: none)")
		}
		store, err := orgstore.Open(ctx, orgstore.Config{URL: cfg.DatabaseURL, MaxReadConns: 2, Guest: true})
		if err != nil {
			return nil, nil, fmt.Errorf("auth.database_url: %w", err)
		}
		tokens, err := access.New(access.Config{Store: store, Logger: log})
		if err != nil {
			store.Close()
			return nil, nil, err
		}
		verifier, closeFn = tokens, func() { _ = store.Close() }
	}
	g, err := access.NewGuard(access.GuardConfig{Verifier: verifier, Protected: protected, Authorize: authorizeSessions, Logger: log})
	if err != nil {
		closeFn()
		return nil, nil, err
	}
	return g.Check, closeFn, nil
}

// authorizeSessions is GET /sessions' rule: an admin asks anything; a
// scoped token only org=<its organisation> (the listing of its own
// sessions), since the other selectors (an address, a username) may match
// another organisation's subscribers.
func authorizeSessions(r *http.Request, p access.Principal) error {
	if p.Admin() {
		return nil
	}
	q, err := httpapi.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return access.ErrForbidden
	}
	for k, v := range q {
		switch k {
		case "org":
			if len(v) != 1 || p.Read(v[0]) != nil {
				return access.ErrForbidden
			}
		case "limit", "after":
		default:
			return access.ErrForbidden
		}
	}
	if len(q["org"]) != 1 {
		return access.ErrForbidden
	}
	return nil
}
