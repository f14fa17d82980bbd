package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/svc-pf/svc-pf/internal/activity"
	"github.com/svc-pf/svc-pf/internal/filelock"
)

// dirStore is a directory of SQLite files, one per UTC day
// (YYYY-MM-DD.db), each created by its first write. One process writes a
// directory (it holds the directory's lock); any number read it.
type dirStore struct {
	dir      string
	readOnly bool
	lock     *filelock.Lock

	// wmu serialises writes; writers are the day files open for writing,
	// with their dictionaries in memory.
	wmu     sync.Mutex
	writers map[int32]*dayFile

	// rmu: readers hold it shared for a whole question, a drop exclusively
	// (so no file is deleted under a reader). omu guards the readers map.
	rmu     sync.RWMutex
	omu     sync.Mutex
	readers map[int32]*sql.DB
}

// maxWriters bounds the day files open for writing: today, yesterday (late
// events, counts of the last interval) and one more.
const maxWriters = 3

func openDir(dir string, readOnly bool) (*dirStore, error) {
	d := &dirStore{dir: dir, readOnly: readOnly, writers: map[int32]*dayFile{}, readers: map[int32]*sql.DB{}}
	if readOnly {
		return d, nil
	}
	lock, err := filelock.Dir(dir, "activity directory")
	if err != nil {
		return nil, fmt.Errorf("activity store: %w", err)
	}
	d.lock = lock
	return d, nil
}

func (d *dirStore) path(day int32) string { return filepath.Join(d.dir, dayName(day)+".db") }

const sqliteBase = "?_pragma=busy_timeout(10000)"

