package natsbus

import (
	"errors"
	"strings"
	"testing"

	"github.com/svc-pf/svc-pf/internal/filelock"
)

// TestEmbeddedLocksItsStore: a second embedded server over one JetStream
// store is refused while the first runs, and starts once it is down.
func TestEmbeddedLocksItsStore(t *testing.T) {
	dir := t.TempDir()
	srv, err := StartEmbedded(EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = StartEmbedded(EmbeddedConfig{StoreDir: dir})
	if !errors.Is(err, filelock.ErrLocked) || !strings.Contains(err.Error(), "JetStream store directory") {
		t.Fatalf("second server on one store: %v, want a lock error naming the store", err)
	}
	srv.Shutdown()
	srv.Shutdown() // idempotent
	srv2, err := StartEmbedded(EmbeddedConfig{StoreDir: dir})
	if err != nil {
		t.Fatalf("restart after shutdown: %v", err)
	}
	srv2.Shutdown()
}
