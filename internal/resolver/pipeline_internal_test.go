package resolver

import (
	"testing"
	"time"
)

// TestQueryContext: a slow-path query's context carries its deadline
// (Exchange bounds itself by it) and nothing to cancel (so Exchange need
// not watch it).
func TestQueryContext(t *testing.T) {
	start := time.Now()
	ctx := queryContext(start)
	if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(queryTimeout)) {
		t.Errorf("deadline %v, %v; want %v", d, ok, start.Add(queryTimeout))
	}
	if ctx.Done() != nil || ctx.Err() != nil {
		t.Errorf("Done %v, Err %v: want nil, nil", ctx.Done(), ctx.Err())
	}
}
