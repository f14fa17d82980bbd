package feedbuild

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// FeedSourceConfig is one entry of `feed_sources:`: a feed that rebuilds
// itself from its sources every Interval. Sources take `feed build`'s
// FORMAT:CODE:PATH syntax, URLs included.
type FeedSourceConfig struct {
	// Name is the feed's name (its feed.json's name, as --name).
	Name string `yaml:"name"`
	// Dir is the feed directory; a node follows it through `feeds:`.
	Dir string `yaml:"dir"`
	// Interval is how often the feed is rebuilt (±10 % jitter); default
	// 1h, at least 10ms.
	Interval time.Duration `yaml:"interval"`
	// Titles are the codes' titles (as --title).
	Titles  map[uint16]string `yaml:"titles"`
	Sources []string          `yaml:"sources"`
	// CacheDir keeps the URL sources' last good bodies; default beside
	// Dir (CacheDirFor).
	CacheDir string `yaml:"cache_dir"`
	// Fetch tunes the URL sources' fetches and checks.
	Fetch FetchConfig `yaml:"fetch"`
}

// DefaultInterval is FeedSourceConfig.Interval when left out: public lists
// change a few times a day at most, and their servers ask for restraint.
const DefaultInterval = time.Hour

// ValidateFeedSources checks a `feed_sources:` list; every error names the
// entry and the key (feed_sources[1].interval: …).
func ValidateFeedSources(list []FeedSourceConfig) error {
	var errs []error
	names, dirs := map[string]int{}, map[string]int{}
	for i, fc := range list {
		at := func(key string, err error) {
			errs = append(errs, fmt.Errorf("feed_sources[%d].%s: %w", i, key, err))
		}
		switch {
		case !nameRE.MatchString(fc.Name):
			at("name", fmt.Errorf("%q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", fc.Name))
		default:
			if j, dup := names[fc.Name]; dup {
				at("name", fmt.Errorf("%q is already used by feed_sources[%d]; give each feed its own name", fc.Name, j))
			}
			names[fc.Name] = i
		}
		if fc.Dir == "" {
			at("dir", errors.New("missing: give the feed directory the nodes follow"))
		} else {
			abs := CacheDirFor(fc.Dir) // the cleaned absolute form, as a key
			if j, dup := dirs[abs]; dup {
				at("dir", fmt.Errorf("%q is already built by feed_sources[%d]; one directory holds one feed", fc.Dir, j))
			}
			dirs[abs] = i
		}
		if fc.Interval < 0 || fc.Interval > 0 && fc.Interval < 10*time.Millisecond {
			at("interval", fmt.Errorf("%s is not a positive interval of at least 10ms (e.g. 1h; leave it out for %s)", fc.Interval, DefaultInterval))
		}
		if len(fc.Sources) == 0 {
			at("sources", errors.New("empty: a feed without a source would be emptied; give at least one FORMAT:CODE:PATH"))
		}
		seen := map[string]int{}
		for j, s := range fc.Sources {
			src, err := ParseSource(s)
			if err != nil {
				at(fmt.Sprintf("sources[%d]", j), err)
				continue
			}
			if k, dup := seen[src.String()]; dup {
				at(fmt.Sprintf("sources[%d]", j), fmt.Errorf("%q is sources[%d] again; list each source once", s, k))
			}
			seen[src.String()] = j
		}
		if err := fc.Fetch.Validate(); err != nil {
			for _, e := range unjoin(err) {
				errs = append(errs, fmt.Errorf("feed_sources[%d].fetch.%w", i, e))
			}
		}
	}
	return errors.Join(errs...)
}

// unjoin splits an errors.Join into its errors.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// UpdaterConfig configures the update loop of `feed_sources:`.
type UpdaterConfig struct {
	Feeds []FeedSourceConfig
	// Registerer receives the svcpf_feed_source_* metrics; nil skips them.
	Registerer prometheus.Registerer
	Logger     *slog.Logger // nil discards
	Now        func() time.Time
}

// Updater rebuilds each feed of `feed_sources:` on its interval. A build
// writes a version only when the content changed (Build compares it with
// the previous version's) and, through Build, only atomically.
type Updater struct {
	log   *slog.Logger
	now   func() time.Time
	feeds []*updFeed
	m     *updaterMetrics
}

type updFeed struct {
	cfg     FeedSourceConfig
	build   BuildConfig
	log     *slog.Logger
	mu      sync.Mutex
	status  FeedStatus
	sources map[string]int // source spelling → index in status.Sources
}

// FeedStatus is one feed's state in the update loop.
type FeedStatus struct {
	Name                string         `json:"name"`
	Dir                 string         `json:"dir"`
	Version             int64          `json:"version,omitempty"`
	LastBuild           time.Time      `json:"last_build,omitzero"`
	LastSuccess         time.Time      `json:"last_success,omitzero"`
	LastError           string         `json:"last_error,omitempty"`
	ConsecutiveFailures int            `json:"consecutive_failures"`
	Sources             []SourceStatus `json:"sources"`
}

