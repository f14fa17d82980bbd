package luapool

import (
	"context"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// equalJSON compares converted values exactly, types included (int64 is not
// float64).
func equalJSON(got, want any) bool { return reflect.DeepEqual(got, want) }

// TestLuaToGo runs Lua expressions and checks what Call returns.
func TestLuaToGo(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want any
		err  string // substring of the error; "" for none
	}{
		{"nil", "nil", nil, ""},
		{"nothing returned", "", nil, ""},
		{"true", "true", true, ""},
		{"string", `"héllo\0x"`, "héllo\x00x", ""},
		{"integral number", "3", int64(3), ""},
		{"integral result of arithmetic", "7 / 7 * 3", int64(3), ""},
		{"negative integer", "-42", int64(-42), ""},
		{"fraction", "0.5", 0.5, ""},
		{"2^53 is exact", "2^53", int64(1 << 53), ""},
		{"beyond 2^53 stays float", "2^60", math.Pow(2, 60), ""},
		{"huge", "1e300", 1e300, ""},
		{"infinity", "1/0", nil, "result: the number +Inf has no JSON form"},
		{"minus infinity", "-1/0", nil, "result: the number -Inf has no JSON form"},
		{"NaN", "0/0", nil, "result: the number NaN has no JSON form"},
		{"NaN nested", `{a = {1, {b = 0/0}}}`, nil, "result: .a[2].b: the number NaN has no JSON form"},
		{"infinity as a key is a string", `{[1/0] = 1}`, map[string]any{"+Inf": int64(1)}, ""},
		{"math.huge is gopher-lua's largest float", "math.huge", math.MaxFloat64, ""},
		{"array", `{1, "two", true}`, []any{int64(1), "two", true}, ""},
		{"object", `{a = 1, b = "x"}`, map[string]any{"a": int64(1), "b": "x"}, ""},
		{"empty table is an object", "{}", map[string]any{}, ""},
		{"empty table marked array", `setmetatable({}, {__jsontype = "array"})`, []any{}, ""},
		{"array marked object", `setmetatable({"a", "b"}, {__jsontype = "object"})`, map[string]any{"1": "a", "2": "b"}, ""},
		{"nested", `{domain = "x.com", categories = {{code = 7, title = "Ads"}}, trace = {{step = "feed", result = "hit"}}, n = {}}`,
			map[string]any{"domain": "x.com", "categories": []any{map[string]any{"code": int64(7), "title": "Ads"}},
				"trace": []any{map[string]any{"step": "feed", "result": "hit"}}, "n": map[string]any{}}, ""},
		{"mixed keys become an object", `{1, 2, x = 3}`, map[string]any{"1": int64(1), "2": int64(2), "x": int64(3)}, ""},
		{"a few holes stay an array", `{1, nil, 3}`, []any{int64(1), nil, int64(3)}, ""},
		{"sparse becomes an object", `(function() local t = {}; t[1] = 1; t[100] = 100; return t end)()`,
			map[string]any{"1": int64(1), "100": int64(100)}, ""},
		{"fraction key", `{[1.5] = "x"}`, map[string]any{"1.5": "x"}, ""},
		{"negative key", `{[-1] = "x"}`, map[string]any{"-1": "x"}, ""},
		{"boolean key", `{[true] = 1}`, nil, "boolean key has no JSON form"},
		{"table key", `{[{}] = 1}`, nil, "table key has no JSON form"},
		{"function value", `{f = print}`, nil, ".f: a function has no JSON form"},
		{"function in an array", `{1, {2, print}}`, nil, "[2][2]: a function has no JSON form"},
		{"userdata", `newproxy()`, nil, "userdata has no JSON form"},
		{"cycle", `(function() local t = {x = {}}; t.x.back = t; return t end)()`, nil, ".x.back: the table contains itself"},
		{"self array", `(function() local t = {}; t[1] = t; return t end)()`, nil, "contains itself"},
		{"shared subtable is not a cycle", `(function() local s = {1}; return {a = s, b = s} end)()`,
			map[string]any{"a": []any{int64(1)}, "b": []any{int64(1)}}, ""},
		{"64 levels deep", `(function() local t = {}; for i = 1, 63 do t = {t} end; return t end)()`, nestedArrays(63), ""},
		{"65 levels deep", `(function() local t = {}; for i = 1, 64 do t = {t} end; return t end)()`, nil, "nested more than 64 deep"},
		{"exponential sharing", `(function() local t = {1}; for i = 1, 40 do t = {t, t} end; return t end)()`, nil, "more than 262144 values"},
	}
	var src strings.Builder
	for i, tt := range tests {
		src.WriteString("function f" + strconv.Itoa(i) + "() return " + tt.expr + " end\n")
	}
	// A generous timeout: the exponential case converts maxValues values
	// before it fails, slow under -race on a loaded machine.
	p := newTestPool(t, Config{CallTimeout: time.Minute}, src.String())
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.Call(context.Background(), "f"+strconv.Itoa(i), nil)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("got %v, %v; want error containing %q", got, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equalJSON(got, tt.want) {
				t.Errorf("got %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func nestedArrays(depth int) any {
	var v any = map[string]any{} // the innermost {} is an object
	for range depth {
		v = []any{v}
	}
	return v
}

type point struct {
	X    int       `json:"x"`
	Tags []string  `json:"tags"`
	At   time.Time `json:"at"`
}

type code int

// TestGoToLua passes Go values to a script that describes what it received
// and then returns it unchanged, so the round trip is checked too.
func TestGoToLua(t *testing.T) {
	src := `
local function describe(v)
  if type(v) ~= "table" then return type(v) .. ":" .. tostring(v) end
  local mt = getmetatable(v)
  local parts = {}
  for k, x in pairs(v) do parts[#parts + 1] = tostring(k) .. "=" .. describe(x) end
  table.sort(parts)
  return ((mt and mt.__jsontype) or "table") .. "{" .. table.concat(parts, ",") .. "}"
end
function echo(v) return {desc = describe(v), back = v} end
`
	at := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name string
		in   any
		desc string // what Lua saw
		back any    // what came back
	}{
		{"string", "x", "string:x", "x"},
		{"bool", false, "boolean:false", false},
		{"int", 7, "number:7", int64(7)},
		{"uint8", uint8(200), "number:200", int64(200)},
		{"int64", int64(-3), "number:-3", int64(-3)},
		{"uint64 huge", uint64(1 << 60), "number:1152921504606846976", float64(1 << 60)},
		{"float32", float32(0.5), "number:0.5", 0.5},
		{"json.Number", json.Number("12"), "number:12", int64(12)},
		{"[]any", []any{"a", 1, true}, "array{1=string:a,2=number:1,3=boolean:true}", []any{"a", int64(1), true}},
		{"empty []any stays an array", []any{}, "array{}", []any{}},
		{"nil []any is an empty array", []any(nil), "array{}", []any{}},
		{"[]any with a hole", []any{"a", nil, "c"}, "array{1=string:a,3=string:c}", []any{"a", nil, "c"}},
		{"[]string", []string{"x", "y"}, "array{1=string:x,2=string:y}", []any{"x", "y"}},
		{"[]map", []map[string]any{{"a": 1}}, "array{1=table{a=number:1}}", []any{map[string]any{"a": int64(1)}}},
		{"[]int", []int{1, 2}, "array{1=number:1,2=number:2}", []any{int64(1), int64(2)}},
		{"[]float64", []float64{1.5}, "array{1=number:1.5}", []any{1.5}},
		{"map", map[string]any{"a": 1, "b": map[string]any{"c": "d"}}, "table{a=number:1,b=table{c=string:d}}",
			map[string]any{"a": int64(1), "b": map[string]any{"c": "d"}}},
		{"empty map", map[string]any{}, "table{}", map[string]any{}},
		{"nil value leaves the key out", map[string]any{"a": nil, "b": 1}, "table{b=number:1}", map[string]any{"b": int64(1)}},
		{"map[string]string", map[string]string{"k": "v"}, "table{k=string:v}", map[string]any{"k": "v"}},
		{"struct through JSON", point{X: 1, Tags: []string{"t"}, At: at}, "table{at=string:2024-01-02T03:04:05Z,tags=array{1=string:t},x=number:1}",
			map[string]any{"x": int64(1), "tags": []any{"t"}, "at": "2024-01-02T03:04:05Z"}},
		{"struct with empty slice", point{Tags: []string{}, At: at}, "table{at=string:2024-01-02T03:04:05Z,tags=array{},x=number:0}",
			map[string]any{"x": int64(0), "tags": []any{}, "at": "2024-01-02T03:04:05Z"}},
		{"named number type", code(5), "number:5", int64(5)},
		{"pointer", &point{X: 2, At: at}, "table{at=string:2024-01-02T03:04:05Z,x=number:2}",
			map[string]any{"x": int64(2), "at": "2024-01-02T03:04:05Z"}},
	}
	p := newTestPool(t, Config{}, src)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.Call(context.Background(), "echo", tt.in)
			if err != nil {
				t.Fatal(err)
			}
			m, _ := got.(map[string]any)
			if m["desc"] != tt.desc {
				t.Errorf("Lua saw %v\nwant    %v", m["desc"], tt.desc)
			}
			if !equalJSON(m["back"], tt.back) {
				t.Errorf("came back %#v\nwant       %#v", m["back"], tt.back)
			}
		})
	}
}

