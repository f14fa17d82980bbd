// Command feedswap is the harness of bench/feedswap.sh (not part of svc-pf):
// it writes the synthetic domain lists of a large feed in three variants, and
// runs a bare node, a feeds.Client following one feed directory, whose
// resident memory the script samples while a new version replaces the feed.
//
//	feedswap gen -n 10000000 -variant base|tenth|all -out DIR
//	feedswap node -url URL
//
// gen writes DIR/c1.txt … DIR/c4.txt, one domain a line, for the domains
// importer (code 1 to 4). Domain i of the base variant is name(i, 0) with
// code 1+i%4. "tenth" changes 10 % of the domains: i%20 == 0 gets another
// name (a removal and an addition), i%20 == 1 another code. "all" gives
// every domain another name.
//
// node prints "version V entries N" each time the served version changes,
// and nothing else on stdout (its logs go to stderr).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: feedswap gen|node …")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = gen(os.Args[2:])
	case "node":
		err = node(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want gen or node", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "feedswap:", err)
		os.Exit(1)
	}
}

// mix is splitmix64's finaliser: a deterministic, well-spread function of i.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

var tlds = []string{"com", "net", "org", "de", "io", "info", "ru", "co.uk", "xyz", "fr"}

// appendName appends domain i of generation salt: one or two labels of
// base-36 letters over a TLD, 12–28 bytes. Distinct i give distinct names
// within a salt (the first label holds i itself), and salts give disjoint
// names (the salt is the first label's first letter).
func appendName(b []byte, i, salt uint64) []byte {
	h := mix(i ^ salt<<56)
	const alpha = "abcdefghijklmnopqrstuvwxyz0123456789"
	if h%3 == 0 {
		n := 3 + h>>8%6
		for k := uint64(0); k < n; k++ {
			b = append(b, alpha[(h>>(16+5*k))%26])
		}
		b = append(b, '.')
	}
	b = append(b, "gjqx"[salt%4])
	for v := i; ; v /= 36 {
		b = append(b, alpha[v%36])
		if v < 36 {
			break
		}
	}
	b = append(b, '-')
	b = append(b, alpha[h>>40%26], alpha[h>>45%26], alpha[h>>50%26])
	b = append(b, '.')
	return append(b, tlds[h>>55%uint64(len(tlds))]...)
}

func gen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	n := fs.Int("n", 10_000_000, "domains")
	variant := fs.String("variant", "base", "base, tenth (10 % changed) or all (every name new)")
	out := fs.String("out", "", "directory for c1.txt … c4.txt")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *n <= 0 {
		return fmt.Errorf("gen: -out DIR and -n > 0 are required")
	}
	if *variant != "base" && *variant != "tenth" && *variant != "all" {
		return fmt.Errorf("gen: -variant %q: want base, tenth or all", *variant)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	var ws [4]*bufio.Writer
	var fsx [4]*os.File
	for c := range ws {
		f, err := os.Create(filepath.Join(*out, fmt.Sprintf("c%d.txt", c+1)))
		if err != nil {
			return err
		}
		fsx[c], ws[c] = f, bufio.NewWriterSize(f, 1<<20)
	}
	var buf []byte
	for i := uint64(0); i < uint64(*n); i++ {
		salt, code := uint64(0), i%4
		switch *variant {
		case "tenth":
			switch i % 20 {
			case 0:
				salt = 1
			case 1:
				code = (code + 1) % 4
			}
		case "all":
			salt = 2
		}
		buf = append(appendName(buf[:0], i, salt), '\n')
		if _, err := ws[code].Write(buf); err != nil {
			return err
		}
	}
	for c := range ws {
		if err := ws[c].Flush(); err != nil {
			return err
		}
		if err := fsx[c].Close(); err != nil {
			return err
		}
	}
	return nil
}

func node(args []string) error {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	url := fs.String("url", "", "the feed directory's URL (or path)")
	poll := fs.Duration("poll", time.Second, "poll interval")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := feeds.New(feeds.Config{
		Feeds:  []feeds.FeedConfig{{Name: "big", URL: *url, PollInterval: *poll}},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	if err != nil {
		return err
	}
	go c.Run(ctx)
	last := int64(-1)
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		for _, f := range c.Set().Feeds() {
			if f.Version != last {
				last = f.Version
				fmt.Printf("version %d entries %d\n", f.Version, f.Entries)
			}
		}
	}
}
