package feedbuild

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/feed"
	"github.com/svc-pf/svc-pf/internal/readmodel/feeds"
)

// maxPreviousFile bounds one file of the previous version that Build reads.
const maxPreviousFile = 1 << 30

// Files of a feed directory that only `feed build` reads. Their names start
// with a dot, and `feed serve` serves none of them.
const (
	lockFile  = ".feedbuild.lock"
	stateFile = ".feedbuild-state.json"
	tmpPrefix = ".feedbuild-tmp-"
)

// BuildConfig is one `feed build`.
type BuildConfig struct {
	Dir     string
	Name    string            // the feed's name; it must match an existing feed.json's
	Titles  map[uint16]string // code titles to set; "" removes a code's title
	Sources []Source
	// Snapshot writes a snapshot even when a delta would do (and a new
	// version even when nothing changed), e.g. to shorten a long chain.
	Snapshot bool
	Now      func() time.Time // nil is time.Now

	// Fetcher fetches the URL sources; nil is one with FetchConfig's
	// defaults.
	Fetcher *Fetcher
	// CacheDir keeps each URL source's last good body and its validators;
	// "" is CacheDirFor(Dir). One cache directory per feed directory.
	CacheDir string

	// beforeManifest runs after every other file is in place and before
	// feed.json is replaced; its error aborts the build there. Tests use it
	// to stand for a crash at the worst moment.
	beforeManifest func() error
}

// SourceResult is what one source gave.
type SourceResult struct {
	Source Source
	Stats  Stats
	// Fetch is what became of a URL source's fetch; nil for a file.
	Fetch *FetchOutcome
}

