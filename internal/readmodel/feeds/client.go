package feeds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// FeedConfig is one entry of the node config's `feeds:` list
// (docs/feed-client.md).
type FeedConfig struct {
	// Name labels the feed in lookups, metrics, logs and the info payload;
	// unique within the node. It need not equal the manifest's name (a
	// mismatch is logged once), so that an operator can rename a feed on
	// the node without rebuilding its directory.
	Name string `yaml:"name"`
	// URL is the feed directory: http(s)://host/dir/ (a trailing slash is
	// added when missing), file:///dir, or a local path.
	URL string `yaml:"url"`
	// PollInterval is how often feed.json is checked; default 5s.
	PollInterval time.Duration `yaml:"poll_interval"`
	// Delay holds a version back until it is at least this old by its
	// manifest's created_at; default 0 (apply at once). See
	// docs/feed-client.md.
	Delay time.Duration `yaml:"delay"`
	// StaleAfter is how long a loaded feed may go without a successful
	// poll, its polls failing, before its status says Stale (every
	// service's /health then answers 503 naming it; the node keeps serving
	// the last good version). Default StalePolls poll intervals: a few
	// failed polls (a publish in progress, a server restarting) are not
	// worth an alert, a feed stuck for minutes is.
	StaleAfter time.Duration `yaml:"stale_after"`
}

// DefaultPollInterval is FeedConfig.PollInterval when left out.
const DefaultPollInterval = 5 * time.Second

// StalePolls is FeedConfig.StaleAfter when left out, in poll intervals:
// 1m at the default interval, longer than a publish in progress or a feed
// server's restart.
const StalePolls = 12

// Limits bound what one poll reads, so that a broken or hostile server
// cannot exhaust the node's memory. A zero field takes its default.
type Limits struct {
	// ManifestBytes caps feed.json; default 4 MiB (about 20,000 versions).
	ManifestBytes int64
	// CodesBytes caps feed-codes.json; default 4 MiB (every one of the
	// 65,536 codes with a long title).
	CodesBytes int64
	// FileBytes caps one snapshot or delta as stored (gzip); default 256 MiB.
	// The file is held in memory until its checksum is verified.
	FileBytes int64
	// DecompressedBytes caps one snapshot or delta once decompressed;
	// default 2 GiB. A longer file is refused, not cut short.
	DecompressedBytes int64
	// Entries caps the lines of a snapshot and the keys of the resulting
	// index; default 50,000,000.
	Entries int
}

// Config configures a Client.
type Config struct {
	// Feeds are the feeds to follow; none is valid (a node without
	// categories, ready at once).
	Feeds []FeedConfig
	// Logger receives progress and problems; nil discards them.
	Logger *slog.Logger
	// Registerer receives the svcpf_feed_* metrics; nil skips them.
	Registerer prometheus.Registerer
	// Clock is the time source for Delay, loaded_at and the success
	// timestamps; default time.Now. Poll timers use real time.
	Clock func() time.Time
	// HTTPClient fetches http(s) feeds; default a client with dial, TLS
	// handshake and response-header timeouts.
	HTTPClient *http.Client
	// FetchTimeout bounds each request (headers and body), so a slow or
	// stalled server fails the poll instead of holding it; default 2m.
	// Raise it for large snapshots over slow links.
	FetchTimeout time.Duration
	// MaxBackoff caps the wait between polls after consecutive failures
	// (the poll interval doubling from the second failure on); default 1m,
	// never below a feed's poll interval.
	MaxBackoff time.Duration
	// RollbackAfter is how long a feed must keep publishing a version older
	// than the one held before the node follows it back (a rebuilt or
	// rolled-back directory) rather than waiting for it to catch up (a
	// stale mirror); default 1m.
	RollbackAfter time.Duration
	// Limits bound sizes read; zero fields take their defaults.
	Limits Limits
}

