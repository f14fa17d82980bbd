package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sighupHelperEnv makes the test binary run svc-pf itself, with the
// signal handling of main, on the arguments in the variable.
const sighupHelperEnv = "SVCPF_TEST_SIGHUP_ARGS"

// TestSIGHUPHelperProcess is not a test: it is `svc-pf` run by
// TestSIGHUPReloads in a child process.
func TestSIGHUPHelperProcess(t *testing.T) {
	args := os.Getenv(sighupHelperEnv)
	if args == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, strings.Fields(args), os.Stdout, os.Stderr))
}

// TestSIGHUPReloads: a real SIGHUP to a running `svc-pf resolver`,
// `svc-pf feed update` or `svc-pf feed serve`, makes it re-read its file
// and log what changed, and it keeps running (a feed_sources change, or
// feed serve's listen, is named as needing a restart); SIGTERM then stops
// it cleanly.
func TestSIGHUPReloads(t *testing.T) {
	t.Run("resolver", func(t *testing.T) {
		sighupReloads(t, "resolver", "resolver listening", "", func(level string) []byte {
			return []byte("dns: {listen: [127.0.0.1:0]}\nhttp: {address: 127.0.0.1:0}\nforwarders: [127.0.0.1:9]\n" +
				"activity: {enabled: false}\nlog: {level: " + level + ", format: json}\n")
		})
	})
	t.Run("feed update", func(t *testing.T) {
		list := filepath.Join(t.TempDir(), "list.txt")
		if err := os.WriteFile(list, []byte("a.example\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "out")
		sighupReloads(t, "feed update", "feed update listening", "feed_sources changed; restart to apply", func(level string) []byte {
			interval := "1h"
			if level == "debug" {
				interval = "2h"
			}
			return []byte("http: {address: 127.0.0.1:0}\nlog: {level: " + level + ", format: json}\n" +
				"feed_sources: [{name: t, dir: " + out + ", interval: " + interval + ", sources: [\"domains:4:" + list + "\"]}]\n")
		})
	})
	t.Run("feed serve", func(t *testing.T) {
		dir := t.TempDir()
		sighupReloads(t, "feed serve", "feed serve listening", "listen changed; restart to apply", func(level string) []byte {
			listen := "127.0.0.1:0"
			if level == "debug" {
				listen = "127.0.0.1:1"
			}
			return []byte("listen: " + listen + "\nlog: {level: " + level + ", format: json}\nparents: [" + dir + "]\n")
		})
	})
}

// sighupReloads runs `svc-pf CMD -c FILE` with file("info") until it logs
// listening, then changes the file to file("debug") and sends SIGHUP: the
// reload is logged (and restartWarn too, when set); a bad file is refused
// and logged; SIGTERM stops it cleanly.
func sighupReloads(t *testing.T, command, listening, restartWarn string, file func(level string) []byte) {
	path := filepath.Join(t.TempDir(), "svc-pf.yaml")
	if err := os.WriteFile(path, file("info"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSIGHUPHelperProcess$")
	cmd.Env = append(os.Environ(), sighupHelperEnv+"="+command+" -c "+path, "NATS_URL=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan map[string]any, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec map[string]any
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				rec = map[string]any{"msg": "NOT JSON: " + sc.Text()}
			}
			lines <- rec
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	}()
	await := func(what string, match func(map[string]any) bool) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case rec, ok := <-lines:
				if !ok {
					t.Fatalf("svc-pf exited while waiting for %s: %v", what, <-exited)
				}
				if strings.HasPrefix(rec["msg"].(string), "NOT JSON") {
					t.Errorf("log line is not JSON: %s", rec["msg"])
				}
				if match(rec) {
					return
				}
			case <-timeout:
				t.Fatalf("no log line for %s", what)
			}
		}
	}
	await(listening, func(r map[string]any) bool { return r["msg"] == listening })
	if err := os.WriteFile(path, file("debug"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	await("the reload", func(r map[string]any) bool {
		msg, _ := r["msg"].(string)
		return strings.HasPrefix(msg, "reload: ") && strings.Contains(msg, "log.level info → debug") && r["level"] == "INFO"
	})
	if restartWarn != "" {
		await("the restart warning", func(r map[string]any) bool {
			return r["level"] == "WARN" && r["msg"] == "reload: "+restartWarn
		})
	}
	// Still running, and at debug now: a bad file is refused and logged.
	if err := os.WriteFile(path, []byte("bogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	await("the refused reload", func(r map[string]any) bool {
		return r["level"] == "ERROR" && strings.Contains(r["msg"].(string), "reload refused") && strings.Contains(r["err"].(string), `unknown key "bogus"`)
	})
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("svc-pf %s after SIGTERM: %v", command, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("svc-pf %s did not stop on SIGTERM", command)
	}
}
