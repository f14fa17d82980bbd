// Package feeds is every node's feed index (DESIGN.md §6.2): the category
// feeds an operator publishes as versioned directories (internal/feed),
// polled into memory and swapped in atomically, so the decision engine
// turns a domain (and a URL path) into category codes without I/O or locks.
//
// Data flow: feed directory (HTTP or local path) → Client (poll, verify,
// apply snapshot or deltas) → one immutable Index per feed → a Set of all
// feeds behind an atomic pointer → policy (simulator, resolver).
package feeds

import (
	"maps"
	"slices"
	"strings"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Index is one feed's domain → codes index. It is immutable: Apply returns
// a new Index, and any number of goroutines read one without locks.
type Index struct {
	names map[string]*nameEntry
	n     int
}

// nameEntry holds the entries of one name: its own codes (bare) and its
// path entries, longest path first.
type nameEntry struct {
	bare  []uint16
	paths []pathEntry
}

type pathEntry struct {
	path  string
	codes []uint16
}

// Match is the entry a lookup found: Name is the name or the parent that
// matched (a suffix of the name asked for), Path the entry's path ("" for a
// name entry), Codes its codes. Key is Name+Path.
type Match struct {
	Name  string
	Path  string
	Codes []uint16
}

// Key is the matching feed key, name[/path].
func (m Match) Key() string { return m.Name + m.Path }

// Builder collects a snapshot's lines into an Index.
type Builder struct{ ix *Index }

// NewBuilder returns a Builder for about sizeHint entries.
func NewBuilder(sizeHint int) *Builder {
	return &Builder{ix: &Index{names: make(map[string]*nameEntry, sizeHint)}}
}

// Set sets the codes of l's key; a later Set of the same key wins. Lines
// that remove (l.Remove) delete the key.
func (b *Builder) Set(l feed.Line) { b.ix.set(l) }

// Index returns the built Index; the Builder must not be used after.
func (b *Builder) Index() *Index {
	ix := b.ix
	b.ix = nil
	return ix
}

// Empty is an Index with no entry.
func Empty() *Index { return &Index{names: map[string]*nameEntry{}} }

// Len is the number of keys (name and name/path entries).
func (ix *Index) Len() int { return ix.n }

// Apply returns a new Index with lines applied in order (a delta); ix is
// unchanged.
func (ix *Index) Apply(lines []feed.Line) *Index {
	next := &Index{names: maps.Clone(ix.names), n: ix.n}
	touched := map[string]bool{}
	for _, l := range lines {
		if e, ok := next.names[l.Name]; ok && !touched[l.Name] {
			// Copy on first write: ix shares the old entry.
			c := &nameEntry{bare: e.bare, paths: slices.Clone(e.paths)}
			next.names[l.Name] = c
		}
		touched[l.Name] = true
		next.set(l)
	}
	return next
}

func (ix *Index) set(l feed.Line) {
	e := ix.names[l.Name]
	if e == nil {
		if l.Remove {
			return
		}
		e = &nameEntry{}
		ix.names[l.Name] = e
	}
	if l.Path == "" {
		switch {
		case l.Remove && e.bare != nil:
			e.bare = nil
			ix.n--
		case !l.Remove:
			if e.bare == nil {
				ix.n++
			}
			e.bare = slices.Clone(l.Codes)
		}
	} else {
		i := slices.IndexFunc(e.paths, func(p pathEntry) bool { return p.path == l.Path })
		switch {
		case l.Remove && i >= 0:
			e.paths = slices.Delete(e.paths, i, i+1)
			ix.n--
		case !l.Remove && i >= 0:
			e.paths[i].codes = slices.Clone(l.Codes)
		case !l.Remove:
			e.paths = append(e.paths, pathEntry{path: l.Path, codes: slices.Clone(l.Codes)})
			slices.SortStableFunc(e.paths, func(a, b pathEntry) int { return len(b.path) - len(a.path) })
			ix.n++
		}
	}
	if e.bare == nil && len(e.paths) == 0 {
		delete(ix.names, l.Name)
	}
}

// Lookup finds the entry for name (an A-label without trailing dot) and
// path ("" or starting with '/') by the rule of DESIGN.md §6.2: the name,
// else each parent in turn, the most specific wins; among the entries of
// one name, the path entry whose path is the longest prefix of path, else
// the name's own entry.
func (ix *Index) Lookup(name, path string) (Match, bool) {
	for {
		if e, ok := ix.names[name]; ok {
			if path != "" {
				for _, p := range e.paths {
					if strings.HasPrefix(path, p.path) {
						return Match{Name: name, Path: p.path, Codes: p.codes}, true
					}
				}
			}
			if e.bare != nil {
				return Match{Name: name, Codes: e.bare}, true
			}
		}
		dot := strings.IndexByte(name, '.')
		if dot < 0 {
			return Match{}, false
		}
		name = name[dot+1:]
	}
}
