package feedbuild

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/svc-pf/svc-pf/internal/feed"
)

// Manifest is feed.json as `feed build` writes it: DESIGN.md §6.2's
// manifest (the latest snapshot and the deltas after it, oldest first),
// plus CatchUp.
//
// CatchUp lists, when the latest snapshot S was written over an earlier
// version, the deltas S-1 and S (oldest first; S-1 only when it exists):
// delta S is written beside snapshot S, so a client at S-1 or S-2 applies
// one or two small deltas instead of downloading the snapshot. A reader
// that knows only §6.2's shape ignores the field (internal/feed decodes
// feed.json without it) and downloads the snapshot: both are correct.
type Manifest struct {
	feed.Manifest
	CatchUp []feed.Version `json:"catch_up,omitempty"`
}

// DecodeManifest parses and validates feed.json with its catch_up list.
func DecodeManifest(data []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("feed.json: %w", err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks §6.2's rules and that CatchUp is a run of deltas ending
// at the snapshot's version.
func (m *Manifest) Validate() error {
	if err := m.Manifest.Validate(); err != nil {
		return err
	}
	snap := m.Versions[0].Version
	for i, v := range m.CatchUp {
		want := snap - int64(len(m.CatchUp)-1-i)
		switch {
		case v.Type != feed.TypeDelta:
			return fmt.Errorf("feed.json: catch_up version %d is a %s, want a delta", v.Version, v.Type)
		case v.Version != want:
			return fmt.Errorf("feed.json: catch_up names version %d where %d belongs (the deltas up to snapshot %d)", v.Version, want, snap)
		case v.File == "" || strings.ContainsAny(v.File, `/\`) || v.File == "." || v.File == "..":
			return fmt.Errorf("feed.json: catch_up version %d names file %q, which is not a plain file name", v.Version, v.File)
		case len(v.SHA256) != 64 || strings.Trim(v.SHA256, "0123456789abcdef") != "":
			return fmt.Errorf("feed.json: catch_up version %d: sha256 %q is not 64 hex digits", v.Version, v.SHA256)
		case v.Entries < 0:
			return fmt.Errorf("feed.json: catch_up version %d: negative entries", v.Version)
		}
	}
	return nil
}

// files is every file the manifest names.
func (m *Manifest) files() []string {
	var out []string
	for _, v := range m.Versions {
		out = append(out, v.File)
	}
	for _, v := range m.CatchUp {
		out = append(out, v.File)
	}
	return out
}

// Plan is what a client at version have downloads to reach the latest
// version, in order: the deltas after have when the manifest has them all
// (in Versions, or in CatchUp for a client one or two versions before the
// snapshot), else the snapshot and every delta after it. A client at the
// latest version downloads nothing; one ahead of it (a feed rebuilt from
// scratch) starts over from the snapshot.
func (m *Manifest) Plan(have int64) []feed.Version {
	latest, snap := m.Latest(), m.Versions[0].Version
	switch {
	case have == latest:
		return nil
	case have >= snap && have < latest:
		return m.Versions[have-snap+1:]
	case have > 0 && have < snap:
		var run []feed.Version
		for _, v := range m.CatchUp {
			if v.Version > have {
				run = append(run, v)
			}
		}
		if len(run) > 0 && run[0].Version == have+1 {
			return append(run, m.Versions[1:]...)
		}
	}
	return m.Versions
}
