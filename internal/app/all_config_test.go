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

// TestSimulatorPProfKey: http.pprof sits beside http.address in the
// simulator's section (and under svc-pf all's simulator:), off unless set.
func TestSimulatorPProfKey(t *testing.T) {
	cfg := DefaultSimulatorConfig()
	if cfg.HTTP.PProf {
		t.Fatal("http.pprof is on by default")
	}
	if err := config.Decode([]byte("http: {address: 127.0.0.1:9081, pprof: true}\n"), &cfg); err != nil {
		t.Fatal(err)
	}
	if !cfg.HTTP.PProf || cfg.HTTP.Address != "127.0.0.1:9081" || cfg.Validate() != nil {
		t.Fatalf("decoded %+v: %v", cfg.HTTP, cfg.Validate())
	}
	all := DefaultAllConfig()
	if err := config.Decode([]byte("simulator:\n  http: {pprof: true}\n"), &all); err != nil {
		t.Fatal(err)
	}
	if !all.Simulator.HTTP.PProf || all.Simulator.HTTP.Address != "127.0.0.1:8081" {
		t.Fatalf("svc-pf all's simulator.http: %+v", all.Simulator.HTTP)
	}
}