func sqliteURI(path string) string {
	var b strings.Builder
	b.WriteString("file:")
	for i := 0; i < len(path); i++ {
		switch c := path[i]; c {
		case '%', '?', '#':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String() + sqliteBase
}

func (d *dirStore) close() error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	var errs []error
	for day, f := range d.writers {
		errs = append(errs, f.close())
		delete(d.writers, day)
	}
	d.rmu.Lock()
	for day, db := range d.readers {
		errs = append(errs, db.Close())
		delete(d.readers, day)
	}
	d.rmu.Unlock()
	if d.lock != nil {
		errs = append(errs, d.lock.Unlock())
		d.lock = nil
	}
	return errors.Join(errs...)
}

// dayFile is one day's file open for writing, with its dictionaries.
type dayFile struct {
	day int32
	db  *sql.DB

	subs    map[subKey]int64
	whos    map[whoKey]int64
	names   map[string]int64
	decs    map[decKey]int64
	whats   map[whatKey]int64
	reasons map[string]int64

	// next is the next counter of a millisecond; a millisecond at or below
	// floorMs and not in next may have events already (ask the file).
	next    map[int64]int64
	floorMs int64
	hiMs    int64

	st struct {
		applied, event, events, roll, rolls, maxID *sql.Stmt
		sub, who, name, dec, what, reason          *sql.Stmt
	}
}

// eventsPerInsert is how many events one INSERT statement carries,
// rollPerInsert how many counters one upsert: fewer statements, and far
// below SQLite's limit of 32 766 parameters.
const (
	eventsPerInsert = 256
	rollPerInsert   = 128
)

func (f *dayFile) close() error {
	return f.db.Close() // closes its statements too
}

// writer returns day's file open for writing, creating and migrating it.
func (d *dirStore) writer(ctx context.Context, day int32) (*dayFile, error) {
	if f := d.writers[day]; f != nil {
		return f, nil
	}
	if d.readOnly {
		return nil, errors.New("activity store: opened read-only")
	}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return nil, fmt.Errorf("activity store: %w (check the directory's owner and the disk)", err)
	}
	// WAL with synchronous=FULL: Write returns only once the batch is on
	// disk (an fsync of the WAL per commit), and the collector acknowledges
	// it then. NORMAL (fsync at checkpoints only) survives the process
	// dying but not an OS crash, and with the collector's transactions of
	// up to 64 messages wrote only ~2 % faster (docs/activity.md,
	// "Durability"): not worth the window.
	db, err := sql.Open("sqlite", sqliteURI(d.path(day))+"&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)"+
		// A page cache (32 MiB) holding the pages a day's writes touch: the
		// index's 1000s of insertion points and the counters of the hour;
		// the default 2 MiB made most inserts read a page back from disk.
		// The WAL is cut back to 16 MiB after a checkpoint.
		"&_pragma=cache_size(-32768)&_pragma=journal_size_limit(16777216)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	f := &dayFile{day: day, db: db}
	if err := f.init(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("activity store: day file %s: %w", d.path(day), err)
	}
	if len(d.writers) >= maxWriters {
		// The oldest day goes: writes for it reopen it.
		old := slices.Min(mapKeys(d.writers))
		_ = d.writers[old].close()
		delete(d.writers, old)
	}
	d.writers[day] = f
	return f, nil
}

func mapKeys[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func (f *dayFile) init(ctx context.Context) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if err := migrate(ctx, tx, "day", "schema_migrations"); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO meta (day) SELECT $1 WHERE NOT EXISTS (SELECT 1 FROM meta)`, dayName(f.day)); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	f.subs, f.whos, f.names = map[subKey]int64{}, map[whoKey]int64{}, map[string]int64{}
	f.decs, f.whats, f.reasons, f.next = map[decKey]int64{}, map[whatKey]int64{}, map[string]int64{}, map[int64]int64{}
	load := func(q string, scan func(r *sql.Rows) error) error {
		rows, err := f.db.QueryContext(ctx, q)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	var id int64
	err = errors.Join(
		load(`SELECT id, org, session_id, username, deviceid, location FROM subs`, func(r *sql.Rows) error {
			var k subKey
			err := r.Scan(&id, &k.org, &k.session, &k.user, &k.device, &k.location)
			f.subs[k] = id
			return err
		}),
		load(`SELECT id, sub, client, policy FROM whos`, func(r *sql.Rows) error {
			var k whoKey
			err := r.Scan(&id, &k.sub, &k.client, &k.policy)
			f.whos[k] = id
			return err
		}),
		load(`SELECT id, name FROM names`, func(r *sql.Rows) error {
			var k string
			err := r.Scan(&id, &k)
			f.names[k] = id
			return err
		}),
		load(`SELECT id, node, qtype, transport, verdict, action, reason, rcode, cached, sampled FROM decs`, func(r *sql.Rows) error {
			var k decKey
			err := r.Scan(&id, &k.node, &k.qtype, &k.transport, &k.verdict, &k.action, &k.reason, &k.rcode, &k.cached, &k.sampled)
			f.decs[k] = id
			return err
		}),
		load(`SELECT id, categories, rule FROM whats`, func(r *sql.Rows) error {
			var k whatKey
			err := r.Scan(&id, &k.cats, &k.rule)
			f.whats[k] = id
			return err
		}),
		load(`SELECT id, reason FROM reasons`, func(r *sql.Rows) error {
			var k string
			err := r.Scan(&id, &k)
			f.reasons[k] = id
			return err
		}),
	)
	if err != nil {
		return err
	}
	var maxID sql.NullInt64
	if err := f.db.QueryRowContext(ctx, `SELECT max(id) FROM events`).Scan(&maxID); err != nil {
		return err
	}
	f.floorMs = -1
	if maxID.Valid {
		f.floorMs = maxID.Int64 >> idShift
	}
	f.hiMs = f.floorMs
	values := strings.TrimSuffix(strings.Repeat("(?,?,?,?,?,?),", eventsPerInsert), ",")
	rollValues := strings.TrimSuffix(strings.Repeat("(?,?,?,?,?,?),", rollPerInsert), ",")
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&f.st.applied, `INSERT OR IGNORE INTO applied (node, boot, seq) VALUES (?, ?, ?)`},
		{&f.st.event, `INSERT INTO events (id, who, name, dec, what, lat) VALUES (?,?,?,?,?,?)`},
		{&f.st.events, `INSERT INTO events (id, who, name, dec, what, lat) VALUES ` + values},
		{&f.st.roll, `INSERT INTO roll (org, dim, h, key, n, b) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT (org, dim, h, key) DO UPDATE SET n = n + excluded.n, b = b + excluded.b`},
		{&f.st.rolls, `INSERT INTO roll (org, dim, h, key, n, b) VALUES ` + rollValues + `
			ON CONFLICT (org, dim, h, key) DO UPDATE SET n = n + excluded.n, b = b + excluded.b`},
		{&f.st.maxID, `SELECT max(id) FROM events WHERE id >= ? AND id < ?`},
		{&f.st.sub, `INSERT INTO subs (org, session_id, username, deviceid, location) VALUES (?, ?, ?, ?, ?) RETURNING id`},
		{&f.st.who, `INSERT INTO whos (sub, client, policy) VALUES (?, ?, ?) RETURNING id`},
		{&f.st.name, `INSERT INTO names (name) VALUES (?) RETURNING id`},
		{&f.st.dec, `INSERT INTO decs (node, qtype, transport, verdict, action, reason, rcode, cached, sampled) VALUES (?,?,?,?,?,?,?,?,?) RETURNING id`},
		{&f.st.what, `INSERT INTO whats (categories, rule) VALUES (?, ?) RETURNING id`},
		{&f.st.reason, `INSERT INTO reasons (reason) VALUES (?) RETURNING id`},
	} {
		if *p.dst, err = f.db.PrepareContext(ctx, p.q); err != nil {
			return err
		}
	}
	return nil
}

// idShift: an event's id is its millisecond of the day << idShift plus a
// counter of the events of that millisecond.
const (
	idShift = 15
	msDay   = 86_400_000
)

func (d *dirStore) write(ctx context.Context, work []dayWork) (int, error) {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	stored := 0
	for _, w := range work {
		f, err := d.writer(ctx, w.day)
		if err != nil {
			return stored, err
		}
		n, err := f.write(ctx, w)
		if err != nil {
			// The file's dictionaries in memory may hold ids the rollback
			// took back, and a connection that failed (a full disk) may stay
			// failed: close it, the next write reopens and reloads.
			_ = f.close()
			delete(d.writers, w.day)
			return stored, fmt.Errorf("activity store: writing %s: %w", d.path(w.day), err)
		}
		stored += n
	}
	return stored, nil
}

// write stores one day's parts in one transaction.
func (f *dayFile) write(ctx context.Context, w dayWork) (int, error) {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	st := func(s *sql.Stmt) *sql.Stmt { return tx.StmtContext(ctx, s) }
	applied, maxID, insOne, insMany, roll, rolls := st(f.st.applied), st(f.st.maxID), st(f.st.event), st(f.st.events), st(f.st.roll), st(f.st.rolls)
	r := rollup{}
	day0 := dayStart(f.day).UnixNano()
	var pending []any
	flush := func(all bool) error {
		for len(pending) >= 6*eventsPerInsert {
			if _, err := insMany.ExecContext(ctx, pending[:6*eventsPerInsert]...); err != nil {
				return err
			}
			pending = pending[6*eventsPerInsert:]
		}
		if all {
			for ; len(pending) > 0; pending = pending[6:] {
				if _, err := insOne.ExecContext(ctx, pending[:6]...); err != nil {
					return err
				}
			}
		}
		return nil
	}
	stored := 0
	for _, p := range w.parts {
		res, err := applied.ExecContext(ctx, p.id.node, int64(p.id.boot), int64(p.id.seq))
		if err != nil {
			return 0, err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			continue // stored before
		}
		for _, e := range p.events {
			sub, err := f.sub(ctx, tx, subOfEvent(e))
			if err != nil {
				return 0, err
			}
			who, err := f.who(ctx, tx, whoKey{sub, e.Client, e.Policy})
			if err != nil {
				return 0, err
			}
			name, err := f.name(ctx, tx, e.QName)
			if err != nil {
				return 0, err
			}
			dec, err := f.dec(ctx, tx, decOf(e))
			if err != nil {
				return 0, err
			}
			what, err := f.what(ctx, tx, whatKey{catsString(e.Categories), e.Rule})
			if err != nil {
				return 0, err
			}
			ms := min(max((e.Time.UnixNano()-day0)/1e6, 0), msDay-1)
			id, err := f.newID(ctx, maxID, ms)
			if err != nil {
				return 0, err
			}
			pending = append(pending, id, who, name, dec, what, int64(e.LatencyUS))
			if err := flush(false); err != nil {
				return 0, err
			}
			h, b := hourOf(e.Time), blocked(e.Verdict)
			r.add(e.Org, dimDomain, h, name, 1, b)
			if !e.Sampled {
				reason, err := f.reason(ctx, tx, e.Reason)
				if err != nil {
					return 0, err
				}
				r.add(e.Org, dimCategory, h, firstCategory(e.Categories), 1, b)
				r.add(e.Org, dimSubscriber, h, sub, 1, b)
				r.add(e.Org, dimReason, h, reason, 1, b)
			}
			stored++
		}
		for _, c := range p.counts {
			sub, err := f.sub(ctx, tx, subOfCount(c))
			if err != nil {
				return 0, err
			}
			reason, err := f.reason(ctx, tx, c.Reason)
			if err != nil {
				return 0, err
			}
			h, n := hourOf(c.Start), int64(c.N)
			r.add(c.Org, dimCategory, h, int64(c.Category), n, false)
			r.add(c.Org, dimSubscriber, h, sub, n, false)
			r.add(c.Org, dimReason, h, reason, n, false)
		}
	}
	if err := flush(true); err != nil {
		return 0, err
	}
	rr := r.rows()
	args := make([]any, 0, 6*rollPerInsert)
	for len(rr) >= rollPerInsert {
		args = args[:0]
		for _, row := range rr[:rollPerInsert] {
			args = append(args, row.org, row.dim, row.h, row.key, row.n, row.b)
		}
		if _, err := rolls.ExecContext(ctx, args...); err != nil {
			return 0, err
		}
		rr = rr[rollPerInsert:]
	}
	for _, row := range rr {
		if _, err := roll.ExecContext(ctx, row.org, row.dim, row.h, row.key, row.n, row.b); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return stored, nil
}

// newID is the next id of millisecond ms (moving on to the next
// millisecond in the rare case that one is full).
func (f *dayFile) newID(ctx context.Context, maxID *sql.Stmt, ms int64) (int64, error) {
	for ; ms < msDay; ms++ {
		n, ok := f.next[ms]
		if !ok {
			if ms <= f.floorMs {
				var m sql.NullInt64
				if err := maxID.QueryRowContext(ctx, ms<<idShift, (ms+1)<<idShift).Scan(&m); err != nil {
					return 0, err
				}
				if m.Valid {
					n = m.Int64&(1<<idShift-1) + 1
				}
			}
		}
		if n >= 1<<idShift {
			continue
		}
		if len(f.next) >= 1<<17 {
			// Bounded: what is forgotten is asked of the file.
			f.floorMs = max(f.floorMs, f.hiMs)
			clear(f.next)
		}
		f.next[ms] = n + 1
		f.hiMs = max(f.hiMs, ms)
		return ms<<idShift | n, nil
	}
	return 0, errors.New("more events in the last milliseconds of the day than ids")
}

func scanID(row *sql.Row) (int64, error) {
	var id int64
	err := row.Scan(&id)
	return id, err
}

func (f *dayFile) sub(ctx context.Context, tx *sql.Tx, k subKey) (int64, error) {
	if id, ok := f.subs[k]; ok {
		return id, nil
	}
	id, err := scanID(tx.StmtContext(ctx, f.st.sub).QueryRowContext(ctx, k.org, k.session, k.user, k.device, k.location))
	if err == nil {
		f.subs[k] = id
	}
	return id, err
}

func (f *dayFile) who(ctx context.Context, tx *sql.Tx, k whoKey) (int64, error) {
	if id, ok := f.whos[k]; ok {
		return id, nil
	}
	id, err := scanID(tx.StmtContext(ctx, f.st.who).QueryRowContext(ctx, k.sub, k.client, k.policy))
	if err == nil {
		f.whos[k] = id
	}
	return id, err
}

func (f *dayFile) name(ctx context.Context, tx *sql.Tx, k string) (int64, error) {
	if id, ok := f.names[k]; ok {
		return id, nil
	}
	id, err := scanID(tx.StmtContext(ctx, f.st.name).QueryRowContext(ctx, k))
	if err == nil {
		f.names[k] = id
	}
	return id, err
}

func (f *dayFile) dec(ctx context.Context, tx *sql.Tx, k decKey) (int64, error) {
	if id, ok := f.decs[k]; ok {
		return id, nil
	}
	id, err := scanID(tx.StmtContext(ctx, f.st.dec).QueryRowContext(ctx, k.node, k.qtype, k.transport, k.verdict, k.action,
		k.reason, k.rcode, k.cached, k.sampled))
	if err == nil {
		f.decs[k] = id
	}
	return id, err
}

func (f *dayFile) what(ctx context.Context, tx *sql.Tx, k whatKey) (int64, error) {
	if id, ok := f.whats[k]; ok {
		return id, nil
	}
	id, err := scanID(tx.StmtContext(ctx, f.st.what).QueryRowContext(ctx, k.cats, k.rule))
	if err == nil {
		f.whats[k] = id
	}
	return id, err
}

func (f *dayFile) reason(ctx context.Context, tx *sql.Tx, k string) (int64, error) {
	if id, ok := f.reasons[k]; ok {
		return id, nil
	}
	id, err := scanID(tx.StmtContext(ctx, f.st.reason).QueryRowContext(ctx, k))
	if err == nil {
		f.reasons[k] = id
	}
	return id, err
}

// dropBefore deletes the files of the days before day.
func (d *dirStore) dropBefore(_ context.Context, day int32) (int, error) {
	entries, err := os.ReadDir(d.dir)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	d.rmu.Lock()
	defer d.rmu.Unlock()
	dropped := 0
	var errs []error
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".db")
		if !ok {
			continue
		}
		t, err := time.Parse(time.DateOnly, name)
		if err != nil {
			continue
		}
		fd := dayOf(t)
		if fd >= day {
			continue
		}
		if f := d.writers[fd]; f != nil {
			errs = append(errs, f.close())
			delete(d.writers, fd)
		}
		if db := d.readers[fd]; db != nil {
			errs = append(errs, db.Close())
			delete(d.readers, fd)
		}
		p := d.path(fd)
		for _, suffix := range []string{"-wal", "-shm"} {
			if err := os.Remove(p + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		dropped++
	}
	return dropped, errors.Join(errs...)
}

// reader returns a read pool on day's file, nil when there is none. The
// caller holds rmu shared.
func (d *dirStore) reader(day int32) (*sql.DB, error) {
	d.omu.Lock()
	defer d.omu.Unlock()
	if db := d.readers[day]; db != nil {
		return db, nil
	}
	p := d.path(day)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	db, err := sql.Open("sqlite", sqliteURI(p)+"&_pragma=query_only(1)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(2)
	d.readers[day] = db
	return db, nil
}

// readDay runs fn in one read transaction (one snapshot) of day's file;
// a day without a file, or one not yet migrated, is skipped.
func (d *dirStore) readDay(ctx context.Context, day int32, fn func(tx *sql.Tx) error) error {
	db, err := d.reader(day)
	if err != nil || db == nil {
		return err
	}
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	var ok int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE name = 'meta'`).Scan(&ok); err != nil || ok == 0 {
		return err
	}
	return fn(tx)
}

