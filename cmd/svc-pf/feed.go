package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/svc-pf/svc-pf/internal/app"
	"github.com/svc-pf/svc-pf/internal/config"
	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

const feedUsage = `Usage:
  svc-pf feed build --dir DIR --name NAME [--title CODE=TITLE]… [--snapshot] [fetch options] SOURCE…
  svc-pf feed update -c FILE [--once] [--debug]
  svc-pf feed serve -c FILE [--debug]
  svc-pf feed serve --dir DIR [--dir DIR]… [--listen ADDR] [--debug]
  svc-pf feed lookup --dir DIR|--url URL NAME[/PATH]

SOURCE is FORMAT:CODE:PATH: FORMAT one of hosts, domains, adblock, rpz, csv;
CODE a category code 0–65535 (or code,code…); csv sources take "-" (csv:-:PATH),
their lines carry the codes. PATH is a file or an http(s):// URL, fetched
conditionally; a failed or suspicious fetch keeps the last good copy.
Fetch options: --max-bytes N --timeout D --idle-timeout D --attempts N
--max-shrink SHARE --ca-file PEM --cache-dir DIR.
update rebuilds the feeds of the file's feed_sources: on their intervals
(--once: one round; exit 1 if a build failed or a source was stale);
SIGHUP re-reads log.level (a changed feed_sources needs a restart).
serve publishes feed directories over HTTP, each feed at /NAME/: from the
file's feeds: (name, dir) and parents: (directories of feed directories),
or from --dir (a feed at /BASENAME/, or a parent), not both; with -c,
SIGHUP re-reads feeds:, parents: and log.level (listen needs a restart).
See docs/feeds.md.
`

// runFeed runs `svc-pf feed …`: one-shot tools, except update and serve,
// which run until ctx ends (SIGTERM, SIGINT).
func runFeed(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, feedUsage)
		return 2
	}
	switch args[0] {
	case "build":
		return feedBuild(ctx, args[1:], stdout, stderr)
	case "update":
		return feedUpdate(ctx, args[1:], stderr)
	case "serve":
		return feedServe(ctx, args[1:], stderr)
	case "lookup":
		return feedLookup(ctx, args[1:], stdout, stderr)
	case "help", "--help", "-help", "-h":
		fmt.Fprint(stdout, feedUsage)
		return 0
	}
	fmt.Fprintf(stderr, "svc-pf feed: unknown command %q\n\n%s", args[0], feedUsage)
	return 2
}

// parseInterleaved parses flags wherever they stand among the positional
// arguments (`build SOURCE… --snapshot` as well as `build --snapshot
// SOURCE…`); the flag package alone stops at the first positional one.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// repeated is a flag that may be given more than once.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func feedBuild(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("svc-pf feed build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the feed directory (created if missing)")
	name := fs.String("name", "", "the feed's name (must match the directory's feed.json)")
	snapshot := fs.Bool("snapshot", false, "write a snapshot even if a delta would do")
	titles := map[uint16]string{}
	fs.Func("title", "CODE=TITLE: the title of a category code (repeatable; CODE= removes it)", func(v string) error {
		code, title, ok := strings.Cut(v, "=")
		n, err := strconv.ParseUint(code, 10, 16)
		if !ok || err != nil {
			return fmt.Errorf("want CODE=TITLE with CODE from 0 to 65535, e.g. 1=advertising")
		}
		titles[uint16(n)] = title
		return nil
	})
	var fc feedbuild.FetchConfig
	fs.Int64Var(&fc.MaxBytes, "max-bytes", 0, "URL sources: refuse a list longer than this many bytes (default 256 MiB)")
	fs.DurationVar(&fc.Timeout, "timeout", 0, "URL sources: bound one attempt, request to last byte (default 5m)")
	fs.DurationVar(&fc.IdleTimeout, "idle-timeout", 0, "URL sources: cut an attempt when the server sends nothing this long (default 30s)")
	fs.IntVar(&fc.Attempts, "attempts", 0, "URL sources: tries on transient failures (default 4; 1 = no retry)")
	fs.Float64Var(&fc.MaxShrink, "max-shrink", 0, "URL sources: refuse a list that lost more than this share of its entries (default 0.5; 1 = off)")
	fs.StringVar(&fc.CAFile, "ca-file", "", "URL sources: PEM CA certificates trusted beside the system's")
	cacheDir := fs.String("cache-dir", "", "URL sources: where their last good copies are kept (default .<DIR's base>.sources beside DIR)")
	positional, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg := feedbuild.BuildConfig{Dir: *dir, Name: *name, Titles: titles, Snapshot: *snapshot, CacheDir: *cacheDir}
	for _, a := range positional {
		src, err := feedbuild.ParseSource(a)
		if err != nil {
			fmt.Fprintf(stderr, "svc-pf feed build: %v\n", err)
			return 2
		}
		cfg.Sources = append(cfg.Sources, src)
	}
	if cfg.Fetcher, err = feedbuild.NewFetcher(fc); err != nil {
		fmt.Fprintf(stderr, "svc-pf feed build: %v\n", strings.NewReplacer("\n", "; ").Replace(err.Error()))
		return 2
	}
	res, err := feedbuild.Build(ctx, cfg)
	if res != nil {
		printBuild(stdout, res)
	}
	if err != nil {
		fmt.Fprintf(stderr, "svc-pf feed build: %v\n", err)
		return 1
	}
	return 0
}

