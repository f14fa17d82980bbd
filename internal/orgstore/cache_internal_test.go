package orgstore

import (
	"net/netip"
	"testing"
)

func TestOverrideCacheRules(t *testing.T) {
	c := newOverrideCache(2)
	a, b, d := netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("11.0.0.0/8"), netip.MustParsePrefix("12.0.0.0/8")
	_, ok, gen := c.get("o", a)
	if ok {
		t.Fatal("hit in an empty cache")
	}
	c.invalidate("other") // a write committed while the read ran
	c.put("o", a, View{Version: 1}, gen)
	if _, ok, _ := c.get("o", a); ok {
		t.Fatal("a read that overlapped a write was cached")
	}
	_, _, gen = c.get("o", a)
	c.put("o", a, View{Version: 2}, gen)
	if v, ok, _ := c.get("o", a); !ok || v.Version != 2 {
		t.Fatalf("get = %+v, %v", v, ok)
	}
	c.put("o", b, View{Version: 2}, gen)
	c.put("o", d, View{Version: 2}, gen) // over the bound: starts over
	if c.size > c.max {
		t.Fatalf("size %d over max %d", c.size, c.max)
	}
	c.invalidate("o")
	if _, ok, _ := c.get("o", d); ok || c.size != 0 {
		t.Fatalf("invalidate left entries (size %d)", c.size)
	}
	var off *overrideCache // disabled: every call is a no-op
	off.put("o", a, View{}, 0)
	off.invalidate("o")
	if _, ok, _ := off.get("o", a); ok {
		t.Fatal("disabled cache hit")
	}
}
