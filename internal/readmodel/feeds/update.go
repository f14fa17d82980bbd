package feeds

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// reason is why an update failed: the bounded `reason` label of
// svcpf_feed_update_failures_total.
type reason int

const (
	reasonFetch     reason = iota // network, HTTP status, timeout, a listed file missing
	reasonManifest                // feed.json or feed-codes.json unreadable or invalid
	reasonChecksum                // a file's SHA-256 differs from the manifest's
	reasonDecode                  // a file is not valid gzip or has a bad line
	reasonSize                    // a file or the index over its Limits cap
	reasonBackwards               // the manifest went back to an older version
	numReasons
)

func (r reason) String() string {
	switch r {
	case reasonFetch:
		return "fetch"
	case reasonManifest:
		return "manifest"
	case reasonChecksum:
		return "checksum"
	case reasonDecode:
		return "decode"
	case reasonSize:
		return "size"
	case reasonBackwards:
		return "backwards"
	}
	return "unknown"
}

// updateError is a failed update and its reason.
type updateError struct {
	reason reason
	err    error
}

func (e *updateError) Error() string { return e.err.Error() }
func (e *updateError) Unwrap() error { return e.err }

func fail(r reason, err error) error {
	if errors.Is(err, errTooLarge) {
		r = reasonSize
	}
	return &updateError{reason: r, err: err}
}

func reasonOf(err error) reason {
	var ue *updateError
	if errors.As(err, &ue) {
		return ue.reason
	}
	return reasonFetch
}

// poll runs one update of f and records its outcome: metrics, status, and a
// log line per distinct failure (a feed that fails the same way every five
// seconds logs it once, and once more when it recovers).
func (c *Client) poll(ctx context.Context, f *feedState) error {
	start := time.Now()
	changed, err := c.update(ctx, f)
	if err != nil && ctx.Err() != nil {
		return err // shutting down: not the feed's failure
	}
	now := c.cfg.Clock()
	held := c.set.Load().feeds[f.pos]
	if err != nil {
		r := reasonOf(err)
		f.m.failures[r].Inc()
		f.failures++
		if key := r.String() + ": " + err.Error(); key != f.lastLogged {
			f.lastLogged = key
			args := []any{"reason", r.String(), "err", err}
			if held != nil {
				args = append(args, "serving_version", held.from.Version)
			} else {
				args = append(args, "serving_version", "none")
			}
			f.log.Warn("feed update failed; retrying on the next polls", args...)
		}
		f.mu.Lock()
		f.status.LastError, f.status.Failures = err.Error(), f.failures
		f.mu.Unlock()
		return err
	}
	if f.failures > 0 {
		f.log.Info("feed update recovered", "after_failures", f.failures)
	}
	f.failures, f.lastLogged = 0, ""
	f.m.lastSuccess.Set(float64(now.UnixNano()) / 1e9)
	if changed {
		f.m.version.Set(float64(held.from.Version))
		f.m.entries.Set(float64(held.index.Len()))
		f.m.updateSeconds.Observe(time.Since(start).Seconds())
	}
	f.mu.Lock()
	f.status.LastError, f.status.Failures, f.status.LastSuccess = "", 0, now
	f.mu.Unlock()
	return nil
}

