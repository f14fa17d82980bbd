package app

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/config"
)

// get sends GET url with the Authorization header auth ("" for none),
// bypassing the tests' default token.
func get(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	return send(t, "GET", url, auth, "")
}

// send is get with another method and a body.
func send(t *testing.T, method, url, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	// The transport under the tests' bearerTransport (TestMain).
	raw := http.DefaultTransport
	if b, ok := raw.(bearerTransport); ok {
		raw = b.base
	}
	resp, err := raw.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(got)
}

// TestBootstrapToken: `svc-pf all` on an empty database writes an admin
// token to <data_dir>/admin.token, mode 0600, logging the file's path and
// not the token; the token works; a restart leaves the file alone.
func TestBootstrapToken(t *testing.T) {
	cfg := testAllConfig(t)
	cfg.OrgManager.Auth.AdminToken = ""
	var logs syncBuffer
	all, stop := runAll(t, cfg, &logs)
	file := filepath.Join(cfg.DataDir, "admin.token")
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v, want 0600", file, fi.Mode().Perm())
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(data))
	if _, _, err := access.ParseToken(tok); err != nil || string(data) != tok+"\n" {
		t.Fatalf("the file holds %q", data)
	}
	base := "http://" + all.OrgManager.Addr().String()
	if code, body := get(t, base+"/tokens", "Bearer "+tok); code != 200 || !strings.Contains(body, `"role":"admin"`) {
		t.Fatalf("GET /tokens with the bootstrap token: %d %s", code, body)
	}
	if code, _ := get(t, base+"/org/acme", ""); code != 401 {
		t.Fatalf("GET /org/acme without a token: %d", code)
	}
	// The service pages stay open.
	for _, u := range []string{base + "/", base + "/health", base + "/metrics", base + "/openapi.yaml",
		"http://" + all.IPMapper.Addr().String() + "/metrics", "http://" + all.IPMapper.Addr().String() + "/"} {
		if code, body := get(t, u, ""); code != 200 {
			t.Errorf("GET %s without a token: %d %.200s", u, code, body)
		}
	}
	// The IP Mapper beside it verifies the same tokens.
	mapper := "http://" + all.IPMapper.Addr().String()
	if code, _ := get(t, mapper+"/sessions?org=acme", ""); code != 401 {
		t.Errorf("GET /sessions without a token: %d", code)
	}
	if code, body := get(t, mapper+"/sessions?org=acme", "Bearer "+tok); code == 401 || code == 403 {
		t.Errorf("GET /sessions with the admin token: %d %s", code, body)
	}
	stop()
	out := logs.String()
	if !strings.Contains(out, "file="+file) {
		t.Errorf("the log does not name %s:\n%s", file, out)
	}
	id, secret, _ := access.ParseToken(tok)
	if strings.Contains(out, secret) {
		t.Errorf("the log contains the token's secret (id %s)", id)
	}
	// A second start finds a token and writes nothing.
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	var again syncBuffer
	_, stop = runAll(t, cfg, &again)
	stop()
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("a restart wrote %s again: %v", file, err)
	}
}

// TestAdminTokenEnv: SVCPF_ADMIN_TOKEN's value is an admin token from the
// first start on (and no bootstrap file is written), starts again with
// it, and refuses to start once it has been revoked or when it is not a
// token.
func TestAdminTokenEnv(t *testing.T) {
	cfg := testAllConfig(t)
	tok := access.GenerateToken()
	cfg.OrgManager.Auth.AdminToken = tok
	var logs syncBuffer
	all, stop := runAll(t, cfg, &logs)
	base := "http://" + all.OrgManager.Addr().String()
	if code, body := get(t, base+"/tokens", "Bearer "+tok); code != 200 || !strings.Contains(body, AdminTokenEnv) {
		t.Fatalf("GET /tokens with %s: %d %s", AdminTokenEnv, code, body)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "admin.token")); !os.IsNotExist(err) {
		t.Errorf("a bootstrap file was written beside %s: %v", AdminTokenEnv, err)
	}
	id, _, _ := access.ParseToken(tok)
	req, _ := http.NewRequest("DELETE", base+"/tokens/"+id, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("revoke: %v %v", resp, err)
	}
	resp.Body.Close()
	stop()
	if _, err := StartAll(context.Background(), cfg, "test", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("start with a revoked %s: %v", AdminTokenEnv, err)
	}
	cfg.OrgManager.Auth.AdminToken = "hunter2"
	if _, err := StartAll(context.Background(), cfg, "test", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), AdminTokenEnv) {
		t.Fatalf("start with a malformed %s: %v", AdminTokenEnv, err)
	}
}