// SourceStatus is one source's state in the update loop.
type SourceStatus struct {
	Source              string      `json:"source"`
	LastResult          FetchResult `json:"last_result,omitempty"`
	LastSuccess         time.Time   `json:"last_success,omitzero"`
	LastError           string      `json:"last_error,omitempty"`
	ConsecutiveFailures int         `json:"consecutive_failures"`
	// Stale: the feed is built from this source's last good copy.
	Stale bool `json:"stale"`
}

// NewUpdater validates cfg (ValidateFeedSources, each feed's fetch
// settings) and builds the loop; Run runs it.
func NewUpdater(cfg UpdaterConfig) (*Updater, error) {
	if err := ValidateFeedSources(cfg.Feeds); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	m, err := newUpdaterMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	u := &Updater{log: log.With("component", "feed_sources"), now: now, m: m}
	for i, fc := range cfg.Feeds {
		if fc.Interval == 0 {
			fc.Interval = DefaultInterval
		}
		fetcher, err := NewFetcher(fc.Fetch)
		if err != nil {
			return nil, fmt.Errorf("feed_sources[%d].fetch: %w", i, err)
		}
		f := &updFeed{cfg: fc, log: u.log.With("feed", fc.Name), sources: map[string]int{},
			status: FeedStatus{Name: fc.Name, Dir: fc.Dir}}
		f.build = BuildConfig{Dir: fc.Dir, Name: fc.Name, Titles: fc.Titles, Fetcher: fetcher, CacheDir: fc.CacheDir, Now: now}
		for _, s := range fc.Sources {
			src, _ := ParseSource(s) // validated above
			f.build.Sources = append(f.build.Sources, src)
			f.sources[src.String()] = len(f.status.Sources)
			f.status.Sources = append(f.status.Sources, SourceStatus{Source: src.Redacted()})
			m.init(fc.Name, src.Redacted())
		}
		u.feeds = append(u.feeds, f)
	}
	return u, nil
}

// Run builds every feed at once, then each on its interval with ±10 %
// jitter, until ctx ends (also with no feed: it is one service among
// others under `svc-pf all`). A failed build is logged, counted and
// reported by Status and Problems; the next round tries again, so a fault
// heals without a restart.
func (u *Updater) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, f := range u.feeds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				u.round(ctx, f)
				t := time.NewTimer(jitter(f.cfg.Interval))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
			}
		}()
	}
	<-ctx.Done()
	return nil
}

// RunOnce builds every feed once, one after the other, and returns an
// error naming each feed whose build failed or that used a last good copy.
func (u *Updater) RunOnce(ctx context.Context) error {
	var errs []error
	for _, f := range u.feeds {
		if err := u.round(ctx, f); err != nil {
			errs = append(errs, fmt.Errorf("feed %s: %w", f.cfg.Name, err))
		}
	}
	return errors.Join(errs...)
}

func jitter(d time.Duration) time.Duration {
	return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
}

// round is one build of f: it updates the status and the metrics and
// returns an error when the build failed or a source was stale.
func (u *Updater) round(ctx context.Context, f *updFeed) error {
	start := u.now()
	res, err := Build(ctx, f.build)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &f.status
	st.LastBuild = start
	var stale []string
	if res != nil {
		for _, sr := range res.Sources {
			i, ok := f.sources[sr.Source.String()]
			if !ok {
				continue
			}
			ss := &st.Sources[i]
			label := ss.Source
			if sr.Fetch == nil { // a file, read
				ss.LastResult, ss.LastSuccess, ss.LastError, ss.ConsecutiveFailures, ss.Stale = "", start, "", 0, false
				u.m.source(f.cfg.Name, label, ss)
				continue
			}
			o := sr.Fetch
			ss.LastResult, ss.Stale = o.Result, o.Stale
			u.m.fetches.WithLabelValues(f.cfg.Name, label, string(o.Result)).Inc()
			if o.Result == FetchUpdated || o.Result == FetchNotModified {
				ss.LastSuccess, ss.LastError, ss.ConsecutiveFailures = start, "", 0
			} else {
				ss.LastError = o.Err
				ss.ConsecutiveFailures++
				stale = append(stale, label)
				f.log.Warn("feed source fetch "+string(o.Result), "source", label, "error", o.Err, "attempts", o.Attempts,
					"last_good", o.GoodAt, "stale", o.Stale)
			}
			u.m.source(f.cfg.Name, label, ss)
		}
	}
	if err != nil {
		// A file source that failed has no outcome above: the build error
		// names it.
		st.LastError, st.ConsecutiveFailures = err.Error(), st.ConsecutiveFailures+1
		u.m.builds.WithLabelValues(f.cfg.Name, "failed").Inc()
		f.log.Error("feed build failed; the feed stays at its last version", "error", err)
		return err
	}
	st.LastSuccess, st.LastError, st.ConsecutiveFailures = start, "", 0
	if res.Manifest != nil {
		st.Version = res.Manifest.Latest()
	}
	if res.Written.Version != 0 {
		u.m.builds.WithLabelValues(f.cfg.Name, "written").Inc()
		f.log.Info("feed version written", "version", res.Written.Version, "type", res.Written.Type, "keys", res.Keys,
			"added", res.Added, "changed", res.Changed, "removed", res.Removed)
	} else {
		u.m.builds.WithLabelValues(f.cfg.Name, "unchanged").Inc()
		f.log.Debug("feed unchanged", "version", st.Version)
	}
	if len(stale) > 0 {
		return fmt.Errorf("built from the last good copy of %s", strings.Join(stale, ", "))
	}
	return nil
}

