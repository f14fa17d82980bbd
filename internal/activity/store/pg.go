package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/svc-pf/svc-pf/internal/activity"
)

// pgStore is PostgreSQL: shared dictionaries, and events, counters and
// applied batch ids in tables partitioned by UTC day. Any number of
// collectors write it at once: the dictionaries are filled with INSERT …
// ON CONFLICT DO NOTHING, a batch's applied row is unique (a second
// collector's insert of it waits for the first's transaction and then
// finds it), counters are upserted in one key order.
type pgStore struct {
	db *sql.DB

	mu         sync.Mutex
	partitions map[int32]bool
	subs       map[subKey]int64
	whos       map[whoKey]int64
	names      map[string]int64
	decs       map[decKey]int64
	whats      map[whatKey]int64
	reasons    map[string]int64
}

// Advisory lock keys (the first of the two-key form spells "svca").
const (
	pgLockClass     = 0x73766361
	pgLockMigrate   = 1
	pgLockPartition = 2
)

func openPostgres(ctx context.Context, url string) (*pgStore, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, errBadPostgresURL
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(5 * time.Minute)
	p := &pgStore{db: db, partitions: map[int32]bool{}}
	p.resetDicts()
	if err := p.migrate(ctx); err != nil {
		_ = db.Close()
		return nil, err
	}
	return p, nil
}

func (p *pgStore) resetDicts() {
	p.subs, p.whos, p.names = map[subKey]int64{}, map[whoKey]int64{}, map[string]int64{}
	p.decs, p.whats, p.reasons = map[decKey]int64{}, map[whatKey]int64{}, map[string]int64{}
}

func (p *pgStore) migrate(ctx context.Context) error {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("activity store: connect to postgres: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if err := lockSchema(ctx, tx, pgLockMigrate); err != nil {
		return err
	}
	if err := migrate(ctx, tx, "postgres", "activity_schema_migrations"); err != nil {
		return err
	}
	return tx.Commit()
}

// lockSchema takes, for tx's duration, the advisory lock what names in
// the current schema: stores in other schemas of one database (another
// installation, a test beside this one) do not wait for it.
func lockSchema(ctx context.Context, tx *sql.Tx, what int) error {
	_, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(current_schema() || '/' || $2))`, pgLockClass, strconv.Itoa(what))
	return err
}

func (p *pgStore) close() error { return p.db.Close() }

func partName(table string, day int32) string {
	return table + "_" + strings.ReplaceAll(dayName(day), "-", "")
}

// ensurePartitions creates the partitions of day and the day after (ahead,
// so that midnight does not wait on DDL), once per process.
func (p *pgStore) ensurePartitions(ctx context.Context, day int32) error {
	p.mu.Lock()
	ok := p.partitions[day]
	p.mu.Unlock()
	if ok {
		return nil
	}
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	// Two collectors creating one partition at once would collide in the
	// catalog despite IF NOT EXISTS.
	if err := lockSchema(ctx, tx, pgLockPartition); err != nil {
		return err
	}
	for _, d := range []int32{day, day + 1} {
		for _, q := range []string{
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF activity_events FOR VALUES FROM (%d) TO (%d)`,
				partName("activity_events", d), int64(d)*msDay, int64(d+1)*msDay),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF activity_roll FOR VALUES FROM (%d) TO (%d)`,
				partName("activity_roll", d), d, d+1),
			fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s PARTITION OF activity_applied FOR VALUES FROM (%d) TO (%d)`,
				partName("activity_applied", d), d, d+1),
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	p.mu.Lock()
	p.partitions[day], p.partitions[day+1] = true, true
	p.mu.Unlock()
	return nil
}