func (d *dirStore) events(ctx context.Context, q activity.EventQuery, days []int32) (activity.EventPage, error) {
	d.rmu.RLock()
	defer d.rmu.RUnlock()
	var page activity.EventPage
	need := q.Limit + 1
	var out []activity.StoredEvent
	for _, day := range days {
		if len(out) >= need {
			break
		}
		err := d.readDay(ctx, day, func(tx *sql.Tx) error {
			evs, err := dirEventsDay(ctx, tx, q, day, need-len(out))
			out = append(out, evs...)
			return err
		})
		if err != nil {
			return page, fmt.Errorf("activity store: reading %s: %w", d.path(day), err)
		}
	}
	if len(out) > q.Limit {
		out = out[:q.Limit]
		last := out[len(out)-1]
		page.Next = &activity.Cursor{Time: last.Time, ID: last.ID}
	}
	page.Events = out
	return page, nil
}

// dayBounds is the id range [lo, hi) of q's time range within day.
func dayBounds(q activity.EventQuery, day int32) (lo, hi int64) {
	d0 := dayStart(day)
	ceilMs := func(t time.Time) int64 {
		ns := t.Sub(d0).Nanoseconds()
		return min(max((ns+999_999)/1e6, 0), msDay)
	}
	lo, hi = ceilMs(q.From)<<idShift, ceilMs(q.To)<<idShift
	if q.After != nil && dayOf(q.After.Time) == day {
		hi = min(hi, q.After.ID)
	}
	return lo, hi
}

