package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestFeedCommandLine(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "ads")
	list := filepath.Join(tmp, "list.txt")
	if err := os.WriteFile(list, []byte("! a list\n||ads.example.com^\n||example.org/dl/^$all\n||x.example^$third-party\nexample.com##.ad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	csv := filepath.Join(tmp, "own.csv")
	if err := os.WriteFile(csv, []byte("bücher.example,7;1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args   []string
		code   int
		output []string
	}{
		{[]string{"feed"}, 2, []string{"svc-pf feed build"}},
		{[]string{"feed", "help"}, 0, []string{"svc-pf feed lookup"}},
		{[]string{"feed", "bogus"}, 2, []string{`unknown command "bogus"`}},
		{[]string{"feed", "build", "--dir", dir, "--name", "ads", "json:1:x"}, 2, []string{`unknown format "json"`}},
		{[]string{"feed", "build", "--dir", dir, "--name", "ads", "--title", "x=y", "adblock:1:" + list}, 2, []string{"want CODE=TITLE"}},
		{[]string{"feed", "build", "--dir", dir, "--name", "ads"}, 1, []string{"no source"}},
		{[]string{"feed", "build", "--dir", dir, "--name", "ads", "adblock:1:" + filepath.Join(tmp, "missing")}, 1, []string{"no such file"}},
		// Flags after the sources work too.
		{[]string{"feed", "build", "--dir", dir, "--name", "ads", "adblock:1:" + list, "csv:-:" + csv, "--title", "1=advertising", "--title", "7=books"}, 0, []string{
			"source adblock:1:" + list + ": imported 2, skipped 3 (comment 1, cosmetic 1, option 1)",
			"source csv:-:" + csv + ": imported 1, skipped 0",
			"total: imported 3, skipped 3 (comment 1, cosmetic 1, option 1); 3 distinct keys",
			"feed-codes.json updated",
			"version 1: snapshot_1.gz, a snapshot of 3 lines; keys 3 added",
			"manifest: snapshot 1\n",
		}},
		{[]string{"feed", "build", "--dir", dir, "--name", "ads", "adblock:1:" + list, "csv:-:" + csv}, 0, []string{"no change: the feed stays at version 1"}},
		{[]string{"feed", "build", "--dir", dir, "--name", "ads", "adblock:1:" + list}, 0, []string{"version 2: delta_2.gz, a delta of 1 line; keys 0 added, 0 changed, 1 removed", "manifest: snapshot 1, delta 2\n"}},
		{[]string{"feed", "build", "--snapshot", "--dir", dir, "--name", "ads", "adblock:1:" + list}, 0, []string{"version 3: snapshot_3.gz, a snapshot of 2 lines", "manifest: snapshot 3; catch-up deltas 2–3\n"}},
		{[]string{"feed", "build", "--dir", dir, "--name", "other", "adblock:1:" + list}, 1, []string{`holds feed "ads", not "other"`}},
		{[]string{"feed", "lookup", "--dir", dir, "www.ads.example.com"}, 0, []string{"www.ads.example.com: match ads.example.com (feed ads, version 3)\n  1\tadvertising\n"}},
		{[]string{"feed", "lookup", "--dir", dir, "example.org/dl/x.exe"}, 0, []string{"example.org/dl/x.exe: match example.org/dl/ (feed ads, version 3)"}},
		{[]string{"feed", "lookup", "--dir", dir, "example.org/"}, 0, []string{"example.org/: no entry (feed ads, version 3, 2 keys)"}},
		{[]string{"feed", "lookup", "--dir", dir, "EXAMPLE.net."}, 0, []string{"example.net: no entry"}},
		// --url takes what a node's feeds: url takes: the node's reader and lookup answer.
		{[]string{"feed", "lookup", "--url", "file://" + dir, "www.ads.example.com"}, 0, []string{"www.ads.example.com: match ads.example.com (feed ads, version 3)\n  1\tadvertising\n"}},
		{[]string{"feed", "lookup", "--url", "ftp://x/", "a.example"}, 1, []string{`svc-pf feed lookup: "ftp://x/": scheme "ftp" is not supported`}},
		{[]string{"feed", "lookup", "--dir", dir, "1.2.3.4"}, 2, []string{"not a domain name"}},
		{[]string{"feed", "lookup", "--dir", dir}, 2, []string{"want one NAME[/PATH]"}},
		{[]string{"feed", "lookup", "x.example"}, 1, []string{"a directory or as a URL"}},
		{[]string{"feed", "lookup", "--dir", filepath.Join(tmp, "none"), "x.example"}, 1, []string{"no such file"}},
		{[]string{"feed", "serve"}, 1, []string{"no directory to serve"}},
		{[]string{"feed", "serve", "--dir", dir, "extra"}, 2, []string{"unexpected arguments"}},
	} {
		var out bytes.Buffer
		code := run(context.Background(), tt.args, &out, &out)
		ok := code == tt.code
		for _, want := range tt.output {
			ok = ok && strings.Contains(out.String(), want)
		}
		if !ok {
			t.Errorf("svc-pf %q: exit %d, output\n%s\nwant %d and %q", tt.args, code, out.String(), tt.code, tt.output)
		}
	}
}

// TestFeedServeAndLookupURL runs `feed serve` on a free port, looks a name
// up through it as a node would, and stops it as SIGTERM does.
func TestFeedServeAndLookupURL(t *testing.T) {
	tmp := t.TempDir()
	parent := filepath.Join(tmp, "feeds")
	list := filepath.Join(tmp, "hosts")
	if err := os.WriteFile(list, []byte("0.0.0.0 bad.example\n127.0.0.1 localhost\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"feed", "build", "--dir", filepath.Join(parent, "malware"), "--name", "malware", "--title", "4=malware", "hosts:4:" + list}, &out, &out); code != 0 {
		t.Fatalf("build: %s", out.String())
	}

	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"feed", "serve", "--dir", parent, "--listen", "127.0.0.1:0"}, io.Discard, &logs)
	}()
	listening := regexp.MustCompile(`msg="feed serve listening" address=(\S+)`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if m := listening.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("never listening: %s", logs.String())
		}
	}
	out.Reset()
	code := run(context.Background(), []string{"feed", "lookup", "--url", "http://" + addr + "/malware/", "x.bad.example"}, &out, &out)
	if code != 0 || !strings.Contains(out.String(), "x.bad.example: match bad.example (feed malware, version 1)\n  4\tmalware") {
		t.Errorf("lookup over HTTP: exit %d: %s", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"feed", "lookup", "--url", "http://" + addr + "/nothing/", "x.example"}, &out, &out); code != 1 || !strings.Contains(out.String(), "404") {
		t.Errorf("lookup of a missing feed: exit %d: %s", code, out.String())
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exit %d: %s", code, logs.String())
	}
	if !strings.Contains(logs.String(), "feed serve stopped") {
		t.Fatalf("no stop logged: %s", logs.String())
	}
}