// pgDict resolves one dictionary's missing keys: insert what is new
// (committed at once, outside the batch's transaction: an id never
// disappears, so the cache stays true), then read the ids.
//
// The inserts of one round go in one pipeline, which PostgreSQL runs as
// one implicit transaction: a statement that fails (a deadlock with another
// collector, the server going away) rolls back the rows inserted before it
// in the round. So the round's ids enter the cache only once the whole
// pipeline has succeeded; an id remembered from a rolled-back insert would
// point at no row, and a subscriber's would fail every later write of it on
// activity_whos' foreign key. The keys go in one order (by their
// arguments' text) so that two collectors inserting the same new keys wait
// on each other's rows in that order instead of deadlocking.
func pgDict[K comparable](ctx context.Context, conn *pgx.Conn, cache map[K]int64, keys map[K]bool,
	insert string, args func(K) []any) error {
	type item struct {
		k    K
		args []any
		sort string
	}
	var missing []item
	for k := range keys {
		if _, ok := cache[k]; !ok {
			a := args(k)
			missing = append(missing, item{k, a, fmt.Sprintf("%#v", a)})
		}
	}
	slices.SortFunc(missing, func(a, b item) int { return strings.Compare(a.sort, b.sort) })
	for len(missing) > 0 {
		var b pgx.Batch
		for _, it := range missing {
			b.Queue(insert, it.args...)
		}
		res := conn.SendBatch(ctx, &b)
		var again []item
		got := make(map[K]int64, len(missing))
		for _, it := range missing {
			var id int64
			err := res.QueryRow().Scan(&id)
			switch {
			case errors.Is(err, pgx.ErrNoRows):
				// Inserted by another collector after this statement's
				// snapshot: the next round sees it.
				again = append(again, it)
			case err != nil:
				_ = res.Close()
				return err
			default:
				got[it.k] = id
			}
		}
		if err := res.Close(); err != nil {
			return err
		}
		maps.Copy(cache, got)
		missing = again
	}
	return nil
}

// upsertSQL inserts a dictionary row or finds the existing one.
func upsertSQL(table, cols string, n int, where string) string {
	ph := make([]string, n)
	for i := range ph {
		ph[i] = fmt.Sprintf("$%d", i+1)
	}
	return fmt.Sprintf(`WITH ins AS (INSERT INTO %s (%s) VALUES (%s) ON CONFLICT DO NOTHING RETURNING id)
		SELECT id FROM ins UNION ALL SELECT id FROM %s WHERE %s LIMIT 1`, table, cols, strings.Join(ph, ","), table, where)
}

var (
	pgSubSQL    = upsertSQL("activity_subs", "org, session_id, username, deviceid, location", 5, "org=$1 AND session_id=$2 AND username=$3 AND deviceid=$4 AND location=$5")
	pgWhoSQL    = upsertSQL("activity_whos", "sub, client, policy", 3, "sub=$1 AND client=$2 AND policy=$3")
	pgNameSQL   = upsertSQL("activity_names", "name", 1, "name=$1")
	pgDecSQL    = upsertSQL("activity_decs", "node, qtype, transport, verdict, action, reason, rcode, cached, sampled", 9, "node=$1 AND qtype=$2 AND transport=$3 AND verdict=$4 AND action=$5 AND reason=$6 AND rcode=$7 AND cached=$8 AND sampled=$9")
	pgWhatSQL   = upsertSQL("activity_whats", "categories, rule", 2, "categories=$1 AND rule=$2")
	pgReasonSQL = upsertSQL("activity_reasons", "reason", 1, "reason=$1")
)

func (p *pgStore) write(ctx context.Context, work []dayWork) (int, error) {
	for _, w := range work {
		if err := p.ensurePartitions(ctx, w.day); err != nil {
			return 0, fmt.Errorf("activity store: creating the partitions of %s: %w", dayName(w.day), err)
		}
	}
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return 0, fmt.Errorf("activity store: postgres: %w", err)
	}
	defer conn.Close()
	stored := 0
	err = conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		p.mu.Lock()
		defer p.mu.Unlock()
		if err := p.resolve(ctx, pc, work); err != nil {
			return err
		}
		for _, w := range work {
			n, err := p.writeDay(ctx, pc, w)
			if err != nil {
				return err
			}
			stored += n
		}
		return nil
	})
	if err != nil {
		return stored, fmt.Errorf("activity store: postgres: %w", err)
	}
	return stored, nil
}

