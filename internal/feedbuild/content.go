package feedbuild

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

// Content is one version of a feed in full: key (name[/path]) → codes
// (sorted, distinct, shared: never modified in place).
type Content map[string][]uint16

// Add unites codes into key's codes: a key that several sources (or lines)
// list carries the codes of all of them.
func (c Content) Add(key string, codes []uint16) {
	old, ok := c[key]
	switch {
	case !ok:
		c[key] = codes
	case !slices.Equal(old, codes):
		u := append(slices.Clone(old), codes...)
		slices.Sort(u)
		c[key] = slices.Compact(u)
	}
}

// indexContent is the keys of ix and their codes.
func indexContent(ix *feeds.Index) Content {
	c := make(Content, ix.Len())
	for m := range ix.All() {
		c[m.Key()] = m.Codes
	}
	return c
}

// NormalizeName turns a name as an operator types it (Unicode or not,
// any case, a trailing dot) into the feed's form, the way the importers do.
func NormalizeName(s string) (string, error) {
	name, cause := normalizeName(s)
	if cause != "" {
		return "", fmt.Errorf("%q is not a domain name the feed can hold (%s)", s, cause)
	}
	return name, nil
}

// splitKey splits a key the feed wrote or an importer made.
func splitKey(key string) (name, path string) {
	if i := strings.IndexByte(key, '/'); i >= 0 {
		return key[:i], key[i:]
	}
	return key, ""
}

// sortedKeys is c's keys in byte order: every file lists its lines by key,
// so a build's output depends on its input alone.
func (c Content) sortedKeys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// snapshotLines is c as a snapshot's lines.
func (c Content) snapshotLines() []feed.Line {
	keys := c.sortedKeys()
	lines := make([]feed.Line, len(keys))
	for i, k := range keys {
		name, path := splitKey(k)
		lines[i] = feed.Line{Name: name, Path: path, Codes: c[k]}
	}
	return lines
}

// diff is the delta from old to c: the keys whose codes changed or that
// are new (set lines) and the keys c no longer has (removals), by key.
func (c Content) diff(old Content) (lines []feed.Line, added, changed, removed int) {
	for _, k := range c.sortedKeys() {
		prev, ok := old[k]
		if ok && slices.Equal(prev, c[k]) {
			continue
		}
		if ok {
			changed++
		} else {
			added++
		}
		name, path := splitKey(k)
		lines = append(lines, feed.Line{Name: name, Path: path, Codes: c[k]})
	}
	for k := range old {
		if _, ok := c[k]; !ok {
			removed++
			name, path := splitKey(k)
			lines = append(lines, feed.Line{Name: name, Path: path, Remove: true})
		}
	}
	slices.SortFunc(lines, func(a, b feed.Line) int { return strings.Compare(a.Key(), b.Key()) })
	return lines, added, changed, removed
}

// encodeLines is the gzip file of lines. The gzip header carries no name
// and no time, so equal lines give equal bytes (and equal SHA-256s).
func encodeLines(lines []feed.Line) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	var line []byte
	for _, l := range lines {
		line = feed.AppendLine(line[:0], l)
		if _, err := zw.Write(line); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}
