package orgstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/svc-pf/svc-pf/internal/access"
)

// The audit record (docs/store.md, Audit): one row per write through a
// management API, appended after the write and read newest first.

// Bounds of what one audit record keeps of each text. The values come from
// requests (a path, a client's request id) and must never make the append
// fail or a row grow without limit; longer text is cut, marked with "…".
const (
	maxAuditPath = 2048
	maxAuditText = 256
)

// MaxAuditLimit is the most records one AuditRecords call returns.
const MaxAuditLimit = 1000

// auditText makes s something both databases hold (valid UTF-8, no NUL)
// of at most max bytes. An audit record is evidence: it is kept, however
// odd the request, rather than refused.
func auditText(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= max {
		return s
	}
	cut := max - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// AppendAudit stores one audit record. rec.ID is ignored (the database
// assigns it); a zero rec.Time is the store's clock. Texts that a database
// cannot hold are repaired, long ones cut (see auditText): the append never
// fails because of what a request contained. Its outcome is not what
// WriteStatus reports (see writeAside).
func (s *Store) AppendAudit(ctx context.Context, rec access.AuditRecord) error {
	at := rec.Time.UnixMicro()
	if rec.Time.IsZero() {
		at = s.nowMicros()
	}
	err := s.writeAside(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO audit
			(time, token_id, token_name, role, method, path, org, org_version, request_id, status)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			at, auditText(rec.TokenID, maxAuditText), auditText(rec.TokenName, maxAuditText),
			auditText(string(rec.Role), maxAuditText), auditText(rec.Method, maxAuditText),
			auditText(rec.Path, maxAuditPath), auditText(rec.Org, maxAuditPath), rec.OrgVersion,
			auditText(rec.RequestID, maxAuditText), int64(rec.Status))
		return err
	})
	if err != nil {
		return fmt.Errorf("orgstore: append audit record: %w", err)
	}
	return nil
}

// AuditRecords returns the records q selects, newest first (by time, then
// by id). q.Limit is clamped to 1..MaxAuditLimit. Each read is one indexed
// range scan that stops after the limit: audit_by_org for one organisation,
// audit_by_time for all.
func (s *Store) AuditRecords(ctx context.Context, q access.AuditQuery) ([]access.AuditRecord, error) {
	limit := min(max(q.Limit, 1), MaxAuditLimit)
	var (
		where []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if q.Org != "" {
		where = append(where, "org = "+arg(q.Org))
	}
	if !q.Since.IsZero() {
		where = append(where, "time >= "+arg(q.Since.UnixMicro()))
	}
	if q.Before != 0 {
		// Row-value order, as the ORDER BY: older time, or the same time
		// and a smaller id. A cursor whose record was pruned meanwhile
		// selects nothing (the subquery is NULL): everything older went
		// with it.
		p := arg(q.Before)
		where = append(where, "(time, id) < ((SELECT time FROM audit WHERE id = "+p+"), "+p+")")
	}
	stmt := `SELECT id, time, token_id, token_name, role, method, path, org, org_version, request_id, status FROM audit`
	if len(where) > 0 {
		stmt += " WHERE " + strings.Join(where, " AND ")
	}
	stmt += " ORDER BY time DESC, id DESC LIMIT " + arg(limit)
	rows, err := s.reader.QueryContext(ctx, stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("orgstore: read audit records: %w", err)
	}
	defer rows.Close()
	out := make([]access.AuditRecord, 0, min(limit, 64))
	for rows.Next() {
		var (
			r    access.AuditRecord
			at   int64
			role string
		)
		if err := rows.Scan(&r.ID, &at, &r.TokenID, &r.TokenName, &role, &r.Method, &r.Path, &r.Org,
			&r.OrgVersion, &r.RequestID, &r.Status); err != nil {
			return nil, fmt.Errorf("orgstore: read audit records: %w", err)
		}
		r.Time, r.Role = fromMicros(at), access.Role(role)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("orgstore: read audit records: %w", err)
	}
	return out, nil
}

// pruneBatch bounds the rows one prune transaction deletes, so that a
// first prune of years of records does not hold SQLite's write lock (and
// every API write behind it) for long.
const pruneBatch = 5000

// PruneAudit deletes every audit record older than before, oldest first,
// in transactions of at most pruneBatch rows, and returns how many it
// deleted. The retention's daily run calls it.
func (s *Store) PruneAudit(ctx context.Context, before time.Time) (int64, error) {
	cutoff := before.UnixMicro()
	var total int64
	for {
		var n int64
		err := s.writeAside(ctx, func(tx *sql.Tx) error {
			var err error
			n, err = execAffected(ctx, tx, `DELETE FROM audit WHERE id IN
				(SELECT id FROM audit WHERE time < $1 ORDER BY time, id LIMIT $2)`, []any{cutoff, pruneBatch})
			return err
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("orgstore: prune audit records: %w", err)
		}
		if n < pruneBatch {
			return total, nil
		}
	}
}
