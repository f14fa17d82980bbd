package node

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
	"github.com/svc-pf/svc-pf/internal/simulator"
)

// TestNodeStatusNamesAsSimulator: the node's status payload names what it
// shares with the simulator's info payload as the simulator does
// (snake_case), at the top level and in each feed.
func TestNodeStatusNamesAsSimulator(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	n, err := New(Config{Feeds: []feeds.FeedConfig{{Name: "f", URL: t.TempDir(), PollInterval: time.Second}}, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	sim, err := simulator.New(simulator.Config{Engine: n.Engine(), Feeds: n.Feeds(), Sizes: n, Workers: 1, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	if err := sim.Maintain(t.Context()); err != nil {
		t.Fatal(err)
	}
	decode := func(v any) map[string]any {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	node, info := decode(n.Status()), decode(sim.Info())
	for _, k := range []string{"sessions", "settings_documents", "feeds"} {
		if _, ok := info[k]; !ok {
			t.Fatalf("the simulator's info has no %q: %v", k, info)
		}
		if _, ok := node[k]; !ok {
			t.Errorf("the node's status has no %q (the simulator's name): %v", k, node)
		}
	}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if k != strings.ToLower(k) {
					t.Errorf("the node's status: %s%s is not snake_case", prefix, k)
				}
				walk(prefix+k+".", x)
			}
		case []any:
			for _, x := range v {
				walk(prefix, x)
			}
		}
	}
	walk("", node)
	feed := node["feeds"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "version", "entries"} {
		if _, ok := feed[k]; !ok {
			t.Errorf("the node's feed status has no %q: %v", k, feed)
		}
	}
}
