package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type sample struct {
	HTTP struct {
		Address string `yaml:"address"`
	} `yaml:"http"`
	Database struct {
		URL string `yaml:"url"`
	} `yaml:"database"`
	Interval time.Duration `yaml:"interval"`
	Workers  int           `yaml:"workers"`
}

func defaults() sample {
	var s sample
	s.HTTP.Address = "127.0.0.1:8080"
	s.Database.URL = "sqlite:data/x.db"
	s.Workers = 4
	return s
}

func TestDecode(t *testing.T) {
	t.Setenv("SVCPF_TEST_DB", "postgres://db/x")
	tests := []struct {
		name    string
		yaml    string
		check   func(sample) bool
		wantErr string
	}{
		{name: "empty keeps defaults", yaml: "", check: func(s sample) bool { return s == defaults() }},
		{name: "partial", yaml: "http:\n  address: 0.0.0.0:9\n", check: func(s sample) bool {
			return s.HTTP.Address == "0.0.0.0:9" && s.Database.URL == "sqlite:data/x.db" && s.Workers == 4
		}},
		{name: "env", yaml: "database:\n  url: ${SVCPF_TEST_DB}\n", check: func(s sample) bool { return s.Database.URL == "postgres://db/x" }},
		{name: "env default", yaml: "database:\n  url: ${SVCPF_UNSET_VAR:-sqlite:y.db}\n", check: func(s sample) bool { return s.Database.URL == "sqlite:y.db" }},
		{name: "bare dollar kept", yaml: "database:\n  url: postgres://u:pa$word@h/d\n", check: func(s sample) bool { return s.Database.URL == "postgres://u:pa$word@h/d" }},
		{name: "duration", yaml: "interval: 1m30s\n", check: func(s sample) bool { return s.Interval == 90*time.Second }},
		{name: "unknown key named", yaml: "http:\n  adress: x\n", wantErr: `line 2: unknown key "adress"`},
		{name: "unknown top key", yaml: "databse: {}\n", wantErr: `unknown key "databse"`},
		{name: "wrong type", yaml: "workers: many\n", wantErr: "cannot unmarshal"},
		{name: "two documents", yaml: "workers: 1\n---\nworkers: 2\n", wantErr: "more than one"},
		{name: "syntax", yaml: "http: [\n", wantErr: "yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := defaults()
			err := Decode([]byte(tt.yaml), &s)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !tt.check(s) {
				t.Fatalf("got %+v, %v", s, err)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.yaml")
	s := defaults()
	if err := Load(missing, false, &s); err != nil || s != defaults() {
		t.Fatalf("missing default file: %v, %+v", err, s)
	}
	if err := Load(missing, true, &s); err == nil {
		t.Fatal("a missing file named with -c must be an error")
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte("bogus: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Load(path, true, &s); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"bogus"`) {
		t.Fatalf("err = %v, want the path and the key", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("http:\n  address: x\n"))
	f.Add([]byte("workers: ${X:-3}\n"))
	f.Add([]byte("[[[\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := defaults()
		_ = Decode(data, &s) // must not panic
	})
}
