package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/app"
	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/feedbuild"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

const feedUsage = `Usage:
  svc-pf feed build --dir DIR --name NAME [--title CODE=TITLE]… [--snapshot] SOURCE…
  svc-pf feed serve --dir DIR [--dir DIR]… [--listen ADDR]
  svc-pf feed lookup --dir DIR|--url URL NAME[/PATH]

SOURCE is FORMAT:CODE:PATH: FORMAT one of hosts, domains, adblock, rpz, csv;
CODE a category code 0–65535 (or code,code…); csv sources take "-" (csv:-:PATH),
their lines carry the codes. See docs/feeds.md.
`

// runFeed runs `svc-pf feed …`: one-shot tools, except serve, which runs
// until ctx ends (SIGTERM, SIGINT).
func runFeed(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, feedUsage)
		return 2
	}
	switch args[0] {
	case "build":
		return feedBuild(ctx, args[1:], stdout, stderr)
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
	positional, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	cfg := feedbuild.BuildConfig{Dir: *dir, Name: *name, Titles: titles, Snapshot: *snapshot}
	for _, a := range positional {
		src, err := feedbuild.ParseSource(a)
		if err != nil {
			fmt.Fprintf(stderr, "svc-pf feed build: %v\n", err)
			return 2
		}
		cfg.Sources = append(cfg.Sources, src)
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

func feedServe(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("svc-pf feed serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var dirs repeated
	fs.Var(&dirs, "dir", "a feed directory, or a directory of feed directories (repeatable)")
	listen := fs.String("listen", feedbuild.DefaultListen, "address to listen on")
	debugLog := fs.Bool("debug", false, "debug-level logging")
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
	log := app.NewLogger(stderr, app.LogConfig{Level: "info"}, *debugLog)
	srv, err := feedbuild.NewServer(feedbuild.ServerConfig{Dirs: dirs, Listen: *listen, Log: log})
	if err == nil {
		err = srv.Run(ctx, nil)
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
