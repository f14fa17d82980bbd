package app

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/feedbuild"
)

// TestFeedServeConfig: `feed serve`'s file is loaded as every command's
// (strict keys, ${VAR} expansion, over the defaults) and each error names
// its key.
func TestFeedServeConfig(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SVCPF_TEST_FEEDS", "/srv/feeds")
	tests := []struct {
		name, yaml string
		want       []string // substrings of the error; none: accepted
		check      func(t *testing.T, c FeedServeConfig)
	}{
		{"minimal", "parents: [/var/lib/svc-pf/feeds]\n", nil, func(t *testing.T, c FeedServeConfig) {
			if c.Listen != feedbuild.DefaultListen || c.Log.Level != "info" || !slices.Equal(c.Parents, []string{"/var/lib/svc-pf/feeds"}) {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{"everything", "log: {level: debug, format: json}\nlisten: \"[::]:80\"\n" +
			"feeds: [{name: threats, dir: \"${SVCPF_TEST_FEEDS}/threats\"}, {name: ads.v2, dir: rel/ads}]\nparents: [\"${SVCPF_TEST_UNSET_FEEDS:-/x}\"]\n",
			nil, func(t *testing.T, c FeedServeConfig) {
				want := []feedbuild.ServedFeed{{Name: "threats", Dir: "/srv/feeds/threats"}, {Name: "ads.v2", Dir: "rel/ads"}}
				if c.Listen != "[::]:80" || !slices.Equal(c.Feeds, want) || !slices.Equal(c.Parents, []string{"/x"}) || c.Log.Format != "json" {
					t.Errorf("got %+v", c)
				}
			}},
		{"nothing to serve", "log: {level: info}\n", []string{"feeds and parents: both empty"}, nil},
		{"unknown key", "parents: [/x]\nfeed: []\n", []string{`unknown key "feed"`}, nil},
		{"unknown key in a feed", "feeds: [{name: a, dir: /x, url: /y}]\n", []string{`unknown key "url"`}, nil},
		{"unset variable", "parents: [\"${SVCPF_TEST_UNSET_FEEDS}\"]\n", []string{"${SVCPF_TEST_UNSET_FEEDS} is not set"}, nil},
		{"bad listen", "listen: 8087\nparents: [/x]\n", []string{`listen "8087": want ip:port`}, nil},
		{"bad port", "listen: 127.0.0.1:http\nparents: [/x]\n", []string{`listen "127.0.0.1:http": the port must be a number`}, nil},
		{"big port", "listen: 127.0.0.1:65536\nparents: [/x]\n", []string{"the port must be a number from 0 to 65535"}, nil},
		{"empty listen", "listen: ''\nparents: [/x]\n", []string{"listen is required"}, nil},
		{"bad names", "feeds: [{name: a/b, dir: /x}, {dir: /y}, {name: a/b, dir: /z}, {name: ok}]\nparents: ['']\nlog: {level: loud}\n",
			[]string{`feeds[0].name "a/b"`, "feeds[1].name is required", `feeds[2].name "a/b"`, "feeds[3].dir is required", "parents[0] is empty", `log.level "loud"`}, nil},
		{"duplicate name", "feeds: [{name: t, dir: /x}, {name: t, dir: /y}]\n", []string{`feeds[1].name "t": also feeds[0]'s`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tt.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, err := LoadChecked(path, true, DefaultFeedServeConfig)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				tt.check(t, cfg)
				return
			}
			if err == nil {
				t.Fatalf("accepted: %+v", cfg)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
