package rpz

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-pf/svc-pf/internal/policy"
)

// Set holds the node's RPZ zones: the files of Config.Zones, each loaded
// at New and reloaded by Run when it changes. Its current Snapshot sits
// behind an atomic pointer, so that Check never takes a lock and a reload
// swaps one zone without disturbing queries in flight. A zone that fails
// to load keeps its last good version (or, never loaded, matches nothing)
// and reports the error in Status until a later version of the file
// loads: a transient fault heals without a restart.
type Set struct {
	cfg   Config
	log   *slog.Logger
	zones []*zoneState
	m     *metrics

	cur     atomic.Pointer[Snapshot]
	pubMu   sync.Mutex // serialises the zones' swaps of cur; readers never take it
	running atomic.Bool
}

// zoneState is one configured zone's loader.
type zoneState struct {
	cfg ZoneConfig
	pos int
	log *slog.Logger
	m   zoneMetrics

	loadMu sync.Mutex  // one check of the file at a time (Run and Poll)
	seen   os.FileInfo // the file version last read, loaded or not; guarded by loadMu

	mu     sync.Mutex // guards status and err
	status Status
	err    error // the current fault, nil when the last check succeeded
}

// Status is one zone's state, for the node's info and health endpoints.
type Status struct {
	Name string `json:"name"`
	File string `json:"file"`
	// Apex and Serial are the loaded version's SOA; Triggers, Records
	// and Skipped its parse report. All zero until a version loads.
	Apex     string             `json:"apex"`
	Serial   uint32             `json:"serial"`
	Triggers int                `json:"triggers"`
	Records  int                `json:"records"`
	Skipped  map[SkipReason]int `json:"skipped"`
	// LoadedAt is when the serving version loaded (zero: never).
	LoadedAt time.Time `json:"loaded_at,omitzero"`
	// LastError is why the latest check failed (empty when it did not);
	// ErrorAt is when that fault was first seen. The zone meanwhile
	// serves the version of LoadedAt.
	LastError string    `json:"last_error,omitempty"`
	ErrorAt   time.Time `json:"error_at,omitzero"`
}

// New validates cfg and loads every zone once, so that a node serves its
// zones from its first query. A zone that fails to load does not fail New:
// it matches nothing, Status and Err report why, and Run retries it. A
// caller that must not serve without its zones checks Err.
func New(cfg Config) (*Set, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	cfg.MaxRecords = cmp.Or(cfg.MaxRecords, DefaultMaxRecords)
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return buildSet(cfg, m), nil
}

// buildSet builds and loads a Set over validated, defaulted cfg.
func buildSet(cfg Config, m *metrics) *Set {
	s := &Set{cfg: cfg, log: cfg.Logger.With("component", "rpz"), m: m}
	snap := &Snapshot{zones: make([]*Zone, len(cfg.Zones))}
	for i, zc := range cfg.Zones {
		zc.PollInterval = cmp.Or(zc.PollInterval, DefaultPollInterval)
		zs := &zoneState{cfg: zc, pos: i, log: s.log.With("zone", zc.Name, "file", zc.File), m: m.zone(zc.Name)}
		zs.status = Status{Name: zc.Name, File: zc.File, Skipped: map[SkipReason]int{}}
		s.zones = append(s.zones, zs)
		// Until a version loads, the zone is there and matches nothing.
		snap.zones[i] = &Zone{name: zc.Name, file: zc.File}
	}
	s.cur.Store(snap)
	for _, zs := range s.zones {
		s.check(zs)
	}
	return s
}

// Snapshot returns the current zones: one state for a whole decision.
func (s *Set) Snapshot() *Snapshot { return s.cur.Load() }

// RPZ returns the value for policy.View.RPZ and policy.Input.RPZ: the
// current snapshot, or nil when no zone is configured, so that the trace
// says "not configured" rather than "no match". (A nil *Snapshot in the
// interface would not be nil.)
func (s *Set) RPZ() policy.RPZ {
	if s == nil || len(s.zones) == 0 {
		return nil
	}
	return s.cur.Load()
}

// Status returns every zone's state in config order.
func (s *Set) Status() []Status {
	out := make([]Status, len(s.zones))
	for i, zs := range s.zones {
		zs.mu.Lock()
		out[i] = zs.status
		out[i].Skipped = maps.Clone(zs.status.Skipped)
		zs.mu.Unlock()
	}
	return out
}

