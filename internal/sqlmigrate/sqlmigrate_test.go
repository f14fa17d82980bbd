package sqlmigrate_test

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/svc-pf/svc-pf/internal/sqlmigrate"
)

// TestLoad: files come in version order, whatever their listing order;
// other files are passed over; a misnamed file or two of one version is
// an error naming them.
func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{
		"m/0010_later.sql": {Data: []byte("B")},
		"m/0002_first.sql": {Data: []byte("A")},
		"m/README.md":      {Data: []byte("not a migration")},
	}
	ms, err := sqlmigrate.Load(fsys, "m")
	if err != nil || len(ms) != 2 || ms[0].Version != 2 || ms[0].SQL != "A" || ms[1].Name != "0010_later.sql" {
		t.Fatalf("%+v, %v", ms, err)
	}
	for name, bad := range map[string]fstest.MapFS{
		"0002_first.sql":  {"m/0002_first.sql": {}, "m/0002_again.sql": {}},
		"first.sql":       {"m/first.sql": {}},
		"0000_zero.sql":   {"m/0000_zero.sql": {}},
		"migrations none": {},
	} {
		if _, err := sqlmigrate.Load(bad, "m"); err == nil || (name != "migrations none" && !strings.Contains(err.Error(), name)) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