func dirEventsDay(ctx context.Context, tx *sql.Tx, q activity.EventQuery, day int32, need int) ([]activity.StoredEvent, error) {
	lo, hi := dayBounds(q, day)
	if lo >= hi {
		return nil, nil
	}
	whos, err := matchingWhos(ctx, tx, `SELECT w.id, w.client FROM whos w JOIN subs s ON s.id = w.sub
		WHERE s.org = ?1 AND (?2 = '' OR s.username = ?2) AND (?3 = '' OR s.deviceid = ?3)`, q.IP, q.Org, q.Username, q.DeviceID)
	if err != nil || len(whos) == 0 {
		return nil, err
	}
	where, args := eventFilter(q, "", func(n int) string { return "?" + strconv.Itoa(n) })
	n := len(args)
	d0 := dayStart(day).UnixMilli()
	var evs []evRow
	if len(whos) > mergeMaxSources {
		// Many subscribers: the events in id (time) order, by windows.
		set := make(map[int64]bool, len(whos))
		for _, w := range whos {
			set[w] = true
		}
		list, _ := inList(set)
		// +who: the events' own order (their key), not the who index.
		scan, err := tx.PrepareContext(ctx, fmt.Sprintf(`SELECT id, who, name, dec, what, lat FROM events
			WHERE id >= ?%d AND id < ?%d AND +who IN %s %s ORDER BY id DESC LIMIT ?%d`, n+1, n+2, list, where, n+3))
		if err != nil {
			return nil, err
		}
		defer scan.Close()
		fetch := func(a, b int64, limit int) ([]evRow, error) {
			rows, err := scan.QueryContext(ctx, append(slices.Clip(args), a, b, limit)...)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var out []evRow
			for rows.Next() {
				var r evRow
				if err := rows.Scan(&r.id, &r.who, &r.name, &r.dec, &r.what, &r.lat); err != nil {
					return nil, err
				}
				r.t = d0 + r.id>>idShift
				out = append(out, r)
			}
			return out, rows.Err()
		}
		evs, hi, err = scanWindows(fetch, lo, hi, scanFirstMs<<idShift, scanBudgetMs<<idShift, need)
		if err != nil {
			return nil, err
		}
		need -= len(evs)
		if len(evs) > 0 && (need == 0 || lo >= hi) {
			return resolveEvents(ctx, tx, evs, "", func(r evRow) int64 { return r.id })
		}
	}
	stmt, err := tx.PrepareContext(ctx, fmt.Sprintf(`SELECT id, name, dec, what, lat FROM events
		WHERE who = ?%d AND id >= ?%d AND id < ?%d %s ORDER BY id DESC LIMIT ?%d`, n+1, n+2, n+3, where, n+4))
	if err != nil {
		return nil, err
	}
	defer stmt.Close()
	sources := make([]fetcher, len(whos))
	for i, who := range whos {
		sources[i] = func(_, id int64, limit int) ([]evRow, error) {
			top := hi
			if id >= 0 {
				top = id
			}
			rows, err := stmt.QueryContext(ctx, append(slices.Clip(args), who, lo, top, limit)...)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var out []evRow
			for rows.Next() {
				r := evRow{who: who}
				if err := rows.Scan(&r.id, &r.name, &r.dec, &r.what, &r.lat); err != nil {
					return nil, err
				}
				r.t = d0 + r.id>>idShift
				out = append(out, r)
			}
			return out, rows.Err()
		}
	}
	merged, err := mergeNewest(sources, need)
	evs = append(evs, merged...)
	if err != nil || len(evs) == 0 {
		return nil, err
	}
	return resolveEvents(ctx, tx, evs, "", func(r evRow) int64 { return r.id })
}

