// Package store keeps the activity the collector takes from the ACTIVITY
// stream and answers the reports' questions about it. Its place in the data
// flow:
//
//	JetStream stream ACTIVITY → collector → store (this package) → reports
//
// Two stores share one design: a directory of SQLite files, one per UTC
// day (the default, <data_dir>/activity), and PostgreSQL with every table
// partitioned by day (the scale path, which several collectors share).
// Repeating strings are kept once in dictionary tables; an event is five
// small integers and its time. Counts for the summaries are added up at
// write time, per organisation, hour, dimension and key, in the same
// transaction as the events, together with the batch's ID, so a batch is
// stored all or none, and once. Retention drops whole days: a file is
// deleted, a partition dropped. docs/activity.md ("Stores") describes the
// schema and why it is so.
package store

import (
	"cmp"
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/svc-pf/svc-pf/internal/activity"
)

// Config configures Open.
type Config struct {
	// URL is activity.StoreConfig.URL: "" (DefaultDir), "dir:/path" or
	// "postgres://…".
	URL string
	// DefaultDir is the directory of the day files when URL is empty
	// (<data_dir>/activity).
	DefaultDir string
	// Retention, when not zero, is how far back the reader answers: a
	// question's From is moved up to now − Retention, so that nothing older
	// is read even before the collector's next drop.
	Retention time.Duration
	// ReadOnly opens without taking the directory's writer lock (a process
	// that only answers reports beside the collector). Write fails.
	ReadOnly bool
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Kinds of store.
const (
	KindDir      = "dir"
	KindPostgres = "postgres"
)

// target is a parsed URL.
type target struct {
	kind string
	dir  string
	pg   string
}

// errBadPostgresURL says a postgres URL does not parse without quoting it
// or pgx's error: pgx redacts the password only from a URL it could parse,
// and echoes one it could not ("cannot parse `postgres://%secret`").
var errBadPostgresURL = errors.New("activity store: store.url is not a valid postgres URL (not shown: it may hold a password); " +
	"want postgres://user:password@host:5432/db?sslmode=require, with special characters in the password percent-encoded")

// ParseURL reads a store URL ("" means defaultDir). It never echoes a
// PostgreSQL URL back: it may carry a password.
func ParseURL(raw, defaultDir string) (target, error) {
	switch {
	case raw == "":
		if defaultDir == "" {
			return target{}, errors.New("activity store: no store.url and no default directory")
		}
		return target{kind: KindDir, dir: defaultDir}, nil
	case strings.HasPrefix(raw, "dir:"):
		dir := strings.TrimPrefix(raw, "dir:")
		switch {
		case dir == "":
			return target{}, errors.New("activity store: dir: has no path (want dir:/var/lib/svc-pf/activity)")
		case strings.ContainsRune(dir, 0) || !utf8.ValidString(dir):
			return target{}, errors.New("activity store: the dir: path must be valid UTF-8 without NUL")
		}
		return target{kind: KindDir, dir: filepath.Clean(dir)}, nil
	case strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://"):
		if _, err := pgx.ParseConfig(raw); err != nil {
			return target{}, errBadPostgresURL
		}
		return target{kind: KindPostgres, pg: raw}, nil
	}
	return target{}, errors.New("activity store: store.url must be empty, dir:/path or postgres://…")
}

// backend is one kind of store.
type backend interface {
	write(ctx context.Context, work []dayWork) (stored int, err error)
	events(ctx context.Context, q activity.EventQuery, days []int32) (activity.EventPage, error)
	summary(ctx context.Context, q activity.SummaryQuery, spans []daySpan, interval time.Duration) (activity.Summary, error)
	dropBefore(ctx context.Context, day int32) (int, error)
	close() error
}

// Store is an activity store: an activity.Writer and activity.Reader. It
// is safe for concurrent use.
type Store struct {
	kind      string
	b         backend
	now       func() time.Time
	retention time.Duration

	mu      sync.Mutex
	lastErr error
	lastAt  time.Time
}

var (
	_ activity.Writer = (*Store)(nil)
	_ activity.Reader = (*Store)(nil)
)

// Open opens (creating as needed) the store named by cfg.URL and applies
// its migrations.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	t, err := ParseURL(cfg.URL, cfg.DefaultDir)
	if err != nil {
		return nil, err
	}
	s := &Store{kind: t.kind, now: cfg.Now, retention: cfg.Retention}
	if s.now == nil {
		s.now = time.Now
	}
	switch t.kind {
	case KindDir:
		s.b, err = openDir(t.dir, cfg.ReadOnly)
	case KindPostgres:
		s.b, err = openPostgres(ctx, t.pg)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Kind is "dir" or "postgres".
func (s *Store) Kind() string { return s.kind }

// Close closes the store.
func (s *Store) Close() error { return s.b.close() }

// WriteError is the last write's error, nil once a write succeeded again:
// what /health says about the store.
func (s *Store) WriteError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

func (s *Store) noteWrite(err error) {
	s.mu.Lock()
	s.lastErr, s.lastAt = err, s.now()
	s.mu.Unlock()
}

// Write stores one batch (activity.Writer).
func (s *Store) Write(ctx context.Context, b *activity.Batch) error {
	_, err := s.WriteBatches(ctx, []*activity.Batch{b})
	return err
}

// WriteBatches stores several batches in one transaction per day: all of
// them or none. A batch stored before is skipped. It returns the number of
// events stored (skipped batches not counted).
func (s *Store) WriteBatches(ctx context.Context, bs []*activity.Batch) (int, error) {
	n, err := s.b.write(ctx, splitDays(bs))
	s.noteWrite(err)
	return n, err
}

// DropBefore drops every whole UTC day that ends at or before t.
func (s *Store) DropBefore(ctx context.Context, t time.Time) (int, error) {
	return s.b.dropBefore(ctx, dayOf(t))
}

// floor is the oldest time the reader answers for.
func (s *Store) floor(from time.Time) time.Time {
	if s.retention > 0 {
		if f := s.now().Add(-s.retention); from.Before(f) {
			return f
		}
	}
	return from
}

// Events answers a validated query (activity.Reader).
func (s *Store) Events(ctx context.Context, q activity.EventQuery) (activity.EventPage, error) {
	if err := q.Validate(); err != nil {
		return activity.EventPage{}, err
	}
	q.From = s.floor(q.From)
	if q.After != nil && q.After.Time.Before(q.To) {
		// Older than the cursor: to is the cursor's time plus its
		// millisecond (the id orders events within it).
		q.To = q.After.Time.Truncate(time.Millisecond).Add(time.Millisecond)
	}
	if !q.From.Before(q.To) {
		return activity.EventPage{}, nil
	}
	var days []int32
	for d := dayOf(q.To.Add(-time.Nanosecond)); d >= dayOf(q.From); d-- {
		days = append(days, d)
	}
	return s.b.events(ctx, q, days)
}

// SummaryGranularity is the grain of a summary: its from and to are
// widened to whole hours, and a series' interval to a whole number of
// hours.
const SummaryGranularity = time.Hour

// daySpan is the hours [h0, h1) of one day a summary reads.
type daySpan struct {
	day    int32
	h0, h1 int
}

// Summary answers a validated query (activity.Reader). From is widened
// down and To up to whole hours (SummaryGranularity), the series' Interval
// up to whole hours; the Summary says which were used.
func (s *Store) Summary(ctx context.Context, q activity.SummaryQuery) (activity.Summary, error) {
	if err := q.Validate(); err != nil {
		return activity.Summary{}, err
	}
	from := s.floor(q.From).Truncate(SummaryGranularity)
	to := q.To.Add(SummaryGranularity - 1).Truncate(SummaryGranularity)
	interval := time.Duration(0)
	if q.Interval > 0 {
		interval = (q.Interval + SummaryGranularity - 1).Truncate(SummaryGranularity)
	}
	q.From, q.To = from, to
	var spans []daySpan
	for t := from; t.Before(to); {
		d := dayOf(t)
		end := dayStart(d + 1)
		if to.Before(end) {
			end = to
		}
		spans = append(spans, daySpan{day: d, h0: int(t.Sub(dayStart(d)) / time.Hour), h1: int(end.Sub(dayStart(d)) / time.Hour)})
		t = end
	}
	sum, err := s.b.summary(ctx, q, spans, interval)
	if err != nil {
		return activity.Summary{}, err
	}
	sum.By, sum.From, sum.To, sum.Interval = q.By, from, to, interval
	if sum.Rows == nil {
		sum.Rows = []activity.SummaryRow{}
	}
	return sum, nil
}

// dayOf is t's UTC day as days since the Unix epoch.
func dayOf(t time.Time) int32 {
	s := t.Unix()
	if s < 0 {
		return int32((s - 86399) / 86400)
	}
	return int32(s / 86400)
}

func dayStart(d int32) time.Time { return time.Unix(int64(d)*86400, 0).UTC() }

// dayName is the day as YYYY-MM-DD.
func dayName(d int32) string { return dayStart(d).Format(time.DateOnly) }

// Dimensions as stored.
const (
	dimCategory   = 1
	dimDomain     = 2
	dimSubscriber = 3
	dimReason     = 4
)

func dimOf(d activity.Dimension) int {
	switch d {
	case activity.ByCategory:
		return dimCategory
	case activity.ByDomain:
		return dimDomain
	case activity.BySubscriber:
		return dimSubscriber
	}
	return dimReason
}

// batchID names a batch in the applied tables.
type batchID struct {
	node      string
	boot, seq uint64
}

// part is what one batch holds for one day.
type part struct {
	id     batchID
	events []*activity.Event
	counts []*activity.Count
}

// dayWork is what a write puts into one day.
type dayWork struct {
	day   int32
	parts []part
}

// splitDays groups the batches' events and counts by UTC day (an event by
// its time, a count by its interval's start), keeping each batch's part of
// a day apart: each part is recorded as applied in its own day. Two
// batches with one ID (a republished batch) stay two parts, and the second
// is skipped as applied.
func splitDays(bs []*activity.Batch) []dayWork {
	byDay := map[int32]*dayWork{}
	lastOf := map[int32]int{}
	var order []int32
	get := func(d int32, bi int, b *activity.Batch) *part {
		w := byDay[d]
		if w == nil {
			w = &dayWork{day: d}
			byDay[d] = w
			order = append(order, d)
		}
		if i, ok := lastOf[d]; ok && i == bi {
			return &w.parts[len(w.parts)-1]
		}
		lastOf[d] = bi
		w.parts = append(w.parts, part{id: batchID{node: b.Node, boot: b.Boot, seq: b.Seq}})
		return &w.parts[len(w.parts)-1]
	}
	for bi, b := range bs {
		for i := range b.Events {
			p := get(dayOf(b.Events[i].Time), bi, b)
			p.events = append(p.events, &b.Events[i])
		}
		for i := range b.Counts {
			p := get(dayOf(b.Counts[i].Start), bi, b)
			p.counts = append(p.counts, &b.Counts[i])
		}
	}
	slices.Sort(order)
	out := make([]dayWork, 0, len(order))
	for _, d := range order {
		out = append(out, *byDay[d])
	}
	return out
}

// Dictionary keys.
type subKey struct{ org, session, user, device, location string }

type whoKey struct {
	sub            int64
	client, policy string
}

type decKey struct {
	node, transport, verdict, action, reason, cached string
	qtype                                            uint16
	rcode                                            int
	sampled                                          bool
}

type whatKey struct{ cats, rule string }

func subOfEvent(e *activity.Event) subKey {
	return subKey{e.Org, e.SessionID, e.Username, e.DeviceID, e.Location}
}

func subOfCount(c *activity.Count) subKey {
	return subKey{c.Org, c.SessionID, c.Username, c.DeviceID, c.Location}
}

func decOf(e *activity.Event) decKey {
	return decKey{node: e.Node, transport: e.Transport, verdict: e.Verdict, action: e.Action, reason: e.Reason,
		cached: e.Cached, qtype: e.QType, rcode: e.Rcode, sampled: e.Sampled}
}

func catsString(c []uint16) string {
	var b strings.Builder
	for i, v := range c {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(v)))
	}
	return b.String()
}