// resolve fills the dictionary caches for every key the work uses.
func (p *pgStore) resolve(ctx context.Context, conn *pgx.Conn, work []dayWork) error {
	subs, names, decs, whats, reasons := map[subKey]bool{}, map[string]bool{}, map[decKey]bool{}, map[whatKey]bool{}, map[string]bool{}
	for _, w := range work {
		for _, pt := range w.parts {
			for _, e := range pt.events {
				subs[subOfEvent(e)], names[e.QName], decs[decOf(e)] = true, true, true
				whats[whatKey{catsString(e.Categories), e.Rule}], reasons[e.Reason] = true, true
			}
			for _, c := range pt.counts {
				subs[subOfCount(c)], reasons[c.Reason] = true, true
			}
		}
	}
	err := errors.Join(
		pgDict(ctx, conn, p.subs, subs, pgSubSQL, func(k subKey) []any { return []any{k.org, k.session, k.user, k.device, k.location} }),
		pgDict(ctx, conn, p.names, names, pgNameSQL, func(k string) []any { return []any{k} }),
		pgDict(ctx, conn, p.decs, decs, pgDecSQL, func(k decKey) []any {
			return []any{k.node, int32(k.qtype), k.transport, k.verdict, k.action, k.reason, int32(k.rcode), k.cached, k.sampled}
		}),
		pgDict(ctx, conn, p.whats, whats, pgWhatSQL, func(k whatKey) []any { return []any{k.cats, k.rule} }),
		pgDict(ctx, conn, p.reasons, reasons, pgReasonSQL, func(k string) []any { return []any{k} }),
	)
	if err != nil {
		return err
	}
	whos := map[whoKey]bool{}
	for _, w := range work {
		for _, pt := range w.parts {
			for _, e := range pt.events {
				whos[whoKey{p.subs[subOfEvent(e)], e.Client, e.Policy}] = true
			}
		}
	}
	return pgDict(ctx, conn, p.whos, whos, pgWhoSQL, func(k whoKey) []any { return []any{int32(k.sub), k.client, k.policy} })
}

// writeDay stores one day's parts in one transaction: applied ids, events
// (COPY) and counters.
func (p *pgStore) writeDay(ctx context.Context, conn *pgx.Conn, w dayWork) (int, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	fresh, err := pgApplied(ctx, tx, w)
	if err != nil {
		return 0, err
	}
	var rows []pgEventRow
	r := rollup{}
	for i, pt := range w.parts {
		if !fresh[i] {
			continue // stored before
		}
		for _, e := range pt.events {
			sub := p.subs[subOfEvent(e)]
			name := p.names[e.QName]
			rows = append(rows, pgEventRow{e.Time.UnixMilli(), int32(p.whos[whoKey{sub, e.Client, e.Policy}]), int32(name), int32(p.decs[decOf(e)]),
				int32(p.whats[whatKey{catsString(e.Categories), e.Rule}]), int32(min(e.LatencyUS, 1<<31-1))})
			h, b := hourOf(e.Time), blocked(e.Verdict)
			r.add(e.Org, dimDomain, h, name, 1, b)
			if !e.Sampled {
				r.add(e.Org, dimCategory, h, firstCategory(e.Categories), 1, b)
				r.add(e.Org, dimSubscriber, h, sub, 1, b)
				r.add(e.Org, dimReason, h, p.reasons[e.Reason], 1, b)
			}
		}
		for _, c := range pt.counts {
			h, n := hourOf(c.Start), int64(c.N)
			r.add(c.Org, dimCategory, h, int64(c.Category), n, false)
			r.add(c.Org, dimSubscriber, h, p.subs[subOfCount(c)], n, false)
			r.add(c.Org, dimReason, h, p.reasons[c.Reason], n, false)
		}
	}
	if len(rows) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"activity_events"}, []string{"t", "who", "name", "dec", "what", "lat"},
			pgx.CopyFromSlice(len(rows), func(i int) ([]any, error) {
				x := &rows[i]
				return []any{x.t, x.who, x.name, x.dec, x.what, x.lat}, nil
			})); err != nil {
			return 0, err
		}
	}
	if rr := r.rows(); len(rr) > 0 {
		orgs, dims, hs, keys, ns, bs := make([]string, len(rr)), make([]int16, len(rr)), make([]int16, len(rr)),
			make([]int64, len(rr)), make([]int64, len(rr)), make([]int64, len(rr))
		for i, x := range rr {
			orgs[i], dims[i], hs[i], keys[i], ns[i], bs[i] = x.org, int16(x.dim), int16(x.h), x.key, x.n, x.b
		}
		// One statement, its rows in key order: two collectors lock the
		// rows they share in the same order.
		if _, err := tx.Exec(ctx, `INSERT INTO activity_roll (day, org, dim, h, key, n, b)
			SELECT $1, * FROM unnest($2::text[], $3::smallint[], $4::smallint[], $5::int[], $6::bigint[], $7::bigint[])
			ON CONFLICT (day, org, dim, h, key) DO UPDATE SET n = activity_roll.n + excluded.n, b = activity_roll.b + excluded.b`,
			w.day, orgs, dims, hs, keys, ns, bs); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	return len(rows), nil
}

