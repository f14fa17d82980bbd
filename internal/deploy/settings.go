package deploy

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/svc-pf/svc-pf/internal/orgstore"
	"github.com/svc-pf/svc-pf/internal/settings"
)

// SettingsKV is the settings bucket as the deploy writes it
// (natsbus.KV implements it).
type SettingsKV interface {
	Put(ctx context.Context, key string, value []byte) error
	Delete(ctx context.Context, key string) error
	// Keys lists the live keys matching a subject filter, completely or
	// with an error.
	Keys(ctx context.Context, filter string) ([]string, error)
}

// settingsDeploys is the settings part of a deploy: it makes the settings
// bucket hold exactly an organisation's stored documents, under the keys of
// settings.Key, and the global document under settings.GlobalKey.
type settingsDeploys struct {
	kv             SettingsKV
	store          Store
	publishTimeout time.Duration
	metrics        *metrics

	mu sync.Mutex
	// held maps an organisation to what the bucket holds of it (key →
	// canonical document) after its last deploy; absent until the first
	// deploy since start, which then lists the bucket's keys.
	held map[string]map[string]string
}

func (s *settingsDeploys) deploy(ctx context.Context, org string, full bool, view orgstore.View) error {
	ctx, cancel := context.WithTimeout(ctx, s.publishTimeout)
	defer cancel()
	want := make(map[string]string, len(view.Settings))
	for _, d := range view.Settings {
		want[settings.Key(org, d.Scope)] = string(d.Doc)
	}
	s.mu.Lock()
	held, known := s.held[org]
	s.mu.Unlock()
	if !known || full {
		// What the bucket holds is unknown (a restart, another writer, a
		// lost message): every wanted document is written and every other
		// key of the organisation removed.
		keys, err := s.kv.Keys(ctx, settings.OrgKeyFilter(org))
		if err != nil {
			return fmt.Errorf("settings of %s: %w", org, err)
		}
		held = make(map[string]string, len(keys))
		for _, k := range keys {
			held[k] = "" // never equal to a document: rewritten when wanted
		}
	}
	for k, doc := range want {
		if held[k] == doc {
			continue
		}
		if err := s.kv.Put(ctx, k, []byte(doc)); err != nil {
			return fmt.Errorf("settings of %s: %w", org, err)
		}
		s.metrics.settingsPut.Inc()
	}
	for k := range held {
		if _, ok := want[k]; ok {
			continue
		}
		if err := s.kv.Delete(ctx, k); err != nil {
			return fmt.Errorf("settings of %s: %w", org, err)
		}
		s.metrics.settingsDeleted.Inc()
	}
	s.mu.Lock()
	s.held[org] = want // built for this deploy alone, so kept as it is
	s.mu.Unlock()
	return nil
}

// clean removes every document of a deleted organisation.
func (s *settingsDeploys) clean(ctx context.Context, org string) error {
	ctx, cancel := context.WithTimeout(ctx, s.publishTimeout)
	defer cancel()
	keys, err := s.kv.Keys(ctx, settings.OrgKeyFilter(org))
	if err != nil {
		return fmt.Errorf("settings of deleted %s: %w", org, err)
	}
	for _, k := range keys {
		if err := s.kv.Delete(ctx, k); err != nil {
			return fmt.Errorf("settings of deleted %s: %w", org, err)
		}
		s.metrics.settingsDeleted.Inc()
	}
	s.mu.Lock()
	delete(s.held, org)
	s.mu.Unlock()
	return nil
}

// deployGlobal writes the global document (or removes it) and returns the
// global version it deployed.
func (s *settingsDeploys) deployGlobal(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.publishTimeout)
	defer cancel()
	g, err := s.store.GlobalSettings(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the global settings: %w", err)
	}
	if g.Doc == nil {
		err = s.kv.Delete(ctx, settings.GlobalKey)
	} else {
		err = s.kv.Put(ctx, settings.GlobalKey, g.Doc)
	}
	if err != nil {
		return 0, fmt.Errorf("global settings: %w", err)
	}
	return g.Version, nil
}