func parseCats(s string) []uint16 {
	if s == "" {
		return nil
	}
	var out []uint16
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(f)
		if err == nil {
			out = append(out, uint16(v))
		}
	}
	return out
}

func blocked(verdict string) bool { return verdict == "block" || verdict == "redirect" }

// firstCategory is the category an event is counted under, as a plain
// allow's count is: its first (0: none), so counts add up across
// categories.
func firstCategory(c []uint16) int64 {
	if len(c) == 0 {
		return 0
	}
	return int64(c[0])
}

// rollKey is one counter of the summaries.
type rollKey struct {
	org string
	dim int
	h   int
	key int64
}

// rollNB is a counter's count and blocked count.
type rollNB struct{ n, b int64 }

// rollup adds up a day's counters before they are written.
type rollup map[rollKey]*rollNB

// add counts n under the hour h and the whole day (24).
func (r rollup) add(org string, dim int, h int, key int64, n int64, isBlocked bool) {
	for _, hh := range [2]int{h, 24} {
		k := rollKey{org, dim, hh, key}
		c := r[k]
		if c == nil {
			c = &rollNB{}
			r[k] = c
		}
		c.n += n
		if isBlocked {
			c.b += n
		}
	}
}

// rollRow is one counter row to upsert.
type rollRow struct {
	org    string
	dim, h int
	key    int64
	n, b   int64
}

