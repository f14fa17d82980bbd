package feedbuild

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// realFeeds is ../shared/data/feeds seen from the repository root: the
// real filter lists (/work/shared/data/feeds/README.md). They are read in
// place, never copied into the repository. CI checks ../shared out beside
// the repository, so a missing directory is a failure, not a skip.
func realFeeds(t testing.TB) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "shared", "data", "feeds"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "easylist.txt")); err != nil {
		t.Fatalf("the real filter lists are missing (%v): they belong in ../shared/data/feeds beside the repository", err)
	}
	return dir
}

// realSources is the feed docs/feeds.md and bench/feeds.sh build: EasyList
// (1 advertising), EasyPrivacy (2 tracking), uBlock badware (3 badware),
// URLhaus (4 malware) read twice — its host lines by the domains importer,
// its ||host/path^$all rules by the adblock importer — so that together
// they take the whole list.
func realSources(dir string) []Source {
	return []Source{
		{Format: FormatAdblock, Codes: []uint16{1}, Path: filepath.Join(dir, "easylist.txt")},
		{Format: FormatAdblock, Codes: []uint16{2}, Path: filepath.Join(dir, "easyprivacy.txt")},
		{Format: FormatAdblock, Codes: []uint16{3}, Path: filepath.Join(dir, "badware.min.txt")},
		{Format: FormatDomains, Codes: []uint16{4}, Path: filepath.Join(dir, "urlhaus-filter-online.txt")},
		{Format: FormatAdblock, Codes: []uint16{4}, Path: filepath.Join(dir, "urlhaus-filter-online.txt")},
	}
}

