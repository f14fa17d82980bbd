package main

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPackageHasDoc: every package of the repository says what it is
// in a package comment (go doc shows it first), in a doc.go or above one
// file's package clause.
func TestEveryPackageHasDoc(t *testing.T) {
	root := filepath.Join("..", "..")
	documented := map[string]bool{} // directory → a file has a package comment
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "data") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		documented[dir] = documented[dir] || f.Doc != nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(documented) < 10 {
		t.Fatalf("found %d packages under %s: not the repository?", len(documented), root)
	}
	for dir, ok := range documented {
		if !ok {
			t.Errorf("package %s has no package comment (add a doc.go)", dir)
		}
	}
}