func printBuild(w io.Writer, res *feedbuild.BuildResult) {
	for _, s := range res.Sources {
		if s.Fetch != nil {
			fmt.Fprintf(w, "source %s: %s; %s\n", s.Source.Redacted(), &s.Stats, s.Fetch)
			continue
		}
		fmt.Fprintf(w, "source %s: %s\n", s.Source, &s.Stats)
	}
	fmt.Fprintf(w, "total: %s; %d distinct keys\n", &res.Total, res.Keys)
	if res.Manifest == nil {
		return
	}
	if res.CodesWritten {
		fmt.Fprintf(w, "%s updated\n", feed.CodesFile)
	}
	if res.Written.Version == 0 {
		fmt.Fprintf(w, "no change: the feed stays at version %d, no version written\n", res.Manifest.Latest())
		return
	}
	v := res.Written
	fmt.Fprintf(w, "version %d: %s, a %s of %s; keys %d added, %d changed, %d removed; %d bytes (a delta: %d, a snapshot: %d)\n",
		v.Version, v.File, v.Type, plural(v.Entries, "line"), res.Added, res.Changed, res.Removed,
		fileSize(res), res.DeltaSize, res.SnapshotSize)
	m := res.Manifest
	fmt.Fprintf(w, "manifest: snapshot %d%s", m.Versions[0].Version, versionRange(", delta", m.Versions[1:]))
	fmt.Fprintf(w, "%s\n", versionRange("; catch-up delta", m.CatchUp))
	if len(res.Pruned) > 0 {
		fmt.Fprintf(w, "pruned: %s\n", strings.Join(res.Pruned, " "))
	}
	if res.PruneSkipped != "" {
		fmt.Fprintf(w, "pruning: %s\n", res.PruneSkipped)
	}
}

func fileSize(res *feedbuild.BuildResult) int64 {
	if res.Written.Type == feed.TypeSnapshot {
		return res.SnapshotSize
	}
	return res.DeltaSize
}

// versionRange is ", deltas 2–5", ", delta 2" or "" for the versions.
func versionRange(prefix string, vs []feed.Version) string {
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("%s %d", prefix, vs[0].Version)
	}
	return fmt.Sprintf("%ss %d–%d", prefix, vs[0].Version, vs[len(vs)-1].Version)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// feedUpdate runs `svc-pf feed update -c FILE`: the feed_sources: loop