// TestAuthModeNone: auth.mode none serves without a token and warns at
// every start; the mode is checked, and the IP Mapper's section is
// refused under svc-pf all.
func TestAuthModeNone(t *testing.T) {
	cfg := testAllConfig(t)
	if err := config.Decode([]byte("orgmanager: {auth: {mode: none}}"), &cfg); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		var logs syncBuffer
		all, stop := runAll(t, cfg, &logs)
		if code, body := get(t, "http://"+all.OrgManager.Addr().String()+"/org/acme", ""); code != 404 {
			t.Errorf("GET /org/acme without a token under mode none: %d %s", code, body)
		}
		if code, _ := get(t, "http://"+all.IPMapper.Addr().String()+"/sessions?org=acme", ""); code == 401 {
			t.Errorf("GET /sessions without a token under mode none: %d", code)
		}
		// The listings and the audit take the admin the guard puts in the
		// request under mode none; the audit names that caller.
		om := "http://" + all.OrgManager.Addr().String()
		if code, body := send(t, "PUT", om+"/org/lab", "", ""); code != 200 {
			t.Fatalf("PUT /org/lab under mode none: %d %s", code, body)
		}
		for path, want := range map[string]string{
			"/org":                     `"org_id":"lab"`,
			"/org/lab/settings?list=1": `"documents":[]`,
			"/org/lab/audit":           `"method":"PUT","path":"/org/lab","org":"lab"`,
			"/audit?limit=1":           `"token_id":"","token_name":"auth.mode none","role":"admin","method":"PUT","path":"/org/lab"`,
		} {
			if code, body := get(t, om+path, ""); code != 200 || !strings.Contains(body, want) {
				t.Errorf("GET %s under mode none: %d %s, want 200 with %s", path, code, body, want)
			}
		}
		stop()
		if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "auth.mode is none") {
			t.Errorf("no warning at start:\n%s", out)
		}
	}
	for yaml, want := range map[string]string{
		"orgmanager: {auth: {mode: open}}":           `auth.mode "open"`,
		"ipmapper: {auth: {mode: none}}":             "ipmapper.auth",
		"orgmanager: {auth: {token: x}}":             `unknown key "token"`,
		"ipmapper: {auth: {database_url: sqlite:x}}": "ipmapper.auth",
	} {
		c := DefaultAllConfig()
		err := config.Decode([]byte(yaml), &c)
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", yaml, err, want)
		}
	}
	if _, _, err := ipMapperAuth(context.Background(), DefaultIPMapperConfig().Auth, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "auth.database_url is required") {
		t.Errorf("standalone IP Mapper without a token database: %v", err)
	}
}

// TestAuthorizeSessions: an admin asks GET /sessions anything; a scoped
// token only its own organisation's listing.
func TestAuthorizeSessions(t *testing.T) {
	admin := access.Principal{Role: access.RoleAdmin}
	viewer := access.Principal{Role: access.RoleOrgViewer, Org: "acme"}
	for _, c := range []struct {
		p     access.Principal
		query string
		ok    bool
	}{
		{admin, "ip=192.0.2.1", true},
		{admin, "username=alice", true},
		{viewer, "org=acme", true},
		{viewer, "org=acme&limit=10&after=x", true},
		{viewer, "org=beta", false},
		{viewer, "org=ghost", false},
		{viewer, "ip=192.0.2.1", false},
		{viewer, "username=alice", false},
		{viewer, "org=acme&username=alice", false},
		{viewer, "org=acme&org=acme", false},
		{viewer, "", false},
		{viewer, "org=%zz", false},
	} {
		r, _ := http.NewRequest("GET", "/sessions?"+c.query, nil)
		if err := authorizeSessions(r, c.p); (err == nil) != c.ok {
			t.Errorf("%s ?%s: %v, want allowed=%v", c.p.Role, c.query, err, c.ok)
		}
	}
}

// TestOrgManagerBootstrapFile: the standalone orgmanager writes the first
// admin token to auth.bootstrap_token_file (its directory made), mode 0600.
func TestOrgManagerBootstrapFile(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultOrgManagerConfig()
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Database.URL = "sqlite:" + filepath.Join(dir, "orgmanager.db")
	cfg.Auth.BootstrapTokenFile = filepath.Join(dir, "secrets", "admin.token")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	om, err := StartOrgManager(ctx, cfg, nil, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- om.Run(ctx) }()
	fi, err := os.Stat(cfg.Auth.BootstrapTokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bootstrap file: %v %v", fi, err)
	}
	data, _ := os.ReadFile(cfg.Auth.BootstrapTokenFile)
	if code, body := get(t, "http://"+om.Addr().String()+"/tokens", "Bearer "+strings.TrimSpace(string(data))); code != 200 {
		t.Fatalf("GET /tokens with it: %d %s", code, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestOrgManagerOpenWritesNoToken: with auth.mode none the orgmanager
// creates no admin token and writes no token file; started again with
// tokens on the same database, it does.
func TestOrgManagerOpenWritesNoToken(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultOrgManagerConfig()
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Database.URL = "sqlite:" + filepath.Join(dir, "orgmanager.db")
	cfg.Auth.BootstrapTokenFile = filepath.Join(dir, "admin.token")
	for _, mode := range []string{AuthNone, AuthTokens} {
		cfg.Auth.Mode = mode
		ctx, cancel := context.WithCancel(context.Background())
		om, err := StartOrgManager(ctx, cfg, nil, "test", slog.New(slog.DiscardHandler))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- om.Run(ctx) }()
		_, err = os.Stat(cfg.Auth.BootstrapTokenFile)
		if mode == AuthNone && !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("auth.mode none: token file %v", err)
		}
		if mode == AuthTokens && err != nil {
			t.Errorf("auth.mode tokens after none: %v", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}