const (
	defaultFetchTimeout  = 2 * time.Minute
	defaultMaxBackoff    = time.Minute
	defaultRollbackAfter = time.Minute
	maxNameLen           = 64
)

// Client polls the configured feeds and publishes all of them as one Set.
// Its read methods are safe for any number of goroutines and never block.
type Client struct {
	cfg   Config
	log   *slog.Logger
	feeds []*feedState
	m     *metrics

	set   atomic.Pointer[Set]
	pubMu sync.Mutex // serialises the feeds' swaps of set; readers never take it

	running   atomic.Bool
	runMu     sync.Mutex      // guards runCtx and stops; held through a Reconfigure's swap
	runCtx    context.Context // Run's, nil when Run is not running
	stops     []func()        // the followers' cancels
	followers sync.WaitGroup  // the feeds' poll goroutines
	ready     chan struct{}
	readyOnce sync.Once
}

// New validates cfg and returns a Client holding no feed yet; call Run.
// Errors name the feed entry and what to change.
func New(cfg Config) (*Client, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	c := &Client{
		cfg:   cfg,
		log:   cfg.Logger.With("component", "feeds"),
		ready: make(chan struct{}),
	}
	var err error
	if c.feeds, err = c.newStates(cfg.Feeds); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	c.m = m
	for _, f := range c.feeds {
		f.m = m.feed(f.cfg.Name)
		f.status.Name = f.cfg.Name
	}
	c.set.Store(&Set{feeds: make([]*loadedFeed, len(c.feeds))})
	if len(c.feeds) == 0 {
		// Through readyOnce: a Reconfigure may add feeds that publish.
		c.readyOnce.Do(func() { close(c.ready) })
	}
	return c, nil
}

// newStates validates a `feeds:` list and builds its pollers (metrics
// not yet resolved). Errors name the entry and what to change.
func (c *Client) newStates(list []FeedConfig) ([]*feedState, error) {
	var out []*feedState
	names := make(map[string]int, len(list))
	for i, fc := range list {
		if err := fc.validate(); err != nil {
			return nil, fmt.Errorf("feeds[%d]: %w", i, err)
		}
		if j, dup := names[fc.Name]; dup {
			return nil, fmt.Errorf("feeds[%d]: name %q is already used by feeds[%d]; give each feed its own name", i, fc.Name, j)
		}
		names[fc.Name] = i
		src, err := newSource(fc.URL, c.cfg.HTTPClient)
		if err != nil {
			return nil, fmt.Errorf("feeds[%d] (%s): url: %w", i, fc.Name, err)
		}
		if fc.PollInterval == 0 {
			fc.PollInterval = DefaultPollInterval
		}
		if fc.StaleAfter == 0 {
			fc.StaleAfter = StalePolls * fc.PollInterval
		}
		out = append(out, &feedState{
			cfg: fc,
			pos: i,
			src: src,
			log: c.log.With("feed", fc.Name),
		})
	}
	return out, nil
}