// inList is "(?,?,…)" for the distinct values and those values as args.
func inList(vals map[int64]bool) (string, []any) {
	var b strings.Builder
	args := make([]any, 0, len(vals))
	b.WriteByte('(')
	for v := range vals {
		if len(args) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(v, 10))
		args = append(args, v)
	}
	b.WriteByte(')')
	return b.String(), nil
}

// resolveEvents turns rows into events, reading the dictionaries (tables
// prefixed by prefix: "" in a day file, "activity_" in PostgreSQL).
func resolveEvents(ctx context.Context, tx querier, evs []evRow, prefix string, idOf func(evRow) int64) ([]activity.StoredEvent, error) {
	whos, names, decs, whats := map[int64]bool{}, map[int64]bool{}, map[int64]bool{}, map[int64]bool{}
	for _, r := range evs {
		whos[r.who], names[r.name], decs[r.dec], whats[r.what] = true, true, true, true
	}
	type who struct {
		sub            subKey
		client, policy string
	}
	wm, nm, dm, xm := map[int64]who{}, map[int64]string{}, map[int64]decKey{}, map[int64]whatKey{}
	load := func(q string, ids map[int64]bool, scan func(id int64, r rowScanner) error) error {
		list, _ := inList(ids)
		rows, err := tx.QueryContext(ctx, strings.ReplaceAll(q, "$T", prefix)+" IN "+list)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			if err := scan(id, rows); err != nil {
				return err
			}
		}
		return rows.Err()
	}
	err := errors.Join(
		load(`SELECT w.id, s.org, s.session_id, s.username, s.deviceid, s.location, w.client, w.policy FROM $Twhos w JOIN $Tsubs s ON s.id = w.sub WHERE w.id`, whos,
			func(_ int64, r rowScanner) error {
				var id int64
				var w who
				err := r.Scan(&id, &w.sub.org, &w.sub.session, &w.sub.user, &w.sub.device, &w.sub.location, &w.client, &w.policy)
				wm[id] = w
				return err
			}),
		load(`SELECT id, name FROM $Tnames WHERE id`, names, func(_ int64, r rowScanner) error {
			var id int64
			var n string
			err := r.Scan(&id, &n)
			nm[id] = n
			return err
		}),
		load(`SELECT id, node, qtype, transport, verdict, action, reason, rcode, cached, sampled FROM $Tdecs WHERE id`, decs,
			func(_ int64, r rowScanner) error {
				var id int64
				var k decKey
				err := r.Scan(&id, &k.node, &k.qtype, &k.transport, &k.verdict, &k.action, &k.reason, &k.rcode, &k.cached, &k.sampled)
				dm[id] = k
				return err
			}),
		load(`SELECT id, categories, rule FROM $Twhats WHERE id`, whats, func(_ int64, r rowScanner) error {
			var id int64
			var k whatKey
			err := r.Scan(&id, &k.cats, &k.rule)
			xm[id] = k
			return err
		}),
	)
	if err != nil {
		return nil, err
	}
	out := make([]activity.StoredEvent, len(evs))
	for i, r := range evs {
		w, dk, x := wm[r.who], dm[r.dec], xm[r.what]
		out[i] = activity.StoredEvent{ID: idOf(r), Event: activity.Event{
			Time: time.UnixMilli(r.t).UTC(), Node: dk.node,
			Org: w.sub.org, SessionID: w.sub.session, Username: w.sub.user, DeviceID: w.sub.device, Location: w.sub.location,
			Client: w.client, QName: nm[r.name], QType: dk.qtype, Transport: dk.transport, Verdict: dk.verdict,
			Action: dk.action, Reason: dk.reason, Rule: x.rule, Categories: parseCats(x.cats), Rcode: dk.rcode,
			Cached: dk.cached, LatencyUS: uint32(r.lat), Policy: w.policy, Sampled: dk.sampled,
		}}
	}
	return out, nil
}

