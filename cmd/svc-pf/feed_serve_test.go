package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestFeedServeConfigProcess runs a real `svc-pf feed serve -c FILE`
// process on a kernel-chosen port: it serves a built feed directory under
// the name its file gives, a node's lookup through that URL finds the
// feed's entry; SIGHUP with a new list of directories serves the new list
// at once (a named feed and a parent's feed); a file naming a plain file
// as a directory, and a file with an unknown key, are refused and logged,
// and the directories in force keep being served; SIGTERM stops it
// cleanly.
func TestFeedServeConfigProcess(t *testing.T) {
	tmp := t.TempDir()
	buildFeed := func(dir, name, list string) {
		t.Helper()
		src := filepath.Join(tmp, name+".txt")
		if err := os.WriteFile(src, []byte(list), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if code := run(context.Background(), []string{"feed", "build", "--dir", dir, "--name", name, "--title", "4=malware", "domains:4:" + src}, &out, &out); code != 0 {
			t.Fatalf("feed build %s: %s", name, out.String())
		}
	}
	one, two := filepath.Join(tmp, "one"), filepath.Join(tmp, "two")
	buildFeed(filepath.Join(one, "a"), "a", "bad-a.example\n")
	buildFeed(filepath.Join(two, "b"), "b", "bad-b.example\n")
	plain := filepath.Join(tmp, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	path := filepath.Join(tmp, "feed-serve.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("log: {level: info, format: json}\nlisten: 127.0.0.1:0\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("feeds: [{name: alpha, dir: " + filepath.Join(one, "a") + "}]\n")
	p := startSvcPF(t, "feed serve -c "+path)
	addr, _ := p.await(t, "listening", func(r map[string]any) bool { return r["msg"] == "feed serve listening" })["address"].(string)
	if addr == "" {
		t.Fatal("no address logged")
	}
	get := func(feedPath string) (int, []byte) {
		t.Helper()
		resp, err := http.Get("http://" + addr + feedPath)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	expect := func(feedPath string, code int, file string) {
		t.Helper()
		c, body := get(feedPath)
		if c != code {
			t.Errorf("GET %s: %d, want %d", feedPath, c, code)
			return
		}
		if file != "" {
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(body, want) {
				t.Errorf("GET %s: not the bytes of %s", feedPath, file)
			}
		}
	}
	expect("/alpha/feed.json", 200, filepath.Join(one, "a", "feed.json"))
	expect("/a/feed.json", 404, "")
	expect("/b/feed.json", 404, "")
	var out bytes.Buffer
	if code := run(context.Background(), []string{"feed", "lookup", "--url", "http://" + addr + "/alpha/", "x.bad-a.example"}, &out, &out); code != 0 ||
		!strings.Contains(out.String(), "x.bad-a.example: match bad-a.example (feed a, version 1)") {
		t.Errorf("lookup through the served URL: exit %d: %s", code, out.String())
	}

	// A new list: beta by name, and every feed directory in one.
	write("feeds: [{name: beta, dir: " + filepath.Join(two, "b") + "}]\nparents: [" + one + "]\n")
	p.signal(t, syscall.SIGHUP)
	p.await(t, "the reload", func(r map[string]any) bool {
		msg, _ := r["msg"].(string)
		return r["level"] == "INFO" && strings.HasPrefix(msg, "reload: ") && strings.Contains(msg, "serving /beta/="+filepath.Join(two, "b"))
	})
	expect("/alpha/feed.json", 404, "")
	expect("/beta/feed.json", 200, filepath.Join(two, "b", "feed.json"))
	expect("/a/feed.json", 200, filepath.Join(one, "a", "feed.json"))

	// Refused: a plain file as a directory; then a file the loader refuses.
	write("feeds: [{name: gamma, dir: " + plain + "}]\n")
	p.signal(t, syscall.SIGHUP)
	p.await(t, "the refused reload", func(r map[string]any) bool {
		err, _ := r["err"].(string)
		return r["level"] == "ERROR" && strings.Contains(r["msg"].(string), "reload refused") && strings.Contains(err, "feeds[0].dir "+plain+" is not a directory")
	})
	expect("/gamma/feed.json", 404, "")
	expect("/beta/feed.json", 200, filepath.Join(two, "b", "feed.json"))
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\nparents: ["+two+"]\nbogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p.signal(t, syscall.SIGHUP)
	p.await(t, "the second refused reload", func(r map[string]any) bool {
		err, _ := r["err"].(string)
		return r["level"] == "ERROR" && strings.Contains(r["msg"].(string), "reload refused") && strings.Contains(err, `unknown key "bogus"`)
	})
	expect("/b/feed.json", 404, "")
	expect("/beta/feed.json", 200, filepath.Join(two, "b", "feed.json"))
	expect("/a/feed.json", 200, filepath.Join(one, "a", "feed.json"))
	p.stop(t)
	if !p.logged("feed serve stopped") {
		t.Error("no stop logged")
	}
}

// TestFeedServeFlagsSIGHUP: a `feed serve --dir` process (no file to
// re-read) logs a SIGHUP and keeps serving; it used to end on it.
func TestFeedServeFlagsSIGHUP(t *testing.T) {
	parent := t.TempDir()
	src := filepath.Join(t.TempDir(), "l.txt")
	if err := os.WriteFile(src, []byte("bad.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if code := run(context.Background(), []string{"feed", "build", "--dir", filepath.Join(parent, "t"), "--name", "t", "domains:4:" + src}, &out, &out); code != 0 {
		t.Fatalf("feed build: %s", out.String())
	}
	p := startSvcPFLog(t, "feed serve --dir "+parent+" --listen 127.0.0.1:0", true)
	line := p.await(t, "listening", func(r map[string]any) bool { return strings.Contains(r["msg"].(string), `msg="feed serve listening"`) })["msg"].(string)
	_, addr, _ := strings.Cut(line, " address=")
	addr, _, _ = strings.Cut(addr, " ")
	p.signal(t, syscall.SIGHUP)
	p.await(t, "the SIGHUP", func(r map[string]any) bool { return strings.Contains(r["msg"].(string), "SIGHUP: nothing to reload") })
	resp, err := http.Get("http://" + addr + "/t/feed.json")
	if err != nil {
		t.Fatalf("after SIGHUP: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("after SIGHUP: GET /t/feed.json: %d", resp.StatusCode)
	}
	p.stop(t)
}

// TestFeedServeCommandLine: -c and --dir/--listen do not mix; a file that
// fails its check stops the start with its errors.
func TestFeedServeCommandLine(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "feed-serve.yaml")
	if err := os.WriteFile(bad, []byte("listen: nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"feed", "serve", "-c", bad, "--dir", "."}, 2, []string{"give -c FILE or --dir/--listen, not both"}},
		{[]string{"feed", "serve", "--config", bad, "--listen", "127.0.0.1:0"}, 2, []string{"not both"}},
		{[]string{"feed", "serve", "-c", bad}, 1, []string{`listen "nope": want ip:port`, "feeds and parents: both empty"}},
		{[]string{"feed", "serve", "-c", filepath.Join(t.TempDir(), "none.yaml")}, 1, []string{"no such file"}},
		{[]string{"feed", "serve"}, 1, []string{"no directory to serve"}},
	} {
		var out bytes.Buffer
		code := run(context.Background(), tt.args, &out, &out)
		for _, w := range tt.want {
			if code != tt.code || !strings.Contains(out.String(), w) {
				t.Errorf("svc-pf %q: exit %d, %q; want %d and %q", tt.args, code, out.String(), tt.code, w)
			}
		}
	}
}

// svcPF is a real svc-pf process (the test binary through
// TestSIGHUPHelperProcess) logging JSON lines.
type svcPF struct {
	text   bool // the log is text lines: each is {"msg": line}
	cmd    *exec.Cmd
	lines  chan map[string]any
	exited chan error
	seen   []map[string]any
}

func startSvcPF(t *testing.T, args string) *svcPF { return startSvcPFLog(t, args, false) }

func startSvcPFLog(t *testing.T, args string, text bool) *svcPF {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSIGHUPHelperProcess$")
	cmd.Env = append(os.Environ(), sighupHelperEnv+"="+args)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &svcPF{text: text, cmd: cmd, lines: make(chan map[string]any, 100), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var rec map[string]any
			if p.text {
				rec = map[string]any{"msg": sc.Text()}
			} else if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				rec = map[string]any{"msg": "NOT JSON: " + sc.Text()}
			}
			p.lines <- rec
		}
		close(p.lines)
		_, _ = io.Copy(io.Discard, stderr)
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	return p
}

// await returns the first log line from now on that matches.
func (p *svcPF) await(t *testing.T, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case rec, ok := <-p.lines:
			if !ok {
				t.Fatalf("svc-pf exited while waiting for %s: %v", what, <-p.exited)
			}
			p.seen = append(p.seen, rec)
			if strings.HasPrefix(rec["msg"].(string), "NOT JSON") {
				t.Errorf("log line is not JSON: %s", rec["msg"])
			}
			if match(rec) {
				return rec
			}
		case <-timeout:
			t.Fatalf("no log line for %s", what)
		}
	}
}

func (p *svcPF) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// stop sends SIGTERM and waits for a clean exit, reading the rest of the log.
func (p *svcPF) stop(t *testing.T) {
	t.Helper()
	p.signal(t, syscall.SIGTERM)
	for rec := range p.lines {
		p.seen = append(p.seen, rec)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Fatalf("svc-pf after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("svc-pf did not stop on SIGTERM")
	}
}

// logged: a line with this message was read.
func (p *svcPF) logged(msg string) bool {
	for _, r := range p.seen {
		if r["msg"] == msg || p.text && strings.Contains(r["msg"].(string), `msg="`+msg+`"`) {
			return true
		}
	}
	return false
}
