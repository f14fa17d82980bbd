package luapool

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// wrapModule's "body" built-in returns a fresh simulate-like body whose
// "settings" part is shared from call to call, as the simulator's rendered
// document is.
func wrapModule(shared map[string]any) Module {
	return Module{
		"body": func(context.Context, []any) (any, error) {
			return map[string]any{
				"domain": "example.com", "verdict": "block", "code": 7, "missing": nil,
				"identity":   map[string]any{"by": "ip", "org": "acme", "profile": nil},
				"categories": []any{map[string]any{"code": 3, "title": "malware"}, map[string]any{"code": 9, "title": "ads"}},
				"layers":     []any{"global", "org:acme"},
				"settings":   shared,
				"empty":      []any{},
			}, nil
		},
		"echo": func(_ context.Context, args []any) (any, error) { return args[0], nil },
	}
}

func sharedDoc() map[string]any {
	return map[string]any{"filtering": true, "blocked_categories": []any{int64(3)}, "allowlist": []any{}}
}

// TestWrappedResultPassesThrough: the default entry file's shape converts
// nothing: Call returns the built-in's own map.
func TestWrappedResultPassesThrough(t *testing.T) {
	var made map[string]any
	p := newTestPool(t, Config{Modules: map[string]Module{"svcpf": {
		"body": func(context.Context, []any) (any, error) {
			made = map[string]any{"domain": "example.com", "n": 3, "nested": map[string]any{"x": []string{"a"}}}
			return made, nil
		},
	}}}, `local m = require("svcpf"); function f() return m.body() end`)
	v, err := p.Call(context.Background(), "f", nil)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := v.(map[string]any)
	if !ok || reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(made).UnsafePointer() {
		t.Fatalf("got %#v, want the built-in's own map", v)
	}
}

