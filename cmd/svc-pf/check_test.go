package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCheckGoodFiles: every command's sample in testdata passes, and the
// message names the file and the command.
func TestCheckGoodFiles(t *testing.T) {
	for _, cmd := range []string{"orgmanager", "ipmapper", "simulator", "resolver", "activity", "all", "feed update", "feed serve"} {
		path := filepath.Join("testdata", "check", strings.ReplaceAll(cmd, " ", "-")+".yaml")
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append([]string{"check", "-c", path}, strings.Fields(cmd)...), &stdout, &stderr)
		if want := path + ": ok for " + cmd + "\n"; code != 0 || stdout.String() != want || stderr.Len() != 0 {
			t.Errorf("check %s: exit %d, stdout %q, stderr %q; want 0 and %q", cmd, code, stdout.String(), stderr.String(), want)
		}
	}
}

// TestCheckBadFiles: a file a command would refuse at start fails its
// check with exit 1 and every error, each naming its key.
func TestCheckBadFiles(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		cmd, yaml string
		want      []string // each on its own line of stderr
	}{
		{"orgmanager", "http:\n  adress: x\n", []string{`line 2: unknown key "adress"`}},
		{"orgmanager", "log:\n  level: loud\n  format: xml\n", []string{`log.level "loud": want debug, info, warn or error`, `log.format "xml": want text or json`}},
		{"ipmapper", "log: {level: info}\n", []string{"nats.url is required"}},
		{"simulator", "lua: {workers: 0}\nfeeds: [{name: 'a b', url: /x}]\n", []string{"lua.workers must be at least 1", `feeds[0]: name "a b"`}},
		{"resolver", "forwarders: [9.9.9.9]\nallow_from: [nope]\ndns: {listen: []}\nrpz: [{name: Z, file: z}]\n",
			[]string{`forwarders[0] "9.9.9.9": want ip:port`, `allow_from[0] "nope": want a CIDR`, "dns.listen: at least one ip:port is required", `rpz[0]: name "Z"`}},
		{"resolver", "forwarders: [9.9.9.9:53]\ndns:\n  listen: [127.0.0.1:53]\n  udp_batch: 100000\n", []string{"dns.udp_batch: 100000 is not within"}},
		{"activity", "nats: {url: ${SVCPF_CHECK_TEST_UNSET}}\n", []string{"line 1: ${SVCPF_CHECK_TEST_UNSET} is not set (set it, or write ${SVCPF_CHECK_TEST_UNSET:-default})"}},
		{"all", "resolver:\n  http: {address: 127.0.0.1:1}\n  forwarders: [9.9.9.9:53]\nsimulator: {feeds: [{name: a, url: /x}]}\n",
			[]string{"resolver.http: under svc-pf all", "simulator.feeds: under svc-pf all"}},
		{"all", "feeds: [{name: a, url: 'ftp://x/'}]\nresolver: {forwarders: [9.9.9.9:53]}\n", []string{"feeds[0] (a): url"}},
		{"all", "data_dir: a\n---\ndata_dir: b\n", []string{"more than one YAML document"}},
		{"feed update", "feed_sources: [{name: t, dir: d, interval: 1h, sources: ['adblock:3:ftp://x/l']}]\n", []string{"feed_sources[0]"}},
		{"feed update", "log: {level: info}\n", []string{"feed_sources: empty"}},
		{"feed serve", "log: {level: info}\n", []string{"feeds and parents: both empty"}},
		{"feed serve", "listen: 8087\nfeeds: [{name: a/b, dir: /x}, {name: c}]\nparents: ['']\n",
			[]string{`listen "8087": want ip:port`, `feeds[0].name "a/b"`, "feeds[1].dir is required", "parents[0] is empty"}},
		{"feed serve", "feeds: [{name: a, dir: /x, url: http://x/a/}]\n", []string{`unknown key "url"`}},
	}
	for i, tt := range tests {
		path := filepath.Join(dir, strings.ReplaceAll(tt.cmd, " ", "-")+"-"+string(rune('a'+i))+".yaml")
		if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), append(append([]string{"check"}, strings.Fields(tt.cmd)...), "--config", path), &stdout, &stderr)
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if code != 1 || stdout.Len() != 0 || lines[len(lines)-1] != path+": not valid for "+tt.cmd {
			t.Errorf("check %s %q: exit %d, stdout %q, stderr %q; want 1 and the errors", tt.cmd, tt.yaml, code, stdout.String(), stderr.String())
			continue
		}
		for _, w := range tt.want {
			found := false
			for _, l := range lines {
				found = found || strings.HasPrefix(l, path+": ") && strings.Contains(l, w)
			}
			if !found {
				t.Errorf("check %s %q: no line %q in\n%s", tt.cmd, tt.yaml, w, stderr.String())
			}
		}
	}
}

