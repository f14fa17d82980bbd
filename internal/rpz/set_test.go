package rpz

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.yaml.in/yaml/v3"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// zoneText is a zone of serial n whose trigger bad.example takes action.
func zoneText(serial int, action string) string {
	return fmt.Sprintf(`$ORIGIN rpz.example.
@ 60 SOA ns h %d 3600 600 86400 60
bad.example CNAME %s
`, serial, action)
}

// fileWriter writes a zone file with a distinct mtime on every write, so
// that a rewrite of the same size is seen as new whatever the file
// system's mtime granularity: the tests never depend on the clock.
type fileWriter struct {
	t    *testing.T
	path string
	n    int
}

func newFileWriter(t *testing.T, name string) *fileWriter {
	return &fileWriter{t: t, path: filepath.Join(t.TempDir(), name)}
}

func (w *fileWriter) write(text string) {
	w.t.Helper()
	if err := os.WriteFile(w.path, []byte(text), 0o644); err != nil {
		w.t.Fatal(err)
	}
	w.touch()
}

func (w *fileWriter) touch() {
	w.t.Helper()
	w.n++
	mt := time.Date(2030, 1, 1, 0, 0, w.n, 0, time.UTC)
	if err := os.Chtimes(w.path, mt, mt); err != nil {
		w.t.Fatal(err)
	}
}

// replace writes text to a new file and renames it over the zone file, as
// a deploy tool should; the mtime is the current file's.
func (w *fileWriter) replace(text string) {
	w.t.Helper()
	old, err := os.Stat(w.path)
	if err != nil {
		w.t.Fatal(err)
	}
	tmp := w.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Chtimes(tmp, old.ModTime(), old.ModTime()); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Rename(tmp, w.path); err != nil {
		w.t.Fatal(err)
	}
}

func newSet(t *testing.T, zones ...ZoneConfig) *Set {
	t.Helper()
	s, err := New(Config{Zones: zones})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// action is what the set does for name: its action and rule, or "-".
func action(s *Set, name string) string {
	d, ok := decide(s, name)
	if !ok {
		return "-"
	}
	return string(d.Action)
}

func TestReloadKeepsLastGood(t *testing.T) {
	w := newFileWriter(t, "op.rpz")
	w.write(zoneText(1, "."))
	s := newSet(t, ZoneConfig{Name: "op", File: w.path})
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if got := action(s, "bad.example"); got != "nxdomain" {
		t.Fatalf("initial: %s", got)
	}
	st := s.Status()[0]
	if st.Serial != 1 || st.Triggers != 1 || st.Apex != "rpz.example" || st.LoadedAt.IsZero() || st.LastError != "" {
		t.Fatalf("status %+v", st)
	}

	// An unchanged file is not read again.
	if err := s.Poll(); err != nil {
		t.Fatal(err)
	}
	if s.Status()[0].LoadedAt != st.LoadedAt {
		t.Error("an unchanged file was reloaded")
	}

	// A change is picked up.
	w.write(zoneText(2, "rpz-drop."))
	if err := s.Poll(); err != nil {
		t.Fatal(err)
	}
	if got := action(s, "bad.example"); got != "drop" {
		t.Fatalf("after edit: %s", got)
	}

	// A broken edit keeps the last good version and reports why.
	w.write(zoneText(3, "rpz-drop.") + "oops.example A not-an-address\n")
	err := s.Poll()
	if err == nil || !strings.Contains(err.Error(), "line: 4") {
		t.Fatalf("Poll after a broken edit: %v", err)
	}
	if got := action(s, "bad.example"); got != "drop" {
		t.Fatalf("after broken edit: %s", got)
	}
	st = s.Status()[0]
	if st.Serial != 2 || !strings.Contains(st.LastError, "not-an-address") || st.ErrorAt.IsZero() {
		t.Fatalf("status after broken edit %+v", st)
	}
	// The broken version is not parsed again; its error stays.
	if err := s.Poll(); err == nil {
		t.Fatal("the error vanished without a fix")
	}

	// The file disappears: still the last good version.
	if err := os.Remove(w.path); err != nil {
		t.Fatal(err)
	}
	if err := s.Poll(); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Fatalf("Poll without the file: %v", err)
	}
	if got := action(s, "bad.example"); got != "drop" {
		t.Fatalf("without the file: %s", got)
	}

	// A fix heals without a restart.
	w.write(zoneText(4, "*."))
	if err := s.Poll(); err != nil {
		t.Fatalf("Poll after the fix: %v", err)
	}
	st = s.Status()[0]
	if got := action(s, "bad.example"); got != "nodata" || st.Serial != 4 || st.LastError != "" || !st.ErrorAt.IsZero() {
		t.Fatalf("after fix: %s %+v", got, st)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() []error })
		if !ok {
			return err
		}
		err = u.Unwrap()[0]
	}
}

