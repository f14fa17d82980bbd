package feedbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// FetchResult is what became of a URL source's fetch in one build.
type FetchResult string

// The results, also the `result` label of svcpf_feed_source_fetch_total.
const (
	FetchUpdated     FetchResult = "updated"      // a new body, accepted
	FetchNotModified FetchResult = "not_modified" // 304: the cached body is current
	FetchFailed      FetchResult = "failed"       // no usable answer (network, timeout, HTTP error, size cap)
	FetchRefused     FetchResult = "refused"      // an answer that failed the checks (nothing imported, shrank, parse error)
)

// FetchOutcome is a URL source's part of a build.
type FetchOutcome struct {
	Result FetchResult
	// Stale is true when the build used the last good copy instead of
	// what the server gave (Result failed or refused).
	Stale bool
	// Err says why the fetch failed or was refused.
	Err      string
	Attempts int
	// Size is the bytes of the body the build used; GoodAt when it was
	// fetched (zero when there was none).
	Size   int64
	GoodAt time.Time
}

// cacheMeta is what a URL source's cache remembers of its last good body.
type cacheMeta struct {
	Source string `json:"source"`
	validators
	File      string    `json:"file"` // the body's file name in the cache directory
	Size      int64     `json:"size"`
	Imported  int       `json:"imported"` // entries of its import: the baseline of max_shrink
	FetchedAt time.Time `json:"fetched_at"`
}

// CacheDirFor is where a feed directory's URL sources keep their last good
// bodies by default: beside it, as .<base>.sources (a dot name, so `feed
// serve` never serves it and it never mixes with the feed's files).
func CacheDirFor(dir string) string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = filepath.Clean(dir)
	}
	return filepath.Join(filepath.Dir(abs), "."+filepath.Base(abs)+".sources")
}

// cacheKey names a source's cache files: its whole spelling, so that the
// same URL under two formats or codes keeps two baselines.
func cacheKey(src Source) string {
	sum := sha256.Sum256([]byte(src.String()))
	return hex.EncodeToString(sum[:12])
}

func readCache(dir, key string) (cacheMeta, string, bool) {
	var m cacheMeta
	data, err := os.ReadFile(filepath.Join(dir, key+".json"))
	if err != nil || json.Unmarshal(data, &m) != nil || m.File == "" || filepath.Base(m.File) != m.File {
		return cacheMeta{}, "", false
	}
	path := filepath.Join(dir, m.File)
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != m.Size {
		return cacheMeta{}, "", false
	}
	return m, path, true
}