// update brings f to the newest version its manifest allows, publishing a
// new Set only once every file needed is fetched, verified and applied. It
// reports whether it published.
func (c *Client) update(ctx context.Context, f *feedState) (bool, error) {
	m, err := c.fetchManifest(ctx, f)
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	f.status.Latest = m.Latest()
	f.mu.Unlock()
	if m.Name != f.cfg.Name && !f.nameWarned {
		f.nameWarned = true
		f.log.Warn("feed.json names another feed; check the url", "manifest_name", m.Name)
	}

	now := c.cfg.Clock()
	cur := c.set.Load().feeds[f.pos]
	var held *feed.Version
	if cur != nil {
		// A copy: a pointer into cur would keep cur's index alive until
		// the update ends, and a stepwise update (replaceSnapshot,
		// applyDeltasStepwise) lets the shards it replaced go at each step.
		v := cur.from
		held = &v
	}
	p := planUpdate(m, held, now, f.cfg.Delay)
	if p.kind == planDeltas && cur != nil && deltasOutweigh(m, p) && canReplace(cur.index, m.Versions[0].Entries) {
		// Deltas of more lines than half the snapshot's (a feed that
		// changed wholesale: its catch-up delta removes every key and sets
		// every new one) would hold their lines and grow an overlay the
		// size of the index; the snapshot replaces the index shard by
		// shard instead, in bounded memory.
		p.kind, p.files = planSnapshot, m.Versions[:p.eligible]
	}
	c.notePending(f, m, p)
	if p.kind == planBackwards {
		if f.backwardsSince.IsZero() {
			f.backwardsSince = now
		}
		if since := now.Sub(f.backwardsSince); since < c.cfg.RollbackAfter {
			return false, fail(reasonBackwards, fmt.Errorf(
				"feed.json's newest version %d is older than version %d held: a stale mirror, or a rebuilt directory (followed once it persists for %s)",
				p.target.Version, held.Version, c.cfg.RollbackAfter))
		}
		f.log.Warn("feed went back to an older version for longer than RollbackAfter; reloading it",
			"from_version", held.Version, "to_version", p.target.Version)
		p.kind = planSnapshot
	} else {
		f.backwardsSince = time.Time{}
	}
	switch p.continuity {
	case feed.Diverged:
		// Deltas over another history would leave a mix of both for good.
		f.m.lineageResets.Inc()
		f.log.Warn("feed.json's history does not contain the version held (another content_sha256, or file checksum): the directory was rebuilt or swapped; loading its snapshot instead of applying its deltas",
			"held_version", held.Version, "held_content_sha256", held.ContentSHA256, "to_version", p.target.Version)
	case feed.Unproven:
		if !f.unprovenLogged {
			f.unprovenLogged = true
			f.log.Warn("feed.json does not prove that its deltas build on the version held (no content_sha256/base_sha256: an older feed build); loading its snapshot for each new version instead",
				"held_version", held.Version, "to_version", p.target.Version)
		}
	}

	codes, err := c.fetchCodes(ctx, f)
	if err != nil {
		return false, err
	}
	if p.kind == planNone && (cur == nil || cur.codes == codes) {
		return false, nil
	}

	next := &loadedFeed{name: f.cfg.Name, codes: codes}
	switch p.kind {
	case planNone: // only the titles changed
		next.from, next.index, next.loadedAt = cur.from, cur.index, cur.loadedAt
	case planSnapshot:
		var ix *Index
		if cur != nil && canReplace(cur.index, p.files[0].Entries) {
			ix, err = c.replaceSnapshot(ctx, f, cur, p.files[0])
		} else {
			ix, err = c.loadSnapshot(ctx, f, p.files[0])
		}
		if err != nil {
			return false, err
		}
		if ix, err = c.applyDeltas(ctx, f, ix, p.files[1:]); err != nil {
			return false, err
		}
		next.from, next.index, next.loadedAt = p.target, ix, now
	case planDeltas:
		var ix *Index
		if stepwiseDeltas(cur.index, p.files, c.cfg.Limits.Entries) {
			ix, err = c.applyDeltasStepwise(ctx, f, cur, p.files)
		} else {
			ix, err = c.applyDeltas(ctx, f, cur.index, p.files)
		}
		if err != nil {
			return false, err
		}
		next.from, next.index, next.loadedAt = p.target, ix, now
	}
	c.publish(f.pos, next)
	// A rollback is done: the next older manifest is a new stale mirror
	// until it, too, persists.
	f.backwardsSince = time.Time{}
	if p.kind != planNone {
		from := int64(0)
		if held != nil {
			from = held.Version
		}
		how := "deltas"
		if p.kind == planSnapshot {
			how = "snapshot"
		}
		f.log.Info("feed updated", "version", p.target.Version, "from_version", from, "via", how,
			"files", len(p.files), "entries", next.index.Len())
	}
	return true, nil
}

