package app

import (
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/config"
)

// TestAllRefusesResolverHTTP: under `svc-pf all` the resolver's API is on
// the node listener, so resolver.http would be read by nobody; the file is
// refused with the key to set instead, while a file without it loads.
func TestAllRefusesResolverHTTP(t *testing.T) {
	ok := DefaultAllConfig()
	ok.Resolver.Forwarders = []string{"127.0.0.1:53"} // independent of this machine's resolv.conf
	if err := ok.Validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, yaml := range []string{
		"resolver:\n  http: {address: 127.0.0.1:9053}\n",
		"resolver:\n  http:\n    tls: {cert_file: c.pem, key_file: k.pem}\n",
	} {
		cfg := DefaultAllConfig()
		cfg.Resolver.Forwarders = []string{"127.0.0.1:53"}
		if err := config.Decode([]byte(yaml), &cfg); err != nil {
			t.Fatalf("%q: %v", yaml, err)
		}
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "resolver.http") || !strings.Contains(err.Error(), "node.http") {
			t.Errorf("%q: %v, want a refusal naming resolver.http and node.http", yaml, err)
		}
	}
}
