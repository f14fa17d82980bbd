package app

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/svc-pf/svc-pf/internal/config"
	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/rpz"
)

// The packaged services: each has an example configuration in
// examples/config/<command>.yaml, installed as /etc/svc-pf/<command>.yaml,
// and a unit packaging/systemd/svc-pf-<command>.service that runs it.
var packagedCommands = []string{"orgmanager", "ipmapper", "simulator", "resolver", "activity", "radius", "all", "feed-update", "feed-serve"}

// commandLine is the command a packaged name stands for: "feed-update" is
// `svc-pf feed update`, "feed-serve" `svc-pf feed serve`.
func commandLine(name string) string { return strings.ReplaceAll(name, "-", " ") }

const (
	examplesDir = "../../examples/config"
	unitsDir    = "../../packaging/systemd"
	// stateDir is the units' StateDirectory=: the one directory
	// ProtectSystem=strict leaves writable to the services.
	stateDir = "/var/lib/svc-pf"
)

// TestExampleConfigs decodes every example configuration strictly (an
// unknown key fails) into its command's config type, over its defaults, as
// the command does, and validates it as the command does before it starts,
// so that an example cannot rot as the config types change. The secrets
// the examples read from the environment without a default are set as the
// unit's EnvironmentFile would; everything else takes the examples' own
// ${NAME:-default} defaults.
func TestExampleConfigs(t *testing.T) {
	entries, err := os.ReadDir(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	clearExampleEnv(t)
	t.Setenv("SVCPF_SIMULATOR_API_KEY", "example-key")
	t.Setenv("SVCPF_RESOLVER_API_KEY", "example-key")
	t.Setenv("SVCPF_RADIUS_SECRET", "example-secret")
	var files []string
	for _, e := range entries {
		files = append(files, e.Name())
	}
	var want []string
	for _, c := range packagedCommands {
		want = append(want, c+".yaml")
	}
	slices.Sort(want)
	if !slices.Equal(files, want) {
		t.Fatalf("examples/config holds %v, want one file per packaged command: %v", files, want)
	}
	for _, cmd := range packagedCommands {
		t.Run(cmd, func(t *testing.T) {
			path := filepath.Join(examplesDir, cmd+".yaml")
			if err := validateExample(cmd, path); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
		})
	}
}

// clearExampleEnv empties every variable the examples name, so that the
// test's environment (a developer's shell, CI) cannot stand in for the
// examples' own defaults; an empty variable counts as unset.
func clearExampleEnv(t *testing.T) {
	t.Helper()
	ref := regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`)
	for _, cmd := range packagedCommands {
		data, err := os.ReadFile(filepath.Join(examplesDir, cmd+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ref.FindAllSubmatch(data, -1) {
			t.Setenv(string(m[1]), "")
		}
	}
}

// validateExample loads path as `svc-pf cmd -c path` would and runs the
// checks the command runs before it starts anything.
func validateExample(cmd, path string) error {
	node := func(f []feeds.FeedConfig, z []rpz.ZoneConfig) error {
		if _, err := feeds.New(feeds.Config{Feeds: f}); err != nil {
			return err
		}
		return rpz.Config{Zones: z}.Validate()
	}
	switch cmd {
	case "orgmanager":
		cfg := DefaultOrgManagerConfig()
		if err := config.Load(path, true, &cfg); err != nil {
			return err
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		return underStateDir("auth.bootstrap_token_file", cfg.Auth.BootstrapTokenFile)
	case "ipmapper":
		cfg := DefaultIPMapperConfig()
		if err := config.Load(path, true, &cfg); err != nil {
			return err
		}
		return cfg.Validate(true)
	case "simulator":
		cfg := DefaultSimulatorConfig()
		if err := config.Load(path, true, &cfg); err != nil {
			return err
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		return node(cfg.Feeds, cfg.RPZ)
	case "resolver":
		cfg := DefaultResolverConfig()
		if err := config.Load(path, true, &cfg); err != nil {
			return err
		}
		if _, err := cfg.parse(); err != nil {
			return err
		}
		if err := cfg.HTTP.Validate(); err != nil {
			return err
		}
		return node(cfg.Feeds, cfg.RPZ)
	case "activity":
		cfg := DefaultActivityConfig()
		if err := config.Load(path, true, &cfg); err != nil {
			return err
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		return underStateDir("data_dir", cfg.DataDir)
	case "radius":
		cfg := DefaultRadiusConfig()
		if err := config.Load(path, true, &cfg); err != nil {
			return err
		}
		return cfg.Validate()
	case "feed-update":
		cfg := DefaultFeedUpdateConfig()
		if err := config.Load(path, true, &cfg); err != nil {
			return err
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		for i, f := range cfg.FeedSources {
			cache := f.CacheDir
			if cache == "" {
				cache = feedbuild.CacheDirFor(f.Dir)
			}
			for key, dir := range map[string]string{"dir": f.Dir, "cache_dir": cache} {
				if err := underStateDir(fmt.Sprintf("feed_sources[%d].%s", i, key), dir); err != nil {
					return err
				}
			}
		}
		return nil
	case "feed-serve":
		cfg := DefaultFeedServeConfig()
		if err := config.Load(path, true, &cfg); err != nil {
			return err
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		// What it serves is what the feed-update example writes.
		var served []string
		for _, f := range cfg.Feeds {
			served = append(served, f.Dir)
		}
		served = append(served, cfg.Parents...)
		for _, d := range served {
			if err := underStateDir("a served directory", d); err != nil {
				return err
			}
		}
		return nil
	case "all":
		cfg := DefaultAllConfig()
		if err := config.Load(path, true, &cfg); err != nil {
			return err
		}
		if err := cfg.Validate(); err != nil {
			return err
		}
		if err := node(cfg.Feeds, cfg.RPZ); err != nil {
			return err
		}
		return underStateDir("data_dir", cfg.DataDir)
	}
	return os.ErrInvalid
}

// underStateDir: what a service writes must be where its unit lets it.
func underStateDir(key, path string) error {
	if path != stateDir && !strings.HasPrefix(path, stateDir+"/") {
		return &stateDirError{key: key, path: path}
	}
	return nil
}

type stateDirError struct{ key, path string }

func (e *stateDirError) Error() string {
	return e.key + " " + e.path + " is outside " + stateDir + ", the only directory the unit lets the service write"
}

// TestExampleConfigsRefuseWhatTheyMust: the check above is the commands'
// own, not a pass-through. The examples with a required secret fail
// without it, naming it, and a misspelt key fails naming the key.
func TestExampleConfigsRefuseWhatTheyMust(t *testing.T) {
	clearExampleEnv(t)
	if err := validateExample("simulator", filepath.Join(examplesDir, "simulator.yaml")); err == nil ||
		!strings.Contains(err.Error(), "api_keys[0]") {
		t.Fatalf("simulator.yaml without SVCPF_SIMULATOR_API_KEY: %v, want the empty api_keys[0] refused", err)
	}
	if err := validateExample("radius", filepath.Join(examplesDir, "radius.yaml")); err == nil ||
		!strings.Contains(err.Error(), "radius.clients[0].secret") {
		t.Fatalf("radius.yaml without SVCPF_RADIUS_SECRET: %v, want the empty secret refused", err)
	}
	data, err := os.ReadFile(filepath.Join(examplesDir, "orgmanager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "orgmanager.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(data), "max_dirty_age:", "max_dirty_ag:", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := validateExample("orgmanager", bad); err == nil || !strings.Contains(err.Error(), `"max_dirty_ag"`) {
		t.Fatalf("a misspelt key: %v, want it named", err)
	}
	if err := underStateDir("data_dir", "data"); err == nil {
		t.Fatal("a relative data_dir passed as under the state directory")
	}
}

// TestUnits: every packaged command has a unit that runs the installed
// binary on the installed example, as the svc-pf user, hardened, with its
// state in the state directory; only the units that serve DNS on port 53
// keep a capability, and only that one.
func TestUnits(t *testing.T) {
	entries, err := os.ReadDir(unitsDir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	var want []string
	for _, c := range packagedCommands {
		want = append(want, "svc-pf-"+c+".service")
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("packaging/systemd holds %v, want %v", got, want)
	}
	for _, cmd := range packagedCommands {
		t.Run(cmd, func(t *testing.T) {
			u := readUnit(t, filepath.Join(unitsDir, "svc-pf-"+cmd+".service"))
			caps := ""
			if cmd == "resolver" || cmd == "all" {
				caps = "CAP_NET_BIND_SERVICE"
			}
			reload := "/bin/kill -HUP $MAINPID"
			for key, want := range map[string]string{
				"ExecStart":               "/usr/bin/svc-pf " + commandLine(cmd) + " -c /etc/svc-pf/" + cmd + ".yaml",
				"ExecReload":              reload,
				"EnvironmentFile":         "-/etc/svc-pf/" + cmd + ".env",
				"User":                    "svc-pf",
				"StateDirectory":          "svc-pf",
				"WorkingDirectory":        stateDir,
				"ConfigurationDirectory":  "svc-pf",
				"ProtectSystem":           "strict",
				"ProtectHome":             "yes",
				"PrivateTmp":              "yes",
				"NoNewPrivileges":         "yes",
				"Restart":                 "on-failure",
				"SystemCallFilter":        "@system-service",
				"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX",
				"CapabilityBoundingSet":   caps,
				"AmbientCapabilities":     caps,
			} {
				// An empty want is an empty setting or none.
				if v, ok := u[key]; v != want || !ok && want != "" {
					t.Errorf("%s=%q (set: %v), want %q", key, v, ok, want)
				}
			}
		})
	}
}

var unitLine = regexp.MustCompile(`^([A-Za-z]+)=(.*)$`)

// readUnit reads a unit file's Key=Value lines (the last one of a key).
func readUnit(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := unitLine.FindStringSubmatch(sc.Text()); m != nil {
			kv[m[1]] = m[2]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return kv
}

// clusterServers are the NATS servers of packaging/nats/, which the
// examples' nats.url lists by default.
var clusterServers = []string{"nats-1.example.net", "nats-2.example.net", "nats-3.example.net"}

// TestNATSClusterConfigs: the three nats-server configurations of the
// cluster docs/operations.md sets up parse as nats-server parses them
// (its own config parser; CI also runs `nats-server -t` on them), form one
// JetStream cluster whose routes are the three servers, differ only in
// server_name, and the examples' default nats.url lists the same three
// servers.
func TestNATSClusterConfigs(t *testing.T) {
	var first string
	for i, host := range clusterServers {
		path := filepath.Join("../../packaging/nats", "nats-"+string(rune('1'+i))+".conf")
		opts, err := server.ProcessConfigFile(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		name := strings.SplitN(host, ".", 2)[0]
		if opts.ServerName != name || !opts.JetStream || opts.Port != 4222 || opts.Cluster.Name != "svcpf" ||
			opts.Cluster.Port != 6222 || len(opts.Routes) != 3 {
			t.Fatalf("%s: server_name %q jetstream %v port %d cluster %q:%d routes %v; want %s, JetStream, 4222, svcpf:6222, three routes",
				path, opts.ServerName, opts.JetStream, opts.Port, opts.Cluster.Name, opts.Cluster.Port, opts.Routes, name)
		}
		for j, r := range opts.Routes {
			if r.Hostname() != clusterServers[j] || r.Port() != "6222" {
				t.Errorf("%s: route %d is %s, want %s:6222", path, j, r, clusterServers[j])
			}
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		rest := strings.ReplaceAll(string(data), "nats-"+string(rune('1'+i))+" ", "nats-N ")
		rest = strings.ReplaceAll(rest, "server_name: nats-"+string(rune('1'+i)), "server_name: nats-N")
		rest = strings.ReplaceAll(rest, "of nats-"+string(rune('1'+i))+",", "of nats-N,")
		if first == "" {
			first = rest
		} else if rest != first {
			t.Errorf("%s differs from nats-1.conf in more than its server name", path)
		}
	}
	for _, cmd := range []string{"orgmanager", "ipmapper", "simulator", "resolver", "activity"} {
		data, err := os.ReadFile(filepath.Join(examplesDir, cmd+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		want := "${SVCPF_NATS_URL:-nats://" + strings.Join(clusterServers, ":4222,nats://") + ":4222}"
		if !strings.Contains(string(data), "url: "+want) {
			t.Errorf("%s.yaml: nats.url is not %s", cmd, want)
		}
	}
}

// TestPackagingListsEveryCommand: the package's maintainer scripts
// (which enable, stop and purge the units) and the install check (which
// looks for every unit and example and runs svc-pf check on each) name
// every packaged command, so that a new service cannot be packaged half.
func TestPackagingListsEveryCommand(t *testing.T) {
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join("../../packaging", path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	unitsLine := regexp.MustCompile(`(?m)^UNITS="([^"]*)"$`)
	for _, script := range []string{"debian/postinst", "debian/prerm", "debian/postrm"} {
		m := unitsLine.FindStringSubmatch(read(script))
		if m == nil {
			t.Errorf("%s: no UNITS=\"…\" line", script)
			continue
		}
		got := strings.Fields(m[1])
		for _, cmd := range packagedCommands {
			if !slices.Contains(got, "svc-pf-"+cmd+".service") {
				t.Errorf("%s: UNITS lacks svc-pf-%s.service", script, cmd)
			}
		}
	}
	ci := read("ci-install.sh")
	brace := "{" + strings.Join(packagedCommands, ",") + "}"
	for _, want := range []string{
		"/lib/systemd/system/svc-pf-" + brace + ".service",
		"/etc/svc-pf/" + brace + ".yaml",
		"for cmd in " + strings.Join(packagedCommands, " ") + "; do",
	} {
		if !strings.Contains(ci, want) {
			t.Errorf("ci-install.sh does not hold %q", want)
		}
	}
}