func (cfg *Config) defaults() error {
	switch {
	case cfg.FetchTimeout < 0:
		return fmt.Errorf("feeds: FetchTimeout %s is negative; leave it zero for the default %s", cfg.FetchTimeout, defaultFetchTimeout)
	case cfg.MaxBackoff < 0:
		return fmt.Errorf("feeds: MaxBackoff %s is negative; leave it zero for the default %s", cfg.MaxBackoff, defaultMaxBackoff)
	case cfg.RollbackAfter < 0:
		return fmt.Errorf("feeds: RollbackAfter %s is negative; leave it zero for the default %s", cfg.RollbackAfter, defaultRollbackAfter)
	case cfg.Limits.ManifestBytes < 0 || cfg.Limits.CodesBytes < 0 || cfg.Limits.FileBytes < 0 ||
		cfg.Limits.DecompressedBytes < 0 || cfg.Limits.Entries < 0:
		return errors.New("feeds: a negative limit; leave a limit zero for its default")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.FetchTimeout == 0 {
		cfg.FetchTimeout = defaultFetchTimeout
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = defaultMaxBackoff
	}
	if cfg.RollbackAfter == 0 {
		cfg.RollbackAfter = defaultRollbackAfter
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = defaultHTTPClient()
	}
	l := &cfg.Limits
	l.ManifestBytes = cmpOr(l.ManifestBytes, 4<<20)
	l.CodesBytes = cmpOr(l.CodesBytes, 4<<20)
	l.FileBytes = cmpOr(l.FileBytes, 256<<20)
	l.DecompressedBytes = cmpOr(l.DecompressedBytes, 2<<30)
	l.Entries = cmpOr(l.Entries, 50_000_000)
	return nil
}

func cmpOr[T int | int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// defaultHTTPClient bounds each phase of a request that can stall, so that a
// dead or black-holed server fails a poll within seconds; the whole request
// is bounded by FetchTimeout through its context.
func defaultHTTPClient() *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: 15 * time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   2,
		ForceAttemptHTTP2:     true,
	}}
}

func (fc *FeedConfig) validate() error {
	if fc.Name == "" {
		return errors.New("name is required")
	}
	if !validFeedName(fc.Name) {
		return fmt.Errorf("name %q: use 1 to %d letters, digits, '.', '_' or '-' (it labels metrics and API answers)", fc.Name, maxNameLen)
	}
	if fc.PollInterval < 0 {
		return fmt.Errorf("feed %s: poll_interval %s is not positive; leave it out for the default %s", fc.Name, fc.PollInterval, DefaultPollInterval)
	}
	if fc.StaleAfter < 0 {
		return fmt.Errorf("feed %s: stale_after %s is negative; leave it out for %d poll intervals", fc.Name, fc.StaleAfter, StalePolls)
	}
	if fc.Delay < 0 {
		return fmt.Errorf("feed %s: delay %s is negative; use 0 to apply versions as soon as they are published", fc.Name, fc.Delay)
	}
	return nil
}

func validFeedName(s string) bool {
	if s == "" || len(s) > maxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '.' && c != '_' && c != '-' {
			return false
		}
	}
	return true
}

// Set returns the loaded feeds. It never blocks and never returns nil; hold
// on to it to answer several questions from one consistent view.
func (c *Client) Set() *Set { return c.set.Load() }

// Lookup is c.Set().Lookup.
func (c *Client) Lookup(name, path string, dst []feed.Category) []feed.Category {
	return c.set.Load().Lookup(name, path, dst)
}

// Ready reports whether every configured feed has been loaded at least once.
// It stays true afterwards: a feed that later fails keeps its last good
// version, which Status and the metrics show as stale.
func (c *Client) Ready() bool {
	select {
	case <-c.ready:
		return true
	default:
		return false
	}
}