// BuildResult is what a build did.
type BuildResult struct {
	Sources []SourceResult
	Total   Stats
	Keys    int // distinct keys of the new content

	// Written is the version written; zero Version when nothing changed
	// (no new version: the directory is as it was, but feed-codes.json).
	Written                 feed.Version
	Added, Changed, Removed int   // keys, against the previous version
	DeltaSize, SnapshotSize int64 // gzip bytes of the delta and of a snapshot of the new content
	Manifest                *feed.Manifest
	CodesWritten            bool     // feed-codes.json changed
	Pruned                  []string // files removed
	PruneSkipped            string   // why nothing was pruned, if so
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// Build imports the sources and writes the next version of the feed in
// cfg.Dir: the new content against the previous version's (read back in
// full and checked), a delta or a snapshot, feed-codes.json, feed.json last
// by atomic rename, then pruning. One build at a time holds the
// directory's lock; a second is refused.
func Build(ctx context.Context, cfg BuildConfig) (*BuildResult, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("feed directory: %w", err)
	}
	unlock, err := lockDir(cfg.Dir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	res := &BuildResult{}
	content := Content{}
	add := func(e Entry) { content.Add(e.Key(), e.Codes) }
	fetcher, cacheDir, err := cfg.urlSetup()
	if err != nil {
		return nil, err
	}
	// A URL source that fails with no last good copy fails the build, but
	// only after every source is tried, so that the result reports them
	// all.
	var urlErrs []error
	for _, src := range cfg.Sources {
		if !src.IsURL() {
			st, err := Import(src, add)
			if err != nil {
				return nil, err
			}
			res.Sources = append(res.Sources, SourceResult{Source: src, Stats: st})
			res.Total.Add(st)
			continue
		}
		st, outcome, err := importURL(ctx, fetcher, cacheDir, src, now(), add)
		res.Sources = append(res.Sources, SourceResult{Source: src, Stats: st, Fetch: outcome})
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return res, ctxErr
			}
			urlErrs = append(urlErrs, err)
			continue
		}
		res.Total.Add(st)
	}
	if len(urlErrs) > 0 {
		return res, errors.Join(urlErrs...)
	}
	if cacheDir != "" {
		if err := tidyCache(cacheDir, cfg.Sources); err != nil {
			return res, fmt.Errorf("cache directory %s: %w", cacheDir, err)
		}
	}
	res.Keys = len(content)
	if err := ctx.Err(); err != nil {
		return nil, err
	}

	// Only a missing feed.json makes a first build: a manifest whose files
	// are missing is a damaged feed, which a new version 1 would hide.
	var prev *feeds.Loaded
	_, err = os.Stat(filepath.Join(cfg.Dir, feed.ManifestFile))
	if err == nil {
		// Read back as a node reads it (feeds.Load, the one reader of
		// feed directories), with a node's limits but for the file size:
		// a build may rewrite a feed of up to maxPreviousFile bytes a file.
		prev, err = feeds.Load(ctx, feeds.LoadConfig{URL: cfg.Dir, Limits: feeds.Limits{FileBytes: maxPreviousFile}})
	} else if errors.Is(err, fs.ErrNotExist) {
		err = nil
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("reading the previous version in %s: %w; the directory is damaged: build into a new directory (clients follow it from its snapshot) or restore this one", cfg.Dir, err)
	case prev != nil && prev.Manifest.Name != cfg.Name:
		return nil, fmt.Errorf("%s holds feed %q, not %q: give --name %s, or another directory for a new feed", cfg.Dir, prev.Manifest.Name, cfg.Name, prev.Manifest.Name)
	}

	codesWritten, err := writeCodes(cfg.Dir, cfg.Titles)
	if err != nil {
		return nil, err
	}
	res.CodesWritten = codesWritten

	var old Content
	if prev != nil {
		old = indexContent(prev.Index())
	}
	lines, added, changed, removed := content.diff(old)
	res.Added, res.Changed, res.Removed = added, changed, removed
	if prev != nil && len(lines) == 0 && !cfg.Snapshot {
		res.Manifest = prev.Manifest
		return res, nil
	}

	snapLines := content.snapshotLines()
	snapData, err := encodeLines(snapLines)
	if err != nil {
		return nil, err
	}
	// The first version has no delta: everything is new.
	deltaData := snapData
	if prev != nil {
		if deltaData, err = encodeLines(lines); err != nil {
			return nil, err
		}
	}
	res.SnapshotSize, res.DeltaSize = int64(len(snapData)), int64(len(deltaData))

	created := now().UTC().Truncate(time.Second)
	n := int64(1)
	if prev != nil {
		n = prev.Manifest.Latest() + 1
	}
	// The lineage: the new content's checksum on both files of version n,
	// and on the delta the checksum of the content it applies to — the
	// previous version as feeds.Load read it back, so a directory written before
	// the fields existed gets them from its next build on.
	contentSum := feed.ContentSHA256(snapLines)
	delta := feed.Version{Version: n, Type: feed.TypeDelta, File: feed.FileName(feed.TypeDelta, n),
		SHA256: sha256Hex(deltaData), Entries: len(lines), CreatedAt: created, ContentSHA256: contentSum}
	if prev != nil {
		delta.BaseSHA256 = prev.ContentSHA256
	}
	snapshot := feed.Version{Version: n, Type: feed.TypeSnapshot, File: feed.FileName(feed.TypeSnapshot, n),
		SHA256: sha256Hex(snapData), Entries: len(content), CreatedAt: created, ContentSHA256: contentSum}

	next := &feed.Manifest{V: feed.FormatVersion, Name: cfg.Name}
	if prev == nil || cfg.Snapshot || !deltaPays(cfg.Dir, prev.Manifest, res.DeltaSize, res.SnapshotSize) {
		res.Written = snapshot
		next.Versions = []feed.Version{snapshot}
		if err := writeAtomic(cfg.Dir, snapshot.File, snapData); err != nil {
			return nil, err
		}
		if prev != nil {
			// The delta beside the snapshot, and the one before it, let a
			// client one or two versions behind catch up without the
			// snapshot (Manifest.CatchUp).
			if err := writeAtomic(cfg.Dir, delta.File, deltaData); err != nil {
				return nil, err
			}
			if before, ok := deltaOf(prev.Manifest, n-1); ok {
				next.CatchUp = append(next.CatchUp, before)
			}
			next.CatchUp = append(next.CatchUp, delta)
		}
	} else {
		res.Written = delta
		next.Versions = append(slices.Clone(prev.Manifest.Versions), delta)
		next.CatchUp = prev.Manifest.CatchUp
		if err := writeAtomic(cfg.Dir, delta.File, deltaData); err != nil {
			return nil, err
		}
	}
	if err := next.Validate(); err != nil {
		return nil, fmt.Errorf("internal error: the new manifest is invalid: %w", err)
	}
	manifestData, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return nil, err
	}
	if cfg.beforeManifest != nil {
		if err := cfg.beforeManifest(); err != nil {
			return nil, err
		}
	}
	// The commit point: readers see the new version from here on, and every
	// file it names is already in place.
	if err := writeAtomic(cfg.Dir, feed.ManifestFile, append(manifestData, '\n')); err != nil {
		return nil, err
	}
	res.Manifest = next

	var prevManifest *feed.Manifest
	if prev != nil {
		prevManifest = prev.Manifest
	}
	res.Pruned, res.PruneSkipped, err = prune(cfg.Dir, next, prevManifest)
	if err != nil {
		return res, fmt.Errorf("version %d is written; pruning old files failed: %w", n, err)
	}
	return res, nil
}