// notePending logs once per version that a delay holds back, so an operator
// watching a publish sees why the node has not applied it yet.
func (c *Client) notePending(f *feedState, m *feed.Manifest, p plan) {
	if p.eligible == len(m.Versions) || f.loggedPending == m.Latest() {
		return
	}
	f.loggedPending = m.Latest()
	next := m.Versions[p.eligible]
	f.log.Info("newer versions wait for the feed's delay", "latest", m.Latest(),
		"next", next.Version, "applicable_at", next.CreatedAt.Add(f.cfg.Delay))
}

// fetchManifest returns the feed's manifest, reusing the last one when the
// server answers 304 or the bytes are unchanged.
func (c *Client) fetchManifest(ctx context.Context, f *feedState) (*feed.Manifest, error) {
	cond := validators{}
	if f.manifest != nil {
		cond = f.manifestVal
	}
	data, val, notModified, err := c.fetch(ctx, f, feed.ManifestFile, c.cfg.Limits.ManifestBytes, cond)
	if err != nil {
		return nil, fail(reasonFetch, err)
	}
	if notModified {
		return f.manifest, nil
	}
	sum := sha256.Sum256(data)
	if f.manifest != nil && sum == f.manifestSum {
		f.manifestVal = val
		return f.manifest, nil
	}
	m, err := feed.DecodeManifest(data)
	if err != nil {
		// The last valid manifest and its validators stay: the next poll
		// asks again, and a 304 cannot hand back these bytes.
		return nil, fail(reasonManifest, err)
	}
	f.manifest, f.manifestVal, f.manifestSum = m, val, sum
	return m, nil
}

// fetchCodes returns the feed's titles: the same *codeTable while the file
// is unchanged, so that an unchanged poll publishes nothing. A directory
// without feed-codes.json has codes without titles.
func (c *Client) fetchCodes(ctx context.Context, f *feedState) (*codeTable, error) {
	cond := validators{}
	if f.codes != nil {
		cond = f.codesVal
	}
	data, val, notModified, err := c.fetch(ctx, f, feed.CodesFile, c.cfg.Limits.CodesBytes, cond)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if f.codes == nil || len(f.codes.codes) > 0 {
			f.log.Warn("the feed has no feed-codes.json; its codes have no titles")
			f.codes, f.codesVal, f.codesSum = newCodeTable(&feed.Codes{}), validators{}, [32]byte{}
		}
		return f.codes, nil
	case err != nil:
		return nil, fail(reasonFetch, err)
	case notModified:
		return f.codes, nil
	}
	sum := sha256.Sum256(data)
	if f.codes != nil && sum == f.codesSum {
		f.codesVal = val
		return f.codes, nil
	}
	codes, err := feed.DecodeCodes(data)
	if err != nil {
		return nil, fail(reasonManifest, err)
	}
	f.codes, f.codesVal, f.codesSum = newCodeTable(codes), val, sum
	return f.codes, nil
}

// fetch reads one file within FetchTimeout and counts its bytes.
func (c *Client) fetch(ctx context.Context, f *feedState, file string, limit int64, cond validators) ([]byte, validators, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.FetchTimeout)
	defer cancel()
	data, val, notModified, err := f.src.fetch(ctx, file, limit, cond)
	f.m.fetchedBytes.Add(float64(len(data)))
	return data, val, notModified, err
}

// planKind is what an update has to do.
type planKind int

const (
	planNone      planKind = iota // the newest applicable version is held (or none is applicable yet)
	planDeltas                    // apply files (deltas) to the index held
	planSnapshot                  // build from files[0] (the snapshot), then apply the deltas after it
	planBackwards                 // the newest applicable version is older than the one held
)

// plan is an update's work, decided from the manifest alone.
type plan struct {
	kind     planKind
	target   feed.Version   // the version held afterwards (zero when none is applicable)
	files    []feed.Version // to fetch, in order; for planBackwards the reload's
	eligible int            // how many of the manifest's versions are old enough for the delay
	// why a held version is reloaded from the snapshot (feed.Continues
	// otherwise): Diverged and Unproven are logged.
	continuity feed.Continuity
}

