package main

import (
	"bytes"
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestHelpNamesEveryJob: `svc-pf --help` lists every command, each with
// what it is for; the orgmanager's line names every API it serves.
func TestHelpNamesEveryJob(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"--help"}, &out, &out); code != 0 {
		t.Fatalf("exit %d: %s", code, out.String())
	}
	_, commands, ok := strings.Cut(out.String(), "Commands:\n")
	if !ok {
		t.Fatalf("no Commands: section:\n%s", out.String())
	}
	// A command's text runs from its name to the next command's.
	entry := regexp.MustCompile(`(?m)^  ([a-z]+) +`)
	jobs := map[string]string{}
	var names []string
	idx := entry.FindAllStringSubmatchIndex(commands, -1)
	for i, m := range idx {
		end := len(commands)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		name := commands[m[2]:m[3]]
		names = append(names, name)
		jobs[name] = strings.Join(strings.Fields(commands[m[1]:end]), " ")
	}
	want := map[string][]string{
		"orgmanager": {"organisations", "prefixes", "overrides", "settings", "deploys"},
		"ipmapper":   {"session table", "NATS", "ipmapper sessions"},
		"simulator":  {"categories", "verdict", "reason", "Lua"},
		"resolver":   {"DNS", "PowerDNS-compatible"},
		"activity":   {"collector", "ACTIVITY", "SQLite", "PostgreSQL"},
		"radius":     {"RADIUS accounting", "IP Mapper", "producer radius"},
		"all":        {"every service", "embedded NATS"},
		"check":      {"validate", "config", "SIGHUP"},
		"feed":       {"build", "serve", "look a name up"},
		"token":      {"create", "list", "revoke", "bearer tokens"},
		"version":    {"version"},
	}
	for name, words := range want {
		if !slices.Contains(names, name) {
			t.Errorf("--help does not list %s", name)
			continue
		}
		for _, w := range words {
			if !strings.Contains(jobs[name], w) {
				t.Errorf("--help on %s: %q does not say %q", name, jobs[name], w)
			}
		}
	}
	if len(names) != len(want) {
		t.Errorf("--help lists %v, want exactly %d commands", names, len(want))
	}
}