type rowScanner interface{ Scan(dst ...any) error }

// querier is a read transaction of either kind.
type querier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

// summary keys: what one counter row is aggregated under across days.
type sumKey struct {
	key, user, device, location string
}

// sumAcc aggregates a summary.
type sumAcc struct {
	rows          map[sumKey]*activity.SummaryRow
	total, blockd int64
}

func newSumAcc() *sumAcc { return &sumAcc{rows: map[sumKey]*activity.SummaryRow{}} }

func (a *sumAcc) add(k sumKey, n, b int64) {
	r := a.rows[k]
	if r == nil {
		r = &activity.SummaryRow{Key: k.key, Username: k.user, DeviceID: k.device, Location: k.location}
		a.rows[k] = r
	}
	r.Count += n
	r.Blocked += b
	a.total += n
	a.blockd += b
}

// top sorts the rows, keeps the top ones and fills Total, Blocked, Other.
func (a *sumAcc) top(n int) (activity.Summary, []sumKey) {
	keys := mapKeys(a.rows)
	slices.SortFunc(keys, func(x, y sumKey) int {
		rx, ry := a.rows[x], a.rows[y]
		if rx.Count != ry.Count {
			if rx.Count > ry.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(x.key+"\x00"+x.user+"\x00"+x.device+"\x00"+x.location, y.key+"\x00"+y.user+"\x00"+y.device+"\x00"+y.location)
	})
	keys = keys[:min(n, len(keys))]
	s := activity.Summary{Total: a.total, Blocked: a.blockd, Other: a.total}
	for _, k := range keys {
		s.Rows = append(s.Rows, *a.rows[k])
		s.Other -= a.rows[k].Count
	}
	return s, keys
}

// keyCols is, per dimension, the columns a counter's key reads as (their
// tables prefixed by $T) and the join that reaches them.
func keyCols(dim int) (cols, join string) {
	switch dim {
	case dimDomain:
		return `k.name, '', '', ''`, `JOIN $Tnames k ON k.id = r.key`
	case dimSubscriber:
		return `k.session_id, k.username, k.deviceid, k.location`, `JOIN $Tsubs k ON k.id = r.key`
	case dimReason:
		return `k.reason, '', '', ''`, `JOIN $Treasons k ON k.id = r.key`
	}
	return `CAST(r.key AS TEXT), '', '', ''`, ``
}

func (d *dirStore) summary(ctx context.Context, q activity.SummaryQuery, spans []daySpan, interval time.Duration) (activity.Summary, error) {
	d.rmu.RLock()
	defer d.rmu.RUnlock()
	dim := dimOf(q.By)
	cols, join := keyCols(dim)
	join = strings.ReplaceAll(join, "$T", "")
	var sum activity.Summary
	var keys []sumKey
	var err error
	if len(spans) == 1 {
		// One day: its counters by id, the text of the top ones only.
		sp := spans[0]
		err = d.readDay(ctx, sp.day, func(tx *sql.Tx) error {
			c := newIDCounts()
			if err := readRoll(ctx, tx, `SELECT key, n, b FROM roll WHERE org = ? AND dim = ? AND h >= ? AND h < ?`,
				c, q.Org, dim, sp); err != nil {
				return err
			}
			sum, keys, err = topSummary(ctx, tx, "", dim, c, q.Top)
			return err
		})
		if err != nil {
			return activity.Summary{}, fmt.Errorf("activity store: reading %s: %w", d.path(sp.day), err)
		}
	} else {
		sum, keys, err = d.summaryDays(ctx, q, spans, dim, cols, join)
		if err != nil {
			return activity.Summary{}, err
		}
	}
	if interval == 0 || len(keys) == 0 {
		return sum, nil
	}
	return d.series(ctx, q, spans, interval, dim, cols, join, sum, keys)
}

// readRoll adds the counter rows q reads (key, n, b; its arguments org,
// dim, then the hours) to c. The whole day is its h = 24 row.
func readRoll(ctx context.Context, tx querier, q string, c *idCounts, org string, dim int, sp daySpan) error {
	h0, h1 := sp.h0, min(sp.h1, 24)
	if h0 == 0 && h1 == 24 {
		h0, h1 = 24, 25
	}
	rows, err := tx.QueryContext(ctx, q, org, dim, h0, h1)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k, n, b int64
		if err := rows.Scan(&k, &n, &b); err != nil {
			return err
		}
		c.add(k, n, b)
	}
	return rows.Err()
}