// pgEventRow is one event as copied into activity_events.
type pgEventRow struct {
	t                         int64
	who, name, dec, what, lat int32
}

// pgApplied records the day's parts as applied, in one statement, and says
// which are new (fresh[i] for w.parts[i]); a part whose batch was stored
// before, or that repeats an earlier part's batch, is not. The ids go in
// sorted so that two collectors wait on each other's rows in one order.
func pgApplied(ctx context.Context, tx pgx.Tx, w dayWork) ([]bool, error) {
	ids := make([]batchID, 0, len(w.parts))
	for _, pt := range w.parts {
		ids = append(ids, pt.id)
	}
	slices.SortFunc(ids, func(a, b batchID) int {
		if c := strings.Compare(a.node, b.node); c != 0 {
			return c
		}
		if c := cmp.Compare(a.boot, b.boot); c != 0 {
			return c
		}
		return cmp.Compare(a.seq, b.seq)
	})
	ids = slices.Compact(ids)
	nodes, boots, seqs := make([]string, len(ids)), make([]int64, len(ids)), make([]int64, len(ids))
	for i, id := range ids {
		nodes[i], boots[i], seqs[i] = id.node, int64(id.boot), int64(id.seq)
	}
	rows, err := tx.Query(ctx, `INSERT INTO activity_applied (day, node, boot, seq)
		SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::bigint[]) ON CONFLICT DO NOTHING RETURNING node, boot, seq`,
		w.day, nodes, boots, seqs)
	if err != nil {
		return nil, err
	}
	inserted := map[batchID]bool{}
	for rows.Next() {
		var id batchID
		var boot, seq int64
		if err := rows.Scan(&id.node, &boot, &seq); err != nil {
			rows.Close()
			return nil, err
		}
		id.boot, id.seq = uint64(boot), uint64(seq)
		inserted[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	fresh := make([]bool, len(w.parts))
	for i, pt := range w.parts {
		if inserted[pt.id] {
			fresh[i] = true
			delete(inserted, pt.id) // a second part of one batch is a repeat
		}
	}
	return fresh, nil
}

func (p *pgStore) dropBefore(ctx context.Context, day int32) (int, error) {
	tx, err := p.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	if err := lockSchema(ctx, tx, pgLockPartition); err != nil {
		return 0, err
	}
	rows, err := tx.QueryContext(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		JOIN pg_class pc ON pc.oid = i.inhparent WHERE pc.relname = 'activity_events' AND pc.relnamespace = current_schema()::regnamespace`)
	if err != nil {
		return 0, err
	}
	var drop []int32
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return 0, err
		}
		t, err := time.Parse("20060102", strings.TrimPrefix(name, "activity_events_"))
		if err == nil && dayOf(t) < day {
			drop = append(drop, dayOf(t))
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, d := range drop {
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %s, %s, %s`, partName("activity_events", d),
			partName("activity_roll", d), partName("activity_applied", d))); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	p.mu.Lock()
	for _, d := range drop {
		delete(p.partitions, d)
	}
	p.mu.Unlock()
	return len(drop), nil
}

func (p *pgStore) events(ctx context.Context, q activity.EventQuery, _ []int32) (activity.EventPage, error) {
	var page activity.EventPage
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return page, err
	}
	defer conn.Close()
	whos, err := matchingWhos(ctx, conn, `SELECT w.id, w.client FROM activity_whos w JOIN activity_subs s ON s.id = w.sub
		WHERE s.org = $1 AND ($2 = '' OR s.username = $2) AND ($3 = '' OR s.deviceid = $3)`, q.IP, q.Org, q.Username, q.DeviceID)
	if err != nil || len(whos) == 0 {
		return page, err
	}
	ceilMs := func(t time.Time) int64 { return (t.UnixNano() + 999_999) / 1e6 }
	lo := ceilMs(q.From)
	topT, topID := ceilMs(q.To), int64(-1)
	if q.After != nil {
		topT, topID = q.After.Time.UnixMilli(), q.After.ID
	}
	where, args := eventFilter(q, "activity_", func(n int) string { return "$" + strconv.Itoa(n) })
	n := len(args)
	need := q.Limit + 1
	var evs []evRow
	if len(whos) > mergeMaxSources {
		// Many subscribers: the events in time order, by windows (the BRIN
		// index on t finds a window's pages).
		scan, err := conn.PrepareContext(ctx, fmt.Sprintf(`SELECT t, id, who, name, dec, what, lat FROM activity_events
			WHERE t >= $%d AND (t, id) < ($%d, $%d) AND who = ANY($%d::integer[]) %s ORDER BY t DESC, id DESC LIMIT $%d`,
			n+1, n+2, n+3, n+4, where, n+5))
		if err != nil {
			return page, err
		}
		defer scan.Close()
		first := true
		fetch := func(a, b int64, limit int) ([]evRow, error) {
			id := int64(-1) // below every id: all of t < b
			if first {
				b, id, first = topT, topID, false
			}
			rows, err := scan.QueryContext(ctx, append(slices.Clip(args), a, b, id, whos, limit)...)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var out []evRow
			for rows.Next() {
				var r evRow
				if err := rows.Scan(&r.t, &r.id, &r.who, &r.name, &r.dec, &r.what, &r.lat); err != nil {
					return nil, err
				}
				out = append(out, r)
			}
			return out, rows.Err()
		}
		hiT := topT
		if topID >= 0 {
			hiT = topT + 1 // the cursor's millisecond is in the first window
		}
		var reached int64
		evs, reached, err = scanWindows(fetch, lo, hiT, scanFirstMs, scanBudgetMs, need)
		if err != nil {
			return page, err
		}
		need -= len(evs)
		if reached < hiT {
			topT, topID = reached, -1
		}
		if need == 0 || lo >= topT {
			return p.finishPage(ctx, conn, q, evs)
		}
	}
	stmt, err := conn.PrepareContext(ctx, fmt.Sprintf(`SELECT t, id, name, dec, what, lat FROM activity_events
		WHERE who = $%d AND t >= $%d AND (t, id) < ($%d, $%d) %s ORDER BY t DESC, id DESC LIMIT $%d`, n+1, n+2, n+3, n+4, where, n+5))
	if err != nil {
		return page, err
	}
	defer stmt.Close()
	sources := make([]fetcher, len(whos))
	for i, who := range whos {
		sources[i] = func(t, id int64, limit int) ([]evRow, error) {
			if t < 0 {
				t, id = topT, topID
			}
			rows, err := stmt.QueryContext(ctx, append(append([]any{}, args...), who, lo, t, id, limit)...)
			if err != nil {
				return nil, err
			}
			defer rows.Close()
			var out []evRow
			for rows.Next() {
				r := evRow{who: who}
				if err := rows.Scan(&r.t, &r.id, &r.name, &r.dec, &r.what, &r.lat); err != nil {
					return nil, err
				}
				out = append(out, r)
			}
			return out, rows.Err()
		}
	}
	merged, err := mergeNewest(sources, need)
	if err != nil {
		return page, err
	}
	return p.finishPage(ctx, conn, q, append(evs, merged...))
}

