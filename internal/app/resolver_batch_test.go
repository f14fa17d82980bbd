package app

import (
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/resolver"
)

// TestResolverUDPBatchConfig: dns.udp_batch is accepted from 0 (the
// default) to resolver.MaxUDPBatch and refused, naming the key, outside.
func TestResolverUDPBatchConfig(t *testing.T) {
	for _, tc := range []struct {
		batch int
		ok    bool
	}{{0, true}, {1, true}, {64, true}, {resolver.MaxUDPBatch, true}, {-1, false}, {resolver.MaxUDPBatch + 1, false}} {
		c := DefaultResolverConfig()
		c.Forwarders = []string{"127.0.0.1:5300"}
		c.DNS.UDPBatch = tc.batch
		_, err := c.parse()
		if tc.ok && err != nil {
			t.Errorf("udp_batch %d: %v", tc.batch, err)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), "dns.udp_batch")) {
			t.Errorf("udp_batch %d: err %v, want a dns.udp_batch error", tc.batch, err)
		}
	}
}
