package app

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestLogConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		cfg  LogConfig
		want string
	}{
		{LogConfig{Level: "info"}, ""},
		{LogConfig{Level: "debug", Format: "json"}, ""},
		{LogConfig{Level: "warn", Format: "text"}, ""},
		{LogConfig{Level: "info", Format: "xml"}, `log.format "xml": want text or json`},
		{LogConfig{Level: "loud", Format: "JSON"}, `log.level "loud": want debug, info, warn or error` + "\n" + `log.format "JSON": want text or json`},
	} {
		err := tt.cfg.validate()
		if got := ""; err != nil {
			got = err.Error()
			if got != tt.want {
				t.Errorf("%+v: %q, want %q", tt.cfg, got, tt.want)
			}
		} else if tt.want != "" {
			t.Errorf("%+v: accepted, want %q", tt.cfg, tt.want)
		}
	}
}

// TestLoggingFormatsAndLevels: json writes JSON lines, text key=value;
// SetLevel changes what is written; --debug keeps debug.
func TestLoggingFormatsAndLevels(t *testing.T) {
	var buf bytes.Buffer
	lg := NewLogging(&buf, LogConfig{Level: "warn", Format: "json"}, false)
	lg.Logger.Info("hidden")
	lg.Logger.With("service", "x").Warn("shown", "k", 1)
	lg.SetLevel("debug")
	lg.Logger.With("service", "x").Debug("now shown")
	recs := jsonLines(t, buf.String())
	if len(recs) != 2 || recs[0]["msg"] != "shown" || recs[0]["service"] != "x" || recs[1]["msg"] != "now shown" || recs[1]["level"] != "DEBUG" {
		t.Fatalf("json logs: %q", buf.String())
	}

	buf.Reset()
	lg = NewLogging(&buf, LogConfig{Level: "error"}, true)
	lg.Logger.Debug("debug under --debug")
	if lg.SetLevel("error") != slog.LevelDebug || !lg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("--debug did not keep debug")
	}
	if !strings.Contains(buf.String(), `level=DEBUG msg="debug under --debug"`) {
		t.Fatalf("text logs: %q", buf.String())
	}
}