// TestRealLists builds the feed from the real lists. The counts are pinned:
// the lists are fixed files, so a change here is a change of an importer —
// check it, then update the counts here and in docs/feeds.md.
func TestRealLists(t *testing.T) {
	lists := realFeeds(t)
	dir := filepath.Join(t.TempDir(), "threats")
	res := build(t, BuildConfig{Dir: dir, Name: "threats",
		Titles:  map[uint16]string{1: "advertising", 2: "tracking", 3: "badware", 4: "malware"},
		Sources: realSources(lists)})

	want := []Stats{
		{Imported: 44358, Skipped: map[Cause]int{CauseCosmetic: 23807, CauseOption: 5805, CauseNotHostRule: 1325, CauseException: 713,
			CauseComment: 259, CausePattern: 122, CauseIP: 104, CauseRegex: 23, CauseSingleLabel: 2}},
		{Imported: 45606, Skipped: map[Cause]int{CauseOption: 4258, CauseNotHostRule: 3302, CauseException: 761, CausePattern: 392,
			CauseComment: 388, CauseCosmetic: 30, CauseIP: 12, CauseRegex: 7, CauseBadfilter: 2}},
		{Imported: 3193, Skipped: map[Cause]int{CausePattern: 370, CauseNotHostRule: 316, CauseComment: 203, CauseRegex: 152,
			CauseOption: 144, CauseCosmetic: 67, CauseIP: 5, CauseSingleLabel: 4, CauseException: 2}},
		{Imported: 601, Skipped: map[Cause]int{CauseAdblockRule: 3346, CauseIP: 2307, CauseComment: 6}},
		{Imported: 3346, Skipped: map[Cause]int{CauseNotHostRule: 2908, CauseComment: 6}},
	}
	for i, s := range res.Sources {
		t.Logf("%s: %s", s.Source, &s.Stats)
		if s.Stats.Imported != want[i].Imported || !reflect.DeepEqual(s.Stats.Skipped, want[i].Skipped) || len(s.Stats.Notes) != 0 {
			t.Errorf("%s: %s\nwant %s", s.Source, &s.Stats, &want[i])
		}
		// Every non-blank line is imported or skipped with a cause.
		if n := nonBlankLines(t, s.Source.Path); s.Stats.Imported+s.Stats.SkippedTotal() != n {
			t.Errorf("%s: imported %d + skipped %d, but the file has %d non-blank lines", s.Source, s.Stats.Imported, s.Stats.SkippedTotal(), n)
		}
	}
	// URLhaus: the two importers together take every host line and every
	// rule, and skip only IP addresses and comments.
	dom, adb := res.Sources[3].Stats, res.Sources[4].Stats
	if dom.Skipped[CauseAdblockRule] != adb.Imported || adb.Skipped[CauseNotHostRule] != dom.Imported+dom.Skipped[CauseIP] {
		t.Errorf("URLhaus: domains %s and adblock %s do not add up to the whole list", &dom, &adb)
	}
	paths := 0
	f, content, err := loadFeed(dir)
	if err != nil {
		t.Fatal(err)
	}
	for k := range content {
		if strings.Contains(k, "/") {
			paths++
		}
	}
	t.Logf("%d keys (%d with a path), snapshot %d bytes", res.Keys, paths, res.SnapshotSize)
	if res.Keys != 96447 || len(content) != res.Keys || paths != 8560 {
		t.Errorf("%d keys, %d with a path; want 96447 and 8560", res.Keys, paths)
	}

	for _, c := range []struct {
		name, path, key string
		codes           []uint16
	}{
		{"0014b04291.com", "", "0014b04291.com", []uint16{1}},                    // EasyList ||name^
		{"cdn.0014b04291.com", "", "0014b04291.com", []uint16{1}},                // and everything under it
		{"gamdom.com", "/?utm_source=x", "gamdom.com/?utm_source=", []uint16{1}}, // EasyList ||name/path$document
		{"00px.net", "", "00px.net", []uint16{2}},                                // EasyPrivacy
		{"vlc.de", "", "vlc.de", []uint16{3}},                                    // badware ||name^$doc
		{"111101111.ru", "", "111101111.ru", []uint16{4}},                        // URLhaus host line
		{"2024.sci-hub.se", "/2294/7a43bb4cf6c57229b02a9604a1f4614e/skidmore1966.pdf", "2024.sci-hub.se/2294/7a43bb4cf6c57229b02a9604a1f4614e/skidmore1966.pdf", []uint16{4}},
		{"2024.sci-hub.se", "/", "", nil}, // a URLhaus path rule is not the whole host
		{"1.1.104.12", "", "", nil},       // URLhaus IP lines are skipped
		{"demand.supply", "", "", nil},    // ||demand.supply^$script: an option a DNS filter cannot enforce
		{"example.com", "", "", nil},
	} {
		m, _ := f.Index().Lookup(c.name, c.path)
		if key, codes := m.Key(), m.Codes; key != c.key || !slices.Equal(codes, c.codes) {
			t.Errorf("Lookup(%s%s) = %q %v, want %q %v", c.name, c.path, key, codes, c.key, c.codes)
		}
	}
	if titleOf(f, 4) != "malware" {
		t.Errorf("title of 4: %q", titleOf(f, 4))
	}

	// The same lists again: no new version. Without badware: a delta that
	// removes its keys (and takes code 3 off the keys it shared).
	if r := build(t, BuildConfig{Dir: dir, Name: "threats", Sources: realSources(lists)}); r.Written.Version != 0 {
		t.Fatalf("an unchanged rebuild wrote version %d", r.Written.Version)
	}
	srcs := slices.Delete(realSources(lists), 2, 3)
	r := build(t, BuildConfig{Dir: dir, Name: "threats", Sources: srcs})
	t.Logf("without badware: %s %d, %d lines (%d removed, %d changed), %d bytes against a %d-byte snapshot",
		r.Written.Type, r.Written.Version, r.Written.Entries, r.Removed, r.Changed, r.DeltaSize, r.SnapshotSize)
	if r.Written.Type != "delta" || r.Removed == 0 {
		t.Fatalf("without badware: %+v", r.Written)
	}
	without := Content{}
	for _, s := range srcs {
		if _, err := Import(s, func(e Entry) { without.Add(e.Key(), e.Codes) }); err != nil {
			t.Fatal(err)
		}
	}
	checkDir(t, dir, without, map[int64]Content{1: content})
}

func nonBlankLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, maxLine)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			n++
		}
	}
	return n
}

// BenchmarkBuildRealLists is the whole `feed build` of the real lists into
// a fresh directory: import, snapshot, write.
func BenchmarkBuildRealLists(b *testing.B) {
	lists := realFeeds(b)
	for b.Loop() {
		dir := b.TempDir()
		if _, err := Build(context.Background(), BuildConfig{Dir: dir, Name: "threats", Sources: realSources(lists)}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkImportEasyList is the adblock importer alone over EasyList.
func BenchmarkImportEasyList(b *testing.B) {
	src := Source{Format: FormatAdblock, Codes: []uint16{1}, Path: filepath.Join(realFeeds(b), "easylist.txt")}
	for b.Loop() {
		if _, err := Import(src, func(Entry) {}); err != nil {
			b.Fatal(err)
		}
	}
}
