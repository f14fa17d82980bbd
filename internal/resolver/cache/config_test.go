package cache_test

import (
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/svc-pf/svc-pf/internal/resolver/cache"
)

func TestConfigYAML(t *testing.T) {
	// Embedded inline, as the resolver's config does.
	var doc struct {
		Cache cache.Config `yaml:",inline"`
	}
	doc.Cache = cache.DefaultConfig()
	src := `
packet_cache:
  entries: 1000
  negative_ttl: 30s
record_cache:
  min_ttl: 5s
`
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	p, r := doc.Cache.Packet, doc.Cache.Record
	if p.Entries != 1000 || p.NegativeTTL != 30*time.Second || p.MaxTTL != 24*time.Hour || p.MaxBytes != 512<<20 {
		t.Errorf("packet %+v", p)
	}
	if r.MinTTL != 5*time.Second || r.Entries != 1_000_000 || r.NegativeTTL != time.Hour {
		t.Errorf("record %+v", r)
	}
	if err := doc.Cache.Validate(); err != nil {
		t.Error(err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mod    func(*cache.Config)
		errKey string
	}{
		{"defaults", func(*cache.Config) {}, ""},
		{"no packet entries", func(c *cache.Config) { c.Packet.Entries = 0 }, "packet_cache.entries"},
		{"negative max_bytes", func(c *cache.Config) { c.Packet.MaxBytes = -1 }, "packet_cache.max_bytes"},
		{"zero max_ttl", func(c *cache.Config) { c.Packet.MaxTTL = 0 }, "packet_cache.max_ttl"},
		{"fractional TTL", func(c *cache.Config) { c.Packet.NegativeTTL = 1500 * time.Millisecond }, "packet_cache.negative_ttl"},
		{"TTL above 2^31-1 s", func(c *cache.Config) { c.Packet.ServfailTTL = 1 << 31 * time.Second }, "packet_cache.servfail_ttl"},
		{"negative shards", func(c *cache.Config) { c.Packet.Shards = -1 }, "packet_cache.shards"},
		{"no record entries", func(c *cache.Config) { c.Record.Entries = -5 }, "record_cache.entries"},
		{"min above max", func(c *cache.Config) { c.Record.MinTTL = 2 * time.Hour; c.Record.MaxTTL = time.Hour }, "record_cache.min_ttl"},
		{"negative negative_ttl", func(c *cache.Config) { c.Record.NegativeTTL = -time.Second }, "record_cache.negative_ttl"},
		{"serve_stale over a week", func(c *cache.Config) { c.Record.ServeStale = 8 * 24 * time.Hour }, "record_cache.serve_stale"},
		{"serve_stale fraction", func(c *cache.Config) { c.Record.ServeStale = 1500 * time.Millisecond }, "record_cache.serve_stale"},
		{"negative serve_stale", func(c *cache.Config) { c.Record.ServeStale = -time.Second }, "record_cache.serve_stale"},
		{"negative prefetch", func(c *cache.Config) { c.Record.Prefetch = -1 }, "record_cache.prefetch"},
		{"serve_stale off", func(c *cache.Config) { c.Record.ServeStale = 0; c.Record.Prefetch = 0 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := cache.DefaultConfig()
			tt.mod(&cfg)
			err := cfg.Validate()
			if tt.errKey == "" {
				if err != nil {
					t.Fatal(err)
				}
				if _, err := cache.NewPacket(cfg.Packet); err != nil {
					t.Error(err)
				}
				if _, err := cache.NewRecord(cfg.Record); err != nil {
					t.Error(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errKey) {
				t.Fatalf("err = %v, want one naming %s", err, tt.errKey)
			}
			_, perr := cache.NewPacket(cfg.Packet)
			_, rerr := cache.NewRecord(cfg.Record)
			if perr == nil && rerr == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}
