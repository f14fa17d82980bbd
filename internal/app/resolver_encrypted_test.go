package app

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/config"
)

// TestResolverEncryptedConfig: dns.dot, dns.doh, dns.doq, dns.doh3 and dns.tls decode
// strictly and are checked, each error naming its key; off by default.
func TestResolverEncryptedConfig(t *testing.T) {
	c := DefaultResolverConfig()
	if len(c.DNS.DoT)+len(c.DNS.DoH) != 0 {
		t.Fatal("encrypted listeners on by default")
	}
	for _, tc := range []struct {
		yaml, key string // key "": accepted
	}{
		{"dns: {listen: [127.0.0.1:53], dot: [127.0.0.1:853], doh: ['[::1]:443'], doq: [127.0.0.1:853], doh3: ['[::1]:443', 127.0.0.1:8443], tls: {cert_file: /c.pem, key_file: /k.pem, " +
			"client_id_suffix: dns.example.net, name: dns.example.net, max_connections_per_client: 8, max_queries_per_connection: 50, idle_timeout: 20s}}", ""},
		{"dns: {listen: [127.0.0.1:53], dot: [127.0.0.1:853]}", "dns.tls.cert_file"},
		{"dns: {listen: [127.0.0.1:53], doh: [localhost:443], tls: {cert_file: /c, key_file: /k}}", "dns.doh[0]"},
		{"dns: {listen: [127.0.0.1:53], tls: {idle_timeout: -1s}}", "idle_timeout"},
		{"dns: {listen: [127.0.0.1:53], doq: [127.0.0.1:853]}", "dns.tls.cert_file"},
		{"dns: {listen: [127.0.0.1:53], doq: [x], tls: {cert_file: /c, key_file: /k}}", "dns.doq[0]"},
		{"dns: {listen: [127.0.0.1:53], doh3: [127.0.0.1:443]}", "dns.tls.cert_file"},
		{"dns: {listen: [127.0.0.1:53], doh3: [127.0.0.1:443, 'dns.example:443'], tls: {cert_file: /c, key_file: /k}}", "dns.doh3[1]"},
		{"dns: {listen: [127.0.0.1:53], tls: {cert: /c}}", "cert"},
		{"dns: {listen: [127.0.0.1:53], dot: [127.0.0.1:853], tls: {client_id_suffix: dns.example.net, name: dns.example.net, max_connections_per_client: 8, " +
			"max_queries_per_connection: 50, idle_timeout: 20s, acme: {domains: [dns.example.net], email: ops@example.net, " +
			"directory: 'https://acme.example.net/dir', cache_dir: /var/lib/svc-pf/acme, ca_file: /ca.pem, renew_before: 240h}}}", ""},
		{"dns: {listen: [127.0.0.1:53], dot: [127.0.0.1:853], tls: {cert_file: /c, key_file: /k, acme: {domains: [a.example]}}}", "dns.tls.acme and dns.tls.cert_file"},
		{"dns: {listen: [127.0.0.1:53], dot: [127.0.0.1:853], tls: {acme: {}}}", "dns.tls.acme.domains"},
		{"dns: {listen: [127.0.0.1:53], dot: [127.0.0.1:853], tls: {acme: {domains: ['*.a.example']}}}", "dns.tls.acme.domains[0]"},
		{"dns: {listen: [127.0.0.1:53], dot: [127.0.0.1:853], tls: {acme: {domains: [a.example], directory: 'acme.example'}}}", "dns.tls.acme.directory"},
		{"dns: {listen: [127.0.0.1:53], dot: [127.0.0.1:853], tls: {acme: {domains: [a.example], renew_before: -1h}}}", "dns.tls.acme.renew_before"},
		{"dns: {listen: [127.0.0.1:53], dot: [127.0.0.1:853], tls: {acme: {domains: [a.example], staging: true}}}", "staging"},
	} {
		c := DefaultResolverConfig()
		c.Forwarders = []string{"127.0.0.1:5300"}
		err := config.Decode([]byte(tc.yaml), &c)
		if err == nil {
			_, err = c.parse()
		}
		if tc.key == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.yaml, err)
			} else if c.DNS.TLS.IdleTimeout != 20*time.Second || c.DNS.TLS.ClientIDSuffix != "dns.example.net" {
				t.Errorf("%s: decoded %+v", tc.yaml, c.DNS.TLS)
			} else if a := c.DNS.TLS.ACME; a != nil && (a.RenewBefore != 240*time.Hour || a.CacheDir != "/var/lib/svc-pf/acme" || len(a.Domains) != 1) {
				t.Errorf("%s: decoded acme %+v", tc.yaml, a)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: err %v, want one naming %s", tc.yaml, err, tc.key)
		}
	}
}

// TestACMECacheDirDefault: dns.tls.acme.cache_dir defaults under the data
// directory (svc-pf all) or the working directory (svc-pf resolver).
func TestACMECacheDirDefault(t *testing.T) {
	if got := resolverACME(&DNSACMEConfig{Domains: []string{"a.example"}}, "/var/lib/svc-pf").CacheDir; got != "/var/lib/svc-pf/acme" {
		t.Fatalf("under a data dir: %q", got)
	}
	if got := resolverACME(&DNSACMEConfig{Domains: []string{"a.example"}}, "").CacheDir; got != "acme" {
		t.Fatalf("no data dir: %q", got)
	}
	if got := resolverACME(&DNSACMEConfig{CacheDir: "/c"}, "/d").CacheDir; got != "/c" {
		t.Fatalf("set: %q", got)
	}
	if resolverACME(nil, "/d") != nil {
		t.Fatal("nil acme became a config")
	}
}

// TestACMEDocExample: the dns.tls.acme example of docs/resolver.md
// decodes strictly into `svc-pf resolver`'s configuration and checks.
func TestACMEDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/resolver.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "### Certificates from ACME")
	_, block, ok2 := strings.Cut(section, "```yaml\n")
	block, _, ok3 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 {
		t.Fatal("docs/resolver.md has no yaml example under Certificates from ACME")
	}
	c := DefaultResolverConfig()
	c.Forwarders = []string{"127.0.0.1:5300"}
	if err := config.Decode([]byte(block), &c); err != nil {
		t.Fatalf("the example: %v", err)
	}
	if _, err := c.parse(); err != nil {
		t.Fatalf("the example: %v", err)
	}
	if a := c.DNS.TLS.ACME; a == nil || len(a.Domains) != 1 || a.Email != "ops@example.net" {
		t.Fatalf("the example decodes to %+v", c.DNS.TLS)
	}
}

// TestDoH3NeedsRestart: a reload that changes dns.doh3 names it in the
// restart warning, as the other listen addresses.
func TestDoH3NeedsRestart(t *testing.T) {
	a, b := DefaultResolverConfig(), DefaultResolverConfig()
	b.DNS.DoH3 = []string{"127.0.0.1:443"}
	if got := restartKeys(a, b, []string{"allow_from", "forwarders", "log.level"}); len(got) != 1 || got[0] != "dns.doh3" {
		t.Fatalf("restartKeys = %v, want [dns.doh3]", got)
	}
}
