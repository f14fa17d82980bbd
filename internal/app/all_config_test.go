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

// TestAllRefusesResolverActivity: under `svc-pf all` the top-level
// activity section is the one read; a resolver.activity — an attempt to
// turn activity off there included — is refused with the key to set,
// and so is an orgmanager.activity.store (the reports read the
// collector's store).
func TestAllRefusesResolverActivity(t *testing.T) {
	for yaml, want := range map[string]string{
		"resolver:\n  activity: {enabled: false}\n":             "resolver.activity",
		"resolver:\n  activity: {client_ip: none}\n":            "resolver.activity",
		"orgmanager:\n  activity: {store: {url: dir:/tmp/x}}\n": "orgmanager.activity.store",
	} {
		cfg := DefaultAllConfig()
		cfg.Resolver.Forwarders = []string{"127.0.0.1:53"}
		if err := config.Decode([]byte(yaml), &cfg); err != nil {
			t.Fatalf("%q: %v", yaml, err)
		}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want a refusal naming %s", yaml, err, want)
		}
	}
	cfg := DefaultAllConfig()
	cfg.Resolver.Forwarders = []string{"127.0.0.1:53"}
	if err := config.Decode([]byte("activity: {enabled: false, client_ip: hash}\n"), &cfg); err != nil || cfg.Validate() != nil {
		t.Fatalf("the top-level section: %v %v", err, cfg.Validate())
	}
}