// summaryDays answers a summary over several day files: each file has
// its own ids, so the counters are added up by their text.
func (d *dirStore) summaryDays(ctx context.Context, q activity.SummaryQuery, spans []daySpan, dim int, cols, join string) (activity.Summary, []sumKey, error) {
	acc := newSumAcc()
	for _, sp := range spans {
		hcond := `r.h >= ? AND r.h < ? AND r.h < 24`
		h0, h1 := sp.h0, sp.h1
		if h0 == 0 && h1 == 24 {
			hcond, h0, h1 = `r.h = ? AND r.h = ? + 24`, 24, 0
		}
		err := d.readDay(ctx, sp.day, func(tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, `SELECT `+cols+`, sum(r.n), sum(r.b) FROM roll r `+join+`
				WHERE r.org = ? AND r.dim = ? AND `+hcond+` GROUP BY r.key`, q.Org, dim, h0, h1)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var k sumKey
				var n, b int64
				if err := rows.Scan(&k.key, &k.user, &k.device, &k.location, &n, &b); err != nil {
					return err
				}
				acc.add(k, n, b)
			}
			return rows.Err()
		})
		if err != nil {
			return activity.Summary{}, nil, fmt.Errorf("activity store: reading %s: %w", d.path(sp.day), err)
		}
	}
	sum, keys := acc.top(q.Top)
	return sum, keys, nil
}

