package feedbuild

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

// writeList writes a source file and returns its path.
func writeList(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// names is a domain list of n names name<i>.example, i from first.
func names(first, n int) string {
	var b strings.Builder
	for i := first; i < first+n; i++ {
		b.WriteString("name")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString(string(rune('a' + i%26)))
		b.WriteString(".")
		b.WriteString(itoa(i))
		b.WriteString(".example\n")
	}
	return b.String()
}

func itoa(i int) string { return strconv.Itoa(i) }

// contentOf is what the domains text means under codes.
func contentOf(t *testing.T, parts ...any) Content {
	t.Helper()
	c := Content{}
	for i := 0; i < len(parts); i += 2 {
		text, codes := parts[i].(string), parts[i+1].([]uint16)
		if _, err := ImportReader(FormatDomains, codes, strings.NewReader(text), func(e Entry) { c.Add(e.Key(), e.Codes) }); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { c.t = c.t.Add(time.Minute); return c.t }

func build(t *testing.T, cfg BuildConfig) *BuildResult {
	t.Helper()
	res, err := Build(context.Background(), cfg)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	return res
}

// checkDir verifies the directory as a reader sees it: a valid manifest
// whose every file (versions and catch-up) exists with its SHA-256, whose
// replay gives want, and from which a client at each earlier version in
// history catches up to want by the manifest's plan.
func checkDir(t *testing.T, dir string, want Content, history map[int64]Content) *feed.Manifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, feed.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := feed.DecodeManifest(data); err != nil {
		t.Fatalf("internal/feed refuses the manifest: %v", err)
	}
	m, err := feed.DecodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range slices.Concat(m.Versions, m.CatchUp) {
		b, err := os.ReadFile(filepath.Join(dir, v.File))
		if err != nil {
			t.Fatalf("version %d: %v", v.Version, err)
		}
		if sha256Hex(b) != v.SHA256 {
			t.Fatalf("version %d: %s does not match its SHA-256", v.Version, v.File)
		}
	}
	// The lineage: every entry's content checksum is its version's
	// content, and a delta's base the content of the version before it.
	contentAt := func(v int64) (Content, bool) {
		if v == m.Latest() {
			return want, true
		}
		c, ok := history[v]
		return c, ok
	}
	for _, v := range slices.Concat(m.Versions, m.CatchUp) {
		if c, ok := contentAt(v.Version); !ok || v.ContentSHA256 != feed.ContentSHA256(c.snapshotLines()) {
			t.Fatalf("version %d (%s): content_sha256 %q is not its content's", v.Version, v.Type, v.ContentSHA256)
		}
		if c, ok := contentAt(v.Version - 1); v.Type == feed.TypeDelta && ok && v.BaseSHA256 != feed.ContentSHA256(c.snapshotLines()) {
			t.Fatalf("delta %d: base_sha256 %q is not version %d's content", v.Version, v.BaseSHA256, v.Version-1)
		}
	}
	_, got, err := loadFeed(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("replaying version %d gives %d keys, want %d", m.Latest(), len(got), len(want))
	}
	for v, c := range history {
		client := maps.Clone(c)
		plan := planFrom(m, heldAt(history, v))
		if err := applyFiles(dir, client, plan); err != nil {
			t.Fatalf("client at %d: %v", v, err)
		}
		if !maps.EqualFunc(client, want, slices.Equal) {
			t.Fatalf("client at %d after %d files: %d keys, want %d", v, len(plan), len(client), len(want))
		}
	}
	return m
}

// loadFeed reads the feed at url (a directory or an http URL) as a node
// does, and returns it with its content as a map.
func loadFeed(url string) (*feeds.Loaded, Content, error) {
	l, err := feeds.Load(context.Background(), feeds.LoadConfig{URL: url})
	if err != nil {
		return nil, nil, err
	}
	return l, indexContent(l.Index()), nil
}

// titleOf is the title the loaded feed gives code, or "".
func titleOf(l *feeds.Loaded, code uint16) string {
	for _, c := range l.Set.Codes() {
		if c.Code == code {
			return c.Title
		}
	}
	return ""
}

// applyFiles is an independent reference for what a node does with the
// files of plan: each read from dir, checked against its manifest entry
// and applied to c in order (a snapshot replaces c).
func applyFiles(dir string, c Content, plan []feed.Version) error {
	for _, v := range plan {
		data, err := os.ReadFile(filepath.Join(dir, v.File))
		if err != nil {
			return err
		}
		if v.Type == feed.TypeSnapshot {
			clear(c)
		}
		err = decodeFile(data, v, func(l feed.Line) {
			if l.Remove {
				delete(c, l.Key())
				return
			}
			c[l.Key()] = l.Codes
		})
		if err != nil {
			return fmt.Errorf("version %d: %w", v.Version, err)
		}
	}
	return nil
}

// decodeFile checks data against the manifest's version (SHA-256 of the
// file as stored, the gzip bytes) and calls fn for each line.
func decodeFile(data []byte, v feed.Version, fn func(feed.Line)) error {
	if got := sha256Hex(data); got != v.SHA256 {
		return fmt.Errorf("%s: SHA-256 %s, but the manifest says %s: the file is damaged or was replaced", v.File, got, v.SHA256)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: %w", v.File, err)
	}
	n := 0
	err = feed.ReadLines(zr, v.Type == feed.TypeDelta, func(l feed.Line) error {
		n++
		fn(l)
		return nil
	})
	if err == nil {
		_, err = io.Copy(io.Discard, zr) // reach the gzip trailer: its CRC check
	}
	if err != nil {
		return fmt.Errorf("%s: %w", v.File, err)
	}
	if n != v.Entries {
		return fmt.Errorf("%s: %d lines, but the manifest says %d entries", v.File, n, v.Entries)
	}
	return nil
}

// planFrom is what a client holding held downloads to reach the latest
// version: the deltas the manifest proves apply to it, else the snapshot
// and every delta after it.
func planFrom(m *feed.Manifest, held feed.Version) []feed.Version {
	if run, c := m.DeltasFrom(held, len(m.Versions)); c == feed.Continues {
		return run
	}
	return m.Versions
}

// heldAt is what a client that loaded version v of history holds, as the
// manifest's entry for v names it.
func heldAt(history map[int64]Content, v int64) feed.Version {
	return feed.Version{Version: v, ContentSHA256: feed.ContentSHA256(history[v].snapshotLines())}
}

func versionsOf(vs []feed.Version) string {
	var parts []string
	for _, v := range vs {
		parts = append(parts, v.Type+":"+itoa(int(v.Version)))
	}
	return strings.Join(parts, " ")
}

func dirFiles(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if versionFileRE.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestBuildSequence: snapshot, delta, delta, --snapshot, delta, delta;
// the manifest, every file's SHA-256, the replay, catch-up from one and two
// versions behind a new snapshot, and pruning that keeps what the last
// three manifests name.
func TestBuildSequence(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "feed")
	clk := &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	history := map[int64]Content{}
	step := func(text string, snapshot bool, wantType string, wantVersions, wantCatchUp string, wantFiles []string) *BuildResult {
		t.Helper()
		src := writeList(t, tmp, "list.txt", text)
		res := build(t, BuildConfig{Dir: dir, Name: "test", Now: clk.now, Snapshot: snapshot,
			Titles:  map[uint16]string{5: "five"},
			Sources: []Source{{Format: FormatDomains, Codes: []uint16{5}, Path: src}}})
		want := contentOf(t, text, []uint16{5})
		if res.Written.Type != wantType {
			t.Fatalf("version %d is a %s, want a %s (delta %d bytes, snapshot %d)", res.Written.Version, res.Written.Type, wantType, res.DeltaSize, res.SnapshotSize)
		}
		m := checkDir(t, dir, want, history)
		if got := versionsOf(m.Versions); got != wantVersions {
			t.Fatalf("version %d: manifest versions %q, want %q", res.Written.Version, got, wantVersions)
		}
		if got := versionsOf(m.CatchUp); got != wantCatchUp {
			t.Fatalf("version %d: catch_up %q, want %q", res.Written.Version, got, wantCatchUp)
		}
		if got := dirFiles(t, dir); !slices.Equal(got, wantFiles) {
			t.Fatalf("version %d: files %q, want %q", res.Written.Version, got, wantFiles)
		}
		history[res.Written.Version] = want
		return res
	}
	base := names(0, 2000)
	r := step(base, false, "snapshot", "snapshot:1", "", []string{"snapshot_1.gz"})
	if r.Added != 2000 || r.Written.Entries != 2000 || !r.CodesWritten {
		t.Fatalf("first build: %+v", r)
	}
	r = step(base+"new1.example\n", false, "delta", "snapshot:1 delta:2", "", []string{"delta_2.gz", "snapshot_1.gz"})
	if r.Added != 1 || r.Written.Entries != 1 || r.CodesWritten {
		t.Fatalf("second build: %+v", r)
	}
	r = step(names(1, 1999)+"new2.example\n", false, "delta", "snapshot:1 delta:2 delta:3", "",
		[]string{"delta_2.gz", "delta_3.gz", "snapshot_1.gz"})
	if r.Added != 1 || r.Removed != 2 || r.Written.Entries != 3 {
		t.Fatalf("third build: %+v", r)
	}
	// A client at 3 or 2 catches up from the catch-up deltas (checkDir
	// replays them from history); the old chain stays for readers of the
	// two manifests before.
	step(names(1, 1999)+"new3.example\n", true, "snapshot", "snapshot:4", "delta:3 delta:4",
		[]string{"delta_2.gz", "delta_3.gz", "delta_4.gz", "snapshot_1.gz", "snapshot_4.gz"})
	m4 := readManifest(t, dir)
	if p := planFrom(m4, heldAt(history, 2)); versionsOf(p) != "delta:3 delta:4" {
		t.Fatalf("plan from 2: %s", versionsOf(p))
	}
	if p := planFrom(m4, heldAt(history, 1)); versionsOf(p) != "snapshot:4" {
		t.Fatalf("plan from 1: %s", versionsOf(p))
	}
	step(names(1, 1999)+"new4.example\n", false, "delta", "snapshot:4 delta:5", "delta:3 delta:4",
		[]string{"delta_2.gz", "delta_3.gz", "delta_4.gz", "delta_5.gz", "snapshot_1.gz", "snapshot_4.gz"})
	// Now no manifest of the last three names snapshot 1 or delta 2.
	r = step(names(1, 1999)+"new5.example\n", false, "delta", "snapshot:4 delta:5 delta:6", "delta:3 delta:4",
		[]string{"delta_3.gz", "delta_4.gz", "delta_5.gz", "delta_6.gz", "snapshot_4.gz"})
	if !slices.Equal(r.Pruned, []string{"delta_2.gz", "snapshot_1.gz"}) {
		t.Fatalf("pruned %q", r.Pruned)
	}
	if got := planFrom(readManifest(t, dir), heldAt(history, 3)); versionsOf(got) != "delta:4 delta:5 delta:6" {
		t.Fatalf("plan from 3: %s", versionsOf(got))
	}
	codes, err := os.ReadFile(filepath.Join(dir, feed.CodesFile))
	if err != nil || !strings.Contains(string(codes), `"title": "five"`) {
		t.Fatalf("feed-codes.json: %s %v", codes, err)
	}
}

func readManifest(t *testing.T, dir string) *feed.Manifest {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, feed.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	m, err := feed.DecodeManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestBuildChoosesSnapshot: a delta that is not smaller than a snapshot
// (everything replaced), or that would make the chain after the snapshot
// outweigh one, gives a snapshot.
func TestBuildChoosesSnapshot(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "feed")
	run := func(text string) *BuildResult {
		return build(t, BuildConfig{Dir: dir, Name: "test",
			Sources: []Source{{Format: FormatDomains, Codes: []uint16{1}, Path: writeList(t, tmp, "l", text)}}})
	}
	run(names(0, 500))
	if r := run(names(1000, 500)); r.Written.Type != feed.TypeSnapshot || r.DeltaSize < r.SnapshotSize {
		t.Fatalf("everything replaced: %s (delta %d, snapshot %d)", r.Written.Type, r.DeltaSize, r.SnapshotSize)
	}
	// Each build replaces 40% of the keys: each delta is smaller than a
	// snapshot, but two of them are not.
	r1 := run(names(1000, 300) + names(5000, 200))
	r2 := run(names(1000, 100) + names(5000, 200) + names(7000, 200))
	if r1.Written.Type != feed.TypeDelta || r2.Written.Type != feed.TypeSnapshot {
		t.Fatalf("chain: %s then %s (sizes %d/%d, %d/%d)", r1.Written.Type, r2.Written.Type, r1.DeltaSize, r1.SnapshotSize, r2.DeltaSize, r2.SnapshotSize)
	}
}

// TestBuildNoChange: the same sources again write no version; a new title
// alone updates feed-codes.json; --snapshot writes a version anyway.
func TestBuildNoChange(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "feed")
	cfg := BuildConfig{Dir: dir, Name: "test", Sources: []Source{{Format: FormatDomains, Codes: []uint16{1}, Path: writeList(t, tmp, "l", names(0, 10))}}}
	build(t, cfg)
	before, _ := os.ReadFile(filepath.Join(dir, feed.ManifestFile))
	r := build(t, cfg)
	after, _ := os.ReadFile(filepath.Join(dir, feed.ManifestFile))
	if r.Written.Version != 0 || r.CodesWritten || !bytes.Equal(before, after) {
		t.Fatalf("an unchanged build wrote version %d (codes %v)", r.Written.Version, r.CodesWritten)
	}
	cfg.Titles = map[uint16]string{1: "advertising"}
	if r := build(t, cfg); r.Written.Version != 0 || !r.CodesWritten {
		t.Fatalf("a title-only build: version %d, codes written %v", r.Written.Version, r.CodesWritten)
	}
	c, err := os.ReadFile(filepath.Join(dir, feed.CodesFile))
	if err != nil {
		t.Fatal(err)
	}
	codes, err := feed.DecodeCodes(c)
	if err != nil || !reflect.DeepEqual(codes.Codes, []feed.Code{{Code: 1, Title: "advertising"}}) {
		t.Fatalf("feed-codes.json: %s %v", c, err)
	}
	cfg.Titles = map[uint16]string{2: "tracking"}
	build(t, cfg)
	cfg.Titles = map[uint16]string{1: ""}
	build(t, cfg)
	c, _ = os.ReadFile(filepath.Join(dir, feed.CodesFile))
	if codes, _ := feed.DecodeCodes(c); !reflect.DeepEqual(codes.Codes, []feed.Code{{Code: 2, Title: "tracking"}}) {
		t.Fatalf("titles merged: %s", c)
	}
	cfg.Snapshot = true
	if r := build(t, cfg); r.Written.Version != 2 || r.Written.Type != feed.TypeSnapshot {
		t.Fatalf("--snapshot without a change: %+v", r.Written)
	}
	checkDir(t, dir, contentOf(t, names(0, 10), []uint16{1}), nil)
}

// TestBuildUnitesCodes: a key from several sources carries all their codes;
// removing a source removes its code from the key (a changed line).
func TestBuildUnitesCodes(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "feed")
	a := writeList(t, tmp, "a", "0.0.0.0 both.example only-a.example\n")
	b := writeList(t, tmp, "b", "||both.example^\n||only-b.example/path^\n")
	c := writeList(t, tmp, "c", "both.example,3;1\n")
	build(t, BuildConfig{Dir: dir, Name: "t", Sources: []Source{
		{Format: FormatHosts, Codes: []uint16{1}, Path: a},
		{Format: FormatAdblock, Codes: []uint16{2}, Path: b},
		{Format: FormatCSV, Path: c},
	}})
	want := Content{"both.example": {1, 2, 3}, "only-a.example": {1}, "only-b.example/path": {2}}
	checkDir(t, dir, want, nil)
	r := build(t, BuildConfig{Dir: dir, Name: "t", Sources: []Source{{Format: FormatHosts, Codes: []uint16{1}, Path: a}}})
	if r.Changed != 1 || r.Removed != 1 || r.Added != 0 {
		t.Fatalf("dropping sources: %+v", r)
	}
	checkDir(t, dir, Content{"both.example": {1}, "only-a.example": {1}}, map[int64]Content{1: want})
}