// TestWrappedResultInScripts: what a script does with a built-in's result
// reads and changes it as a table would be; the shared part is never
// written.
func TestWrappedResultInScripts(t *testing.T) {
	shared := sharedDoc()
	p := newTestPool(t, Config{Modules: map[string]Module{"svcpf": wrapModule(shared)}}, `
local m = require("svcpf")
function read()
  local r = m.body()
  return {domain = r.domain, code = r.code, org = r.identity.org, n = #r.categories,
    title = r.categories[2].title, layers = table.concat(r.layers, ","), missing = r.missing == nil,
    nope = r.nope == nil, num = r[1] == nil, same = r.identity == r.identity,
    t = type(r), tid = type(r.identity), tl = type(r.layers), filtering = r.settings.filtering,
    mt = getmetatable(r), s = tostring(r), len = #r, empty = #r.empty}
end
function modify()
  local r = m.body()
  r.vhost = "edge"                 -- added
  r.verdict = nil                  -- deleted
  r.identity.org = "other"         -- nested change
  r.categories[1].code = 4         -- change inside an array's object
  table.insert(r.layers, "username:alice")
  r.settings.filtering = false     -- must not reach the shared document
  r.extra = {list = {1, 2}, obj = r.identity}
  return r
end
function iterate()
  local r = m.body()
  r.added = 1
  r.domain = nil
  local keys = {}
  for k, v in pairs(r) do keys[#keys + 1] = k .. "=" .. type(v) end
  local nk = 0
  local k = next(r)
  while k do nk = nk + 1; k = next(r, k) end
  local sum = 0
  for i, c in ipairs(r.categories) do sum = sum + i * c.code end
  local tk = {}
  for k in pairs({a = 1}) do tk[#tk + 1] = k end
  return {keys = table.concat(keys, " "), nk = nk, sum = sum, plain = tk[1]}
end
function mix()
  local r = m.body()
  return {r.identity, {r.categories[1], "x"}, m.echo(r.identity), r.layers}
end
function cycle()
  local r = m.body()
  r.self = r
  return r
end
function keyed() local r = m.body(); r[1] = 2; return r end
function setmt() local r = m.body(); setmetatable(r, {}); return r end
function raw() local r = m.body(); return rawget(r, "domain") end
function replace() local r = m.body(); r.identity = nil; r.categories = "none"; return r end
`)
	ctx := context.Background()
	call := func(fn string) map[string]any {
		t.Helper()
		v, err := p.Call(ctx, fn, nil)
		if err != nil {
			t.Fatalf("%s: %v", fn, err)
		}
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: %#v", fn, v)
		}
		return m
	}
	want := map[string]any{
		"domain": "example.com", "code": int64(7), "org": "acme", "n": int64(2), "title": "ads",
		"layers": "global,org:acme", "missing": true, "nope": true, "num": true, "same": true,
		"t": "userdata", "tid": "userdata", "tl": "table", "filtering": true,
		"mt": wrapTypeName, "s": wrapTypeName, "len": int64(0), "empty": int64(0),
	}
	if got := call("read"); !reflect.DeepEqual(got, want) {
		t.Errorf("read:\n got %v\nwant %v", got, want)
	}

	got := call("modify")
	b, _ := json.Marshal(got)
	for _, s := range []string{`"vhost":"edge"`, `"org":"other"`, `{"code":4,"title":"malware"}`,
		`"layers":["global","org:acme","username:alice"]`, `"filtering":false`,
		`"extra":{"list":[1,2],"obj":{"by":"ip","org":"other","profile":null}}`, `"empty":[]`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("modify: %s lacks %s", b, s)
		}
	}
	if _, ok := got["verdict"]; ok {
		t.Errorf("modify: verdict not deleted: %s", b)
	}
	if !reflect.DeepEqual(shared, sharedDoc()) {
		t.Errorf("the shared document was written: %v", shared)
	}

	want = map[string]any{
		"keys": "added=number categories=table code=number empty=table identity=userdata layers=table settings=userdata verdict=string",
		"nk":   int64(8), "sum": int64(1*3 + 2*9), "plain": "a",
	}
	if got := call("iterate"); !reflect.DeepEqual(got, want) {
		t.Errorf("iterate:\n got %v\nwant %v", got, want)
	}

	v, err := p.Call(ctx, "mix", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = json.Marshal(v)
	if s := `[{"by":"ip","org":"acme","profile":null},[{"code":3,"title":"malware"},"x"],{"by":"ip","org":"acme","profile":null},["global","org:acme"]]`; string(b) != s {
		t.Errorf("mix: %s, want %s", b, s)
	}

	if _, err := p.Call(ctx, "cycle", nil); err == nil || !strings.Contains(err.Error(), "contains itself") {
		t.Errorf("cycle: %v", err)
	}
	if _, err := p.Call(ctx, "keyed", nil); err == nil || !strings.Contains(err.Error(), "keys are strings") {
		t.Errorf("keyed: %v", err)
	}
	if _, err := p.Call(ctx, "setmt", nil); err == nil || !strings.Contains(err.Error(), "protected metatable") {
		t.Errorf("setmetatable: %v", err)
	}
	if _, err := p.Call(ctx, "raw", nil); err == nil || !strings.Contains(err.Error(), "table expected") {
		t.Errorf("rawget: %v", err)
	}
	got = call("replace")
	if _, ok := got["identity"]; ok || got["categories"] != "none" {
		t.Errorf("replace: %v", got)
	}
}