// rows turns the rollup into rows sorted by their primary key, so that two
// collectors upserting into one PostgreSQL take their row locks in one
// order and cannot deadlock.
func (r rollup) rows() []rollRow {
	out := make([]rollRow, 0, len(r))
	for k, c := range r {
		out = append(out, rollRow{org: k.org, dim: k.dim, h: k.h, key: k.key, n: c.n, b: c.b})
	}
	slices.SortFunc(out, func(a, b rollRow) int {
		if c := strings.Compare(a.org, b.org); c != 0 {
			return c
		}
		if a.dim != b.dim {
			return a.dim - b.dim
		}
		if a.h != b.h {
			return a.h - b.h
		}
		return int(min(max(a.key-b.key, -1), 1))
	})
	return out
}

// hourOf is t's hour within its UTC day.
func hourOf(t time.Time) int { return t.UTC().Hour() }

// matchIP is the EventQuery's IP filter on one stored client (see
// activity.EventQuery.IP).
func matchIP(q, client string) bool {
	if q == "" {
		return true
	}
	if client == "" {
		return false
	}
	if strings.HasPrefix(q, "h:") {
		return q == client
	}
	cAddr, cErr := netip.ParseAddr(client)
	cPfx, pErr := netip.ParsePrefix(client)
	if a, err := netip.ParseAddr(q); err == nil {
		a = a.Unmap()
		switch {
		case cErr == nil:
			return cAddr.Unmap() == a
		case pErr == nil:
			return cPfx.Contains(a)
		}
		return false
	}
	if p, err := netip.ParsePrefix(q); err == nil {
		p = p.Masked()
		switch {
		case cErr == nil:
			return p.Contains(cAddr.Unmap())
		case pErr == nil:
			return cPfx.Bits() >= p.Bits() && p.Contains(cPfx.Addr())
		}
	}
	return false
}

