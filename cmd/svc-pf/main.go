// Command svc-pf is the one binary of the svc-pf platform: each subcommand
// runs one service (the orgmanager, the IP Mapper, the simulator, the
// resolver) or a tool (feed), and `all` runs the services together around
// an embedded NATS server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/svc-pf/svc-pf/internal/app"
	// The IANA time zone database is built in, so every machine (orgmanager and
	// nodes) validates and evaluates settings schedules alike, whatever its
	// /usr/share/zoneinfo holds.
	_ "time/tzdata"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise
// the module version from the build info is used.
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `svc-pf — subscriber-aware DNS content filtering

Usage:
  svc-pf <command> [--config FILE] [--debug]
  svc-pf check [--config FILE] <command>
  svc-pf feed build|update|serve|lookup …
  svc-pf ipmapper sessions --ip ADDR|--org ORG|--username NAME [--url URL] [--token-file FILE] [--json]
  svc-pf token create --role R [--org ORG] [--name N] [--expires D] | list | revoke ID  [-c FILE] | generate
  svc-pf --version

Commands:
  orgmanager   REST API for organisations, their IP prefixes, per-CIDR overrides and settings documents;
               deploys sessions to the IP Mapper and settings to the nodes; the web console at /ui/
               (default config /etc/svc-pf/orgmanager.yaml)
  ipmapper     the IP Mapper: the session table (address → subscriber) as a NATS micro service
               (default config /etc/svc-pf/ipmapper.yaml); "ipmapper sessions" shows what a running one holds
               (--help for its options)
  simulator    a name's categories and a subscriber's filtering verdict with its reason, over HTTP and NATS,
               through Lua workers (default config /etc/svc-pf/simulator.yaml; --test-and-exit)
  resolver     the filtering DNS server (UDP and TCP) and its PowerDNS-compatible statistics API
               (default config /etc/svc-pf/resolver.yaml)
  activity     the activity collector: stores the nodes' activity from the stream ACTIVITY into per-day SQLite
               files or PostgreSQL (default config /etc/svc-pf/activity.yaml; docs/activity.md)
  radius       RADIUS accounting in: Start/Interim-Update/Stop from the NASes become the IP Mapper's sessions
               (producer radius), answered once stored (default config /etc/svc-pf/radius.yaml; docs/radius.md)
  all          every service above in one process around an embedded NATS server (default config /etc/svc-pf/all.yaml);
               the console at http://127.0.0.1:8080/ui/, its admin token in <data_dir>/admin.token
  check        validate a command's config file as its start would (strict keys, ${VAR} expansion, every
               section) without binding or connecting: "FILE: ok for COMMAND", or every error and exit 1
               (svc-pf check -c FILE resolver; docs/configuration.md). SIGHUP makes a running service re-read
               its file: log.level; for resolver and all forwarders, allow_from, feeds and rpz; for simulator feeds and rpz;
               for feed serve the directories it serves
  feed         build a category feed from filter lists (files or URLs), keep feeds up to date (feed update),
               serve feed directories over HTTP to the nodes (feed serve -c /etc/svc-pf/feed-serve.yaml), look a name up
  token        create, list and revoke the API's bearer tokens on the orgmanager's database
               (-c the orgmanager's config; --help for its options; docs/access.md)
  version      print the version
`

func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return formatVersion(version, bi)
}