// finishPage resolves a page's rows and cuts it, with the cursor of its
// last event when more follow.
func (p *pgStore) finishPage(ctx context.Context, conn *sql.Conn, q activity.EventQuery, evs []evRow) (activity.EventPage, error) {
	var page activity.EventPage
	if len(evs) == 0 {
		return page, nil
	}
	out, err := resolveEvents(ctx, conn, evs, "activity_", func(r evRow) int64 { return r.id })
	if err != nil {
		return page, err
	}
	if len(out) > q.Limit {
		out = out[:q.Limit]
		last := out[len(out)-1]
		page.Next = &activity.Cursor{Time: last.Time, ID: last.ID}
	}
	page.Events = out
	return page, nil
}

func (p *pgStore) summary(ctx context.Context, q activity.SummaryQuery, spans []daySpan, interval time.Duration) (activity.Summary, error) {
	dim := dimOf(q.By)
	cols, join := keyCols(dim)
	join = strings.ReplaceAll(join, "$T", "activity_")
	// The dictionaries are shared by every day: the counters add up by id
	// across days, and only the top ones' text is read.
	c := newIDCounts()
	for _, sp := range spans {
		if err := readRoll(ctx, p.db, fmt.Sprintf(`SELECT key, n, b FROM activity_roll WHERE day = %d AND org = $1 AND dim = $2 AND h >= $3 AND h < $4`, sp.day),
			c, q.Org, dim, sp); err != nil {
			return activity.Summary{}, err
		}
	}
	sum, keys, err := topSummary(ctx, p.db, "activity_", dim, c, q.Top)
	if err != nil {
		return activity.Summary{}, err
	}
	if interval == 0 || len(keys) == 0 {
		return sum, nil
	}
	buckets := int((q.To.Sub(q.From) + interval - 1) / interval)
	idx := map[sumKey]int{}
	var list []string
	for i, k := range keys {
		idx[k] = i
		sum.Rows[i].Series = make([]int64, buckets)
		list = append(list, k.key)
	}
	first := strings.SplitN(cols, ",", 2)[0]
	for _, sp := range spans {
		rows, err := p.db.QueryContext(ctx, `SELECT `+cols+`, r.h, r.n FROM activity_roll r `+join+`
			WHERE r.day = $1 AND r.org = $2 AND r.dim = $3 AND r.h >= $4 AND r.h < $5 AND r.h < 24 AND `+first+` = ANY($6)`,
			sp.day, q.Org, dim, sp.h0, sp.h1, list)
		if err != nil {
			return activity.Summary{}, err
		}
		for rows.Next() {
			var k sumKey
			var h int
			var n int64
			if err := rows.Scan(&k.key, &k.user, &k.device, &k.location, &h, &n); err != nil {
				rows.Close()
				return activity.Summary{}, err
			}
			if i, ok := idx[k]; ok {
				at := dayStart(sp.day).Add(time.Duration(h) * time.Hour)
				if b := int(at.Sub(q.From) / interval); b >= 0 && b < buckets {
					sum.Rows[i].Series[b] += n
				}
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return activity.Summary{}, err
		}
	}
	return sum, nil
}