// TestBuildDeterministic: the same content gives the same bytes.
func TestBuildDeterministic(t *testing.T) {
	tmp := t.TempDir()
	src := []Source{{Format: FormatDomains, Codes: []uint16{1}, Path: writeList(t, tmp, "l", names(0, 300))}}
	r1 := build(t, BuildConfig{Dir: filepath.Join(tmp, "a"), Name: "t", Sources: src})
	r2 := build(t, BuildConfig{Dir: filepath.Join(tmp, "b"), Name: "t", Sources: src})
	if r1.Written.SHA256 != r2.Written.SHA256 {
		t.Fatal("two builds of one content differ")
	}
	raw, _ := os.ReadFile(filepath.Join(tmp, "a", "snapshot_1.gz"))
	var keys []string
	if err := decodeFile(raw, r1.Written, func(l feed.Line) { keys = append(keys, l.Key()) }); err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(keys) {
		t.Fatal("snapshot lines are not sorted by key")
	}
}

// TestBuildCrashBeforeManifest: a build that dies after writing its files
// but before the manifest's rename leaves the previous version readable and
// whole; the next build writes that version number again.
func TestBuildCrashBeforeManifest(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "feed")
	v1 := names(0, 100)
	cfg := BuildConfig{Dir: dir, Name: "t", Sources: []Source{{Format: FormatDomains, Codes: []uint16{1}, Path: writeList(t, tmp, "l", v1)}}}
	build(t, cfg)
	before, _ := os.ReadFile(filepath.Join(dir, feed.ManifestFile))

	writeList(t, tmp, "l", names(50, 100))
	crash := errors.New("simulated crash")
	cfg.Snapshot = true
	cfg.beforeManifest = func() error { return crash }
	if _, err := Build(context.Background(), cfg); !errors.Is(err, crash) {
		t.Fatalf("build: %v, want the crash", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, feed.ManifestFile))
	if !bytes.Equal(before, after) {
		t.Fatal("the manifest changed")
	}
	checkDir(t, dir, contentOf(t, v1, []uint16{1}), nil)

	cfg.beforeManifest = nil
	r := build(t, cfg)
	if r.Written.Version != 2 {
		t.Fatalf("after the crash: version %d, want 2", r.Written.Version)
	}
	checkDir(t, dir, contentOf(t, names(50, 100), []uint16{1}), map[int64]Content{1: contentOf(t, v1, []uint16{1})})
	for _, e := range mustReadDir(t, dir) {
		if strings.HasPrefix(e, tmpPrefix) {
			t.Fatalf("temporary file %s left", e)
		}
	}
}

func mustReadDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestBuildRefuses: a second build while one holds the lock, another
// feed's directory, a damaged file, bad configuration.
func TestBuildRefuses(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "feed")
	src := []Source{{Format: FormatDomains, Codes: []uint16{1}, Path: writeList(t, tmp, "l", names(0, 10))}}
	build(t, BuildConfig{Dir: dir, Name: "t", Sources: src})

	unlock, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(context.Background(), BuildConfig{Dir: dir, Name: "t", Sources: src})
	unlock()
	if err == nil || !strings.Contains(err.Error(), "another feed build is running") {
		t.Fatalf("concurrent build: %v", err)
	}

	for _, c := range []struct {
		cfg BuildConfig
		err string
	}{
		{BuildConfig{Dir: dir, Name: "other", Sources: src}, `holds feed "t", not "other"`},
		{BuildConfig{Dir: dir, Name: "t"}, "no source"},
		{BuildConfig{Dir: dir, Name: "a/b", Sources: src}, "feed name"},
		{BuildConfig{Name: "t", Sources: src}, "--dir"},
		{BuildConfig{Dir: dir, Name: "t", Sources: []Source{{Format: FormatDomains, Codes: []uint16{1}, Path: filepath.Join(tmp, "missing")}}}, "no such file"},
	} {
		if _, err := Build(context.Background(), c.cfg); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%+v: %v, want %q", c.cfg, err, c.err)
		}
	}

	snap := filepath.Join(dir, "snapshot_1.gz")
	data, _ := os.ReadFile(snap)
	if err := os.Rename(snap, snap+".away"); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), BuildConfig{Dir: dir, Name: "t", Sources: src}); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("missing snapshot: %v", err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(snap, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Build(context.Background(), BuildConfig{Dir: dir, Name: "t", Sources: src}); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Fatalf("damaged snapshot: %v", err)
	}
	if _, _, err := loadFeed(dir); err == nil {
		t.Fatal("a damaged feed loaded")
	}
}

