package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/access"
	"github.com/svc-pf/svc-pf/internal/orgstore"
)

// TestTokenCommand runs `svc-pf token create|list|revoke` on a real SQLite
// file named by an orgmanager config (-c), and checks what the database
// then verifies.
func TestTokenCommand(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "orgmanager.db")
	cfgFile := filepath.Join(dir, "orgmanager.yaml")
	if err := os.WriteFile(cfgFile, []byte("database: {url: \"sqlite:"+db+"\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI("token", "list", "-c", cfgFile)
	if code != 0 || out != "no tokens\n" {
		t.Fatalf("list of an empty database: %d %q %q", code, out, errOut)
	}
	code, out, errOut = runCLI("token", "create", "-c", cfgFile, "--role", "org-viewer", "--org", "acme", "--name", "noc screen", "--expires", "720h")
	tok := strings.TrimSpace(out)
	id, _, err := access.ParseToken(tok)
	if code != 0 || err != nil || !strings.Contains(errOut, "created token "+id+" (org-viewer of acme)") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	code, out, _ = runCLI("token", "list", "-c", cfgFile)
	if code != 0 || !regexp.MustCompile(`(?m)^`+id+` +org-viewer +acme +noc screen +\S+Z +\S+Z +-$`).MatchString(out) || strings.Contains(out, tok) {
		t.Fatalf("list:\n%s", out)
	}
	verify := func() error {
		store, err := orgstore.Open(context.Background(), orgstore.Config{URL: "sqlite:" + db})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		tokens, err := access.New(access.Config{Store: store})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tokens.Authenticate(context.Background(), tok)
		return err
	}
	if err := verify(); err != nil {
		t.Fatalf("the created token does not verify: %v", err)
	}
	if code, out, _ = runCLI("token", "revoke", "--database", "sqlite:"+db, id); code != 0 || out != "revoked "+id+"\n" {
		t.Fatalf("revoke: %d %q", code, out)
	}
	if err := verify(); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("after revoke: %v", err)
	}
	for _, args := range [][]string{
		{"token"},
		{"token", "create", "-c", cfgFile},
		{"token", "create", "-c", cfgFile, "--role", "god"},
		{"token", "create", "-c", cfgFile, "--role", "org-admin"},
		{"token", "revoke", "-c", cfgFile},
		{"token", "frobnicate"},
		{"token", "list", "-c", cfgFile, "extra"},
	} {
		if code, _, errOut := runCLI(args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message", args, code, errOut)
		}
	}
	if code, _, errOut := runCLI("token", "revoke", "-c", cfgFile, "0123456789abcdef"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("revoke of an unknown id: %d %q", code, errOut)
	}
	if code, _, errOut := runCLI("token", "list", "-c", filepath.Join(dir, "missing.yaml")); code != 1 || errOut == "" {
		t.Errorf("a missing config: %d %q", code, errOut)
	}
}

// TestTokenGenerate: `svc-pf token generate` prints a token in the
// verifiers' format, a new one each time, and stores nothing (it needs no
// database): a value for SVCPF_ADMIN_TOKEN.
func TestTokenGenerate(t *testing.T) {
	code, a, errOut := runCLI("token", "generate")
	if code != 0 || errOut != "" {
		t.Fatalf("generate: %d %q %q", code, a, errOut)
	}
	if _, _, err := access.ParseToken(strings.TrimSpace(a)); err != nil {
		t.Fatalf("generate printed %q, not a token: %v", a, err)
	}
	if _, b, _ := runCLI("token", "generate"); b == a {
		t.Fatalf("two calls printed the same token %q", a)
	}
	if code, _, errOut := runCLI("token", "generate", "--role", "admin"); code != 2 || !strings.Contains(errOut, "takes no arguments") {
		t.Fatalf("generate with arguments: %d %q", code, errOut)
	}
}