// planUpdate decides how to go from held (nil: nothing loaded) to the
// newest version of m that is at least delay old at now. The deltas after
// the held version are applied only when the manifest proves they build on
// the content held (feed.Manifest.DeltasFrom); otherwise the snapshot and
// the deltas after it are loaded afresh. The version held afterwards is the
// manifest's entry for the target, with its content checksum, so the next
// poll can prove what it holds.
func planUpdate(m *feed.Manifest, held *feed.Version, now time.Time, delay time.Duration) plan {
	n := eligible(m.Versions, now, delay)
	p := plan{eligible: n}
	if n == 0 {
		return p
	}
	p.target = m.Versions[n-1]
	p.files = m.Versions[:n]
	switch {
	case held == nil:
		p.kind = planSnapshot
		return p
	case p.target.Version < held.Version:
		p.kind = planBackwards
		return p
	}
	run, c := m.DeltasFrom(*held, n)
	switch {
	case c != feed.Continues:
		p.kind, p.continuity = planSnapshot, c
	case len(run) == 0:
		p.kind, p.files = planNone, nil
	default:
		p.kind, p.files = planDeltas, run
	}
	return p
}

// eligible is how many of vs, from the first, are at least delay old. A
// zero delay takes every version whatever the clocks say; a version
// without created_at cannot be aged and is taken.
func eligible(vs []feed.Version, now time.Time, delay time.Duration) int {
	if delay <= 0 {
		return len(vs)
	}
	for i, v := range vs {
		if !v.CreatedAt.IsZero() && now.Sub(v.CreatedAt) < delay {
			return i
		}
	}
	return len(vs)
}

// deltasOutweigh reports whether p's deltas have more lines than half the
// snapshot of m that could replace them (m.Versions[0], when that is a
// snapshot within p's reach).
func deltasOutweigh(m *feed.Manifest, p plan) bool {
	if len(m.Versions) == 0 || m.Versions[0].Type != feed.TypeSnapshot || p.eligible == 0 {
		return false
	}
	lines := 0
	for _, v := range p.files {
		lines += v.Entries
	}
	return lines > m.Versions[0].Entries/2
}

// maxSizeHint bounds the index size a manifest's entries can make the
// Builder reserve before a line is read.
const maxSizeHint = 1 << 22

