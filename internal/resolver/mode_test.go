package resolver_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/resolver"
	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// TestModeConfig: New refuses an unknown mode and a forward mode without
// forwarders; recursive mode needs none, passes the recursor's config
// (its own checks included), refuses SetForwarders naming a restart, and
// reports no forwarders.
func TestModeConfig(t *testing.T) {
	listen := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}
	eng := testEngine(t, nil)
	for _, tc := range []struct {
		cfg  resolver.Config
		want string
	}{
		{resolver.Config{Listen: listen, Engine: eng, Mode: 7}, "mode 7 is not forward or recursive"},
		{resolver.Config{Listen: listen, Engine: eng}, "forwarders: at least one"},
		{resolver.Config{Listen: listen, Engine: eng, Mode: resolver.ModeRecursive,
			Recursor: recursor.Config{TrustAnchors: "example. IN A 192.0.2.1\n"}}, "recursor"},
	} {
		if _, err := resolver.New(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(mode %v) = %v, want an error with %q", tc.cfg.Mode, err, tc.want)
		}
	}
	r, err := resolver.New(resolver.Config{Listen: listen, Engine: eng, Mode: resolver.ModeRecursive,
		Recursor: recursor.Config{DNSSEC: recursor.ModeValidate}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.Mode() != resolver.ModeRecursive || r.Mode().String() != "recursive" {
		t.Errorf("Mode() = %v", r.Mode())
	}
	if err := r.SetForwarders([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:53")}, upstream.StrategyFastest); err == nil ||
		!strings.Contains(err.Error(), "needs a restart") {
		t.Errorf("SetForwarders in recursive mode: %v", err)
	}
	if fw, _ := r.Forwarders(); len(fw) != 0 {
		t.Errorf("Forwarders() in recursive mode: %v", fw)
	}
	for _, s := range []string{"", "forward", "recursive", "Recursive"} {
		m, err := resolver.ParseMode(s)
		if (err != nil) != (s == "Recursive") || err == nil && m.String() != map[string]string{"": "forward"}[s]+s {
			t.Errorf("ParseMode(%q) = %v, %v", s, m, err)
		}
	}
}