func TestGoToLuaErrors(t *testing.T) {
	cyclic := map[string]any{}
	cyclic["self"] = cyclic
	tests := []struct {
		name string
		in   any
		err  string
	}{
		{"channel", map[string]any{"c": make(chan int)}, ".c: chan int: json: unsupported type: chan int"},
		{"function", []any{1, func() {}}, "[2]: func()"},
		{"cycle", cyclic, "nested more than 64 deep"},
	}
	p := newTestPool(t, Config{}, `function echo(v) return v end`)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := p.Call(context.Background(), "echo", tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %v, want one containing %q", err, tt.err)
			}
			if !strings.Contains(err.Error(), "argument") {
				t.Errorf("error %v does not say it is the argument", err)
			}
		})
	}
}

// TestBuiltinConversions checks both directions through a Go built-in: what
// Lua passes, and an error in converting what it returns.
func TestBuiltinConversions(t *testing.T) {
	var seen []any
	mod := Module{
		"capture": func(_ context.Context, args []any) (any, error) {
			seen = args
			return []any{}, nil
		},
		"bad_result": func(context.Context, []any) (any, error) { return make(chan int), nil },
	}
	p := newTestPool(t, Config{Modules: map[string]Module{"m": mod}}, `
local m = require("m")
function capture() local r = m.capture(1, "two", {3}, {k = 4.5}, nil); return {r = r, n = #r} end
function bad_arg() return m.capture(print) end
function bad_result() return m.bad_result() end
`)
	v, err := p.Call(context.Background(), "capture", nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{int64(1), "two", []any{int64(3)}, map[string]any{"k": 4.5}, nil}
	if !equalJSON(seen, want) {
		t.Errorf("built-in saw %#v\nwant %#v", seen, want)
	}
	if !equalJSON(v, map[string]any{"r": []any{}, "n": int64(0)}) {
		t.Errorf("capture = %#v", v)
	}
	if _, err := p.Call(context.Background(), "bad_arg", nil); err == nil || !strings.Contains(err.Error(), "m.capture: argument 1: a function has no JSON form") {
		t.Errorf("bad_arg: %v", err)
	}
	if _, err := p.Call(context.Background(), "bad_result", nil); err == nil || !strings.Contains(err.Error(), "m.bad_result: result: chan int") {
		t.Errorf("bad_result: %v", err)
	}
}

// TestConverterDirect covers what a script cannot easily build.
func TestConverterDirect(t *testing.T) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	var c converter
	c.arrayMT = L.NewTable()
	c.arrayMT.RawSetString(jsonTypeField, lua.LString(jsonTypeArray))

	// A key Lua keeps in the hash part although it is a positive integer.
	tb := L.NewTable()
	tb.RawSetH(lua.LNumber(1), lua.LString("hash"))
	got, err := c.toGo(context.Background(), tb)
	if err != nil || !equalJSON(got, map[string]any{"1": "hash"}) {
		t.Errorf("hash-part integer key: %#v, %v", got, err)
	}

	// A deleted string key does not make an array an object.
	tb = L.NewTable()
	tb.RawSetInt(1, lua.LString("a"))
	tb.RawSetString("gone", lua.LTrue)
	tb.RawSetString("gone", lua.LNil)
	got, err = c.toGo(context.Background(), tb)
	if err != nil || !equalJSON(got, []any{"a"}) {
		t.Errorf("array with a deleted key: %#v, %v", got, err)
	}

	// NaN and ±Inf have no JSON form, at the top or nested.
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		tb = L.NewTable()
		inner := L.NewTable()
		inner.RawSetInt(1, lua.LNumber(f))
		tb.RawSetString("x", inner)
		for _, lv := range []lua.LValue{lua.LNumber(f), tb} {
			if got, err = c.toGo(context.Background(), lv); err == nil || !strings.Contains(err.Error(), "no JSON form") {
				t.Errorf("%v: %#v, %v", f, got, err)
			}
		}
	}
	if _, err = c.toGo(context.Background(), tb); err == nil || !strings.HasPrefix(err.Error(), ".x[1]: the number -Inf") {
		t.Errorf("nested -Inf: %v", err)
	}
}
