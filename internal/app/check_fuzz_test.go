package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/svc-pf/svc-pf/internal/config"
)

// FuzzConfigFiles feeds arbitrary files to every command's config
// loading and checking, as `svc-pf check`, a start and a reload run them
// (strict YAML, ${VAR} expansion, each command's Check): never a panic,
// and the verdict is the same on a second reading (a check keeps no state
// between files). The seeds are the packaged example configurations.
func FuzzConfigFiles(f *testing.F) {
	examples, err := filepath.Glob(filepath.Join("..", "..", "examples", "config", "*.yaml"))
	if err != nil || len(examples) == 0 {
		f.Fatalf("no example configs: %v", err)
	}
	for _, p := range examples {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("feed_sources: [{name: x, dir: d, interval: 1h, sources: [\"adblock:1:https://u:p@x/l\"]}]\n"))
	f.Add([]byte("forwarders: [\"${NOPE:-127.0.0.1:53}\"]\nallow_from: [10.0.0.0/8, nope]\n"))
	f.Add([]byte("listen: \"[::1]:08087\"\nfeeds: [{name: ..a, dir: \"${D:-/x}\"}, {name: t, dir: ''}]\nparents: ['']\n"))
	f.Add([]byte("radius: {listen: [\":1813\"], clients: [{network: 192.0.2.0/24, secret: s, org: o}], realms: {x: \"\"}}\n"))
	f.Add([]byte("mode: recursive\ndont_query: [10.0.0.0/8, 192.0.2.7, 'fe80::1%eth0', x]\nforward_zones: [{zone: c.example, forwarders: [192.0.2.1]}]\n"))
	checks := map[string]func([]byte) string{
		"orgmanager":  checkBytes(DefaultOrgManagerConfig),
		"ipmapper":    checkBytes(DefaultIPMapperConfig),
		"simulator":   checkBytes(DefaultSimulatorConfig),
		"resolver":    checkBytes(DefaultResolverConfig),
		"activity":    checkBytes(DefaultActivityConfig),
		"radius":      checkBytes(DefaultRadiusConfig),
		"all":         checkBytes(DefaultAllConfig),
		"feed update": checkBytes(DefaultFeedUpdateConfig),
		"feed serve":  checkBytes(DefaultFeedServeConfig),
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for cmd, check := range checks {
			if a, b := check(data), check(data); a != b {
				t.Fatalf("%s: two checks of one file disagree:\n%s\n%s", cmd, a, b)
			}
		}
	})
}

// checkBytes is LoadChecked on a file's contents: "" when accepted, else
// the error.
func checkBytes[C any, P Checkable[C]](def func() C) func([]byte) string {
	return func(data []byte) string {
		cfg := def()
		err := config.Decode(data, &cfg)
		if err == nil {
			err = P(&cfg).Check()
		}
		if err == nil {
			return ""
		}
		if err.Error() == "" {
			return "an error without a message"
		}
		return err.Error()
	}
}