// formatVersion is the version an operator reports: the release (the -X
// flag, else the module version, else "dev") and the commit it was built
// from, when the build recorded one, so that two "dev" builds can be told
// apart.
func formatVersion(release string, bi *debug.BuildInfo) string {
	if release == "" {
		release = "dev"
		if bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			release = bi.Main.Version
		}
	}
	if bi == nil {
		return release
	}
	var commit, modified, when string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		case "vcs.time":
			when = ", " + s.Value
		}
	}
	if commit == "" {
		return release
	}
	return release + " (commit " + commit[:min(len(commit), 12)] + modified + when + ")"
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, "svc-pf", buildVersion())
		return 0
	case "help", "--help", "-help", "-h":
		fmt.Fprint(stdout, usage)
		return 0
	case "feed":
		return runFeed(ctx, rest, stdout, stderr)
	case "check":
		return runCheck(rest, stdout, stderr)
	case "token":
		return runToken(ctx, rest, stdout, stderr)
	case "ipmapper":
		if len(rest) > 0 && rest[0] == "sessions" {
			return runIPMapperSessions(ctx, rest[1:], stdout, stderr)
		}
	case "orgmanager", "simulator", "resolver", "activity", "radius", "all":
	default:
		fmt.Fprintf(stderr, "svc-pf: unknown command %q\n\n%s", cmd, usage)
		return 2
	}

	fs := flag.NewFlagSet("svc-pf "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	defaultPath := "/etc/svc-pf/" + cmd + ".yaml"
	var configPath string
	fs.StringVar(&configPath, "config", defaultPath, "path of the YAML config file")
	fs.StringVar(&configPath, "c", defaultPath, "shorthand for --config")
	debugLog := fs.Bool("debug", false, "force debug-level logging; overrides log.level")
	showVersion := fs.Bool("version", false, "print the version and exit")
	var testAndExit *bool
	if cmd == "simulator" {
		testAndExit = fs.Bool("test-and-exit", false, "send one lookup_domain for a fixed sample domain and exit; non-zero exit when it fails")
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "svc-pf %s: unexpected arguments %q\n", cmd, fs.Args())
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "svc-pf", buildVersion())
		return 0
	}
	// A file named on the command line must exist; the default may be absent.
	explicit := false
	fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" || f.Name == "c" })

	v := app.Version(buildVersion())
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	svc := serviceRun{path: configPath, explicit: explicit, stderr: stderr, debug: *debugLog, hup: hup}
	var err error
	switch cmd {
	case "orgmanager":
		err = serve(ctx, svc, app.DefaultOrgManagerConfig, orgManagerLog, func(ctx context.Context, cfg app.OrgManagerConfig, log *slog.Logger, _ *app.Reloader[app.OrgManagerConfig]) error {
			return app.RunOrgManager(ctx, cfg, v, log)
		})
	case "ipmapper":
		err = serve(ctx, svc, app.DefaultIPMapperConfig, ipMapperLog, func(ctx context.Context, cfg app.IPMapperConfig, log *slog.Logger, _ *app.Reloader[app.IPMapperConfig]) error {
			return app.RunIPMapper(ctx, cfg, v, log)
		})
	case "simulator":
		err = serve(ctx, svc, app.DefaultSimulatorConfig, simulatorLog, func(ctx context.Context, cfg app.SimulatorConfig, log *slog.Logger, rl *app.Reloader[app.SimulatorConfig]) error {
			return app.RunSimulator(ctx, cfg, v, log, *testAndExit, rl)
		})
	case "resolver":
		err = serve(ctx, svc, app.DefaultResolverConfig, resolverLog, func(ctx context.Context, cfg app.ResolverConfig, log *slog.Logger, rl *app.Reloader[app.ResolverConfig]) error {
			return app.RunResolver(ctx, cfg, v, log, rl)
		})
	case "activity":
		err = serve(ctx, svc, app.DefaultActivityConfig, activityLog, func(ctx context.Context, cfg app.ActivityConfig, log *slog.Logger, _ *app.Reloader[app.ActivityConfig]) error {
			return app.RunActivity(ctx, cfg, v, log)
		})
	case "radius":
		err = serve(ctx, svc, app.DefaultRadiusConfig, radiusLog, func(ctx context.Context, cfg app.RadiusConfig, log *slog.Logger, _ *app.Reloader[app.RadiusConfig]) error {
			return app.RunRadius(ctx, cfg, v, log)
		})
	case "all":
		err = serve(ctx, svc, app.DefaultAllConfig, allLog, func(ctx context.Context, cfg app.AllConfig, log *slog.Logger, rl *app.Reloader[app.AllConfig]) error {
			return app.RunAll(ctx, cfg, v, log, rl)
		})
	}
	if err != nil {
		fmt.Fprintf(stderr, "svc-pf %s: %v\n", cmd, err)
		return 1
	}
	return 0
}
