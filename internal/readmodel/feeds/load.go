package feeds

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// LoadConfig says which feed directory Load reads.
type LoadConfig struct {
	// URL is the directory as FeedConfig.URL takes it: http(s)://host/dir/,
	// file:///dir, or a local path.
	URL string
	// HTTPClient, FetchTimeout and Limits are as in Config; zero values
	// take the same defaults.
	HTTPClient   *http.Client
	FetchTimeout time.Duration
	Limits       Limits
}

// Loaded is one feed directory read in full, once.
type Loaded struct {
	Manifest *feed.Manifest
	// Set holds the feed alone, under its manifest's name: Set.Lookup is
	// the lookup every node's decision makes.
	Set *Set
	// ContentSHA256 is the checksum of the content the files give
	// (feed.ContentSHA256).
	ContentSHA256 string
}

// Index is the feed's index.
func (l *Loaded) Index() *Index { return l.Set.feeds[0].index }

// Load reads a feed directory the way a node's Client first loads it —
// feed.json, feed-codes.json, the snapshot and every delta after it, each
// checked against the manifest's SHA-256 and entry count — and then checks
// what a one-shot reader can afford to on top: that the snapshot repeats no
// key, and that the content matches the newest version's content_sha256
// when the manifest gives it. It is the one reader of feed directories:
// `svc-pf feed lookup` answers from it, and `svc-pf feed build` reads the
// previous version through it. A missing feed.json is an error wrapping
// fs.ErrNotExist.
func Load(ctx context.Context, cfg LoadConfig) (*Loaded, error) {
	// The URL's error without New's "feeds[0]" prefix: there is no list.
	if _, err := newSource(cfg.URL, nil); err != nil {
		return nil, err
	}
	c, err := New(Config{
		Feeds:        []FeedConfig{{Name: "load", URL: cfg.URL}},
		HTTPClient:   cfg.HTTPClient,
		FetchTimeout: cfg.FetchTimeout,
		Limits:       cfg.Limits,
	})
	if err != nil {
		return nil, err
	}
	f := c.feeds[0]
	m, err := c.fetchManifest(ctx, f)
	if err != nil {
		return nil, err
	}
	codes, err := c.fetchCodes(ctx, f)
	if err != nil {
		return nil, err
	}
	snap := m.Versions[0]
	ix, err := c.loadSnapshot(ctx, f, snap)
	if err != nil {
		return nil, fmt.Errorf("version %d: %w", snap.Version, err)
	}
	if ix.Len() != snap.Entries {
		return nil, fail(reasonDecode, fmt.Errorf("version %d: %s repeats keys (%d distinct of %d lines)", snap.Version, snap.File, ix.Len(), snap.Entries))
	}
	if ix, err = c.applyDeltas(ctx, f, ix, m.Versions[1:]); err != nil {
		return nil, err
	}
	l := &Loaded{
		Manifest:      m,
		Set:           &Set{feeds: []*loadedFeed{{name: m.Name, from: m.Versions[len(m.Versions)-1], index: ix, codes: codes}}},
		ContentSHA256: contentSHA256(ix),
	}
	if want := l.Set.feeds[0].from.ContentSHA256; want != "" && want != l.ContentSHA256 {
		return nil, fail(reasonChecksum, fmt.Errorf("version %d: the snapshot and deltas give content_sha256 %s, but the manifest says %s: a file was replaced or the manifest is wrong",
			m.Latest(), l.ContentSHA256, want))
	}
	return l, nil
}

// contentSHA256 is feed.ContentSHA256 of ix's keys.
func contentSHA256(ix *Index) string {
	lines := make([]feed.Line, 0, ix.Len())
	for e := range ix.All() {
		lines = append(lines, feed.Line{Name: e.Name, Path: e.Path, Codes: e.Codes})
	}
	slices.SortFunc(lines, func(a, b feed.Line) int { return strings.Compare(a.Key(), b.Key()) })
	return feed.ContentSHA256(lines)
}
