package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/svc-pf/svc-pf/internal/app"
	"github.com/svc-pf/svc-pf/internal/config"
)

// The log section of each command's config.
func orgManagerLog(c app.OrgManagerConfig) app.LogConfig { return c.Log }
func ipMapperLog(c app.IPMapperConfig) app.LogConfig     { return c.Log }
func simulatorLog(c app.SimulatorConfig) app.LogConfig   { return c.Log }
func resolverLog(c app.ResolverConfig) app.LogConfig     { return c.Log }
func activityLog(c app.ActivityConfig) app.LogConfig     { return c.Log }
func radiusLog(c app.RadiusConfig) app.LogConfig         { return c.Log }
func allLog(c app.AllConfig) app.LogConfig               { return c.Log }
func feedUpdateLog(c app.FeedUpdateConfig) app.LogConfig { return c.Log }
func feedServeLog(c app.FeedServeConfig) app.LogConfig   { return c.Log }

// serviceRun is how a service command was asked to run.
type serviceRun struct {
	path     string
	explicit bool // the file was named: it must exist
	stderr   io.Writer
	debug    bool
	hup      <-chan os.Signal // SIGHUP: reload
}

// serve loads a service's config, builds its logger and its reloader
// (log.level for every command; the run function registers more) and
// runs it until ctx ends.
func serve[C any, P app.Checkable[C]](ctx context.Context, s serviceRun, def func() C, logOf func(C) app.LogConfig,
	run func(context.Context, C, *slog.Logger, *app.Reloader[C]) error) error {
	cfg := def()
	if err := config.Load(s.path, s.explicit, &cfg); err != nil {
		return err
	}
	lg := app.NewLogging(s.stderr, logOf(cfg), s.debug)
	rl, err := app.NewReloader(app.ReloaderConfig[C]{Path: s.path, Current: cfg, Logger: lg.Logger,
		Load: func(path string) (C, error) { return app.LoadChecked[C, P](path, true, def) }})
	if err != nil {
		return err
	}
	rl.Register(app.LogLevelStep(lg, logOf))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go rl.Run(ctx, s.hup)
	return run(ctx, cfg, lg.Logger, rl)
}

// checker is how `svc-pf check` loads and checks a file for cmd, as
// cmd's start would; false for a command it does not know.
func checker(cmd string) (func(path string) error, bool) {
	var check func(path string) error
	switch cmd {
	case "orgmanager":
		check = func(p string) error { _, err := app.LoadChecked(p, true, app.DefaultOrgManagerConfig); return err }
	case "ipmapper":
		check = func(p string) error { _, err := app.LoadChecked(p, true, app.DefaultIPMapperConfig); return err }
	case "simulator":
		check = func(p string) error { _, err := app.LoadChecked(p, true, app.DefaultSimulatorConfig); return err }
	case "resolver":
		check = func(p string) error { _, err := app.LoadChecked(p, true, app.DefaultResolverConfig); return err }
	case "activity":
		check = func(p string) error { _, err := app.LoadChecked(p, true, app.DefaultActivityConfig); return err }
	case "radius":
		check = func(p string) error { _, err := app.LoadChecked(p, true, app.DefaultRadiusConfig); return err }
	case "all":
		check = func(p string) error { _, err := app.LoadChecked(p, true, app.DefaultAllConfig); return err }
	case "feed update":
		check = func(p string) error { _, err := app.LoadChecked(p, true, app.DefaultFeedUpdateConfig); return err }
	case "feed serve":
		check = func(p string) error { _, err := app.LoadChecked(p, true, app.DefaultFeedServeConfig); return err }
	}
	return check, check != nil
}

// runCheck is `svc-pf check [-c FILE] COMMAND`: the file is read and
// checked as COMMAND's start would, and nothing is bound or connected.
// Exit 0 and "FILE: ok for COMMAND", or 1 and every error, one a line,
// each naming its key; 2 for a wrong command line.
func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("svc-pf check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var path string
	fs.StringVar(&path, "config", "", "the config file to check (default /etc/svc-pf/COMMAND.yaml)")
	fs.StringVar(&path, "c", "", "shorthand for --config")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: svc-pf check [-c FILE] COMMAND  (COMMAND: orgmanager, ipmapper, simulator, resolver, activity, radius, all, feed update, feed serve)")
		fs.PrintDefaults()
	}
	// "feed update" and "feed serve" are each one command in two words.
	args = slices.Clone(args)
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "feed" && (args[i+1] == "update" || args[i+1] == "serve") {
			args = slices.Replace(args, i, i+2, "feed "+args[i+1])
			break
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	// The command may come before the flags too: check resolver -c FILE.
	if fs.NArg() > 1 {
		cmd := fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return 2
		}
		args = append([]string{cmd}, fs.Args()...)
	} else {
		args = fs.Args()
	}
	if len(args) != 1 {
		fs.Usage()
		return 2
	}
	cmd := args[0]
	check, ok := checker(cmd)
	if !ok {
		fmt.Fprintf(stderr, "svc-pf check: unknown command %q; want orgmanager, ipmapper, simulator, resolver, activity, radius, all, feed update or feed serve\n", cmd)
		return 2
	}
	if path == "" {
		path = "/etc/svc-pf/" + strings.ReplaceAll(cmd, " ", "-") + ".yaml"
	}
	if err := check(path); err != nil {
		msg := err.Error()
		// config.Load names the file already; a Check's errors do not.
		msg = strings.TrimPrefix(msg, "config "+path+": ")
		for line := range strings.SplitSeq(msg, "\n") {
			fmt.Fprintf(stderr, "%s: %s\n", path, line)
		}
		fmt.Fprintf(stderr, "%s: not valid for %s\n", path, cmd)
		return 1
	}
	fmt.Fprintf(stdout, "%s: ok for %s\n", path, cmd)
	return 0
}
