// Package feed is the category-feed directory format (docs/feeds.md),
// shared by the write side that builds feeds (internal/feedbuild, `svc-pf
// feed build`) and every node's feed index (internal/readmodel/feeds),
// which polls them. It holds the shapes and the codecs, no network I/O:
//
//	feed.json        the manifest, written last by atomic rename
//	snapshot_<N>.gz  lines "domain[/path]<TAB>code[,code…]"
//	delta_<N>.gz     the same, or "domain[/path]<TAB>-" to remove the key
//	feed-codes.json  the codes' titles
//
// Domains are lower-case IDNA A-labels without the trailing dot (Name).
package feed

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"
)

// File names in a feed directory.
const (
	ManifestFile = "feed.json"
	CodesFile    = "feed-codes.json"
)

// FormatVersion is the "v" of feed.json and feed-codes.json.
const FormatVersion = 1

// Version types in the manifest.
const (
	TypeSnapshot = "snapshot"
	TypeDelta    = "delta"
)

// Manifest is feed.json: the latest snapshot and the deltas after it,
// oldest first, plus CatchUp.
//
// Every entry may name its lineage (Version.ContentSHA256, BaseSHA256): a
// client applies deltas to the version it holds only when the first one
// builds on exactly that content (DeltasFrom).
//
// CatchUp lists, when the latest snapshot S was written over an earlier
// version, the deltas S-1 and S (oldest first; S-1 only when it exists):
// `feed build` writes delta S beside snapshot S, so a client at S-1 or S-2
// applies one or two small deltas instead of downloading the snapshot
// (DeltasFrom). A reader that ignores the field downloads the snapshot: both are
// correct.
type Manifest struct {
	V        int       `json:"v"`
	Name     string    `json:"name"`
	Versions []Version `json:"versions"`
	CatchUp  []Version `json:"catch_up,omitempty"`
}

// Version is one file of the feed.
type Version struct {
	Version   int64     `json:"version"`
	Type      string    `json:"type"`
	File      string    `json:"file"`
	SHA256    string    `json:"sha256"`
	Entries   int       `json:"entries"`
	CreatedAt time.Time `json:"created_at"`

	// ContentSHA256 is the SHA-256 of the feed's full key set at this
	// version (ContentSHA256), whatever the file: a delta and a snapshot of
	// one content have the same. BaseSHA256, on a delta, is the content the
	// delta applies to, i.e. the ContentSHA256 of the version before it in
	// the delta's own history. File checksums cannot tell two histories
	// apart (equal deltas over different contents have equal bytes); these
	// can. Both are "" in a manifest written before they existed.
	ContentSHA256 string `json:"content_sha256,omitempty"`
	BaseSHA256    string `json:"base_sha256,omitempty"`
}

// FileName is the conventional file of a version of type typ.
func FileName(typ string, version int64) string {
	return typ + "_" + strconv.FormatInt(version, 10) + ".gz"
}

// Latest is the newest version the manifest names, or 0.
func (m *Manifest) Latest() int64 {
	if len(m.Versions) == 0 {
		return 0
	}
	return m.Versions[len(m.Versions)-1].Version
}

// Validate checks what a reader relies on: the format version, a snapshot
// first, versions increasing by one, file names that stay inside the
// directory, SHA-256 sums in hex, and CatchUp a run of deltas ending at the
// snapshot's version.
func (m *Manifest) Validate() error {
	if m.V != FormatVersion {
		return fmt.Errorf("feed.json: format version %d, want %d", m.V, FormatVersion)
	}
	if len(m.Versions) == 0 {
		return errors.New("feed.json names no version")
	}
	for i, v := range m.Versions {
		switch {
		case i == 0 && v.Type != TypeSnapshot:
			return fmt.Errorf("feed.json: the first version (%d) is a %s, want a snapshot", v.Version, v.Type)
		case i > 0 && v.Type != TypeDelta:
			return fmt.Errorf("feed.json: version %d is a %s after the snapshot, want a delta", v.Version, v.Type)
		case v.Version < 1:
			return fmt.Errorf("feed.json: version %d is not positive", v.Version)
		case i > 0 && v.Version != m.Versions[i-1].Version+1:
			return fmt.Errorf("feed.json: version %d follows %d", v.Version, m.Versions[i-1].Version)
		}
		if err := v.checkFile(""); err != nil {
			return err
		}
		if i > 0 {
			if err := checkChain(m.Versions[i-1], v, ""); err != nil {
				return err
			}
		}
	}
	snap := m.Versions[0].Version
	for i, v := range m.CatchUp {
		want := snap - int64(len(m.CatchUp)-1-i)
		switch {
		case v.Type != TypeDelta:
			return fmt.Errorf("feed.json: catch_up version %d is a %s, want a delta", v.Version, v.Type)
		case v.Version != want || want < 1:
			return fmt.Errorf("feed.json: catch_up names version %d where %d belongs (the deltas up to snapshot %d)", v.Version, want, snap)
		}
		if err := v.checkFile("catch_up "); err != nil {
			return err
		}
		if i > 0 {
			if err := checkChain(m.CatchUp[i-1], v, "catch_up "); err != nil {
				return err
			}
		}
	}
	if n := len(m.CatchUp); n > 0 && !sameContent(m.CatchUp[n-1], m.Versions[0]) {
		return fmt.Errorf("feed.json: catch_up delta %d gives content_sha256 %s, its snapshot %s", snap, m.CatchUp[n-1].ContentSHA256, m.Versions[0].ContentSHA256)
	}
	return nil
}