// TestWrappedRawJSON: a json.RawMessage in a built-in's result is decoded
// only when the script reads it, and comes back as is when it does not.
func TestWrappedRawJSON(t *testing.T) {
	raw := json.RawMessage(`{"filtering":true,"list":[1,2],"n":{"x":"y"}}`)
	p := newTestPool(t, Config{Modules: map[string]Module{"svcpf": {
		"body": func(context.Context, []any) (any, error) { return map[string]any{"doc": raw, "k": "v"}, nil },
	}}}, `
local m = require("svcpf")
function untouched() local r = m.body(); local k = r.k; return r end
function read() local r = m.body(); return {f = r.doc.filtering, n = #r.doc.list, x = r.doc.n.x} end
function change() local r = m.body(); r.doc.filtering = false; table.insert(r.doc.list, 3); return r end
`)
	ctx := context.Background()
	v, err := p.Call(ctx, "untouched", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := v.(map[string]any)["doc"].(json.RawMessage); !ok || string(got) != string(raw) {
		t.Errorf("untouched: %#v", v)
	}
	if v, err = p.Call(ctx, "read", nil); err != nil || !reflect.DeepEqual(v, map[string]any{"f": true, "n": int64(2), "x": "y"}) {
		t.Errorf("read: %#v %v", v, err)
	}
	v, err = p.Call(ctx, "change", nil)
	b, _ := json.Marshal(v)
	if err != nil || string(b) != `{"doc":{"filtering":false,"list":[1,2,3],"n":{"x":"y"}},"k":"v"}` {
		t.Errorf("change: %s %v", b, err)
	}
	if string(raw) != `{"filtering":true,"list":[1,2],"n":{"x":"y"}}` {
		t.Errorf("the shared JSON was written: %s", raw)
	}
}

// testObject is an Object that is not a map: its fields are made when read.
type testObject struct{ reads int }

func (o *testObject) Field(key string) (any, bool) {
	o.reads++
	switch key {
	case "domain":
		return "example.com", true
	case "nested":
		return json.RawMessage(`{"x":["a","b"],"n":2}`), true
	}
	return nil, false
}

func (o *testObject) Keys() []string { return []string{"domain", "nested"} }

// TestObjectResult: an Object result enters Lua as a map would, comes back
// as itself when the script changes nothing (not one field read), and as a
// map of its fields with the script's changes otherwise.
func TestObjectResult(t *testing.T) {
	var made *testObject
	p := newTestPool(t, Config{Modules: map[string]Module{"svcpf": {
		"obj": func(context.Context, []any) (any, error) { made = &testObject{}; return made, nil },
	}}}, `local m = require("svcpf")
function same() return m.obj() end
function read()
  local o = m.obj()
  local keys = {}
  for k in pairs(o) do keys[#keys + 1] = k end
  return {domain = o.domain, x2 = o.nested.x[2], n = #o.nested.x, keys = table.concat(keys, ","), missing = o.nope == nil}
end
function change() local o = m.obj(); o.vhost = "edge"; o.nested.n = 3; o.domain = nil; return o end`)
	ctx := context.Background()
	v, err := p.Call(ctx, "same", nil)
	if err != nil || v != any(made) || made.reads != 0 {
		t.Fatalf("same: %#v, %v (%d reads), want the built-in's own object, unread", v, err, made.reads)
	}
	v, err = p.Call(ctx, "read", nil)
	want := map[string]any{"domain": "example.com", "x2": "b", "n": int64(2), "keys": "domain,nested", "missing": true}
	if err != nil || !reflect.DeepEqual(v, want) {
		t.Fatalf("read: %#v, %v; want %#v", v, err, want)
	}
	v, err = p.Call(ctx, "change", nil)
	want = map[string]any{"vhost": "edge", "nested": map[string]any{"x": []any{"a", "b"}, "n": int64(3)}}
	if err != nil || !reflect.DeepEqual(v, want) {
		t.Fatalf("change: %#v, %v; want %#v", v, err, want)
	}
}

// TestArgumentTableBack: a built-in handed the call's argument table back
// unchanged gets Call's very map; a changed table (a field set, added or
// removed, a metatable) is converted as before.
func TestArgumentTableBack(t *testing.T) {
	var got map[string]any
	p := newTestPool(t, Config{Modules: map[string]Module{"svcpf": {
		"take": func(_ context.Context, args []any) (any, error) { got, _ = args[0].(map[string]any); return nil, nil },
	}}}, `local m = require("svcpf")
function same(req) m.take(req); return true end
function set(req) req.domain = "b.example"; m.take(req); return true end
function add(req) req.extra = 1; m.take(req); return true end
function del(req) req.n = nil; m.take(req); return true end
function meta(req) setmetatable(req, {}); m.take(req); return true end
function restored(req) req.n = 9; req.n = 2; m.take(req); return true end`)
	ctx := context.Background()
	same := func(a, b map[string]any) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	for _, c := range []struct {
		fn     string
		same   bool
		domain any
	}{{"same", true, "a.example"}, {"set", false, "b.example"}, {"add", false, "a.example"},
		{"del", false, "a.example"}, {"meta", false, "a.example"}, {"restored", true, "a.example"}} {
		arg := map[string]any{"domain": "a.example", "n": 2, "ok": true, "f": 1.5, "gone": nil}
		got = nil
		if _, err := p.Call(ctx, c.fn, arg); err != nil {
			t.Fatalf("%s: %v", c.fn, err)
		}
		if got == nil || same(got, arg) != c.same || got["domain"] != c.domain {
			t.Errorf("%s: %#v (the caller's map: %v), want the caller's map %v and domain %v", c.fn, got, same(got, arg), c.same, c.domain)
		}
	}
	// Not flat: converted, never the caller's map.
	arg := map[string]any{"domain": "a.example", "nested": map[string]any{"x": "y"}}
	if _, err := p.Call(ctx, "same", arg); err != nil || got == nil || same(got, arg) {
		t.Errorf("a nested argument came back as the caller's map")
	}
}