// urlSetup is the fetcher and the cache directory when a source is a URL
// (the directory created); nil and "" otherwise.
func (cfg *BuildConfig) urlSetup() (*Fetcher, string, error) {
	if !slices.ContainsFunc(cfg.Sources, Source.IsURL) {
		return nil, "", nil
	}
	f := cfg.Fetcher
	if f == nil {
		var err error
		if f, err = NewFetcher(FetchConfig{}); err != nil {
			return nil, "", err
		}
	}
	dir := cfg.CacheDir
	if dir == "" {
		dir = CacheDirFor(cfg.Dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("the URL sources' cache directory: %w", err)
	}
	return f, dir, nil
}

func (cfg *BuildConfig) validate() error {
	switch {
	case cfg.Dir == "":
		return errors.New("no feed directory: give --dir DIR")
	case !nameRE.MatchString(cfg.Name):
		return fmt.Errorf("feed name %q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", cfg.Name)
	case len(cfg.Sources) == 0:
		return errors.New("no source: a build without one would empty the feed; give at least one FORMAT:CODE:PATH")
	}
	return nil
}

// deltaPays reports whether a delta of deltaSize bytes is the better next
// version: smaller than a snapshot, and small enough that the deltas a new
// client downloads after the snapshot, this one included, stay smaller than
// a snapshot too — else a new snapshot costs every new client less.
func deltaPays(dir string, m *feed.Manifest, deltaSize, snapshotSize int64) bool {
	if deltaSize >= snapshotSize {
		return false
	}
	chain := deltaSize
	for _, v := range m.Versions[1:] {
		fi, err := os.Stat(filepath.Join(dir, v.File))
		if err != nil {
			return false // cannot tell: a snapshot is always right
		}
		chain += fi.Size()
	}
	return chain < snapshotSize
}

// deltaOf finds delta v in the manifest: among its deltas, or the one
// written beside its snapshot.
func deltaOf(m *feed.Manifest, v int64) (feed.Version, bool) {
	for _, list := range [][]feed.Version{m.Versions, m.CatchUp} {
		for _, x := range list {
			if x.Version == v && x.Type == feed.TypeDelta {
				return x, true
			}
		}
	}
	return feed.Version{}, false
}

// writeCodes merges titles into feed-codes.json (a title given replaces the
// old one, "" removes it) and writes it when it changed.
func writeCodes(dir string, titles map[uint16]string) (bool, error) {
	path := filepath.Join(dir, feed.CodesFile)
	merged := map[uint16]string{}
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		old = nil
	case err != nil:
		return false, err
	default:
		c, err := feed.DecodeCodes(old)
		if err != nil {
			return false, fmt.Errorf("%s: %w; fix or remove it (titles come back with --title)", path, err)
		}
		for _, x := range c.Codes {
			merged[x.Code] = x.Title
		}
	}
	for code, title := range titles {
		if title == "" {
			delete(merged, code)
		} else {
			merged[code] = title
		}
	}
	if old == nil && len(merged) == 0 {
		return false, nil
	}
	out := feed.Codes{V: feed.FormatVersion, Codes: []feed.Code{}}
	for code, title := range merged {
		out.Codes = append(out.Codes, feed.Code{Code: code, Title: title})
	}
	slices.SortFunc(out.Codes, func(a, b feed.Code) int { return int(a.Code) - int(b.Code) })
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return false, err
	}
	data = append(data, '\n')
	if string(data) == string(old) {
		return false, nil
	}
	return true, writeAtomic(dir, feed.CodesFile, data)
}

// writeAtomic writes data as dir/name so that a reader sees the old file
// or the new one, never a part: a temporary file, fsync, rename, fsync of
// the directory (which makes the rename itself durable).
func writeAtomic(dir, name string, data []byte) (err error) {
	f, err := os.CreateTemp(dir, tmpPrefix+name+"-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// versionFileRE matches the files pruning may remove.
var versionFileRE = regexp.MustCompile(`^(snapshot|delta)_[0-9]+\.gz$`)

// buildState is what a build remembers for the next one: the files the
// manifest before the current one named. Pruning keeps the files of the
// current manifest and of the two before it, so a client that read any of
// them and is still downloading finds every file it names.
type buildState struct {
	Previous []string `json:"previous"`
}

// prune removes the version files no manifest of the last three names, and
// temporary files a crashed build left (the lock says no build runs).
func prune(dir string, next, prev *feed.Manifest) (removed []string, skipped string, err error) {
	keep := map[string]bool{}
	for _, f := range next.Files() {
		keep[f] = true
	}
	var prevFiles []string
	if prev != nil {
		prevFiles = prev.Files()
	}
	for _, f := range prevFiles {
		keep[f] = true
	}
	statePath := filepath.Join(dir, stateFile)
	data, err := os.ReadFile(statePath)
	var st buildState
	switch {
	case prev == nil:
		// The first version: nothing before it to keep.
	case err != nil || json.Unmarshal(data, &st) != nil:
		skipped = "no readable " + stateFile + " says what the manifest before the last named; nothing pruned this time"
	}
	for _, f := range st.Previous {
		keep[f] = true
	}
	newState, err := json.Marshal(buildState{Previous: prevFiles})
	if err != nil {
		return nil, "", err
	}
	if err := writeAtomic(dir, stateFile, newState); err != nil {
		return nil, "", err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, "", err
	}
	for _, e := range entries {
		name := e.Name()
		stale := strings.HasPrefix(name, tmpPrefix)
		if !stale && (skipped != "" || !versionFileRE.MatchString(name) || keep[name]) {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, skipped, err
		}
		removed = append(removed, name)
	}
	return removed, skipped, nil
}