// series fills the top rows' counts per interval.
func (d *dirStore) series(ctx context.Context, q activity.SummaryQuery, spans []daySpan, interval time.Duration, dim int, cols, join string,
	sum activity.Summary, keys []sumKey) (activity.Summary, error) {
	buckets := int((q.To.Sub(q.From) + interval - 1) / interval)
	idx := map[sumKey]int{}
	for i, k := range keys {
		idx[k] = i
		sum.Rows[i].Series = make([]int64, buckets)
	}
	first := strings.SplitN(cols, ",", 2)[0]
	for _, sp := range spans {
		var in strings.Builder
		args := []any{q.Org, dim, sp.h0, sp.h1}
		for i, k := range keys {
			if i > 0 {
				in.WriteByte(',')
			}
			in.WriteByte('?')
			args = append(args, k.key)
		}
		err := d.readDay(ctx, sp.day, func(tx *sql.Tx) error {
			rows, err := tx.QueryContext(ctx, `SELECT `+cols+`, r.h, r.n FROM roll r `+join+`
				WHERE r.org = ? AND r.dim = ? AND r.h >= ? AND r.h < ? AND r.h < 24 AND `+first+` IN (`+in.String()+`)`, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			for rows.Next() {
				var k sumKey
				var h int
				var n int64
				if err := rows.Scan(&k.key, &k.user, &k.device, &k.location, &h, &n); err != nil {
					return err
				}
				i, ok := idx[k]
				if !ok {
					continue
				}
				at := dayStart(sp.day).Add(time.Duration(h) * time.Hour)
				if b := int(at.Sub(q.From) / interval); b >= 0 && b < buckets {
					sum.Rows[i].Series[b] += n
				}
			}
			return rows.Err()
		})
		if err != nil {
			return activity.Summary{}, err
		}
	}
	return sum, nil
}
