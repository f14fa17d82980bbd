package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRadiusSectionChecked: `svc-pf check` (LoadChecked) refuses a bad
// radius: section under both commands, naming the keys, never quoting the
// secret; ${VAR} fills a secret.
func TestRadiusSectionChecked(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := "radius:\n  listen: [\"127.0.0.1:1813\"]\n  clients: [{network: 192.0.2.0/33, secret: hush-hush-value, org: \"\"}]\n  attributes: {username: bogus}\n"
	for cmd, run := range map[string]func(string) error{
		"radius": func(p string) error { _, err := LoadChecked(p, true, DefaultRadiusConfig); return err },
		"all":    func(p string) error { _, err := LoadChecked(p, true, DefaultAllConfig); return err },
	} {
		err := run(write(cmd+"-bad.yaml", "nats: {url: nats://127.0.0.1:4222}\n"+bad))
		if cmd == "all" {
			err = run(write(cmd+"-bad.yaml", bad))
		}
		if err == nil {
			t.Fatalf("%s: a bad radius section passed", cmd)
		}
		for _, want := range []string{"radius.clients[0].network", "radius.clients[0].org", "radius.attributes.username"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error lacks %q: %v", cmd, want, err)
			}
		}
		if strings.Contains(err.Error(), "hush-hush") {
			t.Errorf("%s: the secret is quoted: %v", cmd, err)
		}
	}
	// Clients without a listen address under svc-pf all.
	if _, err := LoadChecked(write("all-nolisten.yaml", "radius:\n  clients: [{network: 192.0.2.0/24, secret: x, org: acme}]\n"), true, DefaultAllConfig); err == nil ||
		!strings.Contains(err.Error(), "radius.listen") {
		t.Fatalf("clients without listen: %v", err)
	}
	t.Setenv("SVCPF_TEST_RADIUS_SECRET", "from-the-env")
	cfg, err := LoadChecked(write("radius-ok.yaml", "nats: {url: nats://127.0.0.1:4222}\nradius:\n  clients: [{network: 192.0.2.0/24, secret: \"${SVCPF_TEST_RADIUS_SECRET}\", org: acme}]\n"),
		true, DefaultRadiusConfig)
	if err != nil || cfg.Radius.Clients[0].Secret != "from-the-env" || cfg.Radius.Listen[0] != "127.0.0.1:1813" {
		t.Fatalf("a good file: %v %+v", err, cfg.Radius)
	}
}