// checkChain checks that delta v builds on prev's content, where both name
// it: a manifest whose deltas do not chain would let a client apply a delta
// to a content it was not made for.
func checkChain(prev, v Version, what string) error {
	if prev.ContentSHA256 != "" && v.BaseSHA256 != "" && prev.ContentSHA256 != v.BaseSHA256 {
		return fmt.Errorf("feed.json: %sversion %d builds on base_sha256 %s, but version %d has content_sha256 %s",
			what, v.Version, v.BaseSHA256, prev.Version, prev.ContentSHA256)
	}
	return nil
}

// sameContent reports whether a and b, where both name their content, name
// the same.
func sameContent(a, b Version) bool {
	return a.ContentSHA256 == "" || b.ContentSHA256 == "" || a.ContentSHA256 == b.ContentSHA256
}

func (v *Version) checkFile(what string) error {
	switch {
	case v.File == "" || strings.ContainsAny(v.File, `/\`) || v.File == "." || v.File == "..":
		return fmt.Errorf("feed.json: %sversion %d names file %q, which is not a plain file name", what, v.Version, v.File)
	case !validSHA256(v.SHA256):
		return fmt.Errorf("feed.json: %sversion %d: sha256 %q is not 64 hex digits", what, v.Version, v.SHA256)
	case v.Entries < 0:
		return fmt.Errorf("feed.json: %sversion %d: negative entries", what, v.Version)
	case v.ContentSHA256 != "" && !validSHA256(v.ContentSHA256):
		return fmt.Errorf("feed.json: %sversion %d: content_sha256 %q is not 64 hex digits", what, v.Version, v.ContentSHA256)
	case v.BaseSHA256 != "" && !validSHA256(v.BaseSHA256):
		return fmt.Errorf("feed.json: %sversion %d: base_sha256 %q is not 64 hex digits", what, v.Version, v.BaseSHA256)
	}
	return nil
}

// Files is every file the manifest names.
func (m *Manifest) Files() []string {
	out := make([]string, 0, len(m.Versions)+len(m.CatchUp))
	for _, v := range m.Versions {
		out = append(out, v.File)
	}
	for _, v := range m.CatchUp {
		out = append(out, v.File)
	}
	return out
}

// Continuity is what a manifest says about a client's held version.
type Continuity int

const (
	// Continues: the deltas returned apply to the held content (none when
	// it is the target's).
	Continues Continuity = iota
	// Unlisted: the manifest does not list the deltas after the held
	// version (it is too old, or newer than the target).
	Unlisted
	// Unproven: it lists them, but one side lacks the content checksum
	// (a manifest written, or a version loaded, before the field existed).
	Unproven
	// Diverged: the held version is of another history (its version with
	// another content, or, without content checksums, another file).
	Diverged
)

// DeltasFrom says whether the manifest proves a way from held to
// Versions[n-1] (1 ≤ n ≤ len(Versions); m must be valid) by deltas alone:
// Continues, with the deltas, when the first one's BaseSHA256 is held's
// ContentSHA256 (no deltas, when held is the target with its content). The
// deltas come from Versions, or from CatchUp for a client one or two
// versions before the snapshot. Any other answer means the snapshot and the
// deltas after it.
//
// A manifest without content checksums proves no delta; the only check it
// allows is today's: a held version listed as the target with the same file
// checksum is kept (Continues, no deltas).
func (m *Manifest) DeltasFrom(held Version, n int) ([]Version, Continuity) {
	target := m.Versions[n-1]
	switch {
	case held.Version > target.Version:
		return nil, Unlisted
	case held.Version == target.Version:
		same := held.SHA256 == target.SHA256
		if held.ContentSHA256 != "" && target.ContentSHA256 != "" {
			same = held.ContentSHA256 == target.ContentSHA256
		}
		if !same {
			return nil, Diverged
		}
		return nil, Continues
	}
	var run []Version
	if snap := m.Versions[0].Version; held.Version >= snap {
		run = m.Versions[held.Version-snap+1 : n]
	} else if run = m.catchUp(held.Version); run == nil {
		return nil, Unlisted
	} else {
		run = append(run, m.Versions[1:n]...)
	}
	switch first := run[0]; {
	case held.ContentSHA256 == "" || first.BaseSHA256 == "":
		return nil, Unproven
	case held.ContentSHA256 != first.BaseSHA256:
		return nil, Diverged
	}
	return run, Continues
}

// catchUp returns the catch-up deltas that lead from version have to the
// snapshot, or nil when CatchUp has no such run.
func (m *Manifest) catchUp(have int64) []Version {
	var run []Version
	for _, v := range m.CatchUp {
		if v.Version > have {
			run = append(run, v)
		}
	}
	if len(run) == 0 || run[0].Version != have+1 || run[len(run)-1].Version != m.Versions[0].Version {
		return nil
	}
	return run
}

// ContentSHA256 is the content checksum of a version whose full key set
// is lines (no removals): the SHA-256 of the lines as a snapshot writes
// them, sorted by key, uncompressed. lines are sorted here if they are
// not already.
func ContentSHA256(lines []Line) string {
	byKey := func(a, b Line) int { return strings.Compare(a.Key(), b.Key()) }
	if !slices.IsSortedFunc(lines, byKey) {
		lines = slices.Clone(lines)
		slices.SortFunc(lines, byKey)
	}
	h := sha256.New()
	var buf []byte
	for _, l := range lines {
		buf = AppendLine(buf[:0], l)
		h.Write(buf)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func validSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// DecodeManifest parses and validates feed.json.
func DecodeManifest(data []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("feed.json: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Code is a category code and its title.
type Code struct {
	Code  uint16 `json:"code"`
	Title string `json:"title"`
}

// Codes is feed-codes.json.
type Codes struct {
	V     int    `json:"v"`
	Codes []Code `json:"codes"`
}

// DecodeCodes parses feed-codes.json.
func DecodeCodes(data []byte) (*Codes, error) {
	var c Codes
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("feed-codes.json: %w", err)
	}
	if c.V != FormatVersion {
		return nil, fmt.Errorf("feed-codes.json: format version %d, want %d", c.V, FormatVersion)
	}
	return &c, nil
}

// Line is one line of a snapshot or a delta: the key's codes, or (delta
// only) the key's removal.
type Line struct {
	Name   string   // the domain: a Name
	Path   string   // "" or a path starting with '/'
	Codes  []uint16 // sorted, distinct, at least one unless Remove
	Remove bool
}

// Key is the line's key as the files write it: name[/path].
func (l *Line) Key() string { return l.Name + l.Path }

// ParseKey splits name[/path] and checks the name; the path is kept as it
// is (it is matched by prefix, byte for byte).
func ParseKey(key string) (name, path string, err error) {
	name, path = key, ""
	if i := strings.IndexByte(key, '/'); i >= 0 {
		name, path = key[:i], key[i:]
	}
	if err := CheckName(name); err != nil {
		return "", "", err
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c <= ' ' || c == 0x7f {
			return "", "", fmt.Errorf("path %q contains a space or control character", path)
		}
	}
	return name, path, nil
}

// CheckName reports whether name is a domain in the feed's form: lower-case
// LDH labels (and '_', which real names use) of 1 to 63 bytes, A-labels for
// anything international, at most 253 bytes, no trailing dot.
func CheckName(name string) error {
	if name == "" {
		return errors.New("empty name")
	}
	if len(name) > 253 {
		return fmt.Errorf("name longer than 253 bytes")
	}
	label := 0
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '.':
			if label == 0 {
				return fmt.Errorf("name %q has an empty label", name)
			}
			label = 0
			continue
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return fmt.Errorf("name %q: byte %q is not a lower-case letter, digit, '-' or '_'", name, c)
		}
		if label++; label > 63 {
			return fmt.Errorf("name %q has a label longer than 63 bytes", name)
		}
	}
	if label == 0 {
		return fmt.Errorf("name %q ends with a dot", name)
	}
	return nil
}

// ParseCodes parses "code[,code…]" into sorted distinct codes.
func ParseCodes(s string) ([]uint16, error) {
	return appendCodes(nil, s)
}

// appendCodes parses s as ParseCodes does into dst[:0], so that a caller
// can reuse one slice for every line.
func appendCodes(dst []uint16, s string) ([]uint16, error) {
	if s == "" {
		return nil, errors.New("no code")
	}
	out := dst[:0]
	for part := range strings.SplitSeq(s, ",") {
		n, err := strconv.ParseUint(part, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("code %q is not a number from 0 to 65535", strings.Clone(part))
		}
		out = append(out, uint16(n))
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// ParseLine parses one line; delta allows the removal form.
func ParseLine(line []byte, delta bool) (Line, error) {
	l, err := parseLine(string(line), delta, nil)
	if err != nil {
		return Line{}, err
	}
	return l, nil
}

// parseLine parses line (whose memory the Line shares) with its codes in
// codes[:0].
func parseLine(line string, delta bool, codes []uint16) (Line, error) {
	tab := strings.IndexByte(line, '\t')
	if tab < 0 {
		return Line{}, errors.New("no tab between key and codes")
	}
	name, path, err := ParseKey(line[:tab])
	if err != nil {
		return Line{}, err
	}
	l := Line{Name: name, Path: path}
	rest := line[tab+1:]
	if rest == "-" {
		if !delta {
			return Line{}, errors.New("a removal in a snapshot")
		}
		l.Remove = true
		return l, nil
	}
	if l.Codes, err = appendCodes(codes, rest); err != nil {
		return Line{}, err
	}
	return l, nil
}

// ReadLines parses a (decompressed) snapshot or delta, calling fn for each
// line in order. Empty lines are skipped; any other bad line stops the read
// with an error naming its number: a feed file is machine-written, so a bad
// line means a corrupt file, and nothing of it may be applied.
func ReadLines(r io.Reader, delta bool, fn func(Line) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		l, err := ParseLine(b, delta)
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("line %d: %w", n+1, err)
	}
	return nil
}

// ScanLines reads a file as ReadLines does, the same lines and the same
// errors, without allocating per line: the Line passed to fn shares the
// reader's buffer and one codes slice, both overwritten by the next line,
// so fn must copy what it keeps. It is for a reader that reads a large
// file only to copy its lines into a structure of its own (a node's
// feed index, which reads a 10-million-line snapshot several times when
// it replaces one): ReadLines' strings per line are garbage that grows
// the heap towards the collector's goal while the index is held.
func ScanLines(r io.Reader, delta bool, fn func(Line) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var codes []uint16
	n := 0
	for sc.Scan() {
		n++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		// The view's errors copy what they quote (ParseKey's and
		// appendCodes' messages are built by fmt, which copies).
		l, err := parseLine(unsafe.String(&b[0], len(b)), delta, codes)
		if err != nil {
			return fmt.Errorf("line %d: %w", n, err)
		}
		if l.Codes != nil {
			codes = l.Codes
		}
		if err := fn(l); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("line %d: %w", n+1, err)
	}
	return nil
}

// AppendLine appends l as a file line, with its newline.
func AppendLine(dst []byte, l Line) []byte {
	dst = append(dst, l.Name...)
	dst = append(dst, l.Path...)
	dst = append(dst, '\t')
	if l.Remove {
		return append(dst, '-', '\n')
	}
	for i, c := range l.Codes {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendUint(dst, uint64(c), 10)
	}
	return append(dst, '\n')
}

// Category is one code one feed gives a looked-up name.
type Category struct {
	Code  uint16
	Title string // from the feed's feed-codes.json; "" when it has none
	Feed  string // the feed's configured name
	// Name and Path are the feed entry that matched: the name asked for or
	// the parent that matched, and the entry's path ("" for a name entry).
	Name, Path string
}

// Key is the feed key that matched, name[/path] (the simulator bodies'
// "match").
func (c Category) Key() string { return c.Name + c.Path }