// TestCheckBindsNothing: a file whose listeners are busy passes its check
// (check neither binds nor connects), though the command would fail to
// start on it.
func TestCheckBindsNothing(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	addr := busy.Addr().String()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	dir := t.TempDir()
	files := map[string]string{
		"resolver": "dns: {listen: [" + addr + "]}\nforwarders: [" + addr + "]\nhttp: {address: " + addr + "}\n",
		"all":      "data_dir: " + dir + "\nnats: {listen: " + addr + "}\nnode: {http: {address: " + addr + "}}\nresolver: {forwarders: [9.9.9.9:53], dns: {listen: [" + addr + "]}}\n",
		"ipmapper": "nats: {url: nats://" + addr + "}\n",
		// A directory that does not exist yet passes too: feed update
		// may not have built it.
		"feed serve": "listen: " + addr + "\nfeeds: [{name: t, dir: " + filepath.Join(dir, "not-yet") + "}]\n",
	}
	for cmd, body := range files {
		path := filepath.Join(dir, strings.ReplaceAll(cmd, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if code := run(context.Background(), append([]string{"check", "-c", path}, strings.Fields(cmd)...), &out, &out); code != 0 {
			t.Errorf("check %s on busy addresses: exit %d: %s", cmd, code, out.String())
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != len(files) {
		t.Errorf("check wrote into the data directory: %v", entries)
	}
}

func TestCheckCommandLine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"check"}, 2, "usage: svc-pf check"},
		{[]string{"check", "-c", "x.yaml"}, 2, "usage: svc-pf check"},
		{[]string{"check", "-c", "x.yaml", "feed"}, 2, `unknown command "feed"`},
		{[]string{"check", "-c", filepath.Join(t.TempDir(), "none.yaml"), "resolver"}, 1, "no such file"},
		{[]string{"check", "-c", "x.yaml", "resolver", "extra"}, 2, "usage: svc-pf check"},
	} {
		var out bytes.Buffer
		if code := run(context.Background(), tt.args, &out, &out); code != tt.code || !strings.Contains(out.String(), tt.want) {
			t.Errorf("svc-pf %v: exit %d, %q; want %d and %q", tt.args, code, out.String(), tt.code, tt.want)
		}
	}
}

// TestCheckExamples: every example config in the repository passes the
// check of the command its name starts with (resolver.yaml,
// resolver-edge.yaml → resolver). The examples' ${VAR}s are given values,
// as an operator's environment would.
func TestCheckExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "config", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	more, _ := filepath.Glob(filepath.Join("testdata", "check", "*.yaml"))
	files = append(files, more...)
	if len(files) == 0 {
		t.Fatal("no example configs found")
	}
	for _, path := range files {
		base := strings.TrimSuffix(filepath.Base(path), ".yaml")
		cmd, _, _ := strings.Cut(base, "-")
		switch {
		case strings.HasPrefix(base, "feed-update"):
			cmd = "feed update"
		case strings.HasPrefix(base, "feed-serve"):
			cmd = "feed serve"
		}
		if _, ok := checker(cmd); !ok {
			t.Errorf("%s: its name does not start with a command (orgmanager, ipmapper, simulator, resolver, activity, all, feed-update, feed-serve)", path)
			continue
		}
		// A variable an example leaves without a default (a secret) is
		// one the operator must set: give it a value, as they would.
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`).FindAllStringSubmatch(string(data), -1) {
			t.Setenv(m[1], "set-by-the-operator")
		}
		var out bytes.Buffer
		if code := run(context.Background(), append([]string{"check", "-c", path}, strings.Fields(cmd)...), &out, &out); code != 0 {
			t.Errorf("check %s %s: exit %d:\n%s", cmd, path, code, out.String())
		}
	}
}

// TestConfigurationDocExamples: every YAML block of docs/configuration.md
// passes `svc-pf check` for the command its first line names
// ("# svc-pf check COMMAND").
func TestConfigurationDocExamples(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	for _, part := range strings.Split(string(doc), "```yaml\n")[1:] {
		body, _, ok := strings.Cut(part, "```")
		if !ok {
			t.Fatalf("an unterminated yaml block: %q", part)
		}
		first, _, _ := strings.Cut(body, "\n")
		cmd, ok := strings.CutPrefix(first, "# svc-pf check ")
		if !ok {
			t.Errorf("a yaml block without a first line \"# svc-pf check COMMAND\":\n%s", body)
			continue
		}
		path := filepath.Join(t.TempDir(), cmd+".yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if code := run(context.Background(), []string{"check", "-c", path, cmd}, &out, &out); code != 0 {
			t.Errorf("check %s on the block\n%s: exit %d: %s", cmd, body, code, out.String())
		}
		blocks++
	}
	if blocks == 0 {
		t.Fatal("no yaml blocks found")
	}
}