// matchQName is the EventQuery's QName filter: the name and the names
// under it.
func matchQName(q, name string) bool {
	if q == "" || q == "." {
		return true
	}
	return name == q || (strings.HasSuffix(name, q) && len(name) > len(q) && name[len(name)-len(q)-1] == '.')
}

// idCounts is a summary's counters by dictionary id (or category code),
// added up over the hours and days asked for.
type idCounts struct {
	m              map[int64]*rollNB
	total, blocked int64
}

func newIDCounts() *idCounts { return &idCounts{m: map[int64]*rollNB{}} }

func (c *idCounts) add(key, n, b int64) {
	x := c.m[key]
	if x == nil {
		x = &rollNB{}
		c.m[key] = x
	}
	x.n += n
	x.b += b
	c.total += n
	c.blocked += b
}

// candidates are the keys that may be in the top n: every key counted at
// least as often as the n-th largest. Only these need their text read
// (ties at the edge are broken by it): a summary over 50 000 names reads
// the names of ten or so, not of all.
func (c *idCounts) candidates(n int) []int64 {
	counts := make([]int64, 0, len(c.m))
	for _, x := range c.m {
		counts = append(counts, x.n)
	}
	threshold := int64(0)
	if len(counts) > n {
		slices.SortFunc(counts, func(a, b int64) int { return cmp.Compare(b, a) })
		threshold = counts[n-1]
	}
	var out []int64
	for k, x := range c.m {
		if x.n >= threshold {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// dictSQL is, per dimension, the query that reads the text of a counter's
// key ids (tables prefixed by $T); "" for category, whose key is the code.
func dictSQL(dim int) string {
	switch dim {
	case dimDomain:
		return `SELECT id, name, '', '', '' FROM $Tnames WHERE id IN `
	case dimSubscriber:
		return `SELECT id, session_id, username, deviceid, location FROM $Tsubs WHERE id IN `
	case dimReason:
		return `SELECT id, reason, '', '', '' FROM $Treasons WHERE id IN `
	}
	return ""
}

// topSummary turns counters by id into the summary's top rows, reading the
// text of the candidates only.
func topSummary(ctx context.Context, tx querier, prefix string, dim int, c *idCounts, top int) (activity.Summary, []sumKey, error) {
	cands := c.candidates(top)
	keys := map[int64]sumKey{}
	if q := dictSQL(dim); q == "" {
		for _, id := range cands {
			keys[id] = sumKey{key: strconv.FormatInt(id, 10)}
		}
	} else if len(cands) > 0 {
		set := make(map[int64]bool, len(cands))
		for _, id := range cands {
			set[id] = true
		}
		list, _ := inList(set)
		rows, err := tx.QueryContext(ctx, strings.ReplaceAll(q, "$T", prefix)+list)
		if err != nil {
			return activity.Summary{}, nil, err
		}
		for rows.Next() {
			var id int64
			var k sumKey
			if err := rows.Scan(&id, &k.key, &k.user, &k.device, &k.location); err != nil {
				rows.Close()
				return activity.Summary{}, nil, err
			}
			keys[id] = k
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return activity.Summary{}, nil, err
		}
	}
	acc := newSumAcc()
	for _, id := range cands {
		k, ok := keys[id]
		if !ok {
			continue // no dictionary row (never written so): counted in Other
		}
		x := c.m[id]
		acc.add(k, x.n, x.b)
	}
	acc.total, acc.blockd = c.total, c.blocked
	sum, sk := acc.top(top)
	return sum, sk, nil
}