// TestLineageFromAnOlderManifest: a directory whose manifest has no
// content_sha256 (written before the field existed) gets one on its next
// build, the delta's base being the previous content as read back; and
// Load refuses a manifest whose content_sha256 the files do not give.
func TestLineageFromAnOlderManifest(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "feed")
	run := func(text string) *BuildResult {
		return build(t, BuildConfig{Dir: dir, Name: "test",
			Sources: []Source{{Format: FormatDomains, Codes: []uint16{1}, Path: writeList(t, tmp, "l", text)}}})
	}
	first := names(0, 200)
	run(first)
	m := readManifest(t, dir)
	m.Versions[0].ContentSHA256 = ""
	writeManifestFile(t, dir, m)

	res := run(first + "new.example\n")
	if res.Written.Type != feed.TypeDelta {
		t.Fatalf("version 2 is a %s, want a delta", res.Written.Type)
	}
	m = readManifest(t, dir)
	old, want := contentOf(t, first, []uint16{1}), contentOf(t, first+"new.example\n", []uint16{1})
	if d := m.Versions[1]; d.BaseSHA256 != feed.ContentSHA256(old.snapshotLines()) || d.ContentSHA256 != feed.ContentSHA256(want.snapshotLines()) {
		t.Fatalf("delta 2: base %q content %q", d.BaseSHA256, d.ContentSHA256)
	}
	if m.Versions[0].ContentSHA256 != "" {
		t.Fatal("the older entry was given a content_sha256 it did not have")
	}

	m.Versions[1].ContentSHA256 = strings.Repeat("0", 64)
	writeManifestFile(t, dir, m)
	if _, _, err := loadFeed(dir); err == nil || !strings.Contains(err.Error(), "content_sha256") {
		t.Fatalf("Load of a manifest with a wrong content_sha256: %v", err)
	}
}

func writeManifestFile(t *testing.T, dir string, m *feed.Manifest) {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, feed.ManifestFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
}
