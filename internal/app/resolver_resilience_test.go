package app

import (
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/config"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// TestResolverResilienceConfig: forwarder_strategy, record_cache.serve_stale
// and record_cache.prefetch decode strictly, default as documented, and a
// bad value is refused naming its key.
func TestResolverResilienceConfig(t *testing.T) {
	c := DefaultResolverConfig()
	src := `
dns:
  record_cache: {serve_stale: 72h, prefetch: 5}
forwarders: [127.0.0.1:5300, 127.0.0.1:5301]
forwarder_strategy: ordered
`
	if err := config.Decode([]byte(src), &c); err != nil {
		t.Fatal(err)
	}
	s, err := c.parse()
	if err != nil {
		t.Fatal(err)
	}
	if s.strategy != upstream.StrategyOrdered || c.DNS.Cache.Record.ServeStale != 72*time.Hour || c.DNS.Cache.Record.Prefetch != 5 {
		t.Errorf("strategy %v, record cache %+v", s.strategy, c.DNS.Cache.Record)
	}
	// A partial record_cache keeps the other defaults.
	if c.DNS.Cache.Record.Entries != 1_000_000 {
		t.Errorf("entries %d", c.DNS.Cache.Record.Entries)
	}

	d := DefaultResolverConfig()
	d.Forwarders = []string{"127.0.0.1:5300"}
	s, err = d.parse()
	if err != nil {
		t.Fatal(err)
	}
	if s.strategy != upstream.StrategyFastest || d.DNS.Cache.Record.ServeStale != 24*time.Hour || d.DNS.Cache.Record.Prefetch != 2 {
		t.Errorf("defaults: strategy %v, record cache %+v", s.strategy, d.DNS.Cache.Record)
	}

	for src, key := range map[string]string{
		"forwarders: [127.0.0.1:5300]\nforwarder_strategy: random\n":                 "forwarder_strategy",
		"forwarders: [127.0.0.1:5300]\ndns: {record_cache: {serve_stale: 200h}}\n":   "dns: record_cache.serve_stale",
		"forwarders: [127.0.0.1:5300]\ndns: {record_cache: {serve_stale: 1500ms}}\n": "dns: record_cache.serve_stale",
		"forwarders: [127.0.0.1:5300]\ndns: {record_cache: {prefetch: -1}}\n":        "dns: record_cache.prefetch",
		"forwarders: [127.0.0.1:5300]\ndns: {record_cache: {prefetch: 2000000}}\n":   "dns: record_cache.prefetch",
	} {
		c := DefaultResolverConfig()
		if err := config.Decode([]byte(src), &c); err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		if _, err := c.parse(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%q: err %v, want one naming %s", src, err, key)
		}
	}
	// Not a key of the file: the packet cache's copy of prefetch.
	c = DefaultResolverConfig()
	if err := config.Decode([]byte("dns: {packet_cache: {prefetch: 3}}\n"), &c); err == nil {
		t.Error("packet_cache.prefetch accepted")
	}
}
