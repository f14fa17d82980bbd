package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("http:\n  adress: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args   []string
		code   int
		output string
	}{
		{nil, 2, "Usage:"},
		{[]string{"--version"}, 0, "svc-pf "},
		{[]string{"version"}, 0, "svc-pf "},
		{[]string{"orgmanager", "--version"}, 0, "svc-pf "},
		{[]string{"help"}, 0, "Commands:"},
		{[]string{"nonsense"}, 2, `unknown command "nonsense"`},
		{[]string{"orgmanager", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"orgmanager", "extra"}, 2, "unexpected arguments"},
		{[]string{"orgmanager", "-c", filepath.Join(dir, "missing.yaml")}, 1, "no such file"},
		{[]string{"ipmapper", "--config", bad}, 1, `unknown key "adress"`},
		{[]string{"all", "-c", bad}, 1, `unknown key "http"`},
	} {
		var out bytes.Buffer
		code := run(context.Background(), tt.args, &out, &out)
		if code != tt.code || !strings.Contains(out.String(), tt.output) {
			t.Errorf("svc-pf %v: exit %d, output %q; want %d and %q", tt.args, code, out.String(), tt.code, tt.output)
		}
	}
}

// TestOrgManagerRunsAndStops starts the real command on a temporary
// configuration and stops it through its context, as SIGTERM would.
func TestOrgManagerRunsAndStops(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "om.yaml")
	// The bootstrap token goes to the test's directory, not to the
	// default data/admin.token under the working directory (the source
	// tree).
	if err := os.WriteFile(cfg, []byte("http:\n  address: 127.0.0.1:0\ndatabase:\n  url: sqlite:"+filepath.Join(dir, "o.db")+
		"\nauth:\n  bootstrap_token_file: "+filepath.Join(dir, "admin.token")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"orgmanager", "-c", cfg}, io.Discard, &out) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "orgmanager listening") {
		if time.Now().After(deadline) {
			t.Fatalf("never listening: %s", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel() // as SIGTERM does
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "o.db")); err != nil {
		t.Fatalf("database not created: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "admin.token")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("bootstrap token file: %v %v", fi, err)
	}
}

// TestDebugFlag: --debug lowers the log level to debug whatever log.level
// says; without it log.level holds. The router logs every request at debug
// level, so one request shows which level the running service logs at.
func TestDebugFlag(t *testing.T) {
	for _, tc := range []struct {
		name      string
		level     string
		flags     []string
		wantDebug bool
	}{
		{"log.level info", "info", nil, false},
		{"--debug over log.level warn", "warn", []string{"--debug"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := filepath.Join(dir, "om.yaml")
			yaml := "http:\n  address: 127.0.0.1:0\ndatabase:\n  url: sqlite:" + filepath.Join(dir, "o.db") + "\nlog:\n  level: " + tc.level +
				"\nauth:\n  bootstrap_token_file: " + filepath.Join(dir, "admin.token") + "\n"
			if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			var out syncBuffer
			done := make(chan int, 1)
			go func() { done <- run(ctx, append([]string{"orgmanager", "-c", cfg}, tc.flags...), io.Discard, &out) }()
			defer func() {
				cancel()
				if code := <-done; code != 0 {
					t.Errorf("exit %d: %s", code, out.String())
				}
			}()

			// With log.level warn the address is logged only because of
			// --debug (it is an info line).
			listening := regexp.MustCompile(`level=INFO msg="orgmanager listening" .*address=(\S+)`)
			var addr string
			for deadline := time.Now().Add(10 * time.Second); addr == ""; time.Sleep(10 * time.Millisecond) {
				if m := listening.FindStringSubmatch(out.String()); m != nil {
					addr = m[1]
				} else if time.Now().After(deadline) {
					t.Fatalf("never listening: %s", out.String())
				}
			}
			resp, err := http.Get("http://" + addr + "/health")
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			// The router writes the access line before the response is
			// sent, so it is in the output by now if it is written at all.
			requestLine := regexp.MustCompile(`level=DEBUG msg=request .*method=GET path=/health status=200`)
			if got := requestLine.MatchString(out.String()); got != tc.wantDebug {
				t.Fatalf("debug request line logged: %v, want %v; output:\n%s", got, tc.wantDebug, out.String())
			}
		})
	}
}

// syncBuffer is a bytes.Buffer the command's logger and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestFormatVersion(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"},
		{Key: "vcs.time", Value: "2026-11-24T00:00:00Z"}}}
	for _, c := range []struct {
		release string
		bi      *debug.BuildInfo
		want    string
	}{
		{"", nil, "dev"},
		{"v1.2.3", nil, "v1.2.3"},
		{"", &debug.BuildInfo{Main: debug.Module{Version: "v0.4.0"}}, "v0.4.0"},
		{"", vcs, "dev (commit 0123456789ab+modified, 2026-11-24T00:00:00Z)"},
		{"v1.2.3", vcs, "v1.2.3 (commit 0123456789ab+modified, 2026-11-24T00:00:00Z)"},
	} {
		if got := formatVersion(c.release, c.bi); got != c.want {
			t.Errorf("formatVersion(%q) = %q, want %q", c.release, got, c.want)
		}
	}
}
