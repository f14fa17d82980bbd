package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/app"
	"github.com/svc-pf/svc-pf/internal/identity"
	"github.com/svc-pf/svc-pf/internal/ipmapper/mapperclient"
	"github.com/svc-pf/svc-pf/internal/ipmapper/wire"
	"github.com/svc-pf/svc-pf/internal/natsbus"
	"github.com/svc-pf/svc-pf/internal/session"
)

// startIPMapper runs a real IP Mapper (embedded NATS, the HTTP listener
// on a kernel-picked port) holding three sessions of acme, one with a tab
// in its username, and returns its listener's URL.
func startIPMapper(t *testing.T) string {
	t.Helper()
	srv, err := natsbus.StartEmbedded(natsbus.EmbeddedConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := natsbus.Connect(srv.ClientURL(), "ipmapper", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	// The IP Mapper verifies tokens on an orgmanager database, as
	// standalone ones do (auth.database_url); the token comes from the CLI
	// and reaches the sessions command through SVCPF_TOKEN.
	dbURL := "sqlite:" + filepath.Join(t.TempDir(), "orgmanager.db")
	code, tok, errOut := runCLI("token", "create", "--database", dbURL, "--role", "admin", "--name", "sessions test")
	if code != 0 {
		t.Fatalf("token create: %d %s", code, errOut)
	}
	t.Setenv("SVCPF_TOKEN", strings.TrimSpace(tok))
	cfg := app.DefaultIPMapperConfig()
	cfg.HTTP.Address = "127.0.0.1:0"
	cfg.Auth.DatabaseURL = dbURL
	m, err := app.StartIPMapper(cfg, nc, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	base := "http://" + m.Addr().String()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("IP Mapper not ready after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	client, err := mapperclient.NewClient(mapperclient.ClientConfig{Conn: nc, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []session.Session{
		{ID: "s-alice", Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/25")},
			Attributes: identity.Attributes{Username: "alice", Location: "hq"}},
		{ID: "s-bob", Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix("192.0.2.128/25")},
			Attributes: identity.Attributes{Username: "bob", DeviceID: "mac:00:11:22:33:44:55"}},
		{ID: "s-tab", Org: "acme", Allocations: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
			Attributes: identity.Attributes{Username: "ev\til"}},
		{ID: "s-radius", Org: "mobile", Allocations: []netip.Prefix{netip.MustParsePrefix("100.64.0.1/32")},
			Attributes: identity.Attributes{Username: "dave", DeviceID: "msisdn:447900000001"}, Producer: session.ProducerRADIUS},
		{ID: "s-mobile-override", Org: "mobile", Allocations: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/24")}},
	} {
		if _, err := client.SetSession(context.Background(), s, 0); err != nil {
			t.Fatal(err)
		}
	}
	return base
}

func runCLI(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestIPMapperSessionsCommand runs `svc-pf ipmapper sessions` against a
// real IP Mapper's listener: the table, JSON, paging, and each error with
// its exit status.
func TestIPMapperSessionsCommand(t *testing.T) {
	base := startIPMapper(t)

	// The endpoint needs the token; without it the command says so.
	tok := os.Getenv("SVCPF_TOKEN")
	t.Setenv("SVCPF_TOKEN", "")
	if code, _, errOut := runCLI("ipmapper", "sessions", "--url", base, "--org", "acme"); code != 2 || !strings.Contains(errOut, "401") {
		t.Fatalf("without a token: exit %d, stderr %q", code, errOut)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI("ipmapper", "sessions", "--url", base, "--org", "acme", "--token-file", tokenFile); code != 0 {
		t.Fatalf("--token-file: exit %d, stderr %q", code, errOut)
	}
	t.Setenv("SVCPF_TOKEN", tok)

	code, out, errOut := runCLI("ipmapper", "sessions", "--url", base, "--org", "acme")
	if code != 0 || errOut != "" {
		t.Fatalf("--org acme: exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !regexp.MustCompile(`^ID +ORG +PRODUCER +ALLOCATIONS +USERNAME +DEVICEID +LOCATION +REVISION +UPDATED +EXPIRES$`).MatchString(lines[0]) {
		t.Fatalf("--org acme: want a header, 3 rows and a footer:\n%s", out)
	}
	if !regexp.MustCompile(`^s-alice +acme +- +192\.0\.2\.0/25 +alice +- +hq +0 +\d{4}-\d\d-\d\dT\S+Z +-$`).MatchString(lines[1]) ||
		!strings.Contains(lines[2], "mac:00:11:22:33:44:55") ||
		!strings.Contains(lines[3], `"ev\til"`) || lines[4] != "3 sessions" {
		t.Fatalf("--org acme: rows not as expected (a tab in a username must be quoted):\n%s", out)
	}

	// A bare host:port is taken as http://; --ip is the longest-prefix match.
	code, out, _ = runCLI("ipmapper", "sessions", "--url", strings.TrimPrefix(base, "http://"), "--ip", "192.0.2.200")
	if code != 0 || !strings.Contains(out, "s-bob") || strings.Contains(out, "s-alice") || !strings.HasSuffix(out, "1 session\n") {
		t.Fatalf("--ip 192.0.2.200: exit %d\n%s", code, out)
	}

	code, out, _ = runCLI("ipmapper", "sessions", "--url", base, "--username", "alice", "--json")
	var reply wire.SessionsReply
	if code != 0 || json.Unmarshal([]byte(out), &reply) != nil || reply.Count != 1 || reply.Sessions[0].Username != "alice" {
		t.Fatalf("--username alice --json: exit %d\n%s", code, out)
	}

	// Paging: the footer names the next --after.
	code, out, _ = runCLI("ipmapper", "sessions", "--url", base, "--org", "acme", "--limit", "2")
	m := regexp.MustCompile(`2 of 3 sessions; next page: --after (\S+)\n$`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("--limit 2: exit %d, no next page in\n%s", code, out)
	}
	code, out, _ = runCLI("ipmapper", "sessions", "--url", base, "--org", "acme", "--limit", "2", "--after", m[1])
	if code != 0 || !strings.Contains(out, "s-tab") || strings.Contains(out, "s-alice") || !strings.HasSuffix(out, "1 session\n") {
		t.Fatalf("--after %s: exit %d\n%s", m[1], code, out)
	}

	// The producer column and filter: --producer '' is the orgmanager's.
	code, out, _ = runCLI("ipmapper", "sessions", "--url", base, "--org", "mobile")
	if code != 0 || !regexp.MustCompile(`(?m)^s-radius +mobile +radius +100\.64\.0\.1/32 `).MatchString(out) ||
		!regexp.MustCompile(`(?m)^s-mobile-override +mobile +- +100\.64\.0\.0/24 `).MatchString(out) {
		t.Fatalf("--org mobile: exit %d, want both producers in the PRODUCER column:\n%s", code, out)
	}
	for prod, want := range map[string]string{"radius": "s-radius", "": "s-mobile-override"} {
		code, out, _ = runCLI("ipmapper", "sessions", "--url", base, "--org", "mobile", "--producer", prod)
		if code != 0 || !strings.Contains(out, want) || !strings.HasSuffix(out, "1 session\n") {
			t.Fatalf("--org mobile --producer %q: exit %d, want only %s:\n%s", prod, code, want, out)
		}
	}
	if code, _, errOut := runCLI("ipmapper", "sessions", "--url", base, "--org", "mobile", "--producer", "Bad Name"); code != 2 || !strings.Contains(errOut, "invalid producer") {
		t.Fatalf("--producer 'Bad Name': exit %d %q", code, errOut)
	}

	code, out, _ = runCLI("ipmapper", "sessions", "--url", base, "--org", "nobody")
	if code != 0 || out != "no sessions\n" {
		t.Fatalf("--org nobody: exit %d %q", code, out)
	}

	// Refused by the IP Mapper (400): its error text, exit 2.
	code, _, errOut = runCLI("ipmapper", "sessions", "--url", base, "--id", "")
	if code != 2 || !strings.Contains(errOut, "answered 400: ") || !strings.Contains(errOut, "exactly one of") {
		t.Fatalf("--id '': exit %d %q, want 2 and the IP Mapper's 400 text", code, errOut)
	}

	// Nothing listening: what to check, exit 1.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	code, _, errOut = runCLI("ipmapper", "sessions", "--url", closed, "--org", "acme")
	if code != 1 || !strings.Contains(errOut, "connection refused") || !strings.Contains(errOut, "is `svc-pf ipmapper`") {
		t.Fatalf("nothing listening: exit %d %q", code, errOut)
	}

	// A --url whose path the listener does not serve: its 404 text, exit 2.
	code, _, errOut = runCLI("ipmapper", "sessions", "--url", base+"/metrics", "--org", "acme")
	if code != 2 || !strings.Contains(errOut, "answered 404") {
		t.Fatalf("--url of another path: exit %d %q", code, errOut)
	}
}

// TestIPMapperSessionsUsage: the command line is checked before any
// request, with exit status 2.
func TestIPMapperSessionsUsage(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "give one of --ip, --org, --username"},
		{[]string{"--ip", "192.0.2.1", "--org", "acme"}, "give one selector, not --ip and --org"},
		{[]string{"--ip", "not-an-ip"}, `--ip "not-an-ip" is not an IP address`},
		{[]string{"--org", "acme", "--limit", "0"}, "--limit must be 1..10000"},
		{[]string{"--org", "acme", "--url", "ftp://x"}, "want an http:// or https:// URL"},
		{[]string{"--org", "acme", "extra"}, "unexpected arguments"},
		{[]string{"--bogus"}, "flag provided but not defined"},
	} {
		code, _, errOut := runCLI(append([]string{"ipmapper", "sessions"}, tt.args...)...)
		if code != 2 || !strings.Contains(errOut, tt.want) {
			t.Errorf("ipmapper sessions %q: exit %d %q, want 2 and %q", tt.args, code, errOut, tt.want)
		}
	}
	if code, _, errOut := runCLI("ipmapper", "sessions", "--help"); code != 0 || !strings.Contains(errOut, "Exit status:") {
		t.Errorf("--help: exit %d %q", code, errOut)
	}
	if code, out, _ := runCLI("help"); code != 0 || !strings.Contains(out, "svc-pf ipmapper sessions") {
		t.Errorf("help does not list ipmapper sessions:\n%s", out)
	}
}