// TestReplacedByRename: a file renamed over the zone file is a new
// version even with the same size and mtime.
func TestReplacedByRename(t *testing.T) {
	w := newFileWriter(t, "op.rpz")
	w.write(zoneText(1, "."))
	s := newSet(t, ZoneConfig{Name: "op", File: w.path})
	w.replace(zoneText(2, "."))
	if err := s.Poll(); err != nil {
		t.Fatal(err)
	}
	if st := s.Status()[0]; st.Serial != 2 {
		t.Fatalf("serial %d after a rename", st.Serial)
	}
}

// TestMissingAtStart: New does not fail for a zone it cannot load; the
// zone matches nothing until its file appears.
func TestMissingAtStart(t *testing.T) {
	w := newFileWriter(t, "late.rpz")
	other := newFileWriter(t, "other.rpz")
	other.write(zoneText(9, "rpz-tcp-only."))
	s := newSet(t, ZoneConfig{Name: "late", File: w.path}, ZoneConfig{Name: "other", File: other.path})
	if s.Err() == nil {
		t.Fatal("no error for a missing file")
	}
	if got := action(s, "bad.example"); got != "truncate" {
		t.Fatalf("with the first zone missing: %s", got)
	}
	st := s.Status()
	if st[0].LastError == "" || !st[0].LoadedAt.IsZero() || st[1].LastError != "" || st[1].Serial != 9 {
		t.Fatalf("status %+v", st)
	}
	w.write(zoneText(1, "."))
	if err := s.Poll(); err != nil {
		t.Fatal(err)
	}
	// The first zone decides again, in config order.
	if got := action(s, "bad.example"); got != "nxdomain" {
		t.Fatalf("after the file appeared: %s", got)
	}
}

