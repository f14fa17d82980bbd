// Package sqlmigrate reads a store's schema migrations: embedded SQL files
// named NNNN_description.sql, one directory per dialect or kind of
// database. The stores that own them (orgstore, the activity store) apply
// them their own way, in a transaction they control, and record what they
// applied; this package only gives both the one rule for what a migration
// file is.
package sqlmigrate

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one file: its version (the NNNN), its file name and its
// SQL.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Load reads dir's NNNN_description.sql files in version order; a file
// named otherwise, or two files of one version, is an error (what the
// stores record is the version: two files of one would leave one
// unapplied).
func Load(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrations %s: %w", dir, err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s/%s: name must be NNNN_description.sql", dir, name)
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("migration %s/%s: %w", dir, name, err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(body)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i := 1; i < len(out); i++ {
		if out[i].Version == out[i-1].Version {
			return nil, fmt.Errorf("migrations %s and %s share version %d", out[i-1].Name, out[i].Name, out[i].Version)
		}
	}
	return out, nil
}
