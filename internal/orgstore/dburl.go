package orgstore

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// Dialect names, as returned by Store.Dialect.
const (
	DialectSQLite   = "sqlite"
	DialectPostgres = "postgres"
)

// target is a parsed Config.URL.
type target struct {
	dialect string
	// path is the SQLite database file, exactly as written after "sqlite:".
	path string
	// pg is the PostgreSQL connection URL, validated by pgx.
	pg string
}

// parseURL splits a database.url value into its dialect and target. It never
// echoes a PostgreSQL URL back in an error: the URL may carry a password.
func parseURL(raw string) (target, error) {
	if raw == "" {
		return target{}, errors.New("database URL is empty (want sqlite:PATH or postgres://…)")
	}
	scheme, rest, ok := strings.Cut(raw, ":")
	if !ok {
		return target{}, errors.New("database URL has no scheme (want sqlite:PATH or postgres://…)")
	}
	switch strings.ToLower(scheme) {
	case "sqlite":
		return parseSQLitePath(rest)
	case "postgres", "postgresql":
		if !strings.HasPrefix(rest, "//") {
			return target{}, errors.New("postgres database URL must have the form postgres://[user[:password]@]host[:port]/dbname[?options]")
		}
		if _, err := pgx.ParseConfig(raw); err != nil {
			// pgx redacts the password in its parse errors.
			return target{}, fmt.Errorf("invalid postgres database URL: %w", err)
		}
		return target{dialect: DialectPostgres, pg: raw}, nil
	default:
		if !utf8.ValidString(scheme) || len(scheme) > 32 {
			return target{}, errors.New("unsupported database URL scheme (want sqlite:PATH or postgres://…)")
		}
		return target{}, fmt.Errorf("unsupported database URL scheme %q (want sqlite:PATH or postgres://…)", scheme)
	}
}

func parseSQLitePath(path string) (target, error) {
	switch {
	case path == "":
		return target{}, errors.New("sqlite database URL has an empty path (want sqlite:PATH, e.g. sqlite:data/orgmanager.db)")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		// The store opens a writer and a reader pool on the same file; an
		// in-memory database would give each connection its own database.
		return target{}, errors.New("sqlite database URL must name a file: in-memory and file: URI databases are not supported")
	case strings.ContainsRune(path, '?'):
		// The driver would cut the path at '?' and read the rest as options;
		// refusing is clearer than creating a file named differently.
		return target{}, errors.New("sqlite database path must not contain '?': the store sets its own connection options")
	case strings.ContainsRune(path, 0):
		return target{}, errors.New("sqlite database path must not contain a NUL byte")
	case !utf8.ValidString(path):
		return target{}, errors.New("sqlite database path is not valid UTF-8")
	}
	return target{dialect: DialectSQLite, path: path}, nil
}

// sqliteURIPath escapes an absolute file path for a SQLite "file:" URI, whose
// path part is percent-decoded by SQLite and ends at '?' or '#'.
func sqliteURIPath(abs string) string {
	var b strings.Builder
	for i := 0; i < len(abs); i++ {
		switch c := abs[i]; c {
		case '%', '?', '#':
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
