package app

import (
	"testing"

	"github.com/svc-pf/svc-pf/internal/resolver/recursor"
	"github.com/svc-pf/svc-pf/internal/resolver/upstream"
)

// FuzzParseForwardZones: any forward_zones entry is accepted or refused
// with an error naming forward_zones, never a panic; what is accepted the
// recursor accepts too, and so does the forward-mode resolver's forwarder
// client (one parser for both modes).
func FuzzParseForwardZones(f *testing.F) {
	f.Add("corp.example", "192.0.2.1", "[2001:db8::1]:5353", false)
	f.Add(".", "127.0.0.1:53", "", true)
	f.Add("a..b", "nope", "0.0.0.0", false)
	f.Add("", "::ffff:192.0.2.1", "192.0.2.1:0", true)
	f.Add("corp.example", "::ffff:192.0.2.1", "192.0.2.1", true)
	f.Add("corp.example", "[fe80::1%eth0]:53", "", false)
	f.Fuzz(func(t *testing.T, zone, fw1, fw2 string, recurse bool) {
		in := []ForwardZoneConfig{{Zone: zone, Forwarders: []string{fw1}, Recurse: recurse}}
		if fw2 != "" {
			in[0].Forwarders = append(in[0].Forwarders, fw2)
		}
		fz, err := parseForwardZones(in)
		if err != nil {
			return
		}
		if _, err := recursor.New(recursor.Config{ForwardZones: fz}); err != nil {
			t.Fatalf("parseForwardZones accepted %+v, recursor.New refuses it: %v", in, err)
		}
		for _, z := range fz {
			if err := upstream.CheckForwarders(z.Servers, upstream.StrategyFastest); err != nil {
				t.Fatalf("parseForwardZones accepted %+v, the forwarder client refuses it: %v", in, err)
			}
		}
	})
}