// importURL fetches src into the cache and imports it through add; on a
// failed or refused fetch it imports the last good body instead, and fails
// only when there is none. Entries of a refused body never reach add.
func importURL(ctx context.Context, f *Fetcher, cacheDir string, src Source, now time.Time, add func(Entry)) (Stats, *FetchOutcome, error) {
	key := cacheKey(src)
	meta, cachedPath, has := readCache(cacheDir, key)
	out := &FetchOutcome{}
	tmp, err := os.CreateTemp(cacheDir, tmpPrefix+key+"-*")
	if err != nil {
		return Stats{}, out, fmt.Errorf("source %s: cache directory: %w", src.Redacted(), err)
	}
	kept := false
	defer func() {
		if !kept {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	r, ferr := f.fetch(ctx, src.Path, meta.validators, has, tmp)
	out.Attempts = r.Attempts
	if ferr != nil && ctx.Err() != nil {
		return Stats{}, out, ctx.Err()
	}
	switch {
	case ferr != nil:
		out.Result, out.Err = FetchFailed, ferr.Error()
	case r.NotModified:
		out.Result = FetchNotModified
		st, err := importCached(src, cachedPath, add)
		out.Size, out.GoodAt = meta.Size, meta.FetchedAt
		return st, out, err
	default:
		if _, err := tmp.Seek(0, io.SeekStart); err != nil {
			return Stats{}, out, err
		}
		var entries []Entry
		st, perr := ImportReader(src.Format, src.Codes, tmp, func(e Entry) { entries = append(entries, e) })
		switch {
		case perr != nil:
			out.Result, out.Err = FetchRefused, fmt.Sprintf("the list does not parse as %s: %v", src.Format, perr)
		case st.Imported == 0:
			out.Result, out.Err = FetchRefused, fmt.Sprintf("the list imports nothing as %s (%s): not a %s list, or an error page", src.Format, st.String(), src.Format)
		case has && meta.Imported > 0 && float64(st.Imported) < float64(meta.Imported)*(1-f.cfg.MaxShrink):
			out.Result, out.Err = FetchRefused, fmt.Sprintf("the list shrank from %d to %d entries, more than max_shrink %.2f allows: a truncated or broken list? if the shrink is real, raise max_shrink for one build", meta.Imported, st.Imported, f.cfg.MaxShrink)
		default:
			if err := keepBody(cacheDir, key, src, tmp, r, st.Imported, now, meta); err != nil {
				return Stats{}, out, fmt.Errorf("source %s: storing the fetched list: %w", src.Redacted(), err)
			}
			kept = true
			for _, e := range entries {
				add(e)
			}
			out.Result, out.Size, out.GoodAt = FetchUpdated, r.Size, now
			return st, out, nil
		}
	}
	// Failed or refused: the last good body, or nothing.
	if !has {
		return Stats{}, out, fmt.Errorf("source %s: %s; there is no last good copy yet, so the feed is not built without it: fix the URL or the server, or remove the source", src.Redacted(), out.Err)
	}
	out.Stale, out.Size, out.GoodAt = true, meta.Size, meta.FetchedAt
	st, err := importCached(src, cachedPath, add)
	return st, out, err
}

func importCached(src Source, path string, add func(Entry)) (Stats, error) {
	f, err := os.Open(path)
	if err != nil {
		return Stats{}, fmt.Errorf("source %s: the last good copy: %w", src.Redacted(), err)
	}
	defer f.Close()
	st, err := ImportReader(src.Format, src.Codes, f, add)
	if err != nil {
		return st, fmt.Errorf("source %s: the last good copy: %w", src.Redacted(), err)
	}
	return st, nil
}

// keepBody makes tmp the source's last good body: the body under a new
// name, then the metadata naming it (the commit point), then the old body
// goes. A crash at any step leaves the previous metadata naming a body
// that still exists.
func keepBody(dir, key string, src Source, tmp *os.File, r fetchResult, imported int, now time.Time, old cacheMeta) error {
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	name := fmt.Sprintf("%s-%d.body", key, now.UnixNano())
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	m := cacheMeta{Source: src.Redacted(), validators: r.Validators, File: name, Size: r.Size, Imported: imported, FetchedAt: now.UTC()}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if err := writeAtomic(dir, key+".json", data); err != nil {
		os.Remove(filepath.Join(dir, name))
		return err
	}
	if old.File != "" && old.File != name {
		_ = os.Remove(filepath.Join(dir, old.File))
	}
	return nil
}

// tidyCache removes what no current source uses: temporary files a crash
// left, and the cache of sources no longer listed. The feed directory's
// lock is held, so no build writes the cache meanwhile.
func tidyCache(dir string, sources []Source) error {
	keep := map[string]bool{}
	for _, s := range sources {
		if s.IsURL() {
			keep[cacheKey(s)] = true
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		key, _, _ := strings.Cut(strings.TrimSuffix(name, ".json"), "-")
		if strings.HasPrefix(name, tmpPrefix) || (!keep[key] && (strings.HasSuffix(name, ".json") || strings.HasSuffix(name, ".body"))) {
			if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// String is the outcome as `feed build` prints it after a source's counts.
func (o *FetchOutcome) String() string {
	good := ""
	if !o.GoodAt.IsZero() {
		good = " of " + o.GoodAt.UTC().Format(time.RFC3339)
	}
	switch o.Result {
	case FetchUpdated:
		return fmt.Sprintf("fetched %d bytes", o.Size)
	case FetchNotModified:
		return "not modified since the copy" + good
	}
	what := "FETCH FAILED"
	if o.Result == FetchRefused {
		what = "FETCH REFUSED"
	}
	if o.Stale {
		return fmt.Sprintf("%s: %s; using the last good copy%s", what, o.Err, good)
	}
	return fmt.Sprintf("%s: %s", what, o.Err)
}