// Status is every feed's state, sources included (copies).
func (u *Updater) Status() []FeedStatus {
	out := make([]FeedStatus, 0, len(u.feeds))
	for _, f := range u.feeds {
		f.mu.Lock()
		s := f.status
		s.Sources = slices.Clone(s.Sources)
		f.mu.Unlock()
		out = append(out, s)
	}
	return out
}

// Problems is one line per failing feed and per failing source, saying
// what is wrong and what to do; none when all is well.
func (u *Updater) Problems() []string {
	var out []string
	for _, f := range u.Status() {
		if f.ConsecutiveFailures > 0 {
			stays := fmt.Sprintf("it stays at version %d", f.Version)
			if f.Version == 0 {
				stays = "it has no version from this process yet"
			}
			out = append(out, fmt.Sprintf("feed %s (%s): the last %d build(s) failed, %s: %s; fix the source or the directory named there",
				f.Name, f.Dir, f.ConsecutiveFailures, stays, f.LastError))
		}
		for _, s := range f.Sources {
			if s.ConsecutiveFailures == 0 {
				continue
			}
			since := "never fetched successfully"
			if !s.LastSuccess.IsZero() {
				since = "last success " + s.LastSuccess.UTC().Format(time.RFC3339)
			}
			use := "the feed is not built without it"
			if s.Stale {
				use = "the feed uses its last good copy"
			}
			out = append(out, fmt.Sprintf("feed %s: source %s: %s %d time(s) in a row (%s): %s; %s; check the URL and the server, or remove the source from feed_sources",
				f.Name, s.Source, s.LastResult, s.ConsecutiveFailures, since, s.LastError, use))
		}
	}
	return out
}

// updaterMetrics are the svcpf_feed_source_* metrics.
type updaterMetrics struct {
	fetches     *prometheus.CounterVec
	builds      *prometheus.CounterVec
	lastSuccess *prometheus.GaugeVec
	stale       *prometheus.GaugeVec
	failures    *prometheus.GaugeVec
}

func newUpdaterMetrics(reg prometheus.Registerer) (*updaterMetrics, error) {
	m := &updaterMetrics{
		fetches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svcpf_feed_source_fetch_total",
			Help: "Fetches of URL sources of feed_sources, by result (updated, not_modified, failed, refused)."}, []string{"feed", "source", "result"}),
		builds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svcpf_feed_source_builds_total",
			Help: "Builds of feed_sources feeds, by result (written, unchanged, failed)."}, []string{"feed", "result"}),
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svcpf_feed_source_last_success_timestamp_seconds",
			Help: "When the source was last fetched or read successfully (Unix seconds; 0 never)."}, []string{"feed", "source"}),
		stale: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svcpf_feed_source_stale",
			Help: "1 while the feed is built from the source's last good copy because its fetch failed or was refused."}, []string{"feed", "source"}),
		failures: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "svcpf_feed_source_consecutive_failures",
			Help: "Failed or refused fetches of the source in a row."}, []string{"feed", "source"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.fetches, m.builds, m.lastSuccess, m.stale, m.failures} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("feed_sources metrics: %w", err)
			}
		}
	}
	return m, nil
}

// init makes a source's series exist from the start (0), so that an alert
// on them sees a source that never succeeded.
func (m *updaterMetrics) init(feed, source string) {
	m.lastSuccess.WithLabelValues(feed, source)
	m.stale.WithLabelValues(feed, source)
	m.failures.WithLabelValues(feed, source)
}

func (m *updaterMetrics) source(feed, source string, s *SourceStatus) {
	if !s.LastSuccess.IsZero() {
		m.lastSuccess.WithLabelValues(feed, source).Set(float64(s.LastSuccess.Unix()))
	}
	stale := 0.0
	if s.Stale {
		stale = 1
	}
	m.stale.WithLabelValues(feed, source).Set(stale)
	m.failures.WithLabelValues(feed, source).Set(float64(s.ConsecutiveFailures))
}
