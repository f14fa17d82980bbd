package store_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/svc-pf/svc-pf/internal/activity"
)

func TestDirDuplicateInOneCall(t *testing.T) {
	s := openDir(t, filepath.Join(t.TempDir(), "a"), day0.Add(time.Hour))
	a := testBatch("n1", 5, day0.Add(time.Minute), time.Millisecond, 10, 2)
	b := testBatch("n1", 5, day0.Add(time.Minute), time.Millisecond, 1, 2)
	n, err := s.WriteBatches(context.Background(), []*activity.Batch{a, b})
	if err != nil || n != 10 {
		t.Fatalf("stored %d, %v; want 10", n, err)
	}
}
