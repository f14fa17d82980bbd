// Package config reads the YAML configuration file each svc-pf command loads
// once at start-up, before any service is built. Files are strict (an unknown
// key is an error naming it), `${NAME}` references are expanded from the
// environment (an unset one without a default is an error naming it and its
// line), and whatever a file leaves out keeps the caller's defaults. The
// commands' `check` runs the same Load as their start, and SIGHUP reloads
// read the file through it again.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load decodes the file at path into dst, which must already hold the
// defaults. A missing file is an error only when required (a path the
// operator named); otherwise dst keeps its defaults.
func Load(path string, required bool, dst any) error {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !required {
		return nil
	}
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := Decode(data, dst); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// Decode expands environment references in data and decodes it strictly into
// dst. An empty document leaves dst unchanged.
func Decode(data []byte, dst any) error {
	expanded, err := ExpandEnv(string(data), os.LookupEnv)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader([]byte(expanded)))
	dec.KnownFields(true)
	if err := dec.Decode(dst); err != nil && !errors.Is(err, io.EOF) {
		return cleanError(err)
	}
	// A second document would be silently ignored; refuse it instead.
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document")
	}
	return nil
}

// cleanError rewrites yaml's "field x not found in type pkg.T" into a message
// that names the key the operator wrote.
func cleanError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	msgs := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		if i := strings.Index(e, "field "); i >= 0 && strings.Contains(e, " not found in type ") {
			key := e[i+len("field "):]
			key = key[:strings.Index(key, " not found in type ")]
			e = e[:i] + fmt.Sprintf("unknown key %q", key)
		}
		msgs = append(msgs, e)
	}
	return errors.New(strings.Join(msgs, "; "))
}
