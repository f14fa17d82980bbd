package orgstore

import "context"

// BreakWriterForTest makes the store's write connection refuse writes the
// way a connection opened on a read-only database does, without touching
// the file: SQLite's query_only on the single writer connection,
// PostgreSQL's default_transaction_read_only on a pool narrowed to one
// connection (so the session setting is the one writes meet).
func BreakWriterForTest(ctx context.Context, s *Store) error {
	if s.dialect == DialectPostgres {
		s.writer.SetMaxOpenConns(1)
		_, err := s.writer.ExecContext(ctx, `SET SESSION default_transaction_read_only = on`)
		return err
	}
	_, err := s.writer.ExecContext(ctx, `PRAGMA query_only = 1`)
	return err
}
