package resolver

import (
	"context"
	"testing"
	"time"
)

// TestUncancelled: what forward hands the forwarders keeps the caller's
// deadline (Exchange bounds itself by it) but not its cancellation (so
// Exchange need not watch it).
func TestUncancelled(t *testing.T) {
	t.Run("deadline kept", func(t *testing.T) {
		want := time.Now().Add(time.Hour)
		ctx, cancel := context.WithDeadline(context.Background(), want)
		u := uncancelled(ctx)
		cancel()
		if d, ok := u.Deadline(); !ok || !d.Equal(want) {
			t.Errorf("deadline %v, %v; want %v", d, ok, want)
		}
		if u.Done() != nil || u.Err() != nil {
			t.Errorf("Done %v, Err %v after the parent was cancelled: want nil, nil", u.Done(), u.Err())
		}
	})
	t.Run("no deadline", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		u := uncancelled(ctx)
		cancel()
		if _, ok := u.Deadline(); ok {
			t.Error("a deadline appeared")
		}
		if u.Done() != nil || u.Err() != nil {
			t.Errorf("Done %v, Err %v after the parent was cancelled: want nil, nil", u.Done(), u.Err())
		}
	})
	t.Run("values kept", func(t *testing.T) {
		type key struct{}
		ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Hour)
		defer cancel()
		if v := uncancelled(ctx).Value(key{}); v != "v" {
			t.Errorf("value %v, want v", v)
		}
	})
}

// TestQueryContext: a slow-path query's context carries its deadline and
// nothing to cancel, and forward hands it on as it is.
func TestQueryContext(t *testing.T) {
	start := time.Now()
	ctx := queryContext(start)
	if d, ok := ctx.Deadline(); !ok || !d.Equal(start.Add(queryTimeout)) {
		t.Errorf("deadline %v, %v; want %v", d, ok, start.Add(queryTimeout))
	}
	if ctx.Done() != nil || ctx.Err() != nil {
		t.Errorf("Done %v, Err %v: want nil, nil", ctx.Done(), ctx.Err())
	}
	if u := uncancelled(ctx); u != ctx {
		t.Errorf("uncancelled wrapped a context that cannot be cancelled: %#v", u)
	}
}