func (c *Client) loadSnapshot(ctx context.Context, f *feedState, v feed.Version) (*Index, error) {
	limit := c.cfg.Limits.Entries
	b := NewBuilder(min(v.Entries, limit, maxSizeHint))
	n := 0
	err := c.readVersion(ctx, f, v, func(l feed.Line) error {
		if n++; n > limit {
			return fmt.Errorf("%s: more than %d entries: %w", v.File, limit, errTooLarge)
		}
		b.Set(l)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b.Index(), nil
}

// maxBatch is how many delta lines are applied at once: catching up over
// several deltas costs one copy of the index per batch instead of one per
// delta, and the lines held stay bounded.
const maxBatch = 1 << 20

// applyDeltas returns ix with deltas applied in order. ix is not changed, so
// a failure part-way leaves the published index as it was.
func (c *Client) applyDeltas(ctx context.Context, f *feedState, ix *Index, deltas []feed.Version) (*Index, error) {
	limit := c.cfg.Limits.Entries
	var batch []feed.Line
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		ix = ix.Apply(batch)
		batch = nil
		if ix.Len() > limit {
			return fmt.Errorf("index of more than %d entries: %w", limit, errTooLarge)
		}
		return nil
	}
	for _, v := range deltas {
		err := c.readVersion(ctx, f, v, func(l feed.Line) error {
			batch = append(batch, l)
			if len(batch) >= maxBatch {
				return flush()
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	if err := flush(); err != nil {
		return nil, fail(reasonSize, err)
	}
	return ix, nil
}

// replaceSnapshot loads snapshot v over the index cur serves, a group of
// shards at a time (index_replace.go), publishing each step under cur's
// version, so that the node never holds two whole indexes. A first pass
// checks the whole file (lines, count, limits) before any shard is
// replaced; the file's bytes, verified by their checksum, are then read
// again for each group, which therefore reads them as the check did.
func (c *Client) replaceSnapshot(ctx context.Context, f *feedState, cur *loadedFeed, v feed.Version) (*Index, error) {
	data, err := c.fetchVersion(ctx, f, v)
	if err != nil {
		return nil, err
	}
	limit := c.cfg.Limits.Entries
	r := newReplacer(cur.index)
	// Each step is published under the held version; nothing here keeps
	// cur (and its index) past the first step.
	base := loadedFeed{name: cur.name, codes: cur.codes, from: cur.from, loadedAt: cur.loadedAt}
	size := cur.index.SizeBytes()
	cur = nil
	n := 0
	err = c.decodeVersion(ctx, v, data, true, func(l feed.Line) error {
		if n++; n > limit {
			return fmt.Errorf("%s: more than %d entries: %w", v.File, limit, errTooLarge)
		}
		r.count(l)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A group's staging is a sixteenth of the index's bytes, and its new
	// shards about as much: the price is one more read of the file a group.
	ends := r.groups(max(size/replaceGroups, 1<<20))
	var ix *Index
	for i, end := range ends {
		ix, err = r.step(end, func(fn func(feed.Line) error) error {
			return decodeFile(data, false, c.cfg.Limits.DecompressedBytes, true, fn)
		})
		if err != nil {
			// Not expected: the check above read the same bytes. The Set
			// holds a mix under the old version, which the next poll
			// replaces again.
			return nil, fail(reasonDecode, fmt.Errorf("%s: %w", v.File, err))
		}
		if i < len(ends)-1 {
			step := base
			step.index = ix
			c.publish(f.pos, &step)
		}
	}
	f.log.Info("feed snapshot replaced the index shard group by shard group", "version", v.Version, "groups", len(ends), "entries", ix.Len())
	return ix, nil
}

// stepwiseDeltas reports whether deltas are applied to ix, the index the
// node serves, shard group by shard group (applyDeltasStepwise) rather
// than at once: they have more lines than a stepwiseShare-th of its keys,
// it has a full shard table, and even if every line added a key the result
// would stay within the entry limit (a step cannot be taken back, so the
// limit must hold before the first).
func stepwiseDeltas(ix *Index, deltas []feed.Version, limit int) bool {
	lines := 0
	for _, v := range deltas {
		lines += v.Entries
	}
	return ix.bits == maxShardBits && lines > ix.Len()/stepwiseShare && ix.Len()+lines <= limit
}

// stepwiseShare: deltas of more lines than this share of the index are
// applied stepwise. Applied at once, a delta's lines are held as strings
// (about 100 bytes a line, twice an index key's) and every changed name
// goes to the overlay: at a sixteenth of the keys that is already an
// eighth of the index again, before the garbage collector's headroom.
const stepwiseShare = 32

// applyDeltasStepwise applies deltas to the index cur serves a group of
// shards at a time, publishing each step under cur's version, as a
// snapshot replacement does (replaceSnapshot): a first pass checks every
// file whole; then, for each group, the files are read again in order and
// only the group's lines held and applied (Index.applyShards), which
// rewrites the group's shards with them. The memory is the index, the
// files, and one group's lines and shards, not every line at once.
func (c *Client) applyDeltasStepwise(ctx context.Context, f *feedState, cur *loadedFeed, deltas []feed.Version) (*Index, error) {
	datas := make([][]byte, len(deltas))
	for i, v := range deltas {
		data, err := c.fetchVersion(ctx, f, v)
		if err != nil {
			return nil, err
		}
		if err := c.decodeVersion(ctx, v, data, true, func(feed.Line) error { return nil }); err != nil {
			return nil, err
		}
		datas[i] = data
	}
	ix := cur.index
	base := loadedFeed{name: cur.name, codes: cur.codes, from: cur.from, loadedAt: cur.loadedAt}
	cur = nil // as in replaceSnapshot: the replaced shards go at each step
	per := max(1, len(ix.shards)/replaceGroups)
	for lo := 0; lo < len(ix.shards); lo += per {
		hi := min(lo+per, len(ix.shards))
		var lines []feed.Line
		for i, data := range datas {
			err := decodeFile(data, true, c.cfg.Limits.DecompressedBytes, true, func(l feed.Line) error {
				if s := int(ix.key.name(l.Name) >> ix.shift); s >= lo && s < hi {
					l.Name, l.Path, l.Codes = strings.Clone(l.Name), strings.Clone(l.Path), slices.Clone(l.Codes)
					lines = append(lines, l)
				}
				return nil
			})
			if err != nil {
				// Not expected: the check above read the same bytes.
				return nil, fail(reasonDecode, fmt.Errorf("%s: %w", deltas[i].File, err))
			}
		}
		ix = ix.applyShards(lines, lo, hi)
		if hi < len(ix.shards) {
			step := base
			step.index = ix
			c.publish(f.pos, &step)
		}
	}
	if ix.n < minPerShard<<ix.bits {
		ix = ix.rebuild(nil) // far smaller than its shards now (and so, small)
	}
	f.log.Info("feed deltas applied shard group by shard group", "files", len(deltas), "groups", (len(ix.shards)+per-1)/per, "entries", ix.Len())
	return ix, nil
}

// replaceGroups is how many groups of shards a replacement takes at least.
const replaceGroups = 16

// readVersion fetches v's file, checks it against the manifest's SHA-256
// before anything reads it, and calls fn for each line.
func (c *Client) readVersion(ctx context.Context, f *feedState, v feed.Version, fn func(feed.Line) error) error {
	data, err := c.fetchVersion(ctx, f, v)
	if err != nil {
		return err
	}
	return c.decodeVersion(ctx, v, data, false, fn)
}

// fetchVersion fetches v's file and checks it against the manifest's
// SHA-256.
func (c *Client) fetchVersion(ctx context.Context, f *feedState, v feed.Version) ([]byte, error) {
	data, _, _, err := c.fetch(ctx, f, v.File, c.cfg.Limits.FileBytes, validators{})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fail(reasonFetch, fmt.Errorf("feed.json lists %s (version %d), which the directory does not have: %w", v.File, v.Version, err))
	}
	if err != nil {
		return nil, fail(reasonFetch, err)
	}
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != v.SHA256 {
		return nil, fail(reasonChecksum, fmt.Errorf("%s: SHA-256 %s, feed.json says %s", v.File, got, v.SHA256))
	}
	return data, nil
}

// decodeVersion calls fn for each line of data, v's verified file, and
// checks their number against v's entries. view passes lines that share
// the decoder's buffers (feed.ScanLines): fn copies what it keeps.
func (c *Client) decodeVersion(ctx context.Context, v feed.Version, data []byte, view bool, fn func(feed.Line) error) error {
	n := 0
	err := decodeFile(data, v.Type == feed.TypeDelta, c.cfg.Limits.DecompressedBytes, view, func(l feed.Line) error {
		// A large snapshot takes seconds; shutting down should not wait.
		if n++; n%65536 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		return fn(l)
	})
	if err != nil {
		return fail(reasonDecode, fmt.Errorf("%s: %w", v.File, err))
	}
	if n != v.Entries {
		// The checksum vouches for the bytes, not for the build that wrote
		// them: a file that disagrees with its own manifest entry (as
		// `feed build` writes it: one entry per line) is not applied. In
		// particular an empty snapshot replaces a good index only when the
		// manifest, too, says it is empty.
		return fail(reasonDecode, fmt.Errorf("%s: %d lines, feed.json says %d entries", v.File, n, v.Entries))
	}
	return nil
}

// decodeFile decompresses a snapshot or delta and parses its lines, failing
// on anything short of a complete, valid file: a truncated or corrupt gzip
// stream, a bad line, or more than maxBytes decompressed (errTooLarge).
func decodeFile(data []byte, delta bool, maxBytes int64, view bool, fn func(feed.Line) error) error {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("gzip: %w", err)
	}
	defer func() { _ = zr.Close() }()
	cr := &capReader{r: zr, left: maxBytes}
	read := feed.ReadLines
	if view {
		read = feed.ScanLines
	}
	err = read(cr, delta, fn)
	if cr.over {
		// ReadLines may first report the line the cap cut in two.
		return fmt.Errorf("more than %d bytes decompressed: %w", maxBytes, errTooLarge)
	}
	return err
}

// capReader fails, rather than ends, once more than left bytes are read: a
// silent end would apply a file cut short.
type capReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *capReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		// Probe one byte: a file of exactly the cap is complete.
		var one [1]byte
		n, err := c.r.Read(one[:])
		if n > 0 {
			c.over = true
			return 0, errTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}
