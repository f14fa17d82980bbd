package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExpandEnv(t *testing.T) {
	env := map[string]string{"HOST": "db.example", "EMPTY": "", "PASS": "s3cr#t"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	tests := []struct {
		name, in, want string
		wantErr        string // every line of the error, joined by "; "
	}{
		{name: "plain", in: "url: ${HOST}\n", want: "url: db.example\n"},
		{name: "default unused", in: "url: ${HOST:-x}\n", want: "url: db.example\n"},
		{name: "default for unset", in: "url: ${NOPE:-x:5}\n", want: "url: x:5\n"},
		{name: "default for empty", in: "url: ${EMPTY:-x}\n", want: "url: x\n"},
		{name: "empty default", in: "url: '${NOPE:-}'\n", want: "url: ''\n"},
		{name: "set to empty is empty", in: "url: '${EMPTY}'\n", want: "url: ''\n"},
		{name: "bare dollar kept", in: "p: pa$word $HOST\n", want: "p: pa$word $HOST\n"},
		{name: "value with hash", in: "p: ${PASS}\n", want: "p: s3cr#t\n"},
		{name: "unset", in: "a: 1\nurl: ${DB_PASSWORD}\n", wantErr: "line 2: ${DB_PASSWORD} is not set (set it, or write ${DB_PASSWORD:-default})"},
		{name: "every unset named", in: "a: ${A1}\nb: ${B2} ${HOST} ${C3}\n",
			wantErr: "line 1: ${A1} is not set (set it, or write ${A1:-default})\nline 2: ${B2} is not set (set it, or write ${B2:-default})\nline 2: ${C3} is not set (set it, or write ${C3:-default})"},
		{name: "comment line ignored", in: "# url: ${NOPE}\na: 1\n", want: "# url: ${NOPE}\na: 1\n"},
		{name: "indented comment ignored", in: "x:\n  # ${NOPE}\n  y: ${HOST}\n", want: "x:\n  # ${NOPE}\n  y: db.example\n"},
		{name: "trailing comment ignored", in: "a: ${HOST} # was ${NOPE}\n", want: "a: db.example # was ${NOPE}\n"},
		{name: "hash in a word is no comment", in: "a: x#${NOPE}\n", wantErr: "line 1: ${NOPE} is not set"},
		{name: "hash in double quotes", in: "a: \"x # ${NOPE}\"\n", wantErr: "line 1: ${NOPE} is not set"},
		{name: "hash in single quotes", in: "a: 'x # ${HOST}' # ${NOPE}\n", want: "a: 'x # db.example' # ${NOPE}\n"},
		{name: "escaped quote", in: "a: \"x\\\" # ${HOST}\"\n", want: "a: \"x\\\" # db.example\"\n"},
		{name: "no final newline", in: "a: ${HOST}", want: "a: db.example"},
		{name: "unterminated reference kept", in: "a: ${HOST\n", want: "a: ${HOST\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ExpandEnv(tt.in, lookup)
			if tt.wantErr != "" {
				var ue *UnsetError
				if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ExpandEnv(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

// TestLoadUnsetVariable: the operator reads the file, the line and the
// variable, and how to fix it, in one message.
func TestLoadUnsetVariable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	body := strings.Repeat("# comment ${ALSO_UNSET}\n", 11) + "database:\n  url: ${SVCPF_TEST_UNSET_DB_PASSWORD}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s := defaults()
	err := Load(path, true, &s)
	want := "config " + path + ": line 13: ${SVCPF_TEST_UNSET_DB_PASSWORD} is not set (set it, or write ${SVCPF_TEST_UNSET_DB_PASSWORD:-default})"
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v\nwant %s", err, want)
	}
	if s != defaults() {
		t.Fatalf("a refused file changed the config: %+v", s)
	}
}

func FuzzExpandEnv(f *testing.F) {
	f.Add("${A} ${B:-x} $C ${")
	f.Add("a: ${SET} # ${UNSET}\n'#' \"${SET}\" ${EMPTY:-d}\n")
	f.Add("k: 'x # ${UNSET}'\n# ${UNSET}\n")
	f.Add("\"\\\"#${SET}\n")
	env := map[string]string{"SET": "v", "EMPTY": ""}
	f.Fuzz(func(t *testing.T, s string) {
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		out, err := ExpandEnv(s, lookup)
		if err != nil {
			var ue *UnsetError
			if !errors.As(err, &ue) || len(ue.Refs) == 0 {
				t.Fatalf("error %v is not an UnsetError with references", err)
			}
			for _, r := range ue.Refs {
				if r.Line < 1 || r.Line > strings.Count(s, "\n")+1 || !strings.Contains(s, "${"+r.Name+"}") {
					t.Fatalf("reference %+v is not in the input %q", r, s)
				}
			}
			return
		}
		if !strings.Contains(s, "${") && out != s {
			t.Fatalf("text without references changed: %q → %q", s, out)
		}
		// Expansion works line by line: the line count only changes
		// through a value, and none here holds a newline.
		if strings.Count(out, "\n") != strings.Count(s, "\n") {
			t.Fatalf("line count changed: %q → %q", s, out)
		}
		// Everything outside references is kept: with every variable
		// empty, the output is no longer than the input.
		if len(out) > len(s) {
			t.Fatalf("output longer than the input without long values: %q → %q", s, out)
		}
	})
}