// TestRun: Run picks a change up on its own. It waits for the change with
// a generous deadline; nothing is asserted about how long that takes.
func TestRun(t *testing.T) {
	w := newFileWriter(t, "op.rpz")
	w.write(zoneText(1, "."))
	s := newSet(t, ZoneConfig{Name: "op", File: w.path, PollInterval: minPollInterval})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()

	w.write(zoneText(2, "rpz-drop."))
	deadline := time.Now().Add(30 * time.Second)
	for s.Status()[0].Serial != 2 {
		if time.Now().After(deadline) {
			t.Fatal("Run did not reload the changed file")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := action(s, "bad.example"); got != "drop" {
		t.Fatalf("after reload: %s", got)
	}
	if err := s.Run(ctx); err == nil {
		t.Error("a second Run was accepted")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestConcurrentCheckAndReload runs queries while zones are swapped;
// with -race it checks that the read path needs no lock. Every answer
// must come from one whole version.
func TestConcurrentCheckAndReload(t *testing.T) {
	w := newFileWriter(t, "op.rpz")
	w.write(zoneText(1, "."))
	s := newSet(t, ZoneConfig{Name: "op", File: w.path})
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 8 {
		wg.Go(func() {
			var d policy.Decision
			in := policy.Input{Domain: "bad.example"}
			for !stop.Load() {
				d.Reset()
				if !s.Check(&in, &d) {
					bad.Add(1)
					continue
				}
				switch d.Rule() {
				case "rpz:op trigger=bad.example action=nxdomain", "rpz:op trigger=bad.example action=drop":
				default:
					bad.Add(1)
				}
				_ = s.Status()
			}
		})
	}
	for i := range 50 {
		act := "."
		if i%2 == 0 {
			act = "rpz-drop."
		}
		w.write(zoneText(i+2, act))
		if err := s.Poll(); err != nil {
			t.Error(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d checks saw no whole version", n)
	}
}

func TestRPZForPolicy(t *testing.T) {
	empty := newSet(t)
	if empty.RPZ() != nil || empty.Len() != 0 {
		t.Error("a set without zones must give policy a nil RPZ")
	}
	if _, ok := decide(empty, "x.example"); ok {
		t.Error("an empty set matched")
	}
	w := newFileWriter(t, "op.rpz")
	w.write(zoneText(1, "."))
	s := newSet(t, ZoneConfig{Name: "op", File: w.path})
	r := s.RPZ()
	if r == nil {
		t.Fatal("nil RPZ with a zone")
	}
	if _, ok := decide(r, "bad.example"); !ok {
		t.Error("the snapshot does not match")
	}
	if s.Snapshot() != r {
		t.Error("RPZ is not the current snapshot")
	}
}

func TestNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	s := newSet(t, ZoneConfig{Name: "dir", File: dir})
	if err := s.Err(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("err %v", err)
	}
}

func TestMetrics(t *testing.T) {
	w := newFileWriter(t, "op.rpz")
	w.write(zoneText(7, "."))
	reg := prometheus.NewRegistry()
	s, err := New(Config{Zones: []ZoneConfig{{Name: "op", File: w.path}}, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.m.triggers.WithLabelValues("op")); got != 1 {
		t.Errorf("triggers %v", got)
	}
	if got := testutil.ToFloat64(s.m.serial.WithLabelValues("op")); got != 7 {
		t.Errorf("serial %v", got)
	}
	w.write("broken")
	_ = s.Poll()
	if testutil.ToFloat64(s.m.failing.WithLabelValues("op")) != 1 || testutil.ToFloat64(s.m.failures.WithLabelValues("op")) != 1 {
		t.Error("a failed load is not counted")
	}
	if _, err := New(Config{Registerer: reg}); err == nil {
		t.Error("registering twice succeeded")
	}
}

func TestStatusJSON(t *testing.T) {
	w := newFileWriter(t, "op.rpz")
	w.write(zoneText(5, ".") + "x.rpz-ip CNAME .\n")
	s := newSet(t, ZoneConfig{Name: "op", File: w.path})
	b, err := json.Marshal(s.Status())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"name":"op"`, `"serial":5`, `"triggers":1`, `"skipped":{"rpz-ip":1}`, `"loaded_at":"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("%s lacks %s", b, want)
		}
	}
	if strings.Contains(string(b), "last_error") || strings.Contains(string(b), "error_at") {
		t.Errorf("%s reports an error", b)
	}
}

func TestConfig(t *testing.T) {
	ok := ZoneConfig{Name: "op", File: "/etc/svc-pf/op.rpz"}
	tests := []struct {
		name string
		cfg  Config
		want string // "" valid
	}{
		{"none", Config{}, ""},
		{"minimal", Config{Zones: []ZoneConfig{ok}}, ""},
		{"full", Config{Zones: []ZoneConfig{{Name: "op-1.a_b", File: "x", Origin: "rpz.example.", PollInterval: time.Second}}}, ""},
		{"no name", Config{Zones: []ZoneConfig{{File: "x"}}}, "rpz[0]: name: required"},
		{"bad name", Config{Zones: []ZoneConfig{{Name: "Op Zone", File: "x"}}}, "rpz[0]: name \"Op Zone\""},
		{"leading dash", Config{Zones: []ZoneConfig{{Name: "-op", File: "x"}}}, "starting with a letter or digit"},
		{"long name", Config{Zones: []ZoneConfig{{Name: strings.Repeat("a", 65), File: "x"}}}, "longer than 64"},
		{"no file", Config{Zones: []ZoneConfig{{Name: "op"}}}, "rpz[0]: file:"},
		{"bad origin", Config{Zones: []ZoneConfig{{Name: "op", File: "x", Origin: "a..b"}}}, "origin \"a..b\""},
		{"no unit", Config{Zones: []ZoneConfig{{Name: "op", File: "x", PollInterval: 5}}}, "write a unit"},
		{"negative", Config{Zones: []ZoneConfig{{Name: "op", File: "x", PollInterval: -time.Second}}}, "poll_interval"},
		{"duplicate", Config{Zones: []ZoneConfig{ok, ok}}, "rpz[1]: name \"op\" is already used by rpz[0]"},
		{"max records", Config{MaxRecords: -1}, "MaxRecords"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate: %v, want %q", err, tc.want)
			}
			if _, nerr := New(tc.cfg); (nerr == nil) != (err == nil) {
				t.Errorf("New and Validate disagree: %v / %v", nerr, err)
			}
		})
	}
}

// TestConfigYAML: the node config's `rpz:` list decodes strictly into
// []ZoneConfig.
func TestConfigYAML(t *testing.T) {
	doc := `
rpz:
  - name: operator
    file: /etc/svc-pf/operator.rpz
    poll_interval: 5s
  - name: vendor
    file: /etc/svc-pf/vendor.rpz
    origin: vendor.rpz.
`
	var node struct {
		RPZ []ZoneConfig `yaml:"rpz"`
	}
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&node); err != nil {
		t.Fatal(err)
	}
	want := []ZoneConfig{
		{Name: "operator", File: "/etc/svc-pf/operator.rpz", PollInterval: 5 * time.Second},
		{Name: "vendor", File: "/etc/svc-pf/vendor.rpz", Origin: "vendor.rpz."},
	}
	if fmt.Sprint(node.RPZ) != fmt.Sprint(want) {
		t.Fatalf("got %+v", node.RPZ)
	}
	if err := (Config{Zones: node.RPZ}).Validate(); err != nil {
		t.Fatal(err)
	}
	dec = yaml.NewDecoder(strings.NewReader("rpz:\n  - name: x\n    path: /x\n"))
	dec.KnownFields(true)
	if err := dec.Decode(&node); err == nil || !strings.Contains(err.Error(), "path") {
		t.Errorf("unknown key: %v", err)
	}
}

// The tests' handles on a Set: a check without waiting for a poll, and
// the configured zones' count.

// Check implements policy.RPZ over the current snapshot.
func (s *Set) Check(in *policy.Input, d *policy.Decision) bool {
	return s.cur.Load().Check(in, d)
}

// Len is the number of configured zones.
func (s *Set) Len() int { return len(s.zones) }

// Poll checks every zone's file now and reloads those that changed; it
// returns Err. Run calls the same check on each zone's timer; the tests must
// not wait for one.
func (s *Set) Poll() error {
	for _, zs := range s.zones {
		s.check(zs)
	}
	return s.Err()
}