// WaitReady blocks until Ready or ctx is done.
func (c *Client) WaitReady(ctx context.Context) error {
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// FeedStatus is one feed's state for the info payload and health checks.
type FeedStatus struct {
	FeedInfo
	// Latest is the newest version the feed's manifest listed when last
	// read; above Version while a delay holds versions back or updates
	// fail.
	Latest int64 `json:"latest"`
	// LastSuccess is the end of the last poll that left the feed at its
	// newest applicable version.
	LastSuccess time.Time `json:"last_success,omitzero"`
	// LastError is the last poll's failure; empty once a poll succeeds.
	LastError string `json:"last_error,omitempty"`
	// Failures counts the polls that failed in a row.
	Failures int `json:"failures"`
	// Stale: the feed holds a version, its last poll failed, and no poll
	// has succeeded for longer than its stale_after (counted from the
	// load when none ever has). The version is still served; health
	// checks report it.
	Stale bool `json:"stale,omitempty"`
}

// Status returns every configured feed's status, in config order, loaded or
// not.
func (c *Client) Status() []FeedStatus {
	c.pubMu.Lock() // the feeds and the set in step (Reconfigure swaps both)
	set, states := c.set.Load(), c.feeds
	c.pubMu.Unlock()
	now := c.cfg.Clock()
	out := make([]FeedStatus, len(states))
	for i, f := range states {
		f.mu.Lock()
		out[i] = f.status
		f.mu.Unlock()
		if lf := set.feeds[i]; lf != nil {
			out[i].FeedInfo = lf.info()
			good := out[i].LastSuccess
			if good.IsZero() {
				good = out[i].LoadedAt
			}
			out[i].Stale = out[i].LastError != "" && now.Sub(good) > f.cfg.StaleAfter
		}
	}
	return out
}

// Run polls every feed until ctx is done, then returns nil. Each feed is
// polled at once, then every poll interval (±10%, so that nodes started
// together spread their requests), and after failures with a backoff.
// Run may be called once.
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return errors.New("feeds: Run called twice")
	}
	// Reconfigure (reconfigure.go) stops and restarts the followers
	// while Run lasts.
	c.runMu.Lock()
	c.runCtx = ctx
	c.startFollowers()
	c.runMu.Unlock()
	<-ctx.Done()
	c.runMu.Lock()
	c.runCtx = nil
	c.runMu.Unlock()
	c.followers.Wait()
	return nil
}

func (c *Client) follow(ctx context.Context, f *feedState) {
	for ctx.Err() == nil {
		wait := f.cfg.PollInterval
		if err := c.poll(ctx, f); err != nil {
			wait = backoff(f.cfg.PollInterval, c.cfg.MaxBackoff, f.failures)
		}
		if !sleep(ctx, jitter(wait)) {
			return
		}
	}
}

// backoff retries at the poll interval after a first failure (the cause is
// often a publish in progress), then doubles up to maxWait.
func backoff(interval, maxWait time.Duration, failures int) time.Duration {
	maxWait = max(maxWait, interval)
	d := interval
	for i := 1; i < failures && d < maxWait; i++ {
		d *= 2
	}
	return min(d, maxWait)
}

func jitter(d time.Duration) time.Duration {
	if d < 10 {
		return d
	}
	return d - d/10 + rand.N(d/5)
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// publish swaps in a Set with lf as the feed at pos. Feeds update
// independently; the mutex only orders their swaps, so that one feed's
// update never drops another's.
func (c *Client) publish(pos int, lf *loadedFeed) {
	c.pubMu.Lock()
	defer c.pubMu.Unlock()
	old := c.set.Load()
	next := &Set{feeds: make([]*loadedFeed, len(old.feeds))}
	copy(next.feeds, old.feeds)
	next.feeds[pos] = lf
	c.set.Store(next)
	for _, f := range next.feeds {
		if f == nil {
			return
		}
	}
	c.readyOnce.Do(func() { close(c.ready) })
}

// feedState is one feed's poller. The fields above mu belong to the feed's
// poll goroutine; status is shared with Status.
type feedState struct {
	cfg FeedConfig
	pos int // index in Config.Feeds and Set.feeds
	src source
	log *slog.Logger
	m   *feedMetrics

	manifest    *feed.Manifest // the last valid feed.json
	manifestVal validators     // its ETag / Last-Modified
	manifestSum [32]byte       // SHA-256 of its bytes: a re-read without validators skips decoding
	codes       *codeTable     // the last valid feed-codes.json (nil before the first)
	codesVal    validators
	codesSum    [32]byte

	backwardsSince time.Time // first poll of the current run of older manifests
	failures       int       // polls failed in a row
	lastLogged     string    // the failure last logged, so each is logged once
	loggedPending  int64     // the held-back version last logged
	nameWarned     bool
	unprovenLogged bool // the snapshot-instead-of-unproven-deltas warning was logged

	mu     sync.Mutex
	status FeedStatus
}
