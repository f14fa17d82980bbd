//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// readmeInsideEnv carries, into the test binary run again inside the
// namespaces, the copy of the repository to run the README in;
// readmeResolvEnv the resolv.conf to mount over /etc/resolv.conf there.
const (
	readmeInsideEnv = "SVCPF_README_REPO"
	readmeResolvEnv = "SVCPF_README_RESOLV"
)

// readmeTestCommand is the README's block that runs the tests: TestReadme
// does not run it, since it is the command that runs TestReadme.
const readmeTestCommand = "go test ./...\n"

// readmeRunCommand is the README's block that runs the platform in the
// foreground until Ctrl-C. TestReadme runs it as written, in the
// background in a process group of its own (go run and the platform it
// starts), waits until the orgmanager and the node are healthy, then sends
// the group SIGINT, as Ctrl-C in a terminal does, and waits for it to end.
const readmeRunCommand = "go run ./cmd/svc-pf all\n"

// readmeRunWrapped is how the script runs readmeRunCommand (%s).
const readmeRunWrapped = `setsid bash -c 'exec %s' 2> "$(mktemp)" &
readme_run=$!
for i in $(seq 180); do
  curl -sf localhost:8080/health > /dev/null && curl -sf localhost:8082/health > /dev/null && break
  sleep 1
done
curl -sf localhost:8080/health && echo && curl -sf localhost:8082/health && echo
kill -INT -- -$readme_run
for i in $(seq 300); do kill -0 -- -$readme_run 2> /dev/null || break; sleep 0.1; done
! kill -0 -- -$readme_run 2> /dev/null
`

// upstreamA is what the stand-in forwarder answers to every A query.
const upstreamA = "192.0.2.1"

// TestReadme runs README.md's ```sh blocks as written, top to bottom, with
// one bash, in a fresh copy of the repository (the files git tracks or
// would track: a clone of what would be committed), as a newcomer pastes
// them into a shell, and checks what they print.
//
// The README uses fixed ports on 127.0.0.1, so the blocks run in a network
// namespace and a mount namespace of their own (unshare, then this test
// binary again inside): nothing of this machine's is in the way, and nothing
// the README starts is seen from outside. There /etc/resolv.conf names
// 127.0.0.1, where the test answers as the forwarder every A query with
// 192.0.2.1 (the platform's default forwarders are resolv.conf's). Every
// process the blocks start is in one process group, killed at the end, and
// the whole run is bounded in time.
func TestReadme(t *testing.T) {
	if repo := os.Getenv(readmeInsideEnv); repo != "" {
		readmeInside(t, repo)
		return
	}
	need := map[string]string{
		"bash": "bash", "git": "git", "go": "Go 1.26", "curl": "curl", "dig": "dig (Debian: bind9-dnsutils)",
		"unshare": "unshare (util-linux)", "ip": "ip (iproute2)",
	}
	for cmd, what := range need {
		if _, err := exec.LookPath(cmd); err != nil {
			t.Fatalf("TestReadme needs %s on PATH, as the README says (.ci/run installs it): %v", what, err)
		}
	}
	repo := copyRepository(t)
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// Root (as in CI) makes the namespaces directly; anyone else through a
	// user namespace, where the kernel allows it.
	flags := []string{"--net", "--mount"}
	if os.Geteuid() != 0 {
		flags = append([]string{"--user", "--map-root-user"}, flags...)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", append(flags, "--", os.Args[0],
		"-test.run=^TestReadme$", "-test.v", "-test.count=1", "-test.timeout=7m")...)
	cmd.Env = append(os.Environ(), readmeInsideEnv+"="+repo, readmeResolvEnv+"="+resolv)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if bytes.HasPrefix(out, []byte("unshare:")) {
			t.Fatalf("TestReadme needs new network and mount namespaces (run as root, or where unprivileged user namespaces are allowed): unshare %s: %v\n%s",
				strings.Join(flags, " "), err, out)
		}
		t.Fatalf("the README's blocks inside their namespace: %v\n%s", err, out)
	}
	t.Logf("the README's blocks ran:\n%s", tail(out, 60))
}