// until SIGTERM, or one round with --once (exit 1 when a build failed or a
// source was stale, for cron and CI).
func feedUpdate(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("svc-pf feed update", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var path string
	fs.StringVar(&path, "config", "", "the YAML file holding feed_sources: (and log:, http:)")
	fs.StringVar(&path, "c", "", "shorthand for --config")
	once := fs.Bool("once", false, "build every feed once and exit; non-zero when a build failed or a source was stale")
	debugLog := fs.Bool("debug", false, "debug-level logging; overrides log.level")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 || path == "" {
		fmt.Fprintf(stderr, "svc-pf feed update: want -c FILE [--once] [--debug], got %q\n", args)
		return 2
	}
	v := app.Version(buildVersion())
	var err error
	if *once {
		cfg := app.DefaultFeedUpdateConfig()
		if err = config.Load(path, true, &cfg); err == nil {
			err = app.RunFeedUpdate(ctx, cfg, v, app.NewLogger(stderr, cfg.Log, *debugLog), true)
		}
	} else {
		// A long-running service like the others: SIGHUP re-reads the
		// file (log.level; a changed feed_sources is named as needing a
		// restart) instead of ending the process, whose unit would not
		// restart it (systemd counts a SIGHUP death as a clean exit).
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		err = serve(ctx, serviceRun{path: path, explicit: true, stderr: stderr, debug: *debugLog, hup: hup},
			app.DefaultFeedUpdateConfig, feedUpdateLog,
			func(ctx context.Context, cfg app.FeedUpdateConfig, log *slog.Logger, _ *app.Reloader[app.FeedUpdateConfig]) error {
				return app.RunFeedUpdate(ctx, cfg, v, log, false)
			})
	}
	if err != nil {
		fmt.Fprintf(stderr, "svc-pf feed update: %v\n", err)
		return 1
	}
	return 0
}

// feedServe runs `svc-pf feed serve`: from a config file (-c FILE, the
// packaged service; SIGHUP re-reads it), or from --dir/--listen for a
// quick look during development (SIGHUP has nothing to re-read). The two
// do not mix: a file and flags that would each say where to listen or
// what to serve leave one of them ignored.
func feedServe(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("svc-pf feed serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var path string
	fs.StringVar(&path, "config", "", "the YAML file: listen, feeds, parents, log (not with --dir/--listen)")
	fs.StringVar(&path, "c", "", "shorthand for --config")
	var dirs repeated
	fs.Var(&dirs, "dir", "a feed directory, or a directory of feed directories (repeatable; not with -c)")
	listen := fs.String("listen", feedbuild.DefaultListen, "address to listen on (not with -c)")
	debugLog := fs.Bool("debug", false, "debug-level logging; overrides log.level")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "svc-pf feed serve: unexpected arguments %q\n", fs.Args())
		return 2
	}
	flagsGiven := false
	fs.Visit(func(f *flag.Flag) { flagsGiven = flagsGiven || f.Name == "dir" || f.Name == "listen" })
	if path != "" && flagsGiven {
		fmt.Fprintln(stderr, "svc-pf feed serve: give -c FILE or --dir/--listen, not both (the file holds listen:, feeds: and parents:)")
		return 2
	}
	// SIGHUP must not end a long-running service (systemd would count
	// that a clean exit and not restart it): with a file it reloads it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var err error
	if path != "" {
		err = serve(ctx, serviceRun{path: path, explicit: true, stderr: stderr, debug: *debugLog, hup: hup},
			app.DefaultFeedServeConfig, feedServeLog, app.RunFeedServe)
	} else {
		log := app.NewLogger(stderr, app.LogConfig{Level: "info"}, *debugLog)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-hup:
					log.Info("SIGHUP: nothing to reload: the directories come from --dir (run with -c FILE to reload them)")
				}
			}
		}()
		var srv *feedbuild.Server
		srv, err = feedbuild.NewServer(feedbuild.ServerConfig{Dirs: dirs, Listen: *listen, Log: log})
		if err == nil {
			err = srv.Run(ctx, nil)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "svc-pf feed serve: %v\n", err)
		return 1
	}
	return 0
}

func feedLookup(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("svc-pf feed lookup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the feed directory")
	url := fs.String("url", "", "the feed's URL as a node's feeds: url takes it: http(s)://host/path/ or file:///path")
	positional, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(positional) != 1 {
		fmt.Fprintf(stderr, "svc-pf feed lookup: want one NAME[/PATH], got %q\n", positional)
		return 2
	}
	host, path, _ := strings.Cut(positional[0], "/")
	if path != "" || strings.HasSuffix(positional[0], "/") {
		path = "/" + path
	}
	name, err := feedbuild.NormalizeName(host)
	if err != nil {
		fmt.Fprintf(stderr, "svc-pf feed lookup: %v\n", err)
		return 2
	}
	if (*dir == "") == (*url == "") {
		fmt.Fprintln(stderr, "svc-pf feed lookup: give the feed as a directory or as a URL, one of them")
		return 1
	}
	// The node's own reader and lookup (readmodel/feeds), so that this
	// answer is the one a node's decision would find.
	l, err := feeds.Load(ctx, feeds.LoadConfig{URL: cmp.Or(*url, *dir), FetchTimeout: time.Minute})
	if err != nil {
		fmt.Fprintf(stderr, "svc-pf feed lookup: %v\n", err)
		return 1
	}
	m := l.Manifest
	cats := l.Set.Lookup(name, path, nil)
	if len(cats) == 0 {
		fmt.Fprintf(stdout, "%s%s: no entry (feed %s, version %d, %d keys)\n", name, path, m.Name, m.Latest(), l.Index().Len())
		return 0
	}
	fmt.Fprintf(stdout, "%s%s: match %s%s (feed %s, version %d)\n", name, path, cats[0].Name, cats[0].Path, m.Name, m.Latest())
	for _, c := range cats {
		fmt.Fprintf(stdout, "  %d\t%s\n", c.Code, c.Title)
	}
	return 0
}
