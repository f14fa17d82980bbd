package store

import (
	"container/heap"
	"context"
	"fmt"
	"strings"

	"github.com/svc-pf/svc-pf/internal/activity"
)

// evRow is one stored event as read, before its dictionary ids are
// resolved. t is milliseconds since the Unix epoch; (t, id) orders events.
type evRow struct {
	t, id                     int64
	who, name, dec, what, lat int64
}

func (a evRow) less(b evRow) bool { return a.t < b.t || (a.t == b.t && a.id < b.id) }

// fetcher reads up to n of one source's events older than (t, id), newest
// first (t < 0: from the newest).
type fetcher func(t, id int64, n int) ([]evRow, error)

// mergeChunk is how many events a source reads at first; each refill of
// the same source doubles it.
const mergeChunk = 16

type mergeSrc struct {
	fetch     fetcher
	buf       []evRow
	chunk     int
	exhausted bool
}

type mergeHeap []*mergeSrc

func (h mergeHeap) Len() int           { return len(h) }
func (h mergeHeap) Less(i, j int) bool { return h[j].buf[0].less(h[i].buf[0]) }
func (h mergeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)        { *h = append(*h, x.(*mergeSrc)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeNewest merges the sources' events, each newest first, into the
// newest limit of them all. Each source is read lazily in growing chunks,
// so a page over a thousand subscribers reads about a chunk of each plus
// the page, not the page of each.
func mergeNewest(sources []fetcher, limit int) ([]evRow, error) {
	chunk := min(limit, mergeChunk)
	h := make(mergeHeap, 0, len(sources))
	for _, f := range sources {
		s := &mergeSrc{fetch: f, chunk: chunk}
		if err := s.fill(-1, -1); err != nil {
			return nil, err
		}
		if len(s.buf) > 0 {
			h = append(h, s)
		}
	}
	heap.Init(&h)
	var out []evRow
	for len(out) < limit && h.Len() > 0 {
		s := h[0]
		r := s.buf[0]
		out = append(out, r)
		s.buf = s.buf[1:]
		if len(s.buf) == 0 && !s.exhausted {
			s.chunk = min(2*s.chunk, activity.MaxLimit+1)
			if err := s.fill(r.t, r.id); err != nil {
				return nil, err
			}
		}
		if len(s.buf) == 0 {
			heap.Pop(&h)
		} else {
			heap.Fix(&h, 0)
		}
	}
	return out, nil
}

func (s *mergeSrc) fill(t, id int64) error {
	rows, err := s.fetch(t, id, s.chunk)
	if err != nil {
		return err
	}
	s.buf = rows
	s.exhausted = len(rows) < s.chunk
	return nil
}

// matchingWhos runs whosSQL — an organisation's whos (subscriber, client,
// policy) with their client, filtered by username and deviceid, args
// (org, username, deviceid) — and keeps those whose client matches ip
// (matchIP): the sources of a page of events, in both stores.
func matchingWhos(ctx context.Context, db querier, whosSQL, ip string, args ...any) ([]int64, error) {
	rows, err := db.QueryContext(ctx, whosSQL, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var whos []int64
	for rows.Next() {
		var id int64
		var client string
		if err := rows.Scan(&id, &client); err != nil {
			return nil, err
		}
		if matchIP(ip, client) {
			whos = append(whos, id)
		}
	}
	return whos, rows.Err()
}

// eventFilter is the events' condition for q's verdict, reason and name
// (the name and the names under it), as " AND …" with its arguments, in
// both stores: prefix names their dictionary tables ("" or "activity_"),
// ph writes the placeholder of the n-th argument (1-based).
func eventFilter(q activity.EventQuery, prefix string, ph func(n int) string) (string, []any) {
	where, args := "", []any{}
	if q.Verdict != "" || q.Reason != "" {
		where += fmt.Sprintf(` AND dec IN (SELECT id FROM %sdecs WHERE (%[2]s = '' OR verdict = %[2]s) AND (%[3]s = '' OR reason = %[3]s))`,
			prefix, ph(1), ph(2))
		args = append(args, q.Verdict, q.Reason)
	}
	if qn := strings.ToLower(q.QName); qn != "" && qn != "." {
		n := len(args)
		where += fmt.Sprintf(` AND name IN (SELECT id FROM %snames WHERE name = %s OR name LIKE %s ESCAPE '\')`, prefix, ph(n+1), ph(n+2))
		args = append(args, qn, "%."+likeEscape(qn))
	}
	return where, args
}

// likeEscape escapes s for a LIKE pattern with ESCAPE '\'.
func likeEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
	return r.Replace(s)
}

// mergeMaxSources is how many sources (whos) a page merges; a question
// matching more (an organisation's page, ~1000 subscribers) scans the
// events in time order first (scanWindows): a query per source would cost
// a thousand queries for a page of a hundred.
const mergeMaxSources = 8

// Time windows of scanWindows, in milliseconds: the first is a minute, each
// next one twice the last, and at most an hour of events is scanned before
// the rest is left to the merge (an organisation with few events among
// many others').
const (
	scanFirstMs  = 60_000
	scanBudgetMs = 3_600_000
)

// scanWindows reads the newest events of a range by time windows:
// fetch(lo, hi, n) returns up to n matching events with lo ≤ t < hi (t as
// the caller counts it), newest first. The first window is first wide,
// each next one twice the last, until need events are found, lo is reached
// or budget of the range has been scanned. It returns the events found and
// where it stopped: events below reached were not read.
func scanWindows(fetch func(lo, hi int64, n int) ([]evRow, error), lo, hi, first, budget int64, need int) ([]evRow, int64, error) {
	var out []evRow
	for w := first; hi > lo && len(out) < need && budget > 0; w *= 2 {
		wlo := max(lo, hi-w)
		rows, err := fetch(wlo, hi, need-len(out))
		if err != nil {
			return nil, 0, err
		}
		out = append(out, rows...)
		budget -= hi - wlo
		hi = wlo
	}
	return out, hi, nil
}
