package rpz

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// realFeeds is ../shared/data/feeds seen from the repository root: the
// real filter lists (/work/shared/data/feeds/README.md), read in place.
// CI checks ../shared out beside the repository, so a missing directory is
// a failure, not a skip.
func realFeeds(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "data", "feeds"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "urlhaus-filter-online.txt")); err != nil {
		t.Fatalf("the real filter lists are missing (%v): they belong in ../shared/data/feeds beside the repository", err)
	}
	return dir
}

// TestRealData parses an RPZ zone made from the real URLhaus list. The
// shared data holds no RPZ-format file (adblock lists, a hosts-style list
// and the Public Suffix List), so the test writes the zone an operator
// would derive from URLhaus — each host line a trigger for the name and
// its subdomains, NXDOMAIN — into a temporary directory, reading the list
// in place. The counts are pinned: the list is a fixed file.
func TestRealData(t *testing.T) {
	f, err := os.Open(filepath.Join(realFeeds(t), "urlhaus-filter-online.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var zone strings.Builder
	zone.WriteString("$TTL 300\n$ORIGIN urlhaus.rpz.\n@ SOA localhost. hostmaster.localhost. 2025102500 3600 600 86400 300\n@ NS localhost.\n")
	hosts, ips := 0, 0
	var sample, sampleIP string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		// Host and IP lines only: '!' comments and ||host/path^ rules are
		// not names.
		if line == "" || strings.ContainsAny(line, "!|/^$") {
			continue
		}
		fmt.Fprintf(&zone, "%s CNAME .\n*.%s CNAME .\n", line, line)
		if strings.Trim(line, "0123456789.") == "" {
			ips++
			sampleIP = line
		} else {
			hosts++
			sample = line
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "urlhaus.rpz")
	if err := os.WriteFile(path, []byte(zone.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Zones: []ZoneConfig{{Name: "urlhaus", File: path}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	st := s.Status()[0]
	t.Logf("URLhaus as RPZ: %d host and %d IP lines → %+v", hosts, ips, st)
	// Every line is two triggers; the apex NS is zone data.
	if hosts != 601 || ips != 2307 || st.Triggers != 2*(hosts+ips) || st.Skipped[SkipZoneData] != 1 || len(st.Skipped) != 1 ||
		st.Serial != 2025102500 || st.Apex != "urlhaus.rpz" {
		t.Errorf("hosts %d ips %d status %+v", hosts, ips, st)
	}
	for _, name := range []string{sample, "www." + sample, sampleIP} {
		var d policy.Decision
		if !s.Check(&policy.Input{Domain: name}, &d) || d.Action != policy.ActionNXDomain {
			t.Errorf("%s: %+v", name, d)
		}
	}
	var d policy.Decision
	if s.Check(&policy.Input{Domain: "example.org"}, &d) {
		t.Errorf("example.org matched: %s", d.Rule())
	}
}
