package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestFeedUpdateOnce runs `svc-pf feed update -c FILE --once` against a
// real list server: exit 0 and a feed when the source serves, exit 1
// naming the source when it fails (the feed stays), usage and config
// errors named.
func TestFeedUpdateOnce(t *testing.T) {
	var status atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := status.Load(); s != 0 {
			http.Error(w, "down", int(s))
			return
		}
		fmt.Fprint(w, "||bad.threat.example^\n||worse.threat.example^\n")
	}))
	t.Cleanup(ts.Close)
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "threats")
	cfg := filepath.Join(tmp, "update.yaml")
	writeConfig := func(text string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(fmt.Sprintf(`log:
  level: warn
feed_sources:
  - name: threats
    dir: %s
    interval: 1h
    titles: {3: badware}
    sources: ["adblock:3:%s/list.txt"]
    fetch:
      attempts: 1
`, dir, ts.URL))
	var out bytes.Buffer
	if code := run(context.Background(), []string{"feed", "update", "-c", cfg, "--once"}, &out, &out); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"feed", "lookup", "--dir", dir, "x.bad.threat.example"}, &out, &out); code != 0 ||
		!strings.Contains(out.String(), "match bad.threat.example (feed threats, version 1)\n  3\tbadware") {
		t.Fatalf("lookup after update: exit %d: %s", code, out.String())
	}

	status.Store(http.StatusNotFound)
	out.Reset()
	code := run(context.Background(), []string{"feed", "update", "-c", cfg, "--once"}, &out, &out)
	if code != 1 || !strings.Contains(out.String(), "feed threats: built from the last good copy of adblock:3:"+ts.URL+"/list.txt") ||
		!strings.Contains(out.String(), "HTTP 404") {
		t.Fatalf("a failing source: exit %d: %s", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"feed", "lookup", "--dir", dir, "bad.threat.example"}, &out, &out); code != 0 || !strings.Contains(out.String(), "version 1)") {
		t.Fatalf("the feed after a failed update: %s", out.String())
	}

	for _, tc := range []struct {
		args   []string
		config string
		code   int
		want   string
	}{
		{[]string{"feed", "update"}, "", 2, "want -c FILE"},
		{[]string{"feed", "update", "-c", cfg, "extra"}, "", 2, "want -c FILE"},
		{[]string{"feed", "update", "-c", filepath.Join(tmp, "missing.yaml")}, "", 1, "no such file"},
		{[]string{"feed", "update", "-c", cfg, "--once"}, "feed_sources:\n  - name: x\n    dir: d\n    interval: -1h\n    sources: [\"adblock:1:https://x/l\"]\n", 1, "feed_sources[0].interval: -1h0m0s"},
		{[]string{"feed", "update", "-c", cfg, "--once"}, "feed_sources: []\n", 1, "feed_sources: empty"},
		{[]string{"feed", "update", "-c", cfg, "--once"}, "feed_sources:\n  - name: x\n    dri: d\n", 1, `unknown key "dri"`},
	} {
		if tc.config != "" {
			writeConfig(tc.config)
		}
		out.Reset()
		if code := run(context.Background(), tc.args, &out, &out); code != tc.code || !strings.Contains(out.String(), tc.want) {
			t.Errorf("svc-pf %q: exit %d: %s\nwant %d and %q", tc.args, code, out.String(), tc.code, tc.want)
		}
	}
}

// TestFeedUpdateServes runs `svc-pf feed update` as a service: its /health
// answers 503 naming the failing source, its /metrics carries the
// svcpf_feed_source_* metrics, and SIGTERM (the context) stops it.
func TestFeedUpdateServes(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "gone", http.StatusGone)
	}))
	t.Cleanup(ts.Close)
	tmp := t.TempDir()
	cfg := filepath.Join(tmp, "update.yaml")
	source := "hosts:4:" + ts.URL + "/hosts"
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("http:\n  address: 127.0.0.1:0\nfeed_sources:\n  - name: malware\n    dir: %s\n    interval: 50ms\n    sources: [%q]\n",
		filepath.Join(tmp, "malware"), source)), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var logs syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"feed", "update", "-c", cfg}, io.Discard, &logs) }()
	listening := regexp.MustCompile(`msg="feed update listening" address=(\S+)`)
	var addr string
	for deadline := time.Now().Add(10 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
		if m := listening.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("never listening: %s", logs.String())
		}
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var code int
	var body string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, body = get("/health"); code == http.StatusServiceUnavailable || time.Now().After(deadline) {
			break
		}
	}
	var health struct {
		Status, Error string
	}
	if err := json.Unmarshal([]byte(body), &health); err != nil || code != http.StatusServiceUnavailable ||
		!strings.Contains(health.Error, "source "+source+": failed") || !strings.Contains(health.Error, "HTTP 410 Gone") ||
		!strings.Contains(health.Error, "check the URL and the server") {
		t.Fatalf("/health: %d %s", code, body)
	}
	if code, body = get("/metrics"); code != 200 ||
		!strings.Contains(body, fmt.Sprintf(`svcpf_feed_source_fetch_total{feed="malware",result="failed",source=%q}`, source)) ||
		!strings.Contains(body, `svcpf_feed_source_builds_total{feed="malware",result="failed"}`) {
		t.Fatalf("/metrics: %d\n%s", code, body)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d: %s", code, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("feed update did not stop")
	}
}

// TestFeedBuildURL: `feed build` with a URL source prints the fetch's
// outcome; a second build is a 304 and writes nothing; bad fetch options
// are usage errors naming the key.
func TestFeedBuildURL(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprint(w, "0.0.0.0 bad.example\n")
	}))
	t.Cleanup(ts.Close)
	dir := filepath.Join(t.TempDir(), "malware")
	src := "hosts:4:" + ts.URL + "/hosts"
	for _, tc := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"--max-bytes", "1000", src}, 0, []string{"source " + src + ": imported 1, skipped 0; fetched 20 bytes\n", "version 1:"}},
		{[]string{src}, 0, []string{"source " + src + ": imported 1, skipped 0; not modified since the copy of ", "no change"}},
		{[]string{"--max-shrink", "2", src}, 2, []string{"max_shrink: 2 is not a share"}},
		{[]string{"hosts:4:gopher://x/hosts"}, 2, []string{`scheme "gopher" is not supported`}},
	} {
		var out bytes.Buffer
		args := append([]string{"feed", "build", "--dir", dir, "--name", "malware"}, tc.args...)
		code := run(context.Background(), args, &out, &out)
		ok := code == tc.code
		for _, w := range tc.want {
			ok = ok && strings.Contains(out.String(), w)
		}
		if !ok {
			t.Errorf("svc-pf %q: exit %d: %s\nwant %d and %q", args, code, out.String(), tc.code, tc.want)
		}
	}
}