// readmeInside is TestReadme inside its namespaces: it sets up loopback,
// the resolver configuration and the forwarder, then runs the blocks.
func readmeInside(t *testing.T, repo string) {
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v: %s", err, out)
	}
	if err := syscall.Mount(os.Getenv(readmeResolvEnv), "/etc/resolv.conf", "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting a resolv.conf naming 127.0.0.1 over /etc/resolv.conf in the test's mount namespace: %v", err)
	}
	startForwarder(t)

	readme, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := shBlocks(string(readme))
	var script strings.Builder
	script.WriteString("set -eo pipefail\n")
	skipped, ran := 0, 0
	for i, b := range blocks {
		switch b {
		case readmeTestCommand:
			skipped++
			continue
		case readmeRunCommand:
			ran++
			b = fmt.Sprintf(readmeRunWrapped, strings.TrimSpace(b))
		}
		fmt.Fprintf(&script, "echo '@@ block %d @@'\n%s", i+1, b)
	}
	script.WriteString("echo '@@ done @@'\n")
	if skipped != 1 || ran != 1 || len(blocks) < 5 {
		t.Fatalf("README.md has %d sh blocks, %d of them %q and %d %q: not the README this test knows",
			len(blocks), skipped, readmeTestCommand, ran, readmeRunCommand)
	}
	outPath := filepath.Join(t.TempDir(), "out")
	outFile, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = repo
	// curl draws its progress meter when its output is not a terminal, as
	// here and never when pasted; a .curlrc of the test's turns it off.
	curlHome := t.TempDir()
	if err := os.WriteFile(filepath.Join(curlHome, ".curlrc"), []byte("no-progress-meter\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "CURL_HOME="+curlHome)
	// An *os.File, not a pipe: Wait must not wait for what the blocks left
	// running in the background holding it.
	cmd.Stdout, cmd.Stderr = outFile, outFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	runErr := cmd.Run()
	// Whatever a block started and did not stop ends with the group.
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	out, _ := os.ReadFile(outPath)
	log, _ := os.ReadFile(filepath.Join(repo, "all.log"))
	if runErr != nil {
		t.Fatalf("the README's blocks failed: %v\n%s\nall.log:\n%s", runErr, out, tail(log, 40))
	}
	checkReadmeOutput(t, string(out), string(log))

	// What the blocks wrote is ignored by git, so a clone stays clean.
	if st, err := exec.Command("git", "-C", repo, "ls-files", "--others", "--exclude-standard").CombinedOutput(); err != nil || len(st) > 0 {
		t.Errorf("the README's commands left files .gitignore does not list: %v\n%s", err, st)
	}
	fmt.Printf("%s", out)
}

// checkReadmeOutput checks what the README says each block shows.
func checkReadmeOutput(t *testing.T, out, log string) {
	t.Helper()
	for _, want := range []string{
		`"service":"orgmanager"`, // the two commands' platform
		"svc-pf ",                // --version
		"imported 12, skipped 9", // feed build
		"www.blackhattoolz.com: match blackhattoolz.com", // feed lookup
		`"service":"node","status":"ok"`,                 // the node's /health
		`"blocked_categories":[4]`,                       // the effective settings
		`"verdict":"block"`, `"reason":"category"`,
		"401\n", `{"error":"this token may not do that"}`, `"role":"org-viewer","org":"acme"`, // access
		"EDE: 17 (Filtered)", "category:4 feed=threats key=blackhattoolz.com",
		`"name":"questions"`,
		"@@ done @@",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the README's output does not show %q:\n%s", want, out)
		}
	}
	if !regexp.MustCompile(`(?m)^[0-9a-f]{32}\s+acme\s+-\s+127\.0\.0\.2/32\s+alice\s`).MatchString(out) {
		t.Errorf("svc-pf ipmapper sessions does not show alice's session:\n%s", out)
	}
	// The two digs in order: alice's NXDOMAIN, then 127.0.0.3's answer
	// from the forwarder.
	nx := strings.Index(out, "status: NXDOMAIN")
	ok := strings.Index(out, "status: NOERROR")
	answer := regexp.MustCompile(`(?m)^www\.blackhattoolz\.com\.\s+\d+\s+IN\s+A\s+` + regexp.QuoteMeta(upstreamA) + `$`)
	if nx < 0 || ok < nx || !answer.MatchString(out[ok:]) {
		t.Errorf("dig: want alice's NXDOMAIN, then 127.0.0.3's NOERROR with the forwarder's %s:\n%s", upstreamA, out)
	}
	// Started, stopped, and nothing to warn about: a first start and its
	// deploys are quiet.
	if !strings.Contains(log, `msg="svc-pf all stopped"`) {
		t.Errorf("all.log does not end with a clean stop:\n%s", log)
	}
	for _, bad := range []string{"level=WARN", "level=ERROR"} {
		if strings.Contains(log, bad) {
			t.Errorf("all.log has %s:\n%s", bad, log)
		}
	}
}

// shBlocks returns the bodies of the ```sh blocks of a Markdown text, in
// order, each ending with a newline.
func shBlocks(md string) []string {
	var blocks []string
	var cur *strings.Builder
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && line == "```sh":
			cur = &strings.Builder{}
		case cur != nil && line == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return blocks
}

// copyRepository copies the files git tracks, or would track (not
// ignored), into a new git repository: what a clone of the next commit
// holds. Its index holds them all, so `git ls-files --others` afterwards
// lists what the README's commands wrote outside .gitignore.
func copyRepository(t *testing.T) string {
	t.Helper()
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("TestReadme copies the repository with git: git rev-parse: %v", err)
	}
	src := strings.TrimSpace(string(top))
	list, err := exec.Command("git", "-C", src, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dst := filepath.Join(t.TempDir(), "svc-pf")
	n := 0
	for name := range strings.SplitSeq(strings.TrimRight(string(list), "\x00"), "\x00") {
		fi, err := os.Lstat(filepath.Join(src, name))
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the work tree, or not a file
		}
		b, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		to := filepath.Join(dst, name)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 50 {
		t.Fatalf("copied %d files from %s: not the repository?", n, src)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}} {
		if out, err := exec.Command("git", append([]string{"-C", dst}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	return dst
}

// startForwarder answers on 127.0.0.1:53 (UDP), where the namespace's
// resolv.conf sends the platform's forwarded queries: upstreamA for every
// A question, NODATA for the rest.
func startForwarder(t *testing.T) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:53")
	if err != nil {
		t.Fatalf("the stand-in forwarder on 127.0.0.1:53: %v", err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(req)
		if q := req.Question; len(q) == 1 && q[0].Qtype == dns.TypeA {
			m.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
				A: net.ParseIP(upstreamA)}}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