// Err joins the current faults of the zones (nil when every zone's latest
// check succeeded).
func (s *Set) Err() error {
	var errs []error
	for _, zs := range s.zones {
		zs.mu.Lock()
		if zs.err != nil {
			errs = append(errs, zs.err)
		}
		zs.mu.Unlock()
	}
	return errors.Join(errs...)
}

// Run checks each zone's file every poll interval until ctx is done, then
// returns nil.
func (s *Set) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("rpz: Run called twice")
	}
	var wg sync.WaitGroup
	for _, zs := range s.zones {
		wg.Go(func() {
			t := time.NewTicker(zs.cfg.PollInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					s.check(zs)
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// errChanged: the file changed while it was read; the next check reads
// the new version.
var errChanged = errors.New("the file changed while it was read")

// check reloads zs when its file is not the version last read. The
// version is the file's identity (a rename replaces it), size and mtime;
// a version that failed is not read again, so a broken file costs one
// parse and one log line, not one per poll.
func (s *Set) check(zs *zoneState) {
	zs.loadMu.Lock()
	defer zs.loadMu.Unlock()
	fi, err := os.Stat(zs.cfg.File)
	if err != nil {
		zs.seen = nil // whatever comes back is read
		s.failed(zs, err)
		return
	}
	if zs.seen != nil && sameVersion(zs.seen, fi) {
		return
	}
	start := time.Now()
	z, read, err := s.load(zs)
	if errors.Is(err, errChanged) {
		zs.log.Debug("rpz zone file changed while read; reading it again at the next poll")
		return
	}
	zs.seen = read
	if err != nil {
		s.failed(zs, err)
		return
	}
	s.publish(zs.pos, z)
	s.loaded(zs, z, time.Since(start))
}

// load parses the file. It returns the version it read; errChanged when
// the file was written or replaced meanwhile, so that a half-written file
// (an operator editing in place) is never published.
func (s *Set) load(zs *zoneState) (*Zone, os.FileInfo, error) {
	f, err := os.Open(zs.cfg.File)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !before.Mode().IsRegular() {
		return nil, before, fmt.Errorf("rpz zone %q: %s is not a regular file", zs.cfg.Name, zs.cfg.File)
	}
	z, perr := Parse(f, ParseOptions{
		Name: zs.cfg.Name, File: zs.cfg.File, Origin: zs.cfg.Origin, MaxRecords: s.cfg.MaxRecords})
	after, err := os.Stat(zs.cfg.File)
	if err != nil || !sameVersion(before, after) {
		return nil, nil, errChanged
	}
	return z, before, perr
}

func sameVersion(a, b os.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime())
}

// publish swaps zone i in a copy of the current snapshot.
func (s *Set) publish(i int, z *Zone) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	old := s.cur.Load()
	zones := append([]*Zone(nil), old.zones...)
	zones[i] = z
	s.cur.Store(&Snapshot{zones: zones})
}

func (s *Set) loaded(zs *zoneState, z *Zone, took time.Duration) {
	now := s.cfg.Clock()
	st := z.Stats()
	zs.mu.Lock()
	healed := zs.err != nil
	zs.err = nil
	zs.status = Status{Name: zs.cfg.Name, File: zs.cfg.File, Apex: z.apex, Serial: z.serial,
		Triggers: st.Triggers, Records: st.Records, Skipped: st.Skipped, LoadedAt: now}
	zs.mu.Unlock()
	zs.m.loaded(z, now)
	zs.log.Info("rpz zone loaded", "apex", z.apex, "serial", z.serial, "triggers", st.Triggers,
		"wildcards", st.Wildcards, "records", st.Records, "skipped", st.SkippedTotal(), "healed", healed, "took", took)
	if n := st.SkippedTotal(); n > 0 {
		zs.log.Info("rpz zone records skipped", "by_reason", st.Skipped)
	}
}

func (s *Set) failed(zs *zoneState, err error) {
	now := s.cfg.Clock()
	zs.mu.Lock()
	repeated := zs.err != nil && zs.err.Error() == err.Error()
	zs.err = err
	zs.status.LastError = err.Error()
	if !repeated {
		zs.status.ErrorAt = now
	}
	loaded := !zs.status.LoadedAt.IsZero()
	zs.mu.Unlock()
	zs.m.failed()
	if !repeated {
		zs.log.Error("rpz zone failed to load; keeping the last good version", "err", err, "have_version", loaded)
	}
}
