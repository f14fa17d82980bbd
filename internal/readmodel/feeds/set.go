package feeds

import (
	"slices"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Set is every loaded feed at one moment: immutable, published by the
// Client behind one atomic pointer, so a decision reads all feeds from one
// consistent view without locks.
type Set struct {
	feeds []*loadedFeed // in config order; nil until the feed first loads
}

// loadedFeed is one feed's loaded version.
type loadedFeed struct {
	name     string
	from     feed.Version // the manifest entry of the version held (its SHA-256 detects a rebuilt directory)
	index    *Index
	codes    *codeTable
	loadedAt time.Time
}

func (lf *loadedFeed) info() FeedInfo {
	return FeedInfo{Name: lf.name, Version: lf.from.Version, Entries: lf.index.Len(), LoadedAt: lf.loadedAt}
}

// codeTable is one feed's feed-codes.json.
type codeTable struct {
	titles map[uint16]string
	codes  []feed.Code // by code, one per code
}

func newCodeTable(c *feed.Codes) *codeTable {
	t := &codeTable{titles: make(map[uint16]string, len(c.Codes))}
	for _, code := range c.Codes {
		t.titles[code.Code] = code.Title // a later entry for a code wins
	}
	for code, title := range t.titles {
		t.codes = append(t.codes, feed.Code{Code: code, Title: title})
	}
	slices.SortFunc(t.codes, func(a, b feed.Code) int { return int(a.Code) - int(b.Code) })
	return t
}

// Lookup appends to dst the categories of name (a lower-case A-label; one
// trailing dot is ignored) and path ("" or starting with '/'): for each
// loaded feed in config order, the codes of its matching entry (the feeds'
// lookup rule: the name, else the nearest parent; the longest path prefix),
// in code order. Codes are united across feeds: a code two feeds give appears
// once per feed, so each keeps its title and provenance. Lookup allocates
// nothing when dst has room.
func (s *Set) Lookup(name, path string, dst []feed.Category) []feed.Category {
	name = strings.TrimSuffix(name, ".")
	for _, f := range s.feeds {
		if f == nil {
			continue
		}
		m, ok := f.index.Lookup(name, path)
		if !ok {
			continue
		}
		for _, code := range m.Codes {
			dst = append(dst, feed.Category{Code: code, Title: f.codes.titles[code], Feed: f.name, Name: m.Name, Path: m.Path})
		}
	}
	return dst
}

// CodeInfo is a code a feed defines (the simulator's codemappings).
type CodeInfo struct {
	Code  uint16 `json:"code"`
	Title string `json:"title"`
	Feed  string `json:"feed"`
}

// Codes returns every code of every loaded feed's feed-codes.json, by feed
// in config order, then by code.
func (s *Set) Codes() []CodeInfo {
	var out []CodeInfo
	for _, f := range s.feeds {
		if f == nil {
			continue
		}
		for _, c := range f.codes.codes {
			out = append(out, CodeInfo{Code: c.Code, Title: c.Title, Feed: f.name})
		}
	}
	return out
}

// FeedInfo is a loaded feed's version (the simulator's info "feeds").
type FeedInfo struct {
	Name     string    `json:"name"`
	Version  int64     `json:"version"`
	Entries  int       `json:"entries"`
	LoadedAt time.Time `json:"loaded_at,omitzero"`
}

// Feeds returns the loaded feeds, in config order.
func (s *Set) Feeds() []FeedInfo {
	var out []FeedInfo
	for _, f := range s.feeds {
		if f != nil {
			out = append(out, f.info())
		}
	}
	return out
}
